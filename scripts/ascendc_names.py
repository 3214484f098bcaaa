#!/usr/bin/env python3
"""Every AscendC API name the repository's kernels use, and whether the official headers declare it.

``used_names(kernel, target)`` compiles ``op_kernel/<op>.cpp`` against the emulation
(``ms_kvcache/sim/include``) through the same wrapper the sim build uses (``kernel_operator.h``, the
tiling header in kernel mode, the kernel inside its own namespace) with clang's JSON AST dump, with the
target's predefined macros (so the 310P ``#else`` branches are what is listed for 310P), and collects, for
every expression and declaration located in ``op_kernel/``:

* the declarations it references (functions, methods, operators, fields, enum constants, variables),
* the types it names (classes, class templates with their template arguments, enums, aliases),

keeping those declared in the emulation headers (the API), plus the API macros (``GM_ADDR``,
``TILING_KEY_IS``, ...) and global enum constants (``PIPE_ALL``) the kernel sources spell. Each name is
qualified the way clang's ``-ast-list`` prints declarations (``AscendC::TQueBind::AllocTensor``,
``AscendC::RoundMode::CAST_NONE``, ``pipe_t::PIPE_ALL``).

``official_names(target, sources)`` is the set of declarations (``-ast-list``) and macros (``-dM``) the
official headers provide for the target through ``kernel_operator.h`` + ``kernel_operator_list_tensor_intf.h``
(the two headers the kernels include), compiled as the conformance check compiles kernels.
``check_names`` compares the two. Needs clang++ (the AST dump); tests skip without it.

Usage: scripts/ascendc_names.py [--target a2|310p] [--official] [--markdown] [KERNEL ...]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_cann_headers as cch  # noqa: E402

ROOT = cch.ROOT
SIM_INCLUDE = ROOT / "ms_kvcache" / "sim" / "include"

_SCOPE_KINDS = {"NamespaceDecl", "CXXRecordDecl", "ClassTemplateSpecializationDecl",
                "ClassTemplatePartialSpecializationDecl", "EnumDecl", "RecordDecl"}
_KIND_NAMES = {
    "FunctionDecl": "function", "FunctionTemplateDecl": "function", "CXXMethodDecl": "method",
    "CXXConstructorDecl": "constructor", "CXXConversionDecl": "method", "CXXDestructorDecl": "destructor",
    "FieldDecl": "field", "EnumConstantDecl": "enum constant", "VarDecl": "variable", "EnumDecl": "enum",
    "CXXRecordDecl": "class", "ClassTemplateDecl": "class", "ClassTemplateSpecializationDecl": "class",
    "TypedefDecl": "type alias", "TypeAliasDecl": "type alias", "TypeAliasTemplateDecl": "type alias",
    "NamespaceDecl": "namespace",
}
_QUAL_RE = re.compile(r"\b(AscendC(?:::[A-Za-z_]\w*)+)")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")
_SIM_ARCH_NS = re.compile(r"ascendc_sim_arch_\d+")


@dataclass
class UsedName:
    """One API name a kernel uses: ``name`` (qualified as ``-ast-list`` prints it), ``kind`` (function,
    method, class, enum, enum constant, field, type alias, macro, ...), ``files`` using it."""

    name: str
    kind: str
    files: set = field(default_factory=set)


def _clang():
    for c in ("clang++", "clang++-14", "clang++-15", "clang++-16", "clang++-17", "clang++-18"):
        if shutil.which(c):
            return c
    return None


def clang_available():
    """(bool, reason): the name listing needs clang's JSON AST dump."""
    c = _clang()
    return (True, "") if c else (False, "clang++ not found (the AscendC name listing uses clang's JSON AST dump)")


def sim_wrapper(kernel, op_type=None, target="a2"):
    """The kernel-side translation unit of the sim build for ``kernel`` and ``target`` (as
    ms_kvcache.sim.build / cmake/sim.cmake write it, without the entry renaming and registration):
    emulation ``kernel_operator.h``, the ListTensorDesc gate, the tiling header in kernel mode, the
    kernel inside its own namespace. The target's macros come on the command line."""
    k = Path(kernel).resolve()
    op_type = op_type or cch.op_type_of_kernel(k)
    tiling = k.parent.parent / "op_host" / f"{k.stem}_tiling.h"
    ns = f"ascendc_sim_k_{k.stem}_{target}"
    w = ["#define ASCENDC_SIM_KERNEL_SIDE 1", f"#define ASCENDC_SIM_OP_TYPE {op_type}", '#include "kernel_operator.h"',
         '#include "ascendc_sim/list_tensor.h"', '#include "register/tilingdata_base.h"',
         f"namespace {ns} {{ namespace ascendc_sim_gate {{}} }}",
         f"namespace AscendC {{ using namespace ::{ns}::ascendc_sim_gate; }}", "#define ASCENDC_SIM_KERNEL_GATE 1",
         f"namespace {ns} {{", "namespace optiling {}", "using namespace optiling;"]
    if tiling.is_file():
        w.append(f'#include "{tiling}"')
    w += [f'#include "{k}"', f"}}  // namespace {ns}", ""]
    return "\n".join(w)


class _Walker:
    """Pre-order walk of clang's JSON AST that tracks the current file (the dump prints ``file`` only
    when it changes, in the order the locations are written: ``loc`` then ``range``; spelling before
    expansion)."""

    def __init__(self, api_dirs, our_dirs):
        self.api_dirs = tuple(str(Path(d).resolve()) + os.sep for d in api_dirs)
        self.our_dirs = tuple(str(Path(d).resolve()) + os.sep for d in our_dirs)
        self.last = None
        self.decls = {}  # id -> (qualname, kind, is_api)
        self.scopes = {}  # id of a namespace / class / enum -> its qualified name parts
        self.refs = []  # (decl id, file)
        self.types = []  # (qualType string, alias decl id, file)

    def _bare(self, loc):
        if "file" in loc:
            self.last = loc["file"]
        return self.last

    def _loc(self, loc):
        if not isinstance(loc, dict) or not loc:
            return None
        if "spellingLoc" in loc or "expansionLoc" in loc:
            self._bare(loc.get("spellingLoc") or {})
            return self._bare(loc.get("expansionLoc") or {})
        return self._bare(loc)

    def _node_file(self, n):
        f = None
        if "loc" in n:
            f = self._loc(n["loc"])
        r = n.get("range")
        if isinstance(r, dict):
            b = self._loc(r.get("begin") or {})
            self._loc(r.get("end") or {})
            f = f or b
        return f

    def is_api(self, f):
        return f is not None and str(f).startswith(self.api_dirs)

    def is_ours(self, f):
        return f is not None and str(f).startswith(self.our_dirs)

    def walk(self, root):
        stack = [(root, ())]
        while stack:
            n, scope = stack.pop()
            if not isinstance(n, dict):
                continue
            f = self._node_file(n)
            k = n.get("kind", "")
            name = n.get("name")
            if "parentDeclContextId" in n and n["parentDeclContextId"] in self.scopes:
                scope = self.scopes[n["parentDeclContextId"]]  # an out-of-line definition
            if "id" in n and k.endswith("Decl") and name:
                q = "::".join(scope + (name,))
                self.decls[n["id"]] = (q, _KIND_NAMES.get(k, k), self.is_api(f))
            if self.is_ours(f):
                ref = n.get("referencedDecl")
                if isinstance(ref, dict) and "id" in ref:
                    self.refs.append((ref["id"], f))
                if "referencedMemberDecl" in n:
                    self.refs.append((n["referencedMemberDecl"], f))
                for key in ("type", "ctorType"):
                    t = n.get(key)
                    if isinstance(t, dict):
                        self.types.append((t.get("qualType", "") + " " + t.get("desugaredQualType", ""),
                                           t.get("typeAliasDeclId"), f))
            child_scope = scope
            if k in _SCOPE_KINDS and name:
                child_scope = scope + (name,)
                if k == "NamespaceDecl" and _SIM_ARCH_NS.fullmatch(name):
                    child_scope = scope  # the emulation's per-arch inline namespace: not part of the API name
                elif k == "NamespaceDecl" and name == "ascendc_sim_lt" and not scope:
                    child_scope = ("AscendC",)  # ListTensorDesc / TensorDesc, named AscendC:: by their header
                if "id" in n:
                    self.scopes[n["id"]] = child_scope
            inner = n.get("inner") or []
            for c in reversed(inner):
                stack.append((c, child_scope))


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def _our_files(kernel, deps):
    """The kernel and the op_kernel headers it includes (from the ``-M`` dependency list ``deps``)."""
    k = Path(kernel).resolve()
    listed = {str(Path(t).resolve()) for t in deps.replace("\\\n", " ").split() if t.endswith((".h", ".cpp", ".inl"))}
    return [k] + [p for p in sorted(k.parent.glob("*.h")) if str(p.resolve()) in listed]


def _macros(cmd_base, text, cwd):
    """Macros defined by the headers ``text`` includes (``-dM``) minus the compiler's own."""
    def dm(src):
        p = Path(cwd) / "dm.cpp"
        p.write_text(src)
        r = subprocess.run(cmd_base + ["-E", "-dM", str(p)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"macro listing failed:\n{r.stderr[-4000:]}")
        return {m.group(1) for m in re.finditer(r"^#define\s+([A-Za-z_]\w*)", r.stdout, re.M)}
    return dm(text) - dm("")


def used_names(kernel, target="a2", compiler=None, foreign=None):
    """API names ``op_kernel`` code of ``kernel`` uses, compiled against the emulation for ``target``.

    Args:
        foreign (list | None): if given, receives the ``AscendC::`` names the kernel code refers to that
            are NOT declared in the emulation headers (e.g. declared by the kernel itself).

    Returns:
        dict[str, UsedName]: by qualified name.

    Raises:
        RuntimeError: clang++ missing or the compile failed (the message holds the diagnostics).
    """
    cc = compiler or _clang()
    if cc is None:
        raise RuntimeError(clang_available()[1])
    k = Path(kernel).resolve()
    t = cch.TARGETS[target]
    base = [cc, "-x", "c++", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0"] + [f"-D{d}" for d in t.defines]
    base += [f"-I{SIM_INCLUDE}", f"-I{k.parent}", f"-I{k.parent.parent / 'op_host'}"]
    with tempfile.TemporaryDirectory(prefix="mskv_names_") as tmp:
        w = Path(tmp) / f"{k.stem}_sim_kernel.cpp"
        w.write_text(sim_wrapper(k, target=target))
        r = subprocess.run(base + ["-fsyntax-only", "-Xclang", "-ast-dump=json", str(w)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{k.name} ({target}) does not compile against the emulation:\n{r.stderr[-6000:]}")
        ast = json.loads(r.stdout)
        del r
        w_text = w.read_text()
        deps = subprocess.run(base + ["-M", str(w)], capture_output=True, text=True).stdout
        macros = _macros(base, '#define ASCENDC_SIM_KERNEL_SIDE 1\n#include "kernel_operator.h"\n'
                               '#include "kernel_operator_list_tensor_intf.h"\n#include "register/tilingdata_base.h"\n',
                         tmp)
    wk = _Walker([SIM_INCLUDE], [k.parent])
    wk.walk(ast)
    del ast
    out = {}

    def add(name, kind, f):
        u = out.setdefault(name, UsedName(name, kind))
        u.files.add(Path(f).name)

    for did, f in wk.refs:
        d = wk.decls.get(did)
        if d is not None and d[2]:
            add(d[0], d[1], f)
        elif d is not None and d[0].startswith("AscendC::") and foreign is not None:
            foreign.append(f"{d[0]} ({Path(f).name})")
    api_types = {q: kind for q, kind, api in wk.decls.values() if api and kind in ("class", "enum", "type alias")}
    global_api = {}
    for q, kind, api in wk.decls.values():
        if api and "::" not in q and kind in ("class", "type alias", "enum"):
            global_api[q] = kind
    enum_consts = {}
    for q, kind, api in wk.decls.values():
        if api and kind == "enum constant" and not q.startswith(("AscendC::", "ascendc_sim", "std::", "__")):
            enum_consts[q.rsplit("::", 1)[-1]] = q
    for text, alias, f in wk.types:
        text = re.sub(r"\bascendc_sim_lt::", "AscendC::", re.sub(r"\bascendc_sim_arch_\d+::", "", text))
        for m in _QUAL_RE.finditer(text):
            q = m.group(1)
            if q in api_types:
                add(q, api_types[q], f)
            else:
                # an enum constant inside template arguments (AscendC::TPosition::VECIN)
                head = q.rsplit("::", 1)[0]
                if head in api_types:
                    add(q, "enum constant", f)
                elif foreign is not None:
                    foreign.append(f"{q} ({Path(f).name})")
        if alias is not None:
            d = wk.decls.get(alias)
            if d is not None and d[2]:
                add(d[0], d[1], f)
        for ident in _IDENT_RE.findall(text):
            if global_api.get(ident) in ("class", "type alias", "enum"):
                add(ident, global_api[ident], f)
    # what the preprocessor consumed: API macros, and global enum constants spelled in template arguments
    for p in _our_files(k, deps):
        toks = set(_IDENT_RE.findall(_strip_comments(p.read_text(errors="replace"))))
        for tok in toks:
            if tok in macros and not tok.startswith("ASCENDC_SIM") and not tok.startswith("MS_KVCACHE"):
                add(tok, "macro", p)
            elif tok in enum_consts:
                add(enum_consts[tok], "enum constant", p)
    for n in [n for n in out if n.startswith(("ascendc_sim", "std::"))]:
        del out[n]
    return out


_OFFICIAL_CACHE = {}


def official_names(target, sources, compiler=None):
    """Declarations (``-Xclang -ast-list``) and macros the official headers give a kernel for ``target``
    through ``kernel_operator.h`` + ``kernel_operator_list_tensor_intf.h`` (CPU-debug configuration of
    the conformance check).

    Returns:
        (set[str] qualified declaration names, set[str] macro names, set[str] names that only
        scripts/cann_stubs/stub_fun.h declares, standing in for CANN's binary stub_fun.h; empty with an
        installed CANN, whose real header is used)
    """
    cc = compiler or _clang()
    key = (target, repr(sources), cc)
    if key in _OFFICIAL_CACHE:
        return _OFFICIAL_CACHE[key]
    text = '#include "kernel_operator.h"\n#include "kernel_operator_list_tensor_intf.h"\n'
    with tempfile.TemporaryDirectory(prefix="mskv_official_names_") as tmp:
        src = Path(tmp) / "official.cpp"
        src.write_text(text)
        cmd = cch.kernel_command(src, target, cc, sources)
        cmd = [c for c in cmd if c != "-fsyntax-only" and c != str(src)]
        r = subprocess.run(cmd + ["-fsyntax-only", "-Xclang", "-ast-list", str(src)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"official headers do not compile for {target}:\n{r.stderr[-4000:]}")
        decls = {l.strip() for l in r.stdout.splitlines() if l.strip()}
        macros = _macros(cmd, text, tmp)
        stubbed = set()
        if sources.kind == "checkout":  # what only our stand-in for the binary stub_fun.h declares
            st = Path(tmp) / "stub.cpp"
            st.write_text(f'#include "stub_def.h"\n#include "{cch.STUB_DIR / "stub_fun.h"}"\n')
            r2 = subprocess.run([c for c in cmd if c != str(src)] + ["-fsyntax-only", "-Xclang", "-ast-list", str(st)],
                                capture_output=True, text=True)
            if r2.returncode == 0:
                stub_decls = {l.strip() for l in r2.stdout.splitlines() if l.strip()}
                st.write_text('#include "stub_def.h"\n')
                r3 = subprocess.run([c for c in cmd if c != str(src)] + ["-fsyntax-only", "-Xclang", "-ast-list", str(st)],
                                    capture_output=True, text=True)
                stubbed = stub_decls - {l.strip() for l in r3.stdout.splitlines() if l.strip()}
    _OFFICIAL_CACHE[key] = (decls, macros, stubbed)
    return decls, macros, stubbed


#: Names a kernel uses that CANN generates per op rather than declaring in a header
#: (get_op_tiling.py: the tiling class, InitTilingData and these macros).
GENERATED_BY_CANN = {"GET_TILING_DATA", "GET_TILING_DATA_WITH_STRUCT", "GET_TILING_DATA_MEMBER"}


def _strip_template(name):
    """``AscendC::TQue::TQue<pos, depth, mask>`` -> ``AscendC::TQue::TQue`` (as -ast-list prints some)."""
    return re.sub(r"<.*$", "", name)


def check_names(used, official):
    """Compare used API names with the official declarations of one target.

    Returns:
        list[(UsedName, str status)]: status ``"declared"``, ``"declared (macro)"``, ``"generated by CANN"``,
        ``"declared in a base class"`` (a member found under another AscendC class, e.g. a TQueBind
        method used through TQue), ``"declared by the stub_fun.h stand-in"`` (a CCE builtin type such as
        ``pipe_t``, which only CANN's binary tikicpulib declares) or ``"MISSING"``.
    """
    decls, macros, stubbed = official
    plain = {_strip_template(d) for d in decls}
    members = {}
    for d in plain:
        if d.startswith("AscendC::") and d.count("::") >= 2:
            members.setdefault(d.rsplit("::", 1)[1], set()).add(d)
    out = []
    for n in sorted(used.values(), key=lambda u: u.name):
        if n.kind == "macro":
            st = "generated by CANN" if n.name in GENERATED_BY_CANN else (
                "declared (macro)" if n.name in macros else "MISSING")
        elif n.name in stubbed or n.name.rsplit("::", 1)[-1] in stubbed:
            st = "declared by the stub_fun.h stand-in"
        elif n.name in plain:
            st = "declared"
        elif n.kind in ("method", "field", "constructor", "destructor", "variable") and n.name.startswith("AscendC::") \
                and n.name.rsplit("::", 1)[0] in plain and n.name.rsplit("::", 1)[1] in members:
            st = "declared in a base class"
        elif n.kind == "enum constant" and n.name.rsplit("::", 1)[1] in plain:
            st = "declared"  # an unscoped enum's constant, listed without its enum
        else:
            st = "MISSING"
        out.append((n, st))
    return out


def official_header(name, kind, sources):
    """The official header a kernel reaches ``name`` through (documentation): the first interface header
    (``include/kernel_operator.h``, ``include/basic_api/*.h``) that declares it, else the first
    implementation header; a member's class decides for methods, fields and enum constants. ``None``
    if not found (e.g. a CCE builtin type of the binary stub_fun.h)."""
    if sources.ascend_home is not None:
        roots = [sources.ascend_home / "asc" / "include", sources.ascend_home / "asc" / "impl",
                 sources.ascend_home / "tools" / "tikicpulib" / "lib" / "include"]
        cpu = roots[2:]
    else:
        roots = [sources.asc_devkit / "include", sources.asc_devkit / "impl" / "basic_api"]
        cpu = [sources.asc_tools / "cpudebug" / "include"] if sources.asc_tools is not None else []
    if "::" not in name:  # half, bfloat16_t, __aicore__, __gm__: the CPU-debug framework declares them
        roots = cpu + roots
    parts = name.split("::")
    if kind in ("method", "field", "constructor", "destructor", "enum constant", "variable") and len(parts) >= 3:
        name, kind = "::".join(parts[:-1]), "class"
        parts = parts[:-1]
    last = re.escape(parts[-1])
    if kind == "macro":
        pat = re.compile(rf"#\s*define\s+{last}\b")
    elif kind in ("class", "enum", "type alias"):
        pat = re.compile(rf"\b(?:class|struct|enum(?:\s+class)?|using|typedef)\s+(?:[\w:<>, ]+\s+)?{last}\b(?!\s*;)")
    else:
        pat = re.compile(rf"\b{last}\s*\(")
    files = []
    for r in roots:
        if r.is_dir():
            files += sorted(p for p in r.rglob("*.h") if "adv_api" not in p.parts and "tensor_api" not in p.parts)
    def rank(p):
        s = str(p)
        return (0 if any(str(p).startswith(str(c)) for c in cpu) and "::" not in name else
                1 if p.name == "kernel_operator.h" else 2 if "/include/basic_api/" in s and "/impl/" not in s
                else 3 if "/include/" in s else 4, s)
    for f in sorted(files, key=rank):
        try:
            if pat.search(f.read_text(errors="replace")):
                for label, base in (("asc-tools", sources.asc_tools), ("", sources.asc_devkit),
                                    ("", sources.ascend_home)):
                    if base is not None and str(f).startswith(str(base) + os.sep):
                        rel = str(f.relative_to(base))
                        return f"{label}: {rel}" if label else rel
                return str(f)
        except OSError:
            continue
    return None


def markdown_table(per_target, sources):
    """Markdown table of the API names used: name | kind | official header | status per target | used in."""
    targets = list(per_target)
    names = {}
    for t, rows in per_target.items():
        for u, st in rows:
            e = names.setdefault(u.name, {"u": u, "st": {}, "files": set()})
            e["st"][t] = st
            e["files"] |= u.files
    out = ["| API | kind | official header | " + " | ".join(targets) + " | used in |",
           "|---|---|---|" + "---|" * len(targets) + "---|"]
    for n in sorted(names):
        e = names[n]
        stub = any(v.startswith("declared by the stub_fun.h") for v in e["st"].values())
        hdr = None if stub or not sources else official_header(n, e["u"].kind, sources)
        hdr = "tikicpulib `stub_fun.h` (binary)" if stub else (f"`{hdr}`" if hdr else "-")
        st = " | ".join(e["st"].get(t, "not used") for t in targets)
        out.append(f"| `{n}` | {e['u'].kind} | {hdr} | {st} | "
                   f"{', '.join(sorted(e['files']))} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="append", choices=sorted(cch.TARGETS))
    ap.add_argument("--official", action="store_true", help="also check each name against the official headers")
    ap.add_argument("--markdown", action="store_true", help="print one markdown table (docs/conformance.md)")
    ap.add_argument("kernels", nargs="*")
    a = ap.parse_args(argv)
    ok, why = clang_available()
    if not ok:
        print(why, file=sys.stderr)
        return 2
    kernels = a.kernels or [str(p) for p in cch.find_repo_files()["kernel"]]
    src = cch.find_sources() if a.official else None
    bad = 0
    per_target = {}
    for t in a.target or list(cch.TARGETS):
        merged = {}
        for k in kernels:
            if t not in cch.kernel_targets(k):
                continue
            for n, u in used_names(k, t).items():
                m = merged.setdefault(n, UsedName(n, u.kind))
                m.files |= u.files
        rows = check_names(merged, official_names(t, src)) if src else [(u, "") for u in merged.values()]
        per_target[t] = rows
        bad += sum(st == "MISSING" for _, st in rows)
        if a.markdown:
            continue
        print(f"== {t}: {len(merged)} API names")
        for u, st in sorted(rows, key=lambda r: r[0].name):
            print(f"  {u.name:<52} {u.kind:<14} {st:<26} {', '.join(sorted(u.files))}")
    if a.markdown:
        print(markdown_table(per_target, src))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
