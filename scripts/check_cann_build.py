#!/usr/bin/env python3
"""Build conformance check: ms_kvcache's CANN custom-op package through CANN's own build tools.

``scripts/check_cann_headers.py`` compiles each file against the official headers; this script runs what a
user's CANN build runs on them, from the public sources (asc-devkit, asc-tools, metadef, ge), one line per
step:

1. ``sources``: the four source trees (work trees or bare git dirs, extracted as check_cann_headers.py does).
2. ``opbuild``: CANN's op generator built from asc-devkit ``tools/build/opbuild`` (its CMakeLists.txt: the
   sources in its order, ``-DNO_OPERATOR_IMPL``, ``-Wextra -Wfloat-equal -fno-common``) against an OpDef
   registry library built from metadef (:data:`REGISTRY_SOURCES`: the OpDef / OpDefFactory / tiling-data
   registries and the AscendString / type / runtime-attribute code they use) and the stand-ins of
   :data:`STANDINS` for the binary-only pieces (each says what it stands for).
3. ``op_host library``: every ``op_host/*.cpp`` compiled and linked as ``npu_op_code_gen`` does before it runs
   opbuild (asc-devkit ``cmake/asc/fwk_modules/util/compile_ascendc_all_ops_so.py``: ``-fPIC
   -D_GLIBCXX_USE_CXX11_ABI=0 -std=c++11 -I<cann>/include``, ``-shared``), the public headers standing for
   ``<cann>/include`` (check_cann_headers.host_include_dirs).
4. ``opbuild run``: ``op_build <library> <out> --compute_unit=ascend910b;ascend910_93;ascend310p`` with
   ``OPS_PRODUCT_NAME`` set, as ``npu_op_code_gen`` calls it: the ``aclnn_mskv_<op>.h/.cpp`` files,
   ``op_proto.h/.cc`` and ``aic-<unit>-ops-info.ini``.
5. ``aclnn prototypes``: every generated ``aclnn<Op>GetWorkspaceSize`` / ``aclnn<Op>`` prototype equals the one
   ``ms_kvcache._aclnn`` derives from the OpSpec (parameter types and names, file name), for every op with an
   AscendC kernel and no other.
6. ``generated sources compile``: the generated ``aclnn_*.cpp`` and ``op_proto.cc`` compile (``-std=c++11``,
   the template's flags) against the public headers (``aclnn/acl_meta.h`` is a stand-in).
7. ``ops-info``: per compute unit, the ops whose OpDef configures it and only those; per op the input /
   output names, param types, ND formats, dtype rows (= ``OpSpec.dtype_rows`` of the unit's SoC) and
   attributes (type, optional, default = the OpSpec default's code).
8. ``op proto``: each ``REG_OP`` of ``op_proto.h`` declares the OpSpec's inputs (INPUT / OPTIONAL_INPUT /
   DYNAMIC_INPUT), outputs and attributes in order.
9. ``msopgen fallback layout``: ``scripts/build_opp.sh`` in its msopgen mode (the CANN 8.x path) with a
   stand-in msopgen that lays out the real template (asc-tools ``utils/templates/op_project_templates/
   ascendc/customize``) as msopgen does; its ``build.sh`` is replaced by a recorder (the real one needs the
   CANN compilers). The project must have no framework plugin, ``ENABLE_TEST`` off, the default compute
   units (A2 / A3), the build output naming ascend310p as not built, every op's files and no stub op.
10. ``msopgen fallback compile``: every ``op_host/*.cpp`` of that project (the template's
    ``aux_source_directory``: ours and the ``op_proto`` files copied as ``<op>_infer.cpp``) compiled with
    the template's include paths only (its ``opbuild()``: ``-I<cann>/include -I<project>/op_kernel``, and
    ``intf_pub``), linked into ``libascend_all_ops.so`` and run through opbuild as the template's
    ``opbuild()`` does: its aclnn headers and ops-info rows equal those of step 4.

The output ends with a line ``cann build: N of M steps passed`` (and what failed). Exit status: 0 every step
passed, 1 a step failed, 2 not all four sources given (one line naming the missing ones).

Inputs: ``--asc-devkit`` / ``$MS_KVCACHE_ASC_DEVKIT``, ``--asc-tools`` / ``$MS_KVCACHE_ASC_TOOLS``,
``--metadef`` / ``$MS_KVCACHE_METADEF``, ``--ge`` / ``$MS_KVCACHE_GE`` (all four needed), as in
check_cann_headers.py; ``--repo`` the checkout to check (default: this one). Build products (the tools,
compiled objects keyed by their inputs, the generated files) are kept in ``$MS_KVCACHE_CANN_BUILD_CACHE`` or
``~/.cache/ms_kvcache/cann_build``, so a second run only recompiles what changed (``--no-cache``: rebuild).

What this proves and what it does not: docs/conformance.md, "The package build".
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import check_cann_headers as H  # noqa: E402  (sources, include dirs, OpDef compute units)

#: compute unit (OpDef AddConfig key) -> the CANN SoC name whose dtype rows it carries (OpSpec.dtype_rows)
UNIT_SOC = {"ascend910b": "Ascend910B1", "ascend910_93": "Ascend910_9391", "ascend310p": "Ascend310P3"}
#: scripts/build_opp.sh's default --compute-units
DEFAULT_UNITS = ("ascend910b", "ascend910_93")

OPBUILD_DIR = "tools/build/opbuild"
TEMPLATE_DIR = "utils/templates/op_project_templates/ascendc/customize"
#: metadef sources of the OpDef registry library opbuild and the op library link (CANN: libregister /
#: libexe_graph / libmetadef): OpDef, OpDefFactory, OpAICoreConfig, the tiling-data registry, AscendString,
#: type names, RuntimeAttrs
REGISTRY_SOURCES = ("base/asc/opdef/*.cc", "base/asc/tilingdata_base_impl.cc", "base/type/ascend_string_impl.cc",
                    "base/type/types_impl.cc", "base/utils/type_utils_impl.cc", "base/runtime/runtime_attrs.cc")
STEPS = ("sources", "opbuild", "op_host library", "opbuild run", "aclnn prototypes", "generated sources compile",
         "ops-info", "op proto", "msopgen fallback layout", "msopgen fallback compile")


@dataclass(frozen=True)
class Standin:
    """A declared stand-in for a binary-only CANN piece: ``path`` (written under the tools' stand-in folder),
    ``stands_for`` (what it replaces and why that is enough here) and its text (our own)."""

    path: str
    stands_for: str
    text: str


STANDINS = (
    Standin("dlog_pub.h", "CANN's slog header (libslog is binary-only): the dlog_* macros and CheckLogLevel that "
            "metadef's ge_log.h and asc-devkit's ascendc_tool_log.h use; errors and warnings go to stderr",
            """\
            #pragma once
            #include <cstdint>
            #include <cstdio>
            enum { GE = 45, ASCENDCKERNEL = 57 };
            #define RUN_LOG_MASK 0x01000000
            #define DLOG_DEBUG 0
            #define DLOG_INFO 1
            #define DLOG_WARN 2
            #define DLOG_ERROR 3
            static inline int CheckLogLevel(int, int level) { return level >= DLOG_WARN ? 1 : 0; }
            #define dlog_error(mod, fmt, ...) std::fprintf(stderr, "[ERROR] " fmt "\\n", ##__VA_ARGS__)
            #define dlog_warn(mod, fmt, ...) std::fprintf(stderr, "[WARNING] " fmt "\\n", ##__VA_ARGS__)
            #define dlog_info(mod, fmt, ...) ((void)0)
            #define dlog_debug(mod, fmt, ...) ((void)0)
            """),
    Standin("base/err_msg.h", "CANN's error-message manager header (liberror_manager is binary-only): "
            "REPORT_INNER_ERR_MSG, printed to stderr",
            """\
            #pragma once
            #include <cstdio>
            #define REPORT_INNER_ERR_MSG(code, fmt, ...) std::fprintf(stderr, "[ERROR] %s " fmt "\\n", code, ##__VA_ARGS__)
            """),
    Standin("mmpa/mmpa_api.h", "CANN's mmpa portability header (libmmpa is binary-only): mmGetTid and MM_SYS_GET_ENV "
            "with the OPS_* variables, the calls opbuild makes",
            """\
            #pragma once
            #include <climits>
            #include <cstdlib>
            #include <sys/stat.h>
            #include <sys/syscall.h>
            #include <unistd.h>
            static inline int mmGetTid() { return static_cast<int>(syscall(SYS_gettid)); }
            #define MM_ENV_OPS_PRODUCT_NAME "OPS_PRODUCT_NAME"
            #define MM_ENV_OPS_PROJECT_NAME "OPS_PROJECT_NAME"
            #define MM_ENV_OPS_DIRECT_ACCESS_PREFIX "OPS_DIRECT_ACCESS_PREFIX"
            #define MM_ENV_OPS_ACLNN_GEN "OPS_ACLNN_GEN"
            #define MM_SYS_GET_ENV(name, var) do { (var) = std::getenv(name); } while (0)
            """),
    Standin("aclnn/acl_meta.h", "nnopbase's aclnn/acl_meta.h (not in the public sources here): the opaque handle "
            "types and aclnnStatus the generated aclnn sources use",
            """\
            #pragma once
            #include <stddef.h>
            #include <stdint.h>
            #ifdef __cplusplus
            extern "C" {
            #endif
            typedef struct aclTensor aclTensor;
            typedef struct aclTensorList aclTensorList;
            typedef struct aclScalar aclScalar;
            typedef struct aclScalarList aclScalarList;
            typedef struct aclIntArray aclIntArray;
            typedef struct aclFloatArray aclFloatArray;
            typedef struct aclBoolArray aclBoolArray;
            typedef struct aclOpExecutor aclOpExecutor;
            typedef int32_t aclnnStatus;
            typedef void *aclrtStream;
            #ifdef __cplusplus
            }
            #endif
            """),
    Standin("securec_standin.c", "CANN's libc_sec (binary-only): memcpy_s / memset_s, which metadef's tiling-data "
            "code calls (bounds-checked, 0 on success)",
            """\
            #include <stddef.h>
            #include <string.h>
            int memcpy_s(void* d, size_t m, const void* s, size_t n) { if (!d || !s || n > m) return 1; memmove(d, s, n); return 0; }
            int memset_s(void* d, size_t m, int c, size_t n) { if (!d || n > m) return 1; memset(d, c, n); return 0; }
            """),
    Standin("platform_standin.cpp", "libplatform's PlatformAscendC methods our tiling functions call (its source, "
            "asc-devkit impl/utils/tiling/platform, needs the binary-only platform_info.h): opbuild loads the op "
            "library but runs no tiling function, so each stand-in aborts if called",
            """\
            #include <cstdio>
            #include <cstdlib>
            #include "tiling/platform/platform_ascendc.h"
            namespace platform_ascendc {
            static void Refuse(const char* f) { std::fprintf(stderr, "check_cann_build stand-in %s called\\n", f); std::abort(); }
            uint32_t PlatformAscendC::GetCoreNumAiv() const { Refuse(__func__); return 0; }
            SocVersion PlatformAscendC::GetSocVersion() const { Refuse(__func__); return SocVersion(); }
            void PlatformAscendC::GetCoreMemSize(const CoreMemType&, uint64_t&) const { Refuse(__func__); }
            uint32_t PlatformAscendC::GetLibApiWorkSpaceSize() const { Refuse(__func__); return 0; }
            }  // namespace platform_ascendc
            """),
    Standin("op_impl_registry_standin.cpp", "gert::OpImplRegisterV2, the infer-shape registration of op_proto/ "
            "(metadef base/registry/op_impl_registry.cc needs its plugin manager and more of mmpa): registers "
            "nothing; opbuild reads only the OpDefs (needed by step 10, whose library holds the op_proto files "
            "as the template's does)",
            """\
            #include "register/op_impl_registry.h"
            namespace gert {
            class OpImplRegisterV2Impl {};
            OpImplRegisterV2::OpImplRegisterV2(const ge::char_t*) {}
            OpImplRegisterV2::OpImplRegisterV2(const OpImplRegisterV2&) {}
            OpImplRegisterV2::OpImplRegisterV2(OpImplRegisterV2&&) noexcept {}
            OpImplRegisterV2::~OpImplRegisterV2() {}
            OpImplRegisterV2& OpImplRegisterV2::InferShape(InferShapeKernelFunc) { return *this; }
            OpImplRegisterV2& OpImplRegisterV2::InferDataType(InferDataTypeKernelFunc) { return *this; }
            }  // namespace gert
            """),
)

#: what the stand-in msopgen writes (the real msopgen, Ascend/msopgen, is not among the public sources here):
#: the customize template as it is, __ASCNED_COMPUTE_UNIT__ in CMakePresets.json replaced by the unit of -c,
#: the op's op_host/<op>.cpp, op_host/<op>_tiling.h and op_kernel/<op>.cpp, and for -f tf (msopgen's default)
#: a TensorFlow parser plugin framework/tf_plugin/tensorflow_<op>_plugin.cc; build.sh is a recorder
STANDIN_MSOPGEN = r'''#!__PYTHON__
# check_cann_build.py stand-in for CANN's msopgen: lays out the asc-tools customize template as msopgen does.
import json, os, re, shutil, sys
template = __TEMPLATE__
a = sys.argv[1:]
if not a or a[0] != "gen":
    sys.exit("msopgen stand-in: only 'gen' is implemented")
opt = {a[i]: a[i + 1] for i in range(1, len(a) - 1, 2)}
out, fw = opt["-out"], opt.get("-f", "tf").lower()
soc = opt["-c"].split("-", 1)[1].lower()
unit = "ascend910_93" if soc.startswith("ascend910_93") else re.sub(r"^(ascend\d+[a-z]?).*$", r"\1", soc)
shutil.copytree(template, out, dirs_exist_ok=True)
p = os.path.join(out, "CMakePresets.json")
text = open(p).read()
open(p, "w").write(text.replace("__ASCNED_COMPUTE_UNIT__", unit))

def snake(name):
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()

for op in json.load(open(opt["-i"])):
    s = snake(op["op"])
    files = ["op_host/%s.cpp" % s, "op_host/%s_tiling.h" % s, "op_kernel/%s.cpp" % s]
    if fw in ("tf", "tensorflow"):
        files.append("framework/tf_plugin/tensorflow_%s_plugin.cc" % s)
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(out, f)), exist_ok=True)
        open(os.path.join(out, f), "w").write("// %s, written by the msopgen stand-in\n" % op["op"])
build = os.path.join(out, "build.sh")
open(build, "w").write("#!/bin/sh\n# recorder (check_cann_build.py): the template's build.sh needs the CANN compilers\n"
                       "mkdir -p build_out && : > build_out/custom_opp_layout_x86_64.run\n")
os.chmod(build, 0o755)
'''


class StepFailed(Exception):
    """A step failed: ``str(exc)`` is its one-line reason, ``lines`` the detail printed under it."""

    def __init__(self, reason, lines=()):
        super().__init__(reason)
        self.lines = list(lines)


@dataclass
class Step:
    name: str
    ok: bool
    detail: str
    lines: list = field(default_factory=list)


@dataclass
class Report:
    steps: list = field(default_factory=list)

    @property
    def ok(self):
        return bool(self.steps) and all(s.ok for s in self.steps)

    def summary(self):
        n_ok = sum(s.ok for s in self.steps)
        line = f"cann build: {n_ok} of {len(self.steps)} steps passed"
        bad = [s.name for s in self.steps if not s.ok]
        return line + (f"; failed: {', '.join(bad)}" if bad else "")


# ------------------------------------------------------------------------------------------ helpers
def cache_root():
    env = os.environ.get("MS_KVCACHE_CANN_BUILD_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ms_kvcache" / "cann_build"


def _sha(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _run(cmd, cwd=None, env=None, timeout=900):
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                       env=env, timeout=timeout)
    return p.returncode, p.stdout


def _errors(log, limit=3):
    out = [l.strip() for l in log.splitlines() if re.search(r"\berror\b|undefined reference|No such file", l)]
    return out[:limit] or [l.strip() for l in log.strip().splitlines()[-limit:]]


def _tree_id(path):
    """What identifies a source tree's content for the caches: the commit it was extracted from, else the
    newest modification time below it."""
    stamp = Path(path) / ".ms_kvcache_extracted"
    if stamp.is_file():
        return stamp.read_text().strip()
    newest = max((p.stat().st_mtime_ns for p in Path(path).rglob("*") if p.is_file()), default=0)
    return f"{path}@{newest}"


def _compiler_id(cxx):
    return _run([cxx, "--version"])[1].splitlines()[0] if shutil.which(cxx) else cxx


class Ctx:
    """What the steps share: sources, repository, cache folders, compilers, and what earlier steps produced."""

    def __init__(self, sources, repo, cache, jobs=2, use_cache=True, cxx="g++", cc="gcc"):
        self.sources, self.repo, self.cache = sources, Path(repo).resolve(), Path(cache)
        self.jobs, self.use_cache, self.cxx, self.cc = max(1, int(jobs)), use_cache, cxx, cc
        self.cache.mkdir(parents=True, exist_ok=True)
        self.work = self.cache / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.tools = None      # folder with op_build, the registry and platform stand-in libraries, stand-in headers
        self.library = None    # the op_host library (step 3)
        self.generated = None  # opbuild's output folder (step 4)
        self.project = None    # the msopgen fallback's project (step 9)
        self._facts = None
        self._repo_key = None

    # --------------------------------------------------------------------- repository facts
    def repo_key(self):
        """Content of every file of op_host/, op_proto/, op_kernel/ (what a host compile may include)."""
        if self._repo_key is None:
            files = sorted(p for d in ("op_host", "op_proto", "op_kernel") for p in (self.repo / d).glob("*")
                           if p.is_file())
            self._repo_key = _sha(*[p.name.encode() + b"\0" + p.read_bytes() for p in files])
        return self._repo_key

    def facts(self):
        """The OpSpec facts of the repository's kernel ops, read by a child python with the repository first on
        sys.path (``ms_kvcache._aclnn.kernel_specs`` / ``params`` / ``header_name``, ``OpSpec.dtype_rows``)."""
        if self._facts is None:
            code = textwrap.dedent("""
                import json, sys
                from ms_kvcache import _aclnn, _spec
                out = {}
                for s in _aclnn.kernel_specs():
                    out[s.op_type] = {
                        "name": s.name, "header": _aclnn.header_name(s),
                        "params": [list(p) for p in _aclnn.params(s)],
                        "inputs": [[t.name, "dynamic" if t.dynamic else "optional" if t.optional else "required"]
                                   for t in s.inputs],
                        "outputs": [o.name for o in s.outputs],
                        "attrs": [[a.name, a.kernel_type, a.encode(a.default)] for a in s.attrs],
                        "formats": dict(s.extra.get("formats", {})),
                        "rows": {soc: [list(r) for r in s.dtype_rows(soc)] for soc in sys.argv[1:]}}
                print("MSKV_FACTS " + json.dumps(out))
            """)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(self.repo)] + [p for p in os.environ.get(
                "PYTHONPATH", "").split(os.pathsep) if p]), GLOG_v="3")
            rc, out = _run([sys.executable, "-c", code, *UNIT_SOC.values()], env=env, cwd=str(self.repo))
            line = next((l for l in out.splitlines() if l.startswith("MSKV_FACTS ")), None)
            if rc != 0 or line is None:
                raise StepFailed("cannot read the OpSpecs of the repository", _errors(out, 5))
            self._facts = json.loads(line[len("MSKV_FACTS "):])
        return self._facts

    def kernel_op_types(self):
        return sorted(H.camel_case("mskv_" + p.stem) for p in (self.repo / "op_kernel").glob("*.cpp"))

    # --------------------------------------------------------------------- compiling
    def cann_include_dirs(self):
        """The public headers standing for <cann>/include (metadef, ge's graph headers, asc-devkit's
        platform_ascendc.h, check_cann_headers' declaration stubs)."""
        return H.host_include_dirs(self.sources)

    def compile(self, src, flags, key_extra=()):
        """Compile ``src`` to an object with ``self.cxx -c`` and ``flags``, through the object cache.

        Returns:
            (bool, str, Path): ok, the compiler's log (command first), the object.
        """
        src = Path(src)
        cmd = [self.cxx, *flags, "-c", str(src)]
        # keyed by the file's name and content, not its folder: a copy of the repository reuses the objects
        key = _sha(" ".join(cmd[:-1]), src.name, _compiler_id(self.cxx), src.read_bytes(), *key_extra)
        obj = self.cache / "obj" / f"{src.stem}-{key}.o"
        if self.use_cache and obj.is_file():
            return True, " ".join(cmd) + "\n(cached)", obj
        obj.parent.mkdir(parents=True, exist_ok=True)
        tmp = obj.with_suffix(f".{os.getpid()}.tmp")
        rc, log = _run(cmd + ["-o", str(tmp)])
        if rc == 0:
            os.replace(tmp, obj)
        else:
            tmp.unlink(missing_ok=True)
        return rc == 0, " ".join(cmd) + "\n" + log, obj

    def compile_all(self, srcs, flags_of, key_extra=()):
        """Compile every file of ``srcs`` (``flags_of(src)`` -> flags) in parallel; (objects, failures) where a
        failure is ``(src, log)``."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs) as ex:
            res = list(ex.map(lambda s: (s, self.compile(s, flags_of(s), key_extra)), srcs))
        objs = [r[2] for _, r in res if r[0]]
        bad = [(s, r[1]) for s, r in res if not r[0]]
        return objs, bad


def _rel(p, base):
    try:
        return str(Path(p).resolve().relative_to(Path(base).resolve()))
    except ValueError:
        return str(p)


def _fail_compiles(bad, base, what):
    lines = []
    for src, log in bad:
        lines.append(f"{_rel(src, base)}:")
        lines += ["    " + l.replace(str(base) + "/", "") for l in _errors(log)]
    first = next((l for l in _errors(bad[0][1], 1)), "")
    raise StepFailed(f"{len(bad)} {what} failed to compile, e.g. {_rel(bad[0][0], base)}: "
                     f"{first.replace(str(base) + '/', '')}", lines)


# ------------------------------------------------------------------------------------------ parsing
_PROTO_RE = re.compile(r"aclnnStatus\s+aclnn(\w+?)(GetWorkspaceSize)?\s*\((.*?)\);", re.S)


def _norm_param(text):
    """``const aclTensor *key`` -> ("const aclTensor*", "key")."""
    t = " ".join(text.replace("*", " * ").split())
    m = re.match(r"^(.*?)\s*([A-Za-z_]\w*)$", t)
    if not m:
        return (t, "")
    typ = m.group(1).replace(" *", "*").strip()
    return (typ, m.group(2))


def parse_aclnn_header(text):
    """{api name: [(type, name), ...]} of the aclnn prototypes in a generated header: ``aclnnXGetWorkspaceSize``
    and ``aclnnX``."""
    out = {}
    for m in _PROTO_RE.finditer(text):
        api = "aclnn" + m.group(1) + (m.group(2) or "")
        out[api] = [_norm_param(p) for p in m.group(3).split(",") if p.strip()]
    return out


def expected_prototypes(op_type, facts):
    """The prototypes ms_kvcache._aclnn derives for ``op_type`` (``facts[op_type]["params"]``)."""
    ws = [_norm_param(f"{ctype}{name}") for _, ctype, name, _ in facts["params"]]
    ws += [("uint64_t*", "workspaceSize"), ("aclOpExecutor**", "executor")]
    launch = [("void*", "workspace"), ("uint64_t", "workspaceSize"), ("aclOpExecutor*", "executor"),
              ("aclrtStream", "stream")]
    return {f"aclnn{op_type}GetWorkspaceSize": ws, f"aclnn{op_type}": launch}


def parse_ini(text):
    """{section: {key: value}} of an ops-info .ini (``[OpType]`` then ``key=value`` lines)."""
    out, cur = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            cur = out.setdefault(line[1:-1], {})
        elif cur is not None and "=" in line:
            k, _, v = line.partition("=")
            cur[k.strip()] = v.strip()
    return out


_ATTR_TEXT = {"bool": lambda v: "true" if v else "false", "int": lambda v: str(int(v)),
              "float": lambda v: repr(float(v))}


def _same_attr_value(kind, text, value):
    if kind == "float":
        try:
            return abs(float(text) - float(value)) <= 1e-12 * max(1.0, abs(float(value)))
        except ValueError:
            return False
    return text == _ATTR_TEXT[kind](value)


def check_ini_op(op_type, sec, facts, soc):
    """Problems (list of str) of one ops-info section against the OpSpec facts for ``soc``."""
    f = facts
    bad = []
    ins = [(n, k) for n, k in f["inputs"]]
    outs = f["outputs"]
    got_in = []
    i = 0
    while f"input{i}.name" in sec:
        got_in.append((sec[f"input{i}.name"], sec.get(f"input{i}.paramType")))
        i += 1
    got_out = []
    i = 0
    while f"output{i}.name" in sec:
        got_out.append(sec[f"output{i}.name"])
        i += 1
    if got_in != ins:
        bad.append(f"{op_type}: inputs {got_in}, the OpSpec declares {ins}")
    if got_out != outs:
        bad.append(f"{op_type}: outputs {got_out}, the OpSpec declares {outs}")
    if bad:
        return bad
    cols = []
    for i, (name, _) in enumerate(ins):
        cols.append((name, sec.get(f"input{i}.dtype", "").split(","), sec.get(f"input{i}.format", "").split(",")))
    for i, name in enumerate(outs):
        cols.append((name, sec.get(f"output{i}.dtype", "").split(","), sec.get(f"output{i}.format", "").split(",")))
    n = len(cols[0][1])
    if any(len(d) != n or len(fm) != n for _, d, fm in cols):
        return [f"{op_type}: dtype / format lists of different lengths"]
    rows = [tuple(c[1][r] for c in cols) for r in range(n)]
    want = [tuple(r) for r in f["rows"][soc]]
    if len(set(rows)) != len(rows):
        bad.append(f"{op_type}: repeated dtype rows {sorted({r for r in rows if rows.count(r) > 1})}")
    if set(rows) != set(want):
        extra, miss = sorted(set(rows) - set(want)), sorted(set(want) - set(rows))
        bad.append(f"{op_type} on {soc}: dtype rows not in the OpSpec {extra[:3]}{'...' if len(extra) > 3 else ''}; "
                   f"OpSpec rows missing {miss[:3]}{'...' if len(miss) > 3 else ''}")
    for name, _, fm in cols:
        want_fmt = f["formats"].get(name, "ND")
        if set(fm) != {want_fmt}:
            bad.append(f"{op_type}: {name} formats {sorted(set(fm))}, the OpSpec wants {want_fmt}")
    attrs = [a for a in sec.get("attr.list", "").split(",") if a]
    if attrs != [a[0] for a in f["attrs"]]:
        bad.append(f"{op_type}: attributes {attrs}, the OpSpec declares {[a[0] for a in f['attrs']]}")
    else:
        for name, kind, default in f["attrs"]:
            typ, opt, dv = (sec.get(f"attr_{name}.{k}") for k in ("type", "paramType", "defaultValue"))
            if typ != kind or opt != "optional" or dv is None or not _same_attr_value(kind, dv, default):
                bad.append(f"{op_type}: attribute {name} is {typ} {opt} default {dv}, the OpSpec's is {kind} optional "
                           f"default {default!r}")
    return bad


_REG_RE = re.compile(r"REG_OP\((\w+)\)(.*?)\.OP_END_FACTORY_REG\(\1\)", re.S)
_ENTRY_RE = re.compile(r"\.(INPUT|OPTIONAL_INPUT|DYNAMIC_INPUT|OUTPUT|DYNAMIC_OUTPUT|ATTR|REQUIRED_ATTR)\(([^)]*)\)")
_PROTO_KIND = {"INPUT": "required", "OPTIONAL_INPUT": "optional", "DYNAMIC_INPUT": "dynamic"}
_PROTO_ATTR = {"Int": "int", "Bool": "bool", "Float": "float"}


def parse_op_proto(text):
    """{OpType: {"inputs": [(name, kind)], "outputs": [name], "attrs": [(name, type, default text)]}}."""
    out = {}
    for m in _REG_RE.finditer(text):
        d = {"inputs": [], "outputs": [], "attrs": []}
        for kind, args in _ENTRY_RE.findall(m.group(2)):
            a = [x.strip() for x in args.split(",")]
            if kind in _PROTO_KIND:
                d["inputs"].append((a[0], _PROTO_KIND[kind]))
            elif kind in ("OUTPUT", "DYNAMIC_OUTPUT"):
                d["outputs"].append(a[0])
            else:
                d["attrs"].append((a[0], _PROTO_ATTR.get(a[1], a[1]), a[2] if len(a) > 2 else None))
        out[m.group(1)] = d
    return out


# ------------------------------------------------------------------------------------------ steps
def step_sources(ctx):
    s = ctx.sources
    missing = [H.ENV_VARS[n] for n in ("asc_devkit", "asc_tools", "metadef", "ge") if getattr(s, n) is None]
    if missing:
        raise StepFailed(f"needs {' and '.join(missing)}")
    if not (s.asc_devkit / OPBUILD_DIR / "CMakeLists.txt").is_file():
        raise StepFailed(f"asc-devkit {s.asc_devkit} has no {OPBUILD_DIR}/CMakeLists.txt")
    if not (s.asc_tools / TEMPLATE_DIR / "CMakeLists.txt").is_file():
        raise StepFailed(f"asc-tools {s.asc_tools} has no {TEMPLATE_DIR}")
    if not (s.metadef / "base" / "asc" / "opdef").is_dir():
        raise StepFailed(f"metadef {s.metadef} has no base/asc/opdef (the OpDef registry sources)")
    return "; ".join(f"{n.replace('_', '-')} {_tree_id(getattr(s, n))[:12]}" for n in ("asc_devkit", "asc_tools",
                                                                                      "metadef", "ge"))


def _opbuild_sources(asc_devkit):
    """The op_build sources in the order of asc-devkit tools/build/opbuild/CMakeLists.txt (their static
    initialisers register generators with each other: the link order matters)."""
    text = (asc_devkit / OPBUILD_DIR / "CMakeLists.txt").read_text()
    m = re.search(r"add_executable\(\s*op_build\s+(.*?)\)", text, re.S)
    if not m:
        raise StepFailed(f"no add_executable(op_build ...) in {OPBUILD_DIR}/CMakeLists.txt")
    return [asc_devkit / OPBUILD_DIR / f for f in m.group(1).split()]


def _opbuild_flags(asc_devkit):
    text = (asc_devkit / OPBUILD_DIR / "CMakeLists.txt").read_text()
    m = re.search(r"target_compile_options\(\s*op_build\s+PRIVATE\s+(.*?)\)", text, re.S)
    flags = m.group(1).split() if m else []
    # -Werror: the stand-ins are not the real headers, so a warning they cause must not stop the check;
    # -fpie: the executable is linked as a PIE below
    return [f for f in flags if f != "-Werror"]


def step_opbuild(ctx):
    s = ctx.sources
    reg_srcs = sorted({p for pat in REGISTRY_SOURCES for p in s.metadef.glob(pat)})
    ob_srcs = _opbuild_sources(s.asc_devkit)
    key = _sha(_tree_id(s.asc_devkit), _tree_id(s.metadef), _tree_id(s.ge), _compiler_id(ctx.cxx),
               *[f"{x.path}\0{x.text}" for x in STANDINS], STANDIN_MSOPGEN,
               *[p.read_bytes() for p in reg_srcs + ob_srcs])
    tools = ctx.cache / f"tools-{key}"
    ctx.tools = tools
    done = tools / "op_build"
    detail = (f"op_build from asc-devkit {OPBUILD_DIR} ({len(ob_srcs)} sources), OpDef registry from metadef "
              f"({len(reg_srcs)} sources); stand-ins: " + ", ".join(Path(x.path).name for x in STANDINS))
    if ctx.use_cache and done.is_file():
        return detail + " (cached)"
    shutil.rmtree(tools, ignore_errors=True)
    inc = tools / "include"
    for x in STANDINS:
        p = (inc if x.path.endswith(".h") else tools / "standin_src") / x.path
        p.parent.mkdir(parents=True, exist_ok=True)
        lead = "//" if not x.path.endswith(".c") else "/*"
        tail = "" if lead == "//" else " */"
        p.write_text(f"{lead} check_cann_build.py stand-in for {x.stands_for}{tail}\n" + textwrap.dedent(x.text))
    m, g, a = s.metadef, s.ge, s.asc_devkit
    incs = [inc, a / "tools" / "build" / "common", m / "inc" / "external", m / "inc" / "external" / "asc", m / "inc",
            m / "pkg_inc", m, g / "inc" / "graph_metadef" / "external", a / "include" / "utils", H.STUB_DIR]
    iflags = [f"-I{d}" for d in incs]
    common = ["-D_GLIBCXX_USE_CXX11_ABI=0", "-fPIC", "-O1", "-w"]
    objs, bad = ctx.compile_all(reg_srcs + [tools / "standin_src" / "op_impl_registry_standin.cpp"],
                                lambda _: ["-std=c++17", *common, *iflags])
    if bad:
        _fail_compiles(bad, s.metadef, "OpDef registry sources")
    rc, log = _run([ctx.cc, "-fPIC", "-c", tools / "standin_src" / "securec_standin.c", "-o", tools / "securec.o"])
    if rc:
        raise StepFailed("securec stand-in failed to compile", _errors(log))
    rc, log = _run([ctx.cxx, "-shared", "-Wl,--no-undefined", "-o", tools / "libmskv_cann_register.so",
                    *objs, tools / "securec.o"])
    if rc:
        raise StepFailed("the OpDef registry library does not link", _errors(log, 8))
    ok, log, pobj = ctx.compile(tools / "standin_src" / "platform_standin.cpp",
                                ["-std=c++11", "-D_GLIBCXX_USE_CXX11_ABI=0", "-fPIC",
                                 *[f"-I{d}" for d in ctx.cann_include_dirs()]])
    if not ok:
        raise StepFailed("the PlatformAscendC stand-in does not compile against platform_ascendc.h", _errors(log))
    rc, log = _run([ctx.cxx, "-shared", "-o", tools / "libmskv_cann_platform.so", pobj])
    if rc:
        raise StepFailed("the PlatformAscendC stand-in does not link", _errors(log))
    objs, bad = ctx.compile_all(ob_srcs, lambda _: [*_opbuild_flags(a), *common, *iflags])
    if bad:
        _fail_compiles(bad, a, "opbuild sources")
    by_stem = {o.name.rsplit("-", 1)[0]: o for o in objs}
    ordered = [by_stem[p.stem] for p in ob_srcs]
    rc, log = _run([ctx.cxx, "-pie", "-o", tools / "op_build.tmp", *ordered, f"-L{tools}", "-lmskv_cann_register",
                    "-ldl", f"-Wl,-rpath,{tools}"])
    if rc:
        raise StepFailed("op_build does not link", _errors(log, 8))
    os.replace(tools / "op_build.tmp", done)
    return detail


def _link_ops_library(ctx, objs, out):
    rc, log = _run([ctx.cxx, "-shared", "-Wl,--no-undefined", "-o", out, *objs, f"-L{ctx.tools}",
                    "-lmskv_cann_register", "-lmskv_cann_platform", f"-Wl,-rpath,{ctx.tools}"])
    if rc:
        raise StepFailed(f"{out.name} does not link", _errors(log, 8))


def step_host_library(ctx):
    srcs = sorted((ctx.repo / "op_host").glob("*.cpp"))
    if not srcs:
        raise StepFailed("no op_host/*.cpp")
    flags = ["-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0", "-std=c++11"] + [f"-I{d}" for d in ctx.cann_include_dirs()]
    objs, bad = ctx.compile_all(srcs, lambda _: flags, (ctx.repo_key(),))
    if bad:
        _fail_compiles(bad, ctx.repo, "op_host files")
    out = ctx.work / "asc" / "libascend_all_ops.so"
    out.parent.mkdir(parents=True, exist_ok=True)
    _link_ops_library(ctx, objs, out)
    ctx.library = out
    return (f"{len(srcs)} op_host files compiled as npu_op_code_gen does (g++ -fPIC -D_GLIBCXX_USE_CXX11_ABI=0 "
            f"-std=c++11 -I<cann>/include) and linked into {out.name}")


def _run_opbuild(ctx, library, out, units=None):
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPS_")}
    cmd = [ctx.tools / "op_build", library, out]
    if units:
        env["OPS_PRODUCT_NAME"] = ";".join(units)
        cmd.append("--compute_unit=" + ";".join(units))
    rc, log = _run(cmd, env=env)
    if rc != 0:
        raise StepFailed(f"op_build exited with {rc}", log.strip().splitlines()[-8:])
    return sorted(p.name for p in out.iterdir())


def step_opbuild_run(ctx):
    out = ctx.work / "asc" / "autogen"
    files = _run_opbuild(ctx, ctx.library, out, tuple(UNIT_SOC))
    ctx.generated = out
    headers = [f for f in files if f.startswith("aclnn_") and f.endswith(".h")]
    inis = [f for f in files if f.endswith("-ops-info.ini")]
    need = {f"aic-{u}-ops-info.ini" for u in UNIT_SOC} | {"op_proto.h", "op_proto.cc"}
    if not need <= set(files):
        raise StepFailed(f"op_build wrote no {', '.join(sorted(need - set(files)))}")
    return (f"{len(headers)} aclnn_*.h / {len([f for f in files if f.startswith('aclnn_') and f.endswith('.cpp')])} "
            f"aclnn_*.cpp, op_proto.h/.cc, {', '.join(inis)}")


def step_aclnn_prototypes(ctx):
    facts = ctx.facts()
    gen = ctx.generated
    have = {p.name for p in gen.glob("aclnn_*.h")}
    want = {f["header"] for f in facts.values()}
    bad = []
    if have != want:
        bad.append(f"generated headers not derived by ms_kvcache._aclnn: {sorted(have - want)}; derived but not "
                   f"generated: {sorted(want - have)}")
    for op_type, f in sorted(facts.items()):
        if f["header"] not in have:
            continue
        got = parse_aclnn_header((gen / f["header"]).read_text())
        for api, params in expected_prototypes(op_type, f).items():
            if got.get(api) != params:
                bad.append(f"{f['header']}: {api}({', '.join(' '.join(p) for p in got.get(api, []))}) but "
                           f"ms_kvcache._aclnn derives ({', '.join(' '.join(p) for p in params)})")
    if bad:
        raise StepFailed(f"{len(bad)} prototypes differ", bad)
    return f"{len(facts)} of {len(facts)} ops: aclnn<Op>GetWorkspaceSize / aclnn<Op> as ms_kvcache._aclnn derives them"


def step_generated_compile(ctx):
    gen = ctx.generated
    srcs = sorted(gen.glob("aclnn_*.cpp")) + [gen / "op_proto.cc"]
    flags = ["-fPIC", "-fvisibility=hidden", "-D_GLIBCXX_USE_CXX11_ABI=0", "-std=c++11", "-O2", f"-I{gen}",
             f"-I{ctx.tools / 'include'}"] + [f"-I{d}" for d in ctx.cann_include_dirs()]
    objs, bad = ctx.compile_all(srcs, lambda _: flags)
    if bad:
        _fail_compiles(bad, gen, "generated sources")
    return f"{len(srcs) - 1} aclnn_*.cpp and op_proto.cc compile (-std=c++11) against the public headers"


def step_ops_info(ctx):
    facts = ctx.facts()
    bad, n = [], 0
    configs = {t: H.op_soc_configs(t, ctx.repo) for t in facts}
    for unit, soc in UNIT_SOC.items():
        ini = parse_ini((ctx.generated / f"aic-{unit}-ops-info.ini").read_text())
        want_ops = {t for t, c in configs.items() if unit in c}
        if set(ini) != want_ops:
            bad.append(f"aic-{unit}-ops-info.ini: ops {sorted(set(ini) - want_ops)} not configured for {unit}; "
                       f"configured but absent {sorted(want_ops - set(ini))}")
        for op_type, sec in sorted(ini.items()):
            if op_type in facts:
                n += 1
                bad += [f"aic-{unit}: {p}" for p in check_ini_op(op_type, sec, facts[op_type], soc)]
    if bad:
        raise StepFailed(f"{len(bad)} differences from the OpSpecs", bad)
    return f"{n} op entries of {len(UNIT_SOC)} compute units: names, param types, ND formats, dtype rows, attributes"


def step_op_proto(ctx):
    facts = ctx.facts()
    reg = parse_op_proto((ctx.generated / "op_proto.h").read_text())
    bad = []
    if set(reg) != set(facts):
        bad.append(f"REG_OP {sorted(set(reg) - set(facts))} without an OpSpec; OpSpecs without REG_OP "
                   f"{sorted(set(facts) - set(reg))}")
    for op_type, d in sorted(reg.items()):
        f = facts.get(op_type)
        if f is None:
            continue
        if d["inputs"] != [tuple(x) for x in f["inputs"]]:
            bad.append(f"{op_type}: inputs {d['inputs']}, the OpSpec declares {[tuple(x) for x in f['inputs']]}")
        if d["outputs"] != f["outputs"]:
            bad.append(f"{op_type}: outputs {d['outputs']}, the OpSpec declares {f['outputs']}")
        want = [(n, k) for n, k, _ in f["attrs"]]
        if [(n, k) for n, k, _ in d["attrs"]] != want:
            bad.append(f"{op_type}: attributes {d['attrs']}, the OpSpec declares {f['attrs']}")
        else:
            for (n, k, text), (_, _, default) in zip(d["attrs"], f["attrs"]):
                if text is None or not _same_attr_value(k, text, default):
                    bad.append(f"{op_type}: attribute {n} default {text}, the OpSpec's {default!r}")
    if bad:
        raise StepFailed(f"{len(bad)} differences from the OpSpecs", bad)
    return f"{len(reg)} REG_OP: inputs, outputs and attributes as the OpSpecs declare them"


def step_fallback_layout(ctx):
    s = ctx.sources
    fake = ctx.work / "fallback"
    shutil.rmtree(fake, ignore_errors=True)
    (fake / "cann").mkdir(parents=True)
    (fake / "bin").mkdir()
    msopgen = fake / "bin" / "msopgen"
    msopgen.write_text(STANDIN_MSOPGEN.replace("__PYTHON__", sys.executable)
                       .replace("__TEMPLATE__", repr(str(s.asc_tools / TEMPLATE_DIR))))
    msopgen.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_")}
    env["ASCEND_HOME_PATH"] = str(fake / "cann")
    env["PATH"] = f"{fake / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    build = fake / "build"
    rc, log = _run(["bash", ctx.repo / "scripts" / "build_opp.sh", "--source-root", ctx.repo, "--build-dir", build],
                   env=env)
    proj = build / "msopgen_project"
    if rc != 0:
        raise StepFailed("scripts/build_opp.sh failed in msopgen mode", log.strip().splitlines()[-5:])
    ctx.project = proj   # step 10 compiles it whatever this step finds
    bad = []
    plugins = [str(p.relative_to(proj)) for p in (proj / "framework").rglob("*") if p.is_file()
               and p.suffix in (".cc", ".cpp")] if (proj / "framework").is_dir() else []
    if plugins:
        bad.append(f"framework plugin sources in the package project: {plugins} (msopgen's default -f tf)")
    cv = json.loads((proj / "CMakePresets.json").read_text())["configurePresets"][0]["cacheVariables"]
    val = {k: v.get("value") for k, v in cv.items()}
    if str(val.get("ENABLE_TEST")).lower() not in ("false", "off", "0"):
        bad.append(f"CMakePresets.json ENABLE_TEST={val.get('ENABLE_TEST')} (the template's default; testcases/)")
    if val.get("vendor_name") != "ms_kvcache":
        bad.append(f"CMakePresets.json vendor_name={val.get('vendor_name')}")
    units = tuple(str(val.get("ASCEND_COMPUTE_UNIT", "")).split(";"))
    if units != DEFAULT_UNITS:
        bad.append(f"CMakePresets.json ASCEND_COMPUTE_UNIT={';'.join(units)}, the default package is "
                   f"{';'.join(DEFAULT_UNITS)} (ascend310p opt-in: a failing 310P kernel must not fail A2 / A3)")
    skipped = sorted(set(UNIT_SOC) - set(units))
    if skipped and not re.search(r"not built: " + re.escape(";".join(skipped)), log):
        bad.append(f"the build output does not name the compute units it leaves out ({';'.join(skipped)})")
    files = {str(p.relative_to(proj)) for p in proj.rglob("*") if p.is_file()}
    stub = sorted(f for f in files if "ms_kvcache_stub" in f and f.startswith(("op_host/", "op_kernel/")))
    if stub:
        bad.append(f"the stub op's files are still in the project: {stub}")
    for p in sorted((ctx.repo / "op_kernel").glob("*.cpp")):
        if f"op_kernel/mskv_{p.name}" not in files:
            bad.append(f"op_kernel/mskv_{p.name} missing")
    for p in sorted((ctx.repo / "op_host").glob("*.cpp")):
        if f"op_host/{p.name}" not in files:
            bad.append(f"op_host/{p.name} missing")
    for p in sorted((ctx.repo / "op_proto").glob("*.cpp")):
        if f"op_host/{p.stem}_infer.cpp" not in files:
            bad.append(f"op_host/{p.stem}_infer.cpp (op_proto/{p.name}) missing")
    if bad:
        raise StepFailed(f"{len(bad)} problems in the project build_opp.sh lays out", bad)
    return (f"build_opp.sh (msopgen mode) with the asc-tools customize template: {len(files)} files, no framework "
            f"plugin, ENABLE_TEST off, compute units {';'.join(units)}")


def step_fallback_compile(ctx):
    proj = ctx.project
    if proj is None:
        raise StepFailed("not run: scripts/build_opp.sh laid out no project (step msopgen fallback layout)")
    host = proj / "op_host"
    srcs = sorted(p for p in host.iterdir() if p.suffix in (".c", ".cc", ".cpp", ".cxx", ".C", ".c++"))
    # the template's opbuild(): ${CMAKE_COMPILE} -g -fPIC -shared -std=c++11 <op_host sources>
    # -D_GLIBCXX_USE_CXX11_ABI=0 -I ${ASCEND_CANN_PACKAGE_PATH}/include -I ${CMAKE_CURRENT_SOURCE_DIR}/../op_kernel
    # (intf_pub of the libraries: the same two include folders)
    flags = (["-g", "-fPIC", "-std=c++11", "-D_GLIBCXX_USE_CXX11_ABI=0"]
             + [f"-I{d}" for d in ctx.cann_include_dirs()] + [f"-I{host}/../op_kernel"])
    proj_key = _sha(*[p.name.encode() + b"\0" + p.read_bytes() for d in ("op_host", "op_kernel")
                      for p in sorted((proj / d).iterdir()) if p.is_file()])
    objs, bad = ctx.compile_all(srcs, lambda _: flags, (proj_key,))
    if bad:
        _fail_compiles(bad, proj, f"of {len(srcs)} op_host files")
    lib = ctx.work / "fallback" / "libascend_all_ops.so"
    _link_ops_library(ctx, objs, lib)
    out = ctx.work / "fallback" / "autogen"
    _run_opbuild(ctx, lib, out)   # the template's opbuild(): op_build <library> <out dir>, no compute unit
    bad = []
    for h in sorted(ctx.generated.glob("aclnn_*.h")):
        other = out / h.name
        if not other.is_file() or parse_aclnn_header(other.read_text()) != parse_aclnn_header(h.read_text()):
            bad.append(f"{h.name}: the template's opbuild run {'wrote none' if not other.is_file() else 'differs'}")
    for ini in sorted(out.glob("aic-*-ops-info.ini")):
        ref = ctx.generated / ini.name
        if ref.is_file():
            a, b = parse_ini(ini.read_text()), parse_ini(ref.read_text())
            if a != b:
                diff = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
                bad.append(f"{ini.name}: differs from the asc-mode run for {diff[:4]}")
    if not list(out.glob("aic-*-ops-info.ini")):
        bad.append("the template's opbuild run wrote no ops-info file")
    if bad:
        raise StepFailed(f"{len(bad)} differences between the two opbuild runs", bad)
    return (f"{len(srcs)} op_host files of the project compile with the template's include paths "
            f"(-I<cann>/include -I<project>/op_kernel) and link; opbuild on that library writes the same aclnn "
            f"headers and ops-info")


STEP_FUNCS = (step_sources, step_opbuild, step_host_library, step_opbuild_run, step_aclnn_prototypes,
              step_generated_compile, step_ops_info, step_op_proto, step_fallback_layout, step_fallback_compile)
#: step -> the steps it needs
NEEDS = {"opbuild": ("sources",), "op_host library": ("opbuild",), "opbuild run": ("op_host library",),
         "aclnn prototypes": ("opbuild run",), "generated sources compile": ("opbuild run",),
         "ops-info": ("opbuild run",), "op proto": ("opbuild run",), "msopgen fallback layout": ("sources",),
         "msopgen fallback compile": ("opbuild run",)}
#: step -> steps that run with it without blocking it (the fallback compile compiles the project the layout step
#: laid out, whatever problems that step found in it)
ALSO = {"msopgen fallback compile": ("msopgen fallback layout",)}


def run_check(sources, repo=ROOT, cache=None, jobs=2, use_cache=True, only=None, progress=None):
    """Run the steps (``only``: the names of :data:`STEPS` to run, with what they need); returns a Report."""
    ctx = Ctx(sources, repo, cache or cache_root(), jobs, use_cache)
    want = set(STEPS) if not only else set(only)
    todo = set()

    def add(name):
        if name not in todo:
            todo.add(name)
            for n in NEEDS.get(name, ()) + ALSO.get(name, ()):
                add(n)

    for n in want:
        add(n)
    rep = Report()
    failed = set()
    for i, (name, fn) in enumerate(zip(STEPS, STEP_FUNCS)):
        if name not in todo:
            continue
        blocked = [n for n in NEEDS.get(name, ()) if n in failed]
        if blocked:
            step = Step(name, False, f"not run: needs {', '.join(blocked)}")
        else:
            try:
                step = Step(name, True, fn(ctx))
            except StepFailed as exc:
                step = Step(name, False, str(exc), exc.lines)
            except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
                step = Step(name, False, f"{type(exc).__name__}: {exc}")
        if not step.ok:
            failed.add(name)
        rep.steps.append(step)
        if progress is not None:
            progress(i + 1, step)
    return rep


def format_step(i, step, total=len(STEPS)):
    head = f"[{i}/{total}] {step.name}: {'ok' if step.ok else 'FAIL'} - {step.detail}"
    return "\n".join([head] + ["    " + l for l in step.lines])


_SOURCE_KEYS = ("asc_devkit", "asc_tools", "metadef", "ge")
_NEED_ALL = ("the build check needs the public sources {} (work trees or bare git dirs of github.com/mirror-cann/"
             "asc-devkit, hicann/asc-tools, hicann/metadef, hicann/ge), not an installed CANN")


def _option(key):
    return f"--{key.replace('_', '-')} / ${H.ENV_VARS[key]}"


def find_build_sources(**kw):
    """check_cann_headers.find_sources for the four checkouts, all required; an installed CANN alone is not enough
    here (the check builds opbuild from source).

    Raises:
        check_cann_headers.SourcesNotFound: none given, some missing (named), or a given one unusable.
    """
    env = kw.get("environ") or os.environ
    if not any(kw.get(k) is not None or env.get(H.ENV_VARS[k]) for k in _SOURCE_KEYS):
        raise H.SourcesNotFound(_NEED_ALL.format(", ".join(_option(k) for k in _SOURCE_KEYS)))
    src = H.find_sources(**kw)
    missing = [k for k in _SOURCE_KEYS if getattr(src, k) is None]
    if len(missing) == len(_SOURCE_KEYS):  # ($ASCEND_HOME_PATH only: find_sources took it)
        raise H.SourcesNotFound(_NEED_ALL.format(", ".join(_option(k) for k in _SOURCE_KEYS)))
    if missing:
        raise H.SourcesNotFound(f"the build check needs all four public source trees; missing: "
                                f"{', '.join(_option(k) for k in missing)}")
    return src


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for opt in ("--asc-devkit", "--asc-tools", "--metadef", "--ge"):
        ap.add_argument(opt)
    ap.add_argument("--repo", default=str(ROOT), help="the checkout to check (default: this one)")
    ap.add_argument("--jobs", "-j", type=int, default=2)
    ap.add_argument("--no-cache", action="store_true", help="rebuild the tools and every object")
    ap.add_argument("--only", action="append", choices=STEPS, help="run these steps (and what they need)")
    a = ap.parse_args(argv)
    try:
        src = find_build_sources(asc_devkit=a.asc_devkit, asc_tools=a.asc_tools, metadef=a.metadef, ge=a.ge)
    except H.SourcesNotFound as exc:
        print(f"check_cann_build: {exc}", file=sys.stderr)
        return 2
    print(f"check_cann_build: repository {Path(a.repo).resolve()}; cache {cache_root()}", flush=True)
    rep = run_check(src, a.repo, jobs=a.jobs, use_cache=not a.no_cache, only=a.only,
                    progress=lambda i, s: print(format_step(i, s), flush=True))
    print(rep.summary())
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
