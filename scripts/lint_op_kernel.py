#!/usr/bin/env python3
"""Reject what the AscendC device compiler (bisheng) does not accept in kernel code.

The AscendC emulation compiles op_kernel/ with g++, which accepts far more than the device compiler.
This lint keeps kernel sources inside the device subset of C++:

  std           no C++ standard library (``std::``)
  heap          no dynamic memory (``new``, ``delete``, ``malloc``, ``calloc``, ``realloc``, ``free``)
  exceptions    no exceptions (``throw``, ``try``, ``catch``)
  host-io       no host I/O (``printf``, ``fprintf``, ``puts``, ``cout``, ``cerr``); AscendC's device
                ``AscendC::printf`` / ``AscendC::PRINTF`` are allowed
  rtti          no ``dynamic_cast`` / ``typeid``
  include       includes only from the allowlist: ``kernel_operator.h``,
                ``kernel_operator_list_tensor_intf.h``, ``lib/...`` (AscendC high-level API) and the
                op's own headers (quoted includes found next to the source)

Usage: scripts/lint_op_kernel.py [PATH ...]   (files or directories; default: op_kernel/)
Exit status 1 when a violation is found; each is printed as ``file:line: [rule] message``.
"""
import argparse
import re
import sys
from pathlib import Path

ALLOWED_INCLUDES = ("kernel_operator.h", "kernel_operator_list_tensor_intf.h")
ALLOWED_PREFIXES = ("lib/",)
SUFFIXES = (".cpp", ".cc", ".h", ".hpp", ".inl")

CHECKS = [
    ("std", re.compile(r"\bstd\s*::"), "the C++ standard library (std::) does not exist in device code"),
    ("heap", re.compile(r"\bnew\b(?!\s*\()|\bnew\s*\(|\bdelete\b|\b(?:malloc|calloc|realloc|free)\s*\("),
     "no heap in device code (new/delete/malloc/free)"),
    ("exceptions", re.compile(r"\b(?:throw|try|catch)\b"), "device code has no exceptions (throw/try/catch)"),
    ("host-io", re.compile(r"(?<!AscendC::)(?<!::)\b(?:printf|fprintf|puts|cout|cerr)\b"),
     "host I/O does not exist on the device (use AscendC::printf / AscendC::DumpTensor)"),
    ("rtti", re.compile(r"\b(?:dynamic_cast|typeid)\b"), "no RTTI in device code"),
]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


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
                if text[line_start:i].lstrip().startswith("#"):  # keep #include "x.h" intact
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


def lint_file(path):
    path = Path(path)
    raw = path.read_text(errors="replace")
    code = strip_comments_and_strings(raw)
    problems = []
    for lineno, line in enumerate(code.splitlines(), 1):
        m = INCLUDE_RE.match(line)
        if m:
            kind, name = m.groups()
            ok = name in ALLOWED_INCLUDES or name.startswith(ALLOWED_PREFIXES)
            if not ok and kind == '"':
                ok = (path.parent / name).is_file()
            if not ok:
                problems.append((path, lineno, "include",
                                 f"#include {kind}{name}{'>' if kind == '<' else chr(34)} is outside the allowlist "
                                 f"(kernel_operator.h, lib/..., the op's own headers)"))
            continue
        for rule, rx, msg in CHECKS:
            if rx.search(line):
                problems.append((path, lineno, rule, msg))
    return problems


def iter_sources(paths):
    for p in paths:
        p = Path(p)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_file() and f.suffix in SUFFIXES:
                    yield f
        elif p.is_file():
            yield p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[str(Path(__file__).resolve().parent.parent / "op_kernel")])
    args = ap.parse_args(argv)
    problems = []
    for f in iter_sources(args.paths):
        problems.extend(lint_file(f))
    for path, lineno, rule, msg in problems:
        print(f"{path}:{lineno}: [{rule}] {msg}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
