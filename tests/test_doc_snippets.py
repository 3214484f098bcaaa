"""Every snippet of README.md and docs/*.md runs as pasted.

Each ```python block runs alone, as a reader pastes it into a new Python session: in a fresh process of
its own with the cwd in a temp folder (a block that needs names of an earlier one fails). A block whose
first line is a marker comment is treated as the marker says:

- ``# snippet: npu`` - needs an Ascend NPU and CANN: compiled only (none here);
- ``# snippet: excerpt`` - a piece of library code quoted to explain it, not a program: compiled only;
- ``# snippet: two processes`` - the parts of two cooperating processes side by side (a receiver that
  waits for a sender): compiled only; tests/test_disagg.py and ``ms-kvcache demo --disagg`` run them.
- ``# snippet: mindspore >= X.Y`` - needs MindSpore X.Y or newer (e.g. the float8 part of
  docs/quantization.md: MindSpore 2.7's ``Tensor.view`` takes no dtype): runs where the installed
  MindSpore is at least X.Y, compiled only on an older one (a reader of the doc sees the same line).

Any other block must run without error.

In the ```bash blocks, every ``ms-kvcache ...`` command must parse with the CLI's own parser (real
subcommands and options), and every ``scripts/...`` / ``tools/...`` file a command runs must exist.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
MARKERS = ("# snippet: npu", "# snippet: excerpt", "# snippet: two processes", "# snippet: mindspore >=")
_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.M | re.S)
_MIN_VERSION = re.compile(r"^# snippet: mindspore >= (\d+(?:\.\d+)*)(?:\s.*)?$")


def _version_tuple(text):
    """(2, 10, 0) of "2.10.0" / "2.10.0rc1" (the leading digits of each dotted part)."""
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in text.split("."))


def runs_here(marker, mindspore_version):
    """Whether a block with ``marker`` (None: no marker) runs under ``mindspore_version``: unmarked blocks
    and ``# snippet: mindspore >= X.Y`` blocks on MindSpore X.Y or newer; the other markers never."""
    if marker is None:
        return True
    m = _MIN_VERSION.match(marker)
    if m is None:
        if marker.startswith("# snippet: mindspore >="):
            raise ValueError(f"malformed version marker {marker!r}: expected '# snippet: mindspore >= X.Y'")
        return False
    need = _version_tuple(m.group(1))
    have = _version_tuple(mindspore_version)
    width = max(len(need), len(have))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def _mindspore_version():
    from importlib.metadata import version

    return version("mindspore")


def snippets(path):
    """[(line, code, marker or None)] of the ```python blocks of a Markdown file."""
    text = path.read_text()
    out = []
    for m in _FENCE.finditer(text):
        code = m.group(1)
        first = code.lstrip().splitlines()[0].strip() if code.strip() else ""
        marker = first if any(first.startswith(mk) for mk in MARKERS) else None
        out.append((text.count("\n", 0, m.start()) + 2, code, marker))
    return out


_RUNNER = r"""
import json, pathlib, sys, traceback, types
blocks = json.loads(sys.stdin.read())
# one module for all blocks: MindSpore's graph compiler looks a Cell's globals up through its module
mod = types.ModuleType("doc_snippets")
sys.modules["doc_snippets"] = mod
ns = mod.__dict__
for line, code, marker in blocks:
    try:
        # a real file: MindSpore's graph compiler reads a Cell's source with inspect
        f = pathlib.Path(f"snippet_{pathlib.Path(sys.argv[1]).stem}_line{line}.py")
        f.write_text(code)
        compiled = compile(code, str(f.resolve()), "exec")
        if marker is None:
            exec(compiled, ns)
    except BaseException:
        print(f"the python block at {sys.argv[1]} line {line} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
print("ran", sum(1 for b in blocks if b[2] is None), "of", len(blocks))
"""


def test_markers_are_few_and_known():
    """Only the few blocks that cannot run here carry a marker; every file's blocks are found."""
    marked = [(f.name, line, mk) for f in FILES for line, _, mk in snippets(f) if mk]
    compiled_only = [m for m in marked if not _MIN_VERSION.match(m[2])]  # version-marked blocks run on newer
    total = sum(len(snippets(f)) for f in FILES)
    assert total >= 10 and len(compiled_only) <= 8 and len(marked) - len(compiled_only) <= 3, marked
    text = (ROOT / "README.md").read_text()
    assert "ms_kvcache.reshape_and_cache(" in text and "class " in text and "GRAPH_MODE" in text


def _all_blocks():
    return [(f, line, code, mk) for f in FILES for line, code, mk in snippets(f)]


@pytest.mark.parametrize("path, line, code, marker", _all_blocks(), ids=lambda v: v.name if isinstance(v, Path)
                         else (str(v) if isinstance(v, int) else ""))
def test_snippet_runs_as_pasted(path, line, code, marker, tmp_path):
    """One block, alone in a fresh process (or compiled only, as its marker says)."""
    if not runs_here(marker, _mindspore_version()):
        compile(code, f"{path.name}:{line}", "exec")  # a block that cannot run here must still be valid Python
        return
    blocks = [(line, code, None)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), GLOG_v="3")
    env.pop("MS_KVCACHE_BACKEND", None)
    p = subprocess.run([sys.executable, "-c", _RUNNER, str(path.relative_to(ROOT))], input=json.dumps(blocks),
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-5000:]
    assert "ran 1 of 1" in p.stdout


def test_runner_fails_a_block_that_needs_an_earlier_one(tmp_path):
    """The runner really isolates blocks: a block using a name of an earlier block fails."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _RUNNER, "x.md"], input=json.dumps([(3, "print(defined_above)\n", None)]),
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "NameError" in p.stderr and "x.md line 3" in p.stderr


_BASH = re.compile(r"^[ \t]*```(?:bash|sh|shell)[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)  # list items indent theirs


def bash_commands(path):
    """[(line, words)] of the simple commands in the ```bash blocks of a Markdown file (comments cut,
    continuation lines joined, ``&&`` / ``;`` / ``|`` chains split, ``VAR=value`` prefixes dropped)."""
    text = path.read_text()
    out = []
    for m in _BASH.finditer(text):
        first = text.count("\n", 0, m.start()) + 2
        lines, pending = [], ""
        for i, raw in enumerate(m.group(1).splitlines()):  # a trailing backslash continues the line
            code = re.sub(r"(^|\s)#.*$", "", raw).strip()
            if code.endswith("\\"):
                pending += code[:-1] + " "
                continue
            lines.append((i, pending + code))
            pending = ""
        for i, code in lines:
            lex = shlex.shlex(code, posix=True, punctuation_chars=";&|")
            lex.whitespace_split = True
            words = []
            for tok in list(lex) + [";"]:
                if tok and set(tok) <= set(";&|"):  # a separator: &&, ||, ;, |
                    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                        words.pop(0)  # VAR=value prefixes
                    if words:
                        out.append((first + i, words))
                    words = []
                else:
                    words.append(tok)
    return out


def test_bash_commands_name_real_options_and_files():
    from ms_kvcache.cli import CLIError, build_parser

    checked = 0
    for f in FILES:
        for line, words in bash_commands(f):
            where = f"{f.name} line {line}: {' '.join(words)}"
            if words[0] == "ms-kvcache":
                if any(w.startswith("<") or "..." in w for w in words):
                    continue  # a placeholder, not a command
                try:
                    build_parser().parse_args(words[1:])
                except CLIError as exc:
                    raise AssertionError(f"{where}: {exc}") from None
                except SystemExit:  # --help / --version
                    pass
                checked += 1
            for w in words[:3]:
                if re.match(r"^(\./)?(scripts|tools)/\S+\.(py|sh)$", w):
                    assert (ROOT / w).is_file(), f"{where}: {w} does not exist"
                    checked += 1
    assert checked >= 10


def test_version_marker():
    """``# snippet: mindspore >= X.Y`` runs from X.Y on (numeric comparison), compiled only before; a
    malformed one is an error, not a silently skipped block."""
    m = "# snippet: mindspore >= 2.8 (why)"
    assert runs_here(None, "2.7.2") and not runs_here("# snippet: npu (x)", "2.10.0")
    assert not runs_here(m, "2.7.2") and not runs_here(m, "2.7.0")
    assert runs_here(m, "2.8.0") and runs_here(m, "2.10.0") and runs_here("# snippet: mindspore >= 2.10", "2.10.0rc1")
    assert not runs_here("# snippet: mindspore >= 2.10", "2.9.0")
    with pytest.raises(ValueError, match="malformed version marker"):
        runs_here("# snippet: mindspore >= two", "2.10.0")


def test_float8_view_blocks_are_marked_for_mindspore_2_8():
    """A block that views a tensor as float8 (``Tensor.view(dtype)``: MindSpore 2.8+) carries the 2.8 marker,
    so the doc-snippet run on 2.7 does not fail on it (the float8 part of docs/quantization.md)."""
    found = 0
    for f in FILES:
        for line, code, mk in snippets(f):
            if re.search(r"\.view\(ms\.float8", code):
                found += 1
                assert mk is not None and _MIN_VERSION.match(mk) and runs_here(mk, "2.8.0") \
                    and not runs_here(mk, "2.7.2"), f"{f.name} line {line}: needs '# snippet: mindspore >= 2.8'"
    assert found >= 1
