"""Kernel lint: reject what the AscendC device compiler (bisheng) does not accept in kernel code.

The AscendC emulation compiles kernels with g++, which accepts far more than the device compiler, so
a kernel that passes the emulation may still not build for an NPU. This lint keeps kernel sources
inside the device subset of C++. :func:`ms_kvcache.sim.build` runs it on every kernel source (and the
op's own headers it includes) and refuses to build on a violation (``lint=False`` opts out);
``python -m ms_kvcache.sim.lint [PATH ...]`` (or ``scripts/lint_op_kernel.py``) runs it on files or
directories.

Rules (``file:line: [rule] message``):

  std         no C++ standard library: no ``std::``, ``using namespace std``, ``namespace x = std``
  heap        no dynamic memory (``new``, ``delete``, ``malloc``, ``calloc``, ``realloc``, ``free``,
              ``aligned_alloc``, ``posix_memalign``, ``strdup``, ...)
  exceptions  no exceptions (``throw``, ``try``, ``catch``)
  host-io     no host I/O (``printf``, ``fprintf``, ``puts``, ``fputs``, ``putchar``, ``fwrite``,
              ``fopen``, ``scanf``, ``perror``, ``stdout``, ``stderr``, ``cout``, ``cerr``, ...);
              AscendC's device ``AscendC::printf`` / ``PRINTF`` are allowed, and so is an unqualified
              ``printf`` where ``using namespace AscendC;`` (or ``using AscendC::printf;``) is in effect:
              at file scope before it (also from an including file or an op header included before
              it), or in an enclosing block. ``::printf`` is the host's and always rejected
  rtti        no ``dynamic_cast`` / ``typeid``
  include     includes only from the allowlist: ``kernel_operator.h``,
              ``kernel_operator_list_tensor_intf.h``, ``lib/...`` (AscendC high-level API) and the
              op's own headers: quoted includes that resolve inside the source tree (the kernel's
              directory; ``../`` out of it, absolute paths and computed ``#include MACRO`` are
              rejected, because the CANN kernel build copies op_kernel/ only)

Every rule is checked on the source text (comments and string literals blanked) and again on the
source after the C preprocessor (allowed headers replaced by empty stubs, the op's own headers
inlined), so a banned name built by token pasting (``mal##loc``) or hidden in a macro is caught
too; such a hit says "after macro expansion". The preprocessed check runs once per arch family
(the macros bisheng predefines: ``__NPU_ARCH__`` 2201 for Atlas A2/A3, 2002 for Ascend310P), so both
sides of an ``#if __CCE_AICORE__`` are checked. It needs a C++ compiler (``$CXX``
or ``g++``); without one it is skipped with a note. It does not prove that bisheng accepts the code
(templates, intrinsics and device attributes are not checked).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ms_kvcache.sim._archs import ARCHS

__all__ = ["lint_file", "lint_paths", "format_problems", "main", "RULES", "KernelLintError"]

ALLOWED_INCLUDES = ("kernel_operator.h", "kernel_operator_list_tensor_intf.h")
ALLOWED_PREFIXES = ("lib/",)
SUFFIXES = (".cpp", ".cc", ".h", ".hpp", ".inl")

_NOT_MEMBER = r"(?<![.\w])(?<!->)"  # not x.name / x->name
_HEAP = ("malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign", "memalign", "valloc", "pvalloc",
         "strdup", "strndup", "alloca")
_HOST_IO = ("printf", "fprintf", "sprintf", "snprintf", "vprintf", "vfprintf", "vsprintf", "vsnprintf", "dprintf",
            "puts", "fputs", "putc", "fputc", "putchar", "fwrite", "fread", "fopen", "fclose", "fflush", "fgets",
            "gets", "getchar", "getc", "fgetc", "scanf", "fscanf", "sscanf", "perror", "stdout", "stderr", "stdin",
            "cout", "cerr", "clog", "cin", "FILE")

_HOST_IO_RX = re.compile(r"(?<!AscendC::)" + _NOT_MEMBER + r"\b(?:" + "|".join(_HOST_IO) + r")\b")

#: (rule, compiled regex, message)
RULES = [
    ("std", re.compile(_NOT_MEMBER + r"\bstd\b"),
     "the C++ standard library (std::, using namespace std) does not exist in device code"),
    ("heap", re.compile(r"\bnew\b|\bdelete\b|" + _NOT_MEMBER + r"\b(?:" + "|".join(_HEAP) + r")\b"),
     "no heap in device code (new/delete/malloc/free/...)"),
    ("exceptions", re.compile(r"\b(?:throw|try|catch)\b"), "device code has no exceptions (throw/try/catch)"),
    ("host-io", _HOST_IO_RX,
     "host I/O does not exist on the device (use AscendC::printf / AscendC::DumpTensor)"),
    ("rtti", re.compile(r"\b(?:dynamic_cast|typeid)\b"), "no RTTI in device code"),
]
_INCLUDE_LINE = re.compile(r"^\s*#\s*include\b(.*)$")
# a using-directive / using-declaration that makes an unqualified `printf` AscendC::printf
_USING_ASCENDC = re.compile(r"\busing\s+(?:namespace\s+(?:::\s*)?AscendC\s*;|(?:::\s*)?AscendC\s*::\s*printf\s*;)")
_SCOPE_TOKEN = re.compile(r"[{}]|" + _USING_ASCENDC.pattern + r"|(?<![\w.:])(?<!->)(?P<pf>(?:::\s*)?\bprintf\b)")
_INCLUDE_FORM = re.compile(r'^\s*([<"])([^>"]+)[>"]')
_LINEMARKER = re.compile(r'^#\s*(\d+)\s+"((?:[^"\\]|\\.)*)"')


class KernelLintError(ValueError):
    """A kernel source breaks the device-code subset (raised by :func:`ms_kvcache.sim.build`).

    Attribute ``problems``: list of ``(path, line, rule, message)``.
    """

    def __init__(self, message, problems):
        super().__init__(message)
        self.problems = problems


def strip_comments_and_strings(text):
    """Blank out comments and string / char literals, keeping line structure (and #include lines)."""
    out = []
    i, n = 0, len(text)
    state = None
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if state is None:
            if c == "/" and nxt == "/":
                state = "line"
                i += 2
                continue
            if c == "/" and nxt == "*":
                state = "block"
                i += 2
                continue
            if c in "\"'":
                line_start = text.rfind("\n", 0, i) + 1
                if text[line_start:i].lstrip().startswith("#"):  # keep #include "x.h" / linemarkers intact
                    out.append(c)
                    i += 1
                    continue
                state = c
                out.append(c)
                i += 1
                continue
            out.append(c)
        elif state == "line":
            if c == "\n":
                state = None
                out.append(c)
        elif state == "block":
            if c == "*" and nxt == "/":
                state = None
                i += 2
                continue
            out.append("\n" if c == "\n" else " ")
        else:  # inside a literal
            if c == "\\":
                i += 2
                continue
            if c == state:
                state = None
                out.append(c)
            elif c == "\n":
                out.append(c)
        i += 1
    return "".join(out)


def _ascendc_printf_scan(lines, active=False, include_exports=None, legal=None):
    """Where an unqualified ``printf`` is ``AscendC::printf``: scans ``lines`` (code with comments and
    strings blanked) tracking braces; a ``using namespace AscendC;`` (or ``using AscendC::printf;``) is
    in effect until the block it appears in closes (at file scope: to the end). ``active``: in effect
    from the start (the including file had it at file scope). ``include_exports(line)``: True if that
    ``#include`` line brings a file-scope directive (an op header that declares it). Adds the
    ``(line number, column)`` of every unqualified ``printf`` in effect to ``legal`` (a set) and
    returns whether a directive is in effect at file scope at the end."""
    legal = set() if legal is None else legal
    stack = [active]  # per open block: is a directive in effect in it
    for lineno, line in enumerate(lines, 1):
        if line.lstrip().startswith("#"):
            if len(stack) == 1 and include_exports is not None and _INCLUDE_LINE.match(line) and include_exports(line):
                stack[0] = True
            continue
        for m in _SCOPE_TOKEN.finditer(line):
            tok = m.group(0)
            if tok == "{":
                stack.append(stack[-1])
            elif tok == "}":
                if len(stack) > 1:
                    stack.pop()
            elif m.group("pf") is not None:
                if stack[-1] and not tok.startswith(":"):
                    legal.add((lineno, m.start("pf")))
            else:
                stack[-1] = True
    return stack[0]


def _host_io_hit(line, lineno, legal):
    """True if ``line`` has a host-io name that is not an AscendC::printf (see _ascendc_printf_scan)."""
    for m in _HOST_IO_RX.finditer(line):
        if m.group(0) == "printf" and (lineno, m.start()) in legal:
            continue
        return True
    return False


def _line_hits(line, lineno, legal):
    """The rules ``line`` breaks (an AscendC::printf in ``legal`` is not host I/O)."""
    out = []
    for rule, rx, msg in RULES:
        if rule == "host-io":
            if _host_io_hit(line, lineno, legal):
                out.append((rule, msg))
        elif rx.search(line):
            out.append((rule, msg))
    return out


def _exports_using(path, root, seen=None):
    """True if the op header ``path`` (or an op header it includes at file scope) puts
    ``using namespace AscendC;`` in effect at file scope."""
    path = Path(path).resolve()
    seen = set() if seen is None else seen
    if path in seen:
        return False
    seen.add(path)
    try:
        code = strip_comments_and_strings(path.read_text(errors="replace")).splitlines()
    except OSError:
        return False
    return _ascendc_printf_scan(code, include_exports=_include_exporter(path, root, seen))


def _include_exporter(path, root, seen=None):
    def exports(line):
        m = _INCLUDE_LINE.match(line)
        msg, local = _check_include(path, root, m.group(1))
        return msg is None and local is not None and _exports_using(local, root, seen)
    return exports


def _inside(path, root):
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _check_include(path, root, rest):
    """(problem message or None, local header path or None) for the text after ``#include``."""
    m = _INCLUDE_FORM.match(rest)
    if not m:
        return (f"#include{rest.rstrip()} is a computed include; only literal includes from the allowlist are "
                "accepted"), None
    kind, name = m.groups()
    shown = f"#include {kind}{name}{'>' if kind == '<' else chr(34)}"
    if name in ALLOWED_INCLUDES or name.startswith(ALLOWED_PREFIXES):
        if ".." in Path(name).parts:
            return f"{shown} leaves the AscendC include tree", None
        return None, None
    if kind == '"':
        target = path.parent / name
        if Path(name).is_absolute():
            return f"{shown} is an absolute path; include the op's own headers relative to it", None
        if target.is_file():
            if not _inside(target, root):
                return (f"{shown} resolves to {target.resolve()}, outside the kernel source tree {root.resolve()} "
                        "(the CANN kernel build copies op_kernel/ only)"), None
            return None, target.resolve()
    return f"{shown} is outside the allowlist (kernel_operator.h, lib/..., the op's own headers)", None


def _text_problems(path, root, seen, locals_out, using_active=False):
    """Problems of one file's text; the op headers it includes are appended to ``locals_out`` as
    ``(path, using_active)`` (whether ``using namespace AscendC`` is in effect at file scope there)."""
    raw = path.read_text(errors="replace")
    code = strip_comments_and_strings(raw).splitlines()
    legal = set()
    exporter = _include_exporter(path, root)
    _ascendc_printf_scan(code, using_active, exporter, legal)
    problems = []
    active = using_active
    for lineno, line in enumerate(code, 1):
        m = _INCLUDE_LINE.match(line)
        if m:
            msg, local = _check_include(path, root, m.group(1))
            if msg:
                problems.append((path, lineno, "include", msg))
            if local is not None and local not in seen:
                seen.add(local)
                locals_out.append((local, active or _ascendc_printf_scan(code[:lineno - 1], using_active, exporter)))
            continue
        for rule, msg in _line_hits(line, lineno, legal):
            problems.append((path, lineno, rule, msg))
    return problems


def _compiler():
    for c in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if c and shutil.which(c):
            return c
    return None


def _expanded_problems(path, root, files, known, notes):
    """Rules checked on the preprocessed source of ``path``. The sources the text pass read (``files``:
    the kernel and the op's own headers, all inside ``root``) are mirrored into a temporary tree with
    every include line that is not an allowed or local header blanked, and the allowed headers are
    empty stubs, so only the op's own code is expanded."""
    cxx = _compiler()
    if cxx is None:
        notes.append(f"{path}: no C++ compiler found ($CXX, g++): macro-expanded check skipped")
        return []
    root = root.resolve()
    with tempfile.TemporaryDirectory(prefix="mskv-lint-") as tmp:
        stub_dir, mirror = Path(tmp) / "stubs", Path(tmp) / "src"
        stubs = set(ALLOWED_INCLUDES)
        back = {}
        for f in files:
            f = Path(f).resolve()
            rel = f.relative_to(root) if _inside(f, root) else Path(f.name)
            dst = mirror / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            lines = f.read_text(errors="replace").split("\n")
            code = strip_comments_and_strings("\n".join(lines)).split("\n")
            for i, line in enumerate(code):
                m = _INCLUDE_LINE.match(line)
                if not m:
                    continue
                fm = _INCLUDE_FORM.match(m.group(1))
                msg, local = _check_include(f, root, m.group(1))
                if fm and msg is None and local is None:  # allowed AscendC header: an empty stub
                    stubs.add(fm.group(2))
                elif msg is not None:  # reported by the text pass; not expanded
                    lines[i] = ""
            dst.write_text("\n".join(lines))
            back[os.path.normpath(str(dst))] = f
        for name in stubs:
            p = stub_dir / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("")
        main_copy = mirror / (path.resolve().relative_to(root) if _inside(path, root) else Path(path.name))
        # once per arch family, with the macros bisheng predefines, so every `#if __CCE_AICORE__` branch
        # that some target compiles is checked
        outs = []
        procs = []  # the arch families' preprocessors run side by side
        for arch, macros in sorted(ARCHS.items(), reverse=True):
            cmd = [cxx, "-E", "-x", "c++", "-std=c++17", "-nostdinc", "-nostdinc++"] + [f"-D{m}" for m in macros]
            cmd += [f"-I{stub_dir}", str(main_copy)]
            procs.append((arch, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        for arch, p in procs:
            out, err = p.communicate()
            proc = subprocess.CompletedProcess(p.args, p.returncode, out, err)
            if proc.returncode != 0:
                err = [ln for ln in proc.stderr.strip().splitlines() if "error" in ln] or proc.stderr.strip().splitlines()
                notes.append(f"{path}: preprocessing for __NPU_ARCH__ {arch} failed, macro-expanded check skipped: "
                             f"{err[0] if err else proc.returncode}")
                continue
            outs.append((arch, proc.stdout))
    problems = []
    for arch, out in outs:
        cur_file, cur_line = None, 0
        code = strip_comments_and_strings(out).splitlines()
        legal = set()  # the whole translation unit: a directive in a header covers the code after it
        _ascendc_printf_scan(code, legal=legal)
        for idx, line in enumerate(code, 1):
            m = _LINEMARKER.match(line)
            if m:
                cur_line, cur_file = int(m.group(1)) - 1, back.get(os.path.normpath(m.group(2)))
                continue
            cur_line += 1
            if cur_file is None:
                continue  # <built-in>, <command-line>, stubs
            for rule, msg in _line_hits(line, idx, legal):
                key = (str(cur_file), cur_line, rule)
                if key in known:
                    continue
                known.add(key)
                problems.append((cur_file, cur_line, rule, msg + f" (after macro expansion, __NPU_ARCH__ {arch})"))
    return problems


def lint_file(path, root=None, expand=True, notes=None):
    """Problems of one kernel source and of the op's own headers it includes.

    Args:
        path: the source file.
        root: the source tree quoted includes must stay in (default: the file's directory).
        expand: also check the preprocessed source (needs a C++ compiler).
        notes: a list that receives notes about checks that could not run.

    Returns:
        list of ``(path, line, rule, message)``.
    """
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    notes = [] if notes is None else notes
    seen = {path.resolve()}
    todo, files = [(path, False)], []
    problems = []
    while todo:
        f, using_active = todo.pop(0)
        files.append(f)
        found = []
        problems.extend(_text_problems(f, root, seen, found, using_active))
        todo.extend(found)
    if expand:
        known = {(str(Path(p).resolve()), ln, rule) for p, ln, rule, _ in problems}
        problems.extend(_expanded_problems(path, root, files, known, notes))
    return problems


def iter_sources(paths):
    """(file, root) for every source under ``paths`` (a directory is its files' root)."""
    for p in paths:
        p = Path(p)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_file() and f.suffix in SUFFIXES:
                    yield f, p
        elif p.is_file():
            yield p, p.parent


def lint_paths(paths, expand=True, notes=None):
    """Problems of every source under ``paths`` (files or directories), each reported once."""
    out, seen = [], set()
    for f, root in iter_sources(paths):
        for pr in lint_file(f, root, expand, notes):
            key = (str(Path(pr[0]).resolve()), pr[1], pr[2])
            if key not in seen:
                seen.add(key)
                out.append(pr)
    return out


def format_problems(problems):
    return "\n".join(f"{p}:{ln}: [{rule}] {msg}" for p, ln, rule, msg in problems)


def main(argv=None, default_paths=None):
    ap = argparse.ArgumentParser(prog="ms_kvcache.sim.lint", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="files or directories (default: op_kernel/ of this checkout)")
    ap.add_argument("--no-expand", action="store_true", help="skip the check of the preprocessed source")
    args = ap.parse_args(argv)
    paths = args.paths or default_paths or [str(Path(__file__).resolve().parents[2] / "op_kernel")]
    notes = []
    problems = lint_paths(paths, expand=not args.no_expand, notes=notes)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    if problems:
        print(format_problems(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
