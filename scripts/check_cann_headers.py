#!/usr/bin/env python3
"""Conformance check: compile ms_kvcache's AscendC kernels and CANN host files against the OFFICIAL headers.

The repository's own build compiles ``op_kernel/`` only against the in-repo emulation
(``ms_kvcache/sim/include``). This script compiles the same files the way a user's CANN build sees them:

* every ``op_kernel/*.cpp`` in CANN's CPU-debug configuration (asc-devkit
  ``tests/api/basic_api/ascendc_header_checker/CMakeLists.txt``: ``-std=c++17 -fsyntax-only
  -DASCENDC_CPU_DEBUG=1 -D__NPU_ARCH__=<arch> -DASCENDC_DEBUG=1 -DASCENDC_DUMP=1`` + the target's
  ``__DAV_*`` macros, include dirs of its ``tikcfw_headers`` target; asc-tools ``cpudebug/CMakeLists.txt``:
  ``__CCE_KT_TEST__=1`` and ``__CCE_AICORE__``; ``cmake/asc/asc_modules/CMakeASCInformation.cmake``:
  ``-D_GLIBCXX_USE_CXX11_ABI=0``), with the kernel-side tiling class and ``GET_TILING_DATA`` generated
  from ``op_host/<op>_tiling.h`` the way CANN's ``get_op_tiling.py`` generates them and passed with
  ``-include`` as CANN does. Targets: ``a2`` (Atlas A2/A3 vector core, dav-c220-vec) for every kernel,
  ``310p`` (dav-m200) for the kernels whose OpDef has ``AddConfig("ascend310p")``. Compilers: g++ and
  clang++ (bisheng is clang-based: narrowing conversions are errors). An API the official headers mark
  ``[[deprecated(... unsupported API on current device ...)]]`` for the target is an error
  (``-Werror=deprecated-declarations``), as is any other deprecated API.
* every ``op_host/*.cpp`` and ``op_proto/*.cpp`` against metadef (+ ge's graph headers) and asc-devkit's
  ``tiling/platform/platform_ascendc.h``, with g++ and clang++ under ``-std=c++11`` (what CANN's opbuild
  uses) and ``-std=c++17``; then the c++11 g++ objects (``-fPIC -fvisibility=hidden``, as the
  custom-op project template builds them) are linked into one ``libcust_opmaster``-style shared library:
  duplicate symbols fail the link, and every undefined symbol must be a CANN API symbol (namespaces
  ops / optiling / gert / ge / fe / platform_ascendc / AscendC, or a securec function), i.e. one CANN's
  libregister / libexe_graph / libtiling_api / libplatform / libc_sec provide; those get a generated stub
  library so the final link runs with ``--no-undefined``.

Inputs (options win over environment variables):

* an installed CANN: ``--ascend-home`` / ``$ASCEND_HOME_PATH``;
* or checkouts of the public sources: ``--asc-devkit`` / ``$MS_KVCACHE_ASC_DEVKIT``, ``--asc-tools`` /
  ``$MS_KVCACHE_ASC_TOOLS``, ``--metadef`` / ``$MS_KVCACHE_METADEF``, ``--ge`` / ``$MS_KVCACHE_GE``
  (ge holds ``graph/operator_reg.h``, which metadef's ``register/op_def.h`` includes: without it the host
  files are not checked). Each may be a work tree or a bare git directory (it is extracted with
  ``git --git-dir=D archive HEAD | tar -x`` into ``$MS_KVCACHE_CANN_CACHE`` or a per-user temp dir).

Headers that exist only in CANN's binary packages are replaced by declaration stubs in
``scripts/cann_stubs/`` (each says what it stands in for): tikicpulib's ``stub_fun.h`` (the CCE
intrinsics, declared as templates accepting any arguments), ``securec.h``, ``platform/soc_spec.h``.
With an installed CANN the real headers come first on the include path.

What this proves and what it does not: docs/conformance.md.

Usage::

    scripts/check_cann_headers.py [--asc-devkit D --asc-tools D --metadef D --ge D | --ascend-home D]
                                  [--target a2|310p ...] [--compiler g++|clang++ ...] [--jobs N] [-v]
                                  [--kernels-only | --host-only] [FILE ...]

Exit status: 0 all clean, 1 something failed, 2 no official sources found.

Importable API (tests/test_cann_headers.py, tests/test_cann_probes.py)::

    find_sources(...) -> Sources            # raises SourcesNotFound(reason)
    compile_kernel(src, target="a2", compiler="g++", sources=None, ...) -> (ok, diagnostics)
    compile_host(src, std="c++17", compiler="g++", sources=None, ...) -> (ok, diagnostics)
    run_check(sources, ...) -> Report
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUB_DIR = Path(__file__).resolve().parent / "cann_stubs"

ENV_VARS = {
    "asc_devkit": "MS_KVCACHE_ASC_DEVKIT",
    "asc_tools": "MS_KVCACHE_ASC_TOOLS",
    "metadef": "MS_KVCACHE_METADEF",
    "ge": "MS_KVCACHE_GE",
    "ascend_home": "ASCEND_HOME_PATH",
}


@dataclass(frozen=True)
class Target:
    """One device configuration of the kernel check.

    Attributes:
        name: ``"a2"`` or ``"310p"``.
        title: human-readable description.
        soc_config: the OpDef ``AddConfig`` key that enables this target for an op (``None``: every op).
        defines: the macros bisheng / CANN's CPU-debug build define for the target (``-D`` flags).
    """

    name: str
    title: str
    soc_config: object
    defines: tuple


#: The predefined macros are those of the official CPU-debug configurations: ``__NPU_ARCH__`` and the
#: ``__DAV_*`` macros from asc-devkit's header checker (dav-c220-vec, dav-m200), ``__CCE_AICORE__`` from
#: asc-tools cpudebug (220 for ascend910B1, 200 for ascend310p).
TARGETS = {
    "a2": Target("a2", "Atlas A2/A3 vector core (dav-c220-vec)", None,
                 ("__NPU_ARCH__=2201", "__CCE_AICORE__=220", "__DAV_C220__", "__DAV_C220_VEC__")),
    "310p": Target("310p", "Atlas 300I/V Pro, Ascend310P (dav-m200)", "ascend310p",
                   ("__NPU_ARCH__=2002", "__CCE_AICORE__=200", "__DAV_M200__")),
}
COMPILERS = ("g++", "clang++")
HOST_STDS = ("c++11", "c++17")

#: Flags common to every kernel compile (CPU-debug mode; see the module docstring for their sources).
KERNEL_COMMON_DEFINES = ("ASCENDC_CPU_DEBUG=1", "__CCE_KT_TEST__=1", "ASCENDC_DEBUG=1", "ASCENDC_DUMP=1",
                         "_GLIBCXX_USE_CXX11_ABI=0")
#: Diagnostics that stay warnings for the compiler but fail the check by :func:`policy_violations`:
#: deprecated APIs and narrowing conversions (bisheng, clang-based, rejects narrowing in braced
#: initialisers; g++ only warns). They are not -Werror because the official headers' CPU-debug-only
#: checking code has narrowing conversions of its own, which bisheng never compiles.
KERNEL_WARNING_FLAGS = ("-Wdeprecated-declarations", "-Wnarrowing")
CLANG_KERNEL_WARNING_FLAGS = ("-Wdeprecated-declarations", "-Wno-error=c++11-narrowing")

#: Namespaces whose undefined symbols CANN's host libraries define (libregister, libexe_graph,
#: libtiling_api, libplatform, libgraph): the link stubs only these.
CANN_HOST_NAMESPACES = ("ops::", "optiling::", "gert::", "ge::", "fe::", "platform_ascendc::", "AscendC::")
#: C functions of CANN's libc_sec (securec.h) that metadef's inline code calls (tilingdata_base.h: memcpy_s).
CANN_HOST_C_SYMBOLS = ("memcpy_s", "memmove_s", "memset_s", "strcpy_s", "strncpy_s", "strcat_s", "strncat_s",
                       "sprintf_s", "snprintf_s", "vsnprintf_s", "sscanf_s")


class SourcesNotFound(Exception):
    """No usable official sources / CANN installation; ``str(exc)`` says what is missing and how to give it."""


@dataclass
class Sources:
    """Where the official headers come from.

    Attributes:
        asc_devkit, asc_tools, metadef, ge: source trees (``Path`` or ``None``) of the public checkouts.
        ascend_home: an installed CANN (``Path`` or ``None``); when set, the checkouts are not used.
        origin: one line per input saying where it came from (option, environment, extracted git dir).
    """

    asc_devkit: object = None
    asc_tools: object = None
    metadef: object = None
    ge: object = None
    ascend_home: object = None
    origin: list = field(default_factory=list)

    @property
    def kind(self):
        """``"cann"`` (an installed CANN) or ``"checkout"`` (public source trees)."""
        return "cann" if self.ascend_home is not None else "checkout"

    def kernel_ok(self):
        """(bool, reason): whether the kernel check can run with these sources."""
        if self.ascend_home is not None:
            return True, ""
        missing = [n for n in ("asc_devkit", "asc_tools") if getattr(self, n) is None]
        if missing:
            return False, "kernel check needs " + " and ".join(ENV_VARS[n] for n in missing)
        return True, ""

    def host_ok(self):
        """(bool, reason): whether the host check can run with these sources."""
        if self.ascend_home is not None:
            return True, ""
        missing = [n for n in ("metadef", "ge", "asc_devkit") if getattr(self, n) is None]
        if missing:
            return False, ("host check needs " + " and ".join(ENV_VARS[n] for n in missing)
                           + " (metadef's register/op_def.h includes graph/operator_reg.h from ge)")
        return True, ""


# ------------------------------------------------------------------------------------------ sources
def _cache_root():
    env = os.environ.get("MS_KVCACHE_CANN_CACHE")
    if env:
        return Path(env)
    return Path(tempfile.gettempdir()) / f"ms_kvcache-{os.getuid()}" / "cann_sources"


def _is_bare_git_dir(d):
    return (d / "HEAD").is_file() and (d / "objects").is_dir() and (d / "refs").is_dir()


def materialize(path, what):
    """A source tree for ``path``: the directory itself, or for a bare git directory its ``HEAD``
    extracted (``git --git-dir=D archive HEAD | tar -x``) into a cache directory named by the commit.

    Raises:
        SourcesNotFound: ``path`` is not a directory, or the extraction failed.
    """
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise SourcesNotFound(f"{what}: {p} is not a directory")
    if not _is_bare_git_dir(p):
        return p, f"{what}: {p}"
    r = subprocess.run(["git", f"--git-dir={p}", "rev-parse", "HEAD"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SourcesNotFound(f"{what}: {p} looks like a bare git directory but has no HEAD: {r.stderr.strip()}")
    sha = r.stdout.strip()
    name = p.name if p.name not in ("repo", ".git") else p.parent.name
    dest = _cache_root() / f"{re.sub(r'[^A-Za-z0-9_.+-]', '_', name)}-{sha[:12]}"
    if not (dest / ".ms_kvcache_extracted").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=str(dest.parent)))
        archive = subprocess.Popen(["git", f"--git-dir={p}", "archive", "HEAD"], stdout=subprocess.PIPE)
        tar = subprocess.run(["tar", "-x", "-C", str(tmp)], stdin=archive.stdout, capture_output=True)
        archive.stdout.close()
        if archive.wait() != 0 or tar.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SourcesNotFound(f"{what}: extracting {p} failed: {tar.stderr.decode(errors='replace').strip()}")
        (tmp / ".ms_kvcache_extracted").write_text(sha + "\n")
        if dest.exists():  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    return dest, f"{what}: {p} (bare git dir, HEAD {sha[:12]} extracted to {dest})"


def find_sources(asc_devkit=None, asc_tools=None, metadef=None, ge=None, ascend_home=None, environ=None):
    """Locate the official headers: arguments first, then ``$MS_KVCACHE_ASC_DEVKIT`` /
    ``$MS_KVCACHE_ASC_TOOLS`` / ``$MS_KVCACHE_METADEF`` / ``$MS_KVCACHE_GE`` (public checkouts), then
    ``$ASCEND_HOME_PATH`` (an installed CANN). Checkouts given explicitly win over an installed CANN.

    Returns:
        Sources

    Raises:
        SourcesNotFound: nothing given, or a given path is unusable (the message names it).
    """
    env = os.environ if environ is None else environ
    given = {"asc_devkit": asc_devkit, "asc_tools": asc_tools, "metadef": metadef, "ge": ge}
    src = Sources()
    for key, val in given.items():
        how = "option"
        if val is None and env.get(ENV_VARS[key]):
            val, how = env[ENV_VARS[key]], f"${ENV_VARS[key]}"
        if val is not None:
            tree, line = materialize(val, f"{key} ({how})")
            setattr(src, key, tree)
            src.origin.append(line)
    if src.asc_devkit is not None:
        if not (src.asc_devkit / "include" / "kernel_operator.h").is_file():
            raise SourcesNotFound(f"asc_devkit: {src.asc_devkit} has no include/kernel_operator.h")
        if src.asc_tools is not None and not (src.asc_tools / "cpudebug" / "include" / "stub_def.h").is_file():
            raise SourcesNotFound(f"asc_tools: {src.asc_tools} has no cpudebug/include/stub_def.h")
        if src.metadef is not None and not (src.metadef / "inc" / "external" / "register").is_dir():
            raise SourcesNotFound(f"metadef: {src.metadef} has no inc/external/register")
        return src
    if any(getattr(src, k) is not None for k in given):
        raise SourcesNotFound(f"asc-devkit is required with the other checkouts: set {ENV_VARS['asc_devkit']} "
                              "or --asc-devkit")
    home = ascend_home if ascend_home is not None else env.get(ENV_VARS["ascend_home"])
    if home:
        h = Path(home).expanduser().resolve()
        if not h.is_dir():
            raise SourcesNotFound(f"ascend_home: {h} is not a directory")
        src.ascend_home = h
        src.origin.append(f"ascend_home: {h}")
        return src
    raise SourcesNotFound(
        "no official AscendC / CANN headers: set ASCEND_HOME_PATH to an installed CANN, or "
        "MS_KVCACHE_ASC_DEVKIT, MS_KVCACHE_ASC_TOOLS, MS_KVCACHE_METADEF and MS_KVCACHE_GE to checkouts (or bare git "
        "dirs) of the public sources (github.com/mirror-cann/asc-devkit, hicann/asc-tools, hicann/metadef, hicann/ge)")


def sources_status(**kwargs):
    """``(Sources, "")`` if official headers are available, else ``(None, reason)``."""
    try:
        return find_sources(**kwargs), ""
    except SourcesNotFound as exc:
        return None, str(exc)


# ------------------------------------------------------------------------------------------ include dirs
def _work_dir(sources):
    """Per-sources scratch directory (generated kernel_tiling.h)."""
    key = hashlib.sha256(repr((sources.asc_devkit, sources.asc_tools, sources.ascend_home)).encode()).hexdigest()[:12]
    d = _cache_root() / f"work-{key}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _kernel_tiling_dir(sources):
    """Directory holding ``kernel_tiling/kernel_tiling.h`` (the adv_api tiling structs, generated at build
    time by asc-devkit's ``impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py``)."""
    if sources.ascend_home is not None:
        h = sources.ascend_home
        for d in (h / "include" / "tikcpp" / "tikcfw", h / "include", h / "include" / "tikcpp",
                  h / "compiler" / "tikcpp" / "tikcfw", h / "asc" / "include", h / "tools" / "tikicpulib" / "lib" / "include"):
            if (d / "kernel_tiling" / "kernel_tiling.h").is_file():
                return d
        raise SourcesNotFound(f"ascend_home: no kernel_tiling/kernel_tiling.h under {h}")
    out = _work_dir(sources) / "gen"
    header = out / "kernel_tiling" / "kernel_tiling.h"
    script = sources.asc_devkit / "impl" / "adv_api" / "cmake" / "scripts" / "gen_kernel_tiling_data_def.py"
    stamp = out / "stamp"
    want = f"{script}:{script.stat().st_mtime_ns if script.is_file() else 0}"
    if header.is_file() and stamp.is_file() and stamp.read_text() == want:
        return out
    if not script.is_file():
        raise SourcesNotFound(f"asc_devkit: {script} not found (it generates kernel_tiling/kernel_tiling.h)")
    header.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, str(script), str(sources.asc_devkit / "include" / "adv_api"), str(header)],
                       capture_output=True, text=True)
    if r.returncode != 0 or not header.is_file():
        raise SourcesNotFound(f"asc_devkit: generating kernel_tiling.h failed:\n{r.stdout}{r.stderr}")
    stamp.write_text(want)
    return out


def kernel_include_dirs(sources):
    """Include directories of the kernel compile, in order (official headers, then our stubs)."""
    if sources.ascend_home is not None:
        h = sources.ascend_home
        dirs = [h / "tools" / "tikicpulib" / "lib" / "include", h / "tools" / "cpudebug" / "include", h / "include"]
        dirs += [h / "asc" / "impl" / s for s in ("", "adv_api", "basic_api", "basic_api/reg_compute", "c_api",
                                                  "micro_api", "simt_api", "utils")]
        dirs += [h / "asc" / "include" / s for s in ("", "adv_api", "adv_api/matmul", "aicpu_api", "basic_api",
                                                     "basic_api/reg_compute", "c_api", "interface", "micro_api",
                                                     "simt_api", "simt_api/cpp", "tiling", "utils")]
        dirs += [h / "asc", h / "include" / "tikcpp" / "tikcfw"]
    else:
        a, t = sources.asc_devkit, sources.asc_tools
        # asc-devkit's header checker: ${ASCENDC_DIR} + the tikcfw_headers BUILD_INTERFACE directories
        dirs = [a, a / "impl", a / "impl" / "basic_api", a / "impl" / "basic_api" / "reg_compute",
                a / "impl" / "simt_api", a / "impl" / "c_api", a / "include", a / "include" / "basic_api",
                a / "include" / "simt_api", a / "include" / "simt_api" / "cpp",
                a / "include" / "basic_api" / "reg_compute", a / "include" / "c_api"]
        # asc-tools cpudebug (asc_tools_headers + its public include dir: stub_def.h, kernel_fp16.h, ...)
        dirs += [t / "cpudebug" / "include", t / "cpudebug" / "utils", t / "cpudebug" / "utils" / "include"]
    dirs.append(_kernel_tiling_dir(sources))
    dirs.append(STUB_DIR)
    return [str(d) for d in dirs if Path(d).is_dir()]


def host_include_dirs(sources):
    """Include directories of the host (op_host / op_proto) compile: metadef, ge graph headers,
    asc-devkit's utils (tiling/platform/platform_ascendc.h), then our stubs (platform/soc_spec.h, securec.h)."""
    if sources.ascend_home is not None:
        h = sources.ascend_home
        dirs = [h / "include", h / "include" / "ascendc" / "include" / "highlevel_api"]
    else:
        m, g, a = sources.metadef, sources.ge, sources.asc_devkit
        dirs = [m / "inc" / "external", m / "inc" / "external" / "asc", m / "inc",
                g / "inc" / "graph_metadef" / "external", a / "include" / "utils"]
    dirs.append(STUB_DIR)
    return [str(d) for d in dirs if Path(d).is_dir()]


# ------------------------------------------------------------------------------------------ tiling data
_MARKER_HEADER = r"""
#define BEGIN_TILING_DATA_DEF(name) @@MSKV_BEGIN name @@
#define TILING_DATA_FIELD_DEF(type, name) @@MSKV_FIELD type | name @@
#define TILING_DATA_FIELD_DEF_ARR(type, count, name) @@MSKV_ARR type | count | name @@
#define TILING_DATA_FIELD_DEF_STRUCT(type, name) @@MSKV_STRUCT type | name @@
#define END_TILING_DATA_DEF @@MSKV_END @@
#define REGISTER_TILING_DATA_CLASS(op, cls) @@MSKV_REG op | cls @@
"""


@dataclass
class TilingStruct:
    """One ``BEGIN_TILING_DATA_DEF(name) ... END_TILING_DATA_DEF`` of a tiling header.

    ``fields``: ``(kind, type, name, count)`` with kind ``"field"``, ``"arr"`` or ``"struct"``.
    """

    name: str
    fields: list = field(default_factory=list)


def parse_tiling_header(path, compiler="g++"):
    """Structs and registrations of a CANN tiling header (``op_host/<op>_tiling.h`` and what it includes).

    The header is run through the preprocessor with the TilingData macros redefined as markers, so
    includes, comments and macros are handled by the compiler, not by text matching.

    Returns:
        (dict name -> TilingStruct in definition order, list of (op_type, class_name) registrations)

    Raises:
        ValueError: the preprocessor failed or a marker is malformed.
    """
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="mskv_tiling_") as d:
        reg = Path(d) / "register"
        reg.mkdir()
        (reg / "tilingdata_base.h").write_text(_MARKER_HEADER)
        r = subprocess.run([compiler, "-x", "c++", "-std=c++17", "-E", "-P", f"-I{d}", f"-I{path.parent}", str(path)],
                           capture_output=True, text=True)
    if r.returncode != 0:
        raise ValueError(f"preprocessing {path} failed:\n{r.stderr}")
    structs, regs, cur = {}, [], None
    for m in re.finditer(r"@@MSKV_(BEGIN|FIELD|ARR|STRUCT|END|REG)\s*(.*?)\s*@@", r.stdout, re.S):
        kind, body = m.group(1), [s.strip() for s in m.group(2).split("|")]
        if kind == "BEGIN":
            cur = TilingStruct(body[0])
            structs[cur.name] = cur
        elif kind == "END":
            cur = None
        elif kind == "REG":
            regs.append((body[0], body[1]))
        else:
            if cur is None:
                raise ValueError(f"{path}: TILING_DATA_FIELD_DEF outside BEGIN_TILING_DATA_DEF")
            if kind == "FIELD":
                cur.fields.append(("field", body[0], body[1], None))
            elif kind == "ARR":
                cur.fields.append(("arr", body[0], body[2], body[1]))
            else:
                cur.fields.append(("struct", body[0], body[1], None))
    return structs, regs


def generate_kernel_tiling(tiling_h, op_type, compiler="g++"):
    """Kernel-side tiling header for ``op_type``, generated like CANN's ``get_op_tiling.py`` does for a
    dynamic-shape kernel: each struct as a plain class with the host fields (nested structs first, the
    op's class ``__attribute__((__may_alias__))``), ``InitTilingData`` copying the tiling bytes from GM,
    and ``GET_TILING_DATA`` / ``GET_TILING_DATA_WITH_STRUCT`` / ``GET_TILING_DATA_MEMBER``. Our own code.

    Args:
        tiling_h: path of ``op_host/<op>_tiling.h`` (or ``None``: only the macros, no class).
        op_type: OpType the kernel belongs to (``REGISTER_TILING_DATA_CLASS(op_type, Class)`` picks the class).

    Returns:
        str: the header text.
    """
    structs, regs = parse_tiling_header(tiling_h, compiler) if tiling_h is not None else ({}, [])
    cls = next((c for o, c in regs if o == op_type), None)
    if cls is None and len({c for _, c in regs}) == 1:
        cls = regs[0][1]
    guard = "MSKV_GEN_TILING_" + re.sub(r"\W", "_", op_type).upper() + "_H_"
    out = [f"// generated by scripts/check_cann_headers.py from {tiling_h} for {op_type}", f"#ifndef {guard}",
           f"#define {guard}", '#include "kernel_tiling/kernel_tiling.h"', "#ifdef ASCENDC_CPU_DEBUG",
           '#include "kernel_log.h"', "#endif", "#define REGISTER_TILINGDATA_SIZE(tiling_struct, counter)", ""]
    order, seen = [], set()

    def visit(name):
        if name in seen or name not in structs:
            return
        seen.add(name)
        for kind, typ, _, _ in structs[name].fields:
            if kind == "struct":
                visit(typ)
        order.append(name)

    for name in structs:
        visit(name)
    for name in order:
        s = structs[name]
        out += [f"class {s.name}", "{", "public:"]
        for kind, typ, fname, count in s.fields:
            if kind == "field":
                out.append(f"    {typ} {fname};")
            elif kind == "arr":
                out.append(f"    {typ} {fname}[{count}];")
            else:
                out.append(f"    {typ} {fname};")
        out += ["}__attribute__((__may_alias__));", ""]
    out += [
        "template <class T>",
        "inline __aicore__ void InitTilingData(const __gm__ uint8_t* p_tilingdata, T* tilingdata)",
        "{",
        "    constexpr uint64_t all_bytes = sizeof(T);",
        "    for (uint64_t i = 0; i < all_bytes; ++i) {",
        "        *((uint8_t*)tilingdata + i) = *((const __gm__ uint8_t*)p_tilingdata + i);",
        "    }",
        "}",
        "",
    ]
    if cls is not None:
        out += [f"#define GET_TILING_DATA(tiling_data, tiling_arg) \\",
                f"    {cls} tiling_data; \\",
                f"    InitTilingData<{cls}>(tiling_arg, &tiling_data);"]
    out += ["#define GET_TILING_DATA_WITH_STRUCT(tiling_struct, tiling_data, tiling_arg) \\",
            "    REGISTER_TILINGDATA_SIZE(tiling_struct, __COUNTER__); \\",
            "    tiling_struct tiling_data; \\",
            "    InitTilingData<tiling_struct>(tiling_arg, &tiling_data);",
            "#define GET_TILING_DATA_MEMBER(tiling_type, member, var, tiling) \\",
            "    REGISTER_TILINGDATA_SIZE(tiling_type, __COUNTER__); \\",
            "    decltype(((tiling_type*)0)->member) var; \\",
            "    size_t offset##var = (size_t)(&((tiling_type*)0)->member); \\",
            "    InitTilingData<decltype(((tiling_type*)0)->member)>(tiling + offset##var, &var);",
            f"#endif  // {guard}", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ repository
_ENTRY_RE = re.compile(r"(?:__global__\s+__aicore__|__aicore__\s+__global__)\s+void\s+([A-Za-z_]\w*)\s*\(")


def kernel_entries(text):
    """Kernel entry names (``extern "C" __global__ __aicore__ void <name>(``) of a kernel source."""
    return list(dict.fromkeys(_ENTRY_RE.findall(text)))


def camel_case(snake):
    """``mskv_reshape_and_cache`` -> ``MskvReshapeAndCache`` (CANN: kernel entry = snake_case(OpType))."""
    return "".join(p[:1].upper() + p[1:] for p in snake.split("_") if p)


def op_type_of_kernel(path):
    """OpType of a kernel file: the CamelCase of its first entry (the file stem if it has none)."""
    p = Path(path)
    e = kernel_entries(p.read_text(errors="replace"))
    return camel_case(e[0] if e else p.stem)


_ADD_CONFIG = re.compile(r'AddConfig\(\s*"([^"]+)"')


def _host_helper_bodies(path, seen=None):
    """Bodies of the functions defined in the op_host headers ``path`` includes (quoted includes,
    transitively): {function name: body}."""
    seen = set() if seen is None else seen
    out = {}
    for inc in re.findall(r'#\s*include\s*"([^"]+)"', Path(path).read_text(errors="replace")):
        h = (Path(path).parent / inc).resolve()
        if h in seen or not h.is_file():
            continue
        seen.add(h)
        text = h.read_text(errors="replace")
        for m in re.finditer(r"\bvoid\s+([A-Za-z_]\w*)\s*\([^)]*\)\s*\{", text):
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            out.setdefault(m.group(1), text[m.end():i])
        for name, body in _host_helper_bodies(h, seen).items():
            out.setdefault(name, body)
    return out


def _calls(name, text):
    return re.search(rf"(?<![\w.>]){re.escape(name)}\s*\(", text) is not None


def _host_helper_configs(path):
    """``AddConfig`` keys of the functions defined in the op_host headers ``path`` includes, with those of the
    helpers they call (``mskv_rope_tiling::DeclareGqaRopeOnEverySoc`` calls ``mskv_tiling::DeclareOnEverySoc``):
    {function name: keys}, for the functions that add any."""
    bodies = _host_helper_bodies(path)
    keys = {name: set(_ADD_CONFIG.findall(body)) for name, body in bodies.items()}
    changed = True
    while changed:  # the closure over the helpers' calls of each other
        changed = False
        for name, body in bodies.items():
            for other, okeys in keys.items():
                if other != name and not okeys <= keys[name] and _calls(other, body):
                    keys[name] |= okeys
                    changed = True
    return {name: k for name, k in keys.items() if k}


def op_soc_configs(op_type, repo=ROOT):
    """``AddConfig`` keys of op ``op_type``'s OpDef (``{"ascend910b", "ascend910_93", "ascend310p"}``),
    read from the ``op_host/*.cpp`` that defines ``class <op_type> : public OpDef``: its own ``AddConfig``
    calls and those of the helpers of its op_host headers it calls (``mskv_tiling::DeclareOnEverySoc``, also
    through another helper: ``mskv_rope_tiling::DeclareGqaRopeOnEverySoc``)."""
    for f in sorted((Path(repo) / "op_host").glob("*.cpp")):
        text = f.read_text(errors="replace")
        if re.search(rf"\bclass\s+{re.escape(op_type)}\s*:\s*public\s+(?:ops::)?OpDef\b", text):
            keys = set(_ADD_CONFIG.findall(text))
            for name, hkeys in _host_helper_configs(f).items():
                if _calls(name, text):
                    keys |= hkeys
            return keys
    return set()


def find_repo_files(repo=ROOT):
    """The files the check compiles: ``{"kernel": [op_kernel/*.cpp], "host": [op_host/*.cpp, op_proto/*.cpp]}``."""
    r = Path(repo)
    return {"kernel": sorted((r / "op_kernel").glob("*.cpp")),
            "host": sorted((r / "op_host").glob("*.cpp")) + sorted((r / "op_proto").glob("*.cpp"))}


def kernel_targets(path, repo=ROOT):
    """Targets a kernel file is checked for: ``a2`` always, ``310p`` where its OpDef has
    ``AddConfig("ascend310p")``."""
    cfg = op_soc_configs(op_type_of_kernel(path), repo)
    return [t for t, spec in TARGETS.items() if spec.soc_config is None or spec.soc_config in cfg]


# ------------------------------------------------------------------------------------------ compiling
def _run(cmd, cwd=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    return p.returncode, p.stdout


def summarize(log, limit=6):
    """The first ``limit`` error lines of a compiler log (the log as :func:`compile_kernel` returns it: the
    command on its first line)."""
    lines = log.splitlines()[1:]  # the first line is the command
    errs = [i for i, l in enumerate(lines) if re.search(r"(\berror:|\bfatal error\b|undefined reference|multiple definition)", l)]
    out = []
    for i in errs[:limit]:
        out.append(lines[i].strip())
    return out


def _is_clang(compiler):
    return "clang" in Path(compiler).name


_DIAG_RE = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<sev>warning|error): (?P<msg>.*)$")


def policy_violations(log, checked_files):
    """Diagnostics that fail a kernel check although the compiler only warned.

    * a use of a deprecated API located in a checked file (our code), or anywhere when the official
      headers mark it "unsupported API on current device" (they put that mark on the implementation
      function the API calls for the target, so the warning points into their header and the
      instantiation chain leads back to our call);
    * a narrowing conversion located in a checked file (bisheng rejects it).

    Args:
        log (str): compiler output.
        checked_files (iterable of str): absolute paths whose diagnostics are "ours".

    Returns:
        list[str]: the offending diagnostic lines (empty: none).
    """
    ours = tuple(str(Path(f).resolve()) for f in checked_files)
    bad = []
    for line in log.splitlines():
        m = _DIAG_RE.match(line.strip())
        if not m or m.group("sev") != "warning":
            continue
        msg, f = m.group("msg"), m.group("file")
        try:
            f = str(Path(f).resolve())
        except OSError:
            pass
        mine = f.startswith(ours)
        if "deprecated" in msg and ("unsupported" in msg or mine):
            bad.append(line.strip())
        elif "narrow" in msg and mine:
            bad.append(line.strip())
    return list(dict.fromkeys(bad))


def kernel_command(src, target="a2", compiler="g++", sources=None, include_dirs=(), extra_flags=(),
                   tiling_file=None):
    """The compiler command of one kernel check (``-fsyntax-only``)."""
    t = TARGETS[target]
    cmd = [compiler, "-x", "c++", "-std=c++17", "-fsyntax-only"]
    cmd += [f"-D{d}" for d in KERNEL_COMMON_DEFINES + t.defines]
    if _is_clang(compiler):
        cmd += list(CLANG_KERNEL_WARNING_FLAGS) + ["-Wno-unknown-warning-option"]
    else:
        cmd += list(KERNEL_WARNING_FLAGS)
    cmd += [f"-I{d}" for d in list(include_dirs) + kernel_include_dirs(sources)]
    if tiling_file is not None:
        cmd += ["-include", str(tiling_file)]
    cmd += list(extra_flags) + [str(src)]
    return cmd


#: CANN's kernel build finds the tiling keys of a kernel in its preprocessed source: it runs the compiler
#: with -E and matches ``g_tilingKey == \((-?\d+)`` (asc-devkit tools/build/asc_op_compile_base/
#: asc_op_compiler/kernel_info_infer.py, ``find_tilingkey``); TILING_KEY_IS(k) expands to
#: ``(g_tilingKey == (k))`` (impl/basic_api/utils/kernel_utils_macros.h). A key that is not one decimal
#: literal there is not found (the build logs an error for a non-numeric one).
TILING_KEY_COMPARE = re.compile(r"g_tilingKey\s*==\s*\(")
TILING_KEY_LITERAL = re.compile(r"g_tilingKey == \((-?\d+)")
KEYS_HEADER = "mskv_tiling_keys.h"


def keys_macro(stem):
    """The op's key-set macro in op_kernel/mskv_tiling_keys.h: ``MSKV_KEYS_<STEM>``."""
    return "MSKV_KEYS_" + re.sub(r"\W", "_", stem).upper()


def preprocessed_tiling_keys(text):
    """(keys, problems) of a preprocessed kernel: the literal keys CANN's regex finds, in order, and one line
    per ``g_tilingKey ==`` comparison that is not the literal form (``g_tilingKey == (<decimal>``, no
    leading 0: a leading 0 is an octal literal in C++ but CANN's key would read it as decimal)."""
    keys, problems = [], []
    for m in TILING_KEY_COMPARE.finditer(text):
        frag = text[m.start():m.start() + 60].replace("\n", " ")
        lit = TILING_KEY_LITERAL.match(text, m.start())
        tail = text[lit.end():lit.end() + 1] if lit else ""
        if lit is None or tail != ")":
            problems.append(f"tiling key comparison is not a decimal literal: {frag!r}")
        elif len(lit.group(1).lstrip("-")) > 1 and lit.group(1).lstrip("-").startswith("0"):
            problems.append(f"tiling key {lit.group(1)} has a leading 0 (an octal literal): {frag!r}")
        else:
            keys.append(int(lit.group(1)))
    return keys, problems


def declared_tiling_keys(stem, target="a2", compiler="g++", kernel_dir=None):
    """The tiling keys op_kernel/mskv_tiling_keys.h declares for op ``stem`` on ``target`` (the header
    preprocessed alone with the target's predefined macros), or None if it declares no ``MSKV_KEYS_<STEM>``."""
    kdir = Path(kernel_dir) if kernel_dir else ROOT / "op_kernel"
    if not (kdir / KEYS_HEADER).is_file():
        return None
    macro = keys_macro(stem)
    drv = (f'#include "{KEYS_HEADER}"\n#ifdef {macro}\n#define MSKV_CHECK_DUMP(K, ...) mskv_declared_key K ;\n'
           f"{macro}(MSKV_CHECK_DUMP)\n#else\nmskv_no_declaration\n#endif\n")
    cmd = [compiler, "-x", "c++", "-E", "-P"] + [f"-D{d}" for d in TARGETS[target].defines] + [f"-I{kdir}", "-"]
    p = subprocess.run(cmd, input=drv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"declared_tiling_keys({stem!r}, {target!r}): {' '.join(cmd)} failed:\n{p.stderr}")
    if "mskv_no_declaration" in p.stdout:
        return None
    return [int(k) for k in re.findall(r"mskv_declared_key\s+(\d+)\s*;", p.stdout)]


def check_tiling_keys(src, target, compiler, sources, incs, tiling_file, cwd):
    """Problem lines of one kernel's tiling keys as CANN's build reads them: the kernel preprocessed with the
    official headers (the same command with -E) must compare g_tilingKey with a decimal literal in every
    branch, once per key, and its keys must be exactly those its op declares in op_kernel/mskv_tiling_keys.h
    for the target."""
    cmd = kernel_command(src, target, compiler, sources, incs, (), tiling_file)
    cmd = [a if a != "-fsyntax-only" else "-E" for a in cmd] + ["-o", str(Path(cwd) / "kernel.i")]
    rc, log = _run(cmd, cwd=cwd)
    if rc != 0:
        return [f"preprocessing failed: {summarize(log, 1)}"]
    keys, problems = preprocessed_tiling_keys((Path(cwd) / "kernel.i").read_text(errors="replace"))
    want = declared_tiling_keys(Path(src).stem, target, compiler if "clang" not in compiler else "g++",
                                Path(src).parent)
    if want is None:
        return problems + [f"no {keys_macro(Path(src).stem)} in op_kernel/{KEYS_HEADER} (the op's tiling keys)"]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        problems.append(f"tiling keys with more than one branch: {dup}")
    if set(keys) != set(want):
        problems.append(f"tiling keys in the preprocessed kernel {sorted(set(keys) - set(want))} not declared, "
                        f"declared for {target} {sorted(set(want) - set(keys))} without a branch")
    return problems


def compile_kernel(source, target="a2", compiler="g++", sources=None, tiling_header="auto", op_type=None,
                   include_dirs=(), extra_flags=(), check_keys=True):
    """Compile one AscendC kernel against the official headers in CANN's CPU-debug configuration.

    Args:
        source (str | Path): a kernel file, or kernel source text (then compiled from a temp file; its
            quoted includes are looked up in ``include_dirs`` and ``op_kernel/``).
        target (str): ``"a2"`` or ``"310p"`` (:data:`TARGETS`).
        compiler (str): ``"g++"`` or ``"clang++"`` (any compatible driver).
        sources (Sources | None): from :func:`find_sources`; ``None`` = :func:`find_sources` ().
        tiling_header (Path | None | "auto"): the op's ``<op>_tiling.h``; ``"auto"`` = ``op_host/<stem>_tiling.h``
            next to a kernel file (none for source text); ``None`` = no tiling class (``GET_TILING_DATA``
            then is undefined).
        op_type (str | None): the OpType whose registered tiling class ``GET_TILING_DATA`` declares
            (default: from the kernel entry).
        include_dirs, extra_flags: added to the command (before the official include dirs).
        check_keys (bool): for a kernel file (next to op_kernel/mskv_tiling_keys.h) with a tiling-key ladder,
            also preprocess it (-E) and check its
            keys as CANN's build reads them (:func:`check_tiling_keys`): a failure is an error line.

    Returns:
        (bool, str): ``ok`` and the compiler's diagnostics (with the command on the first line).

    Raises:
        SourcesNotFound: no official headers.
        ValueError: unknown target.
    """
    if target not in TARGETS:
        raise ValueError(f"compile_kernel: argument 'target': expected one of {sorted(TARGETS)}, got {target!r}")
    sources = sources if sources is not None else find_sources()
    ok_k, why = sources.kernel_ok()
    if not ok_k:
        raise SourcesNotFound(why)
    with tempfile.TemporaryDirectory(prefix="mskv_cann_k_") as tmp:
        tmp = Path(tmp)
        if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and Path(source).is_file()):
            src = Path(source).resolve()
            text = src.read_text(errors="replace")
            if tiling_header == "auto":
                cand = src.parent.parent / "op_host" / f"{src.stem}_tiling.h"
                tiling_header = cand if cand.is_file() else None
            incs = [str(src.parent)] + list(include_dirs)
        else:
            text = str(source)
            src = tmp / "probe_kernel.cpp"
            src.write_text(text)
            if tiling_header == "auto":
                tiling_header = None
            incs = list(include_dirs) + [str(ROOT / "op_kernel")]
        if op_type is None:
            e = kernel_entries(text)
            op_type = camel_case(e[0]) if e else "MskvProbe"
        tf = tmp / f"{op_type}_kernel_tiling.h"
        tf.write_text(generate_kernel_tiling(tiling_header, op_type, compiler if "clang" not in compiler else "g++"))
        cmd = kernel_command(src, target, compiler, sources, incs, extra_flags, tf)
        rc, log = _run(cmd, cwd=str(tmp))
        ours = [src] + [p for d in incs for p in Path(d).glob("*.h")]
        bad = policy_violations(log, ours)
        if rc == 0 and check_keys and "TILING_KEY_IS" in text and (src.parent / KEYS_HEADER).is_file():
            bad += ["tiling keys: " + b for b in check_tiling_keys(src, target, compiler, sources, incs, tf, str(tmp))]
    if bad:
        log += "\ncheck_cann_headers: error: " + "\ncheck_cann_headers: error: ".join(bad) + "\n"
    return rc == 0 and not bad, " ".join(cmd) + "\n" + log


HOST_WARNING_FLAGS = ("-Wall", "-Wextra", "-Wno-unused-private-field", "-Wno-unknown-warning-option")


def host_command(src, std="c++17", compiler="g++", sources=None, obj=None, include_dirs=()):
    """Compiler command of one host check: ``-fsyntax-only``, or ``-c -o obj`` with the custom-op
    project's flags (``-fPIC -fvisibility=hidden -fvisibility-inlines-hidden``) when ``obj`` is given."""
    cmd = [compiler, "-x", "c++", f"-std={std}", "-D_GLIBCXX_USE_CXX11_ABI=0"]
    cmd += [f for f in HOST_WARNING_FLAGS if "clang" in compiler or f != "-Wno-unknown-warning-option"]
    cmd += [f"-I{d}" for d in [str(Path(src).parent), str(ROOT / "op_host"), str(ROOT / "op_kernel")]
            + list(include_dirs) + host_include_dirs(sources)]
    if obj is None:
        cmd += ["-fsyntax-only", str(src)]
    else:
        cmd += ["-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-O1", "-c", str(src), "-o", str(obj)]
    return cmd


def _own_warnings(log, repo=ROOT):
    return [l for l in log.splitlines() if l.startswith(str(repo)) and re.search(r"\bwarning:", l)]


def compile_host(source, std="c++17", compiler="g++", sources=None, obj=None, include_dirs=()):
    """Compile one op_host / op_proto file against metadef + platform_ascendc.h.

    Returns:
        (bool, str): ok (no error and no warning located in the repository) and the diagnostics.
    """
    sources = sources if sources is not None else find_sources()
    ok_h, why = sources.host_ok()
    if not ok_h:
        raise SourcesNotFound(why)
    cmd = host_command(source, std, compiler, sources, obj, include_dirs)
    rc, log = _run(cmd)
    own = _own_warnings(log)
    return rc == 0 and not own, " ".join(cmd) + "\n" + log


def _demangle(names):
    if not names:
        return []
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return r.stdout.splitlines() if r.returncode == 0 else list(names)


def _system_symbols(compiler):
    """Dynamic symbols defined by the C / C++ runtime libraries a host library links by default."""
    names = set()
    for lib in ("libstdc++.so", "libc.so.6", "libm.so.6", "libgcc_s.so.1"):
        r = subprocess.run([compiler, f"-print-file-name={lib}"], capture_output=True, text=True)
        path = Path(r.stdout.strip()).resolve() if r.returncode == 0 else None
        if path is None or not path.is_file():
            continue
        nm = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True).stdout
        names |= {l.split()[-1].split("@")[0] for l in nm.splitlines() if l.strip() and len(l.split()) >= 3}
    return names


def link_host(objs, workdir, compiler="g++"):
    """Link host objects into one ``libcust_opmaster``-style shared library and check its symbols.

    The objects are linked with ``-shared`` (duplicate definitions fail here); every symbol the library
    still needs beyond libc / libm / libstdc++ / libgcc must lie in a CANN API namespace
    (:data:`CANN_HOST_NAMESPACES`) or be a securec function (:data:`CANN_HOST_C_SYMBOLS`): CANN's binary
    host libraries define those. They get a generated stub library (one empty function per symbol) and
    the library is linked again with ``--no-undefined`` against it.

    Returns:
        (bool, str, list[str]): ok, diagnostics, the demangled CANN symbols that were stubbed.
    """
    workdir = Path(workdir)
    lib = workdir / "libcust_opmaster_check.so"
    base = [compiler, "-shared", "-fPIC", "-o", str(lib)] + [str(o) for o in objs]
    rc, log = _run(base)
    if rc != 0:
        return False, ("duplicate symbols:\n" if "multiple definition" in log else "") + log, []
    nm = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True).stdout
    undefined = sorted({l.split()[-1].split("@")[0] for l in nm.splitlines() if l.strip()})
    system = _system_symbols(compiler)
    need = [m for m in undefined if m not in system and not m.startswith(("_ITM_", "__gmon_start__"))
            and m not in ("__cxa_finalize",)]
    dem = dict(zip(need, _demangle(need)))
    bad = [dem[m] for m in need if not dem[m].startswith(CANN_HOST_NAMESPACES) and m not in CANN_HOST_C_SYMBOLS]
    if bad:
        return False, "undefined symbols that no CANN host library provides:\n  " + "\n  ".join(bad), []
    stub = workdir / "cann_host_stub.S"
    stub.write_text("".join(f".globl {m}\n.type {m}, @function\n{m}:\n  ret\n" for m in need) +
                    '.section .note.GNU-stack,"",@progbits\n')
    stub_lib = workdir / "libcann_host_stub.so"
    rc3, log3 = _run([compiler, "-shared", "-o", str(stub_lib), str(stub)])
    if rc3 != 0:
        return False, log3, []
    rc4, log4 = _run(base + ["-Wl,--no-undefined", f"-L{workdir}", "-lcann_host_stub"])
    if rc4 != 0:
        return False, log4, []
    return True, log4, [dem[m] for m in need]


# ------------------------------------------------------------------------------------------ probes
PROBE_DIR = ROOT / "tests" / "cann_probes"
_PROBE_KEY_RE = re.compile(r"^//\s*(probe|official|expect|run|twin|targets)(?:\[([\w]+)\])?:\s*(.*)$")


@dataclass
class Probe:
    """A probe kernel (``tests/cann_probes/<stem>.cpp``): one API use with its expected verdict.

    Header comment keys: ``probe:`` what it exercises, ``official:`` where the official verdict comes
    from, ``expect:`` / ``expect[<target>]:`` ``accept`` or ``reject`` (compile), ``run:`` /
    ``run[<target>]:`` ``ok`` or ``error`` (a rule the official headers check at run time in CPU-debug or
    only document: run on the emulation), ``twin:`` the correct counterpart, ``targets:`` (default all).

    Attributes:
        path, stem, entry (kernel entry ``probe_<stem>``), what, official, expect (dict target -> verdict),
        run (dict target -> "ok" / "error" / None), targets (list).
    """

    path: Path
    stem: str
    entry: str
    what: str
    official: str
    expect: dict
    run: dict
    targets: list


def load_probes(directory=PROBE_DIR):
    """All probes of ``directory`` (sorted by name).

    Raises:
        ValueError: a probe lacks ``probe:`` / ``expect:`` or has a bad verdict or no ``probe_<stem>`` entry.
    """
    out = []
    for f in sorted(Path(directory).glob("*.cpp")):
        keys = {}
        for line in f.read_text().splitlines():
            m = _PROBE_KEY_RE.match(line.strip())
            if m:
                key = m.group(1) + (f"[{m.group(2)}]" if m.group(2) else "")
                keys[key] = (keys.get(key, "") + " " + m.group(3)).strip()
            elif line.startswith("//") and keys and not line.strip("/ ").startswith(tuple(
                    k + ":" for k in ("probe", "official", "expect", "run", "twin", "targets"))):
                last = list(keys)[-1]
                keys[last] += " " + line.strip("/ ").strip()
            elif not line.startswith("//"):
                break
        targets = keys.get("targets", " ".join(TARGETS)).split()
        expect, run = {}, {}
        for t in targets:
            e = keys.get(f"expect[{t}]", keys.get("expect"))
            if e not in ("accept", "reject"):
                raise ValueError(f"{f}: expect{'[' + t + ']' if f'expect[{t}]' in keys else ''} must be accept or reject, got {e!r}")
            expect[t] = e
            r = keys.get(f"run[{t}]", keys.get("run"))
            if r not in (None, "ok", "error"):
                raise ValueError(f"{f}: run must be ok or error, got {r!r}")
            run[t] = r if e == "accept" else None
        entry = f"probe_{f.stem}"
        if entry not in kernel_entries(f.read_text()):
            raise ValueError(f"{f}: no kernel entry {entry}(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)")
        if "probe" not in keys:
            raise ValueError(f"{f}: no '// probe:' line")
        out.append(Probe(f, f.stem, entry, keys["probe"], keys.get("official", ""), expect, run, targets))
    return out


def official_probe_verdict(probe, target, compiler="clang++", sources=None):
    """``("accept" | "reject", diagnostics)`` of ``probe`` compiled against the official headers for ``target``."""
    ok, log = compile_kernel(probe.path, target, compiler, sources, tiling_header=None)
    return ("accept" if ok else "reject"), log


# ------------------------------------------------------------------------------------------ the check
@dataclass
class Result:
    """One compile (or link) of the check: ``kind`` (kernel / host / link), ``path``, ``config``
    (``"a2 g++"``, ``"c++11 clang++"``), ``ok``, ``log``."""

    kind: str
    path: str
    config: str
    ok: bool
    log: str = ""


@dataclass
class Report:
    """All results of :func:`run_check` plus the per-file summary.

    Attributes:
        results: list of :class:`Result`.
        kernel_files, host_files: files checked; a file counts as compiling when all its configurations do.
        skipped: reasons a part of the check did not run.
    """

    results: list = field(default_factory=list)
    kernel_files: list = field(default_factory=list)
    host_files: list = field(default_factory=list)
    skipped: list = field(default_factory=list)

    def _files_ok(self, kind, files):
        return [f for f in files if all(r.ok for r in self.results if r.kind == kind and r.path == str(f))
                and any(r.kind == kind and r.path == str(f) for r in self.results)]

    @property
    def kernel_ok(self):
        return self._files_ok("kernel", self.kernel_files)

    @property
    def host_ok(self):
        return self._files_ok("host", self.host_files)

    @property
    def link_ok(self):
        links = [r for r in self.results if r.kind == "link"]
        return all(r.ok for r in links)

    @property
    def ok(self):
        return (len(self.kernel_ok) == len(self.kernel_files) and len(self.host_ok) == len(self.host_files)
                and self.link_ok and not self.skipped)

    def summary(self):
        """``N of M kernel files and K of J host files compile`` (+ the link and what was skipped)."""
        s = (f"{len(self.kernel_ok)} of {len(self.kernel_files)} kernel files and {len(self.host_ok)} of "
             f"{len(self.host_files)} host files compile")
        links = [r for r in self.results if r.kind == "link"]
        if links:
            s += "; libcust_opmaster link " + ("ok" if self.link_ok else "FAILED")
        if self.skipped:
            s += "; not checked: " + "; ".join(self.skipped)
        return s

    def failures(self):
        return [r for r in self.results if not r.ok]


def _rel(p, repo):
    try:
        return str(Path(p).resolve().relative_to(Path(repo).resolve()))
    except ValueError:
        return str(p)


def run_check(sources, repo=ROOT, targets=tuple(TARGETS), compilers=COMPILERS, stds=HOST_STDS, jobs=2,
              files=None, kernels=True, host=True, progress=None):
    """Run the whole conformance check.

    Args:
        sources (Sources): from :func:`find_sources`.
        repo (Path): repository root (``op_kernel/``, ``op_host/``, ``op_proto/``).
        targets, compilers, stds: configurations to run (kernels: target x compiler, only targets the
            op's OpDef configures; host: std x compiler).
        jobs (int): parallel compiler processes.
        files (list | None): restrict to these files.
        kernels, host (bool): which half to run.
        progress (callable | None): called with each :class:`Result` as it completes.

    Returns:
        Report
    """
    repo = Path(repo)
    found = find_repo_files(repo)
    sel = None if not files else {str(Path(f).resolve()) for f in files}
    kfiles = [f for f in found["kernel"] if sel is None or str(f.resolve()) in sel]
    hfiles = [f for f in found["host"] if sel is None or str(f.resolve()) in sel]
    report = Report()
    tasks = []
    if kernels:
        ok_k, why = sources.kernel_ok()
        if ok_k:
            report.kernel_files = [str(f) for f in kfiles]
            for f in kfiles:
                for t in kernel_targets(f, repo):
                    if t not in targets:
                        continue
                    for c in compilers:
                        tasks.append(("kernel", f, t, c))
        elif kfiles:
            report.skipped.append(why)
    hdir = None
    if host:
        ok_h, why = sources.host_ok()
        if ok_h:
            report.host_files = [str(f) for f in hfiles]
            hdir = Path(tempfile.mkdtemp(prefix="mskv_cann_host_"))
            for i, f in enumerate(hfiles):
                for s in stds:
                    for c in compilers:
                        obj = hdir / f"{i}_{f.parent.name}_{f.stem}.o" if (s == "c++11" and c == "g++") else None
                        tasks.append(("host", f, s, c, obj))
        elif hfiles:
            report.skipped.append(why)

    def work(task):
        if task[0] == "kernel":
            _, f, t, c = task
            ok, log = compile_kernel(f, t, c, sources, include_dirs=())
            res = Result("kernel", str(f), f"{t} {c}", ok, log)
        else:
            _, f, s, c, obj = task
            ok, log = compile_host(f, s, c, sources, obj=obj)
            res = Result("host", str(f), f"{s} {c}" + (" (object)" if obj else ""), ok, log)
        if progress is not None:
            progress(res)
        return res

    try:
        with ThreadPoolExecutor(max_workers=max(1, int(jobs))) as ex:
            report.results = list(ex.map(work, tasks))
        if hdir is not None and hfiles and "g++" in compilers and "c++11" in stds:
            objs = [t[4] for t in tasks if t[0] == "host" and t[4] is not None]
            if all(Path(o).is_file() for o in objs):
                ok, log, stubbed = link_host(objs, hdir)
                msg = log if not ok else (f"{len(objs)} objects; CANN API symbols stubbed ({len(stubbed)}):\n  "
                                          + "\n  ".join(stubbed))
                res = Result("link", "libcust_opmaster", f"c++11 g++ ({len(objs)} objects)", ok, msg)
            else:
                res = Result("link", "libcust_opmaster", "c++11 g++", False, "not linked: a host object failed to compile")
            report.results.append(res)
            if progress is not None:
                progress(res)
    finally:
        if hdir is not None:
            shutil.rmtree(hdir, ignore_errors=True)
    return report


def format_result(r, repo=ROOT, verbose=False):
    """One line per result (``kind  file  config  ok|FAIL  first error``), plus the log when verbose."""
    status = "ok" if r.ok else "FAIL"
    line = f"{r.kind:<6} {_rel(r.path, repo):<44} {r.config:<22} {status}"
    if not r.ok:
        errs = summarize(r.log, 1) if r.kind != "link" else [r.log.splitlines()[0] if r.log else ""]
        if not errs:
            errs = [l for l in r.log.splitlines()[1:] if "warning" in l][:1]
        if errs:
            line += "  " + errs[0].replace(str(repo) + "/", "")
    if verbose and (not r.ok or r.kind == "link"):
        line += "\n" + "\n".join("    " + l for l in r.log.splitlines()[1:])
    return line


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--asc-devkit"), ap.add_argument("--asc-tools"), ap.add_argument("--metadef")
    ap.add_argument("--ge"), ap.add_argument("--ascend-home")
    ap.add_argument("--target", action="append", choices=sorted(TARGETS), help="default: all")
    ap.add_argument("--compiler", action="append", help="default: g++ and clang++")
    ap.add_argument("--std", action="append", choices=HOST_STDS, help="host standards (default: both)")
    ap.add_argument("--jobs", "-j", type=int, default=2)
    ap.add_argument("--kernels-only", action="store_true"), ap.add_argument("--host-only", action="store_true")
    ap.add_argument("--verbose", "-v", action="store_true", help="print the full log of each failure")
    ap.add_argument("files", nargs="*", help="restrict to these op_kernel / op_host / op_proto files")
    a = ap.parse_args(argv)
    try:
        src = find_sources(a.asc_devkit, a.asc_tools, a.metadef, a.ge, a.ascend_home)
    except SourcesNotFound as exc:
        print(f"check_cann_headers: {exc}", file=sys.stderr)
        return 2
    print("official sources:\n  " + "\n  ".join(src.origin), flush=True)
    comps = tuple(a.compiler or [c for c in COMPILERS if shutil.which(c)])
    rep = run_check(src, targets=tuple(a.target or TARGETS), compilers=comps, stds=tuple(a.std or HOST_STDS),
                    jobs=a.jobs, files=a.files, kernels=not a.host_only, host=not a.kernels_only,
                    progress=lambda r: print(format_result(r, verbose=a.verbose), flush=True))
    print(rep.summary())
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
