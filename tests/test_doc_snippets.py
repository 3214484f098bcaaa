"""Every Python snippet of README.md and docs/*.md runs as written.

The ```python blocks of one file run in order in one namespace (a later block may use the names of an
earlier one, as a reader does), in a fresh process with the cwd in a temp folder. A block whose first
line is a marker comment is treated as the marker says:

- ``# snippet: npu`` - needs an Ascend NPU and CANN: compiled only (none here);
- ``# snippet: excerpt`` - a piece of library code quoted to explain it, not a program: compiled only;
- ``# snippet: two processes`` - the parts of two cooperating processes side by side (a receiver that
  waits for a sender): compiled only; tests/test_disagg.py and ``ms-kvcache demo --disagg`` run them.

Any other block must run without error.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
MARKERS = ("# snippet: npu", "# snippet: excerpt", "# snippet: two processes")
_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.M | re.S)


def snippets(path):
    """[(line, code, marker or None)] of the ```python blocks of a Markdown file."""
    text = path.read_text()
    out = []
    for m in _FENCE.finditer(text):
        code = m.group(1)
        first = code.lstrip().splitlines()[0].strip() if code.strip() else ""
        marker = next((mk for mk in MARKERS if first.startswith(mk)), None)
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
    total = sum(len(snippets(f)) for f in FILES)
    assert total >= 10 and len(marked) <= 8, marked
    text = (ROOT / "README.md").read_text()
    assert "ms_kvcache.reshape_and_cache(" in text and "class " in text and "GRAPH_MODE" in text


@pytest.mark.parametrize("path", [f for f in FILES if snippets(f)], ids=lambda p: p.name)
def test_snippets_run_as_written(path, tmp_path):
    blocks = snippets(path)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), GLOG_v="3")
    env.pop("MS_KVCACHE_BACKEND", None)
    p = subprocess.run([sys.executable, "-c", _RUNNER, str(path.relative_to(ROOT))], input=json.dumps(blocks),
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-5000:]
    assert f"ran {sum(1 for b in blocks if b[2] is None)} of {len(blocks)}" in p.stdout
