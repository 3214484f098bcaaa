"""The Python modules of ms_kvcache import downward only (docs/design.md, "Layers").

A static scan (tools/mskv_structure.py, ``import_graph``: ``ast``, nothing imported) of every module under
ms_kvcache, module-level and function-level imports alike, relative imports resolved: no import of a higher
layer of ``LAYERS`` and no import cycle. The scanner itself is tested on small fixture packages, and the
registry of OpSpecs is checked to fill without the op wrappers (the declarations are data, below them).
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import mskv_structure as S  # noqa: E402 - tools/mskv_structure.py, a developer check outside the package

#: Edges of the cycle among ``_aclnn``, ``_backends/ascend`` and ``_host_memory`` (and the package root,
#: which imports ``_backends.ascend``). Another branch breaks it (RUNTIME_OPS as a spec marker, host-memory
#: registration below the ascend backend, no ``import ms_kvcache`` in ``_aclnn``); the lead removes this set
#: when merging that branch. Nothing else is exempt.
_BROKEN_ON_ANOTHER_BRANCH = {
    ("ms_kvcache._aclnn", "ms_kvcache"),                 # kernel_specs(): `import ms_kvcache` to register the ops
    ("ms_kvcache._aclnn", "ms_kvcache._backends.ascend"),  # kernel_specs(): ascend.RUNTIME_OPS
    ("ms_kvcache._host_memory", "ms_kvcache._backends.ascend"),  # register / unregister, _INFLIGHT
}


def test_package_imports_downward_only_without_cycles():
    problems = S.import_problems(ROOT, allowed=_BROKEN_ON_ANOTHER_BRANCH)
    assert problems == [], "\n".join(problems)


def test_exempt_edges_still_exist():
    """Each exempt edge is still in the code: once the other branch is merged, the test says to drop it."""
    _, edges, _ = S.import_graph(ROOT)
    gone = sorted(e for e in _BROKEN_ON_ANOTHER_BRANCH if e not in edges)
    assert not gone, f"no longer imported, remove from _BROKEN_ON_ANOTHER_BRANCH: {gone}"


def test_every_module_has_a_layer():
    modules, _, _ = S.import_graph(ROOT)
    assert len(modules) > 60
    assert [m for m in modules if S.layer_of(m) is None] == []
    # the quantizing variants sit below the public ops they serve, their shared checks below both
    assert S.layer_of("ms_kvcache.ops._kv_shapes") < S.layer_of("ms_kvcache.ops.reshape_and_cache_quant") \
        < S.layer_of("ms_kvcache.ops.reshape_and_cache")
    assert S.layer_of("ms_kvcache._opspecs.copy") < S.layer_of("ms_kvcache._validate") \
        < S.layer_of("ms_kvcache._custom") < S.layer_of("ms_kvcache.ops")


def test_quantizing_variants_do_not_import_their_base_ops():
    _, edges, _ = S.import_graph(ROOT)
    back = sorted((a, b) for a, b in edges
                  if a.startswith("ms_kvcache.ops.") and a.endswith("_quant") and b.startswith("ms_kvcache.ops.")
                  and not b.endswith("_quant") and not b.split(".")[-1].startswith("_"))
    assert back == []


# ---------------------------------------------------------------------------------------- the scanner itself
def _fixture(tmp_path, files):
    pkg = tmp_path / "ms_kvcache"
    for rel, text in {"__init__.py": "", **files}.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path


def test_scanner_finds_a_function_level_cycle(tmp_path):
    root = _fixture(tmp_path, {
        "_spec.py": "def get_spec():\n    import ms_kvcache.ops  # the registry reaching up\n",
        "ops/__init__.py": "from ms_kvcache.ops import reshape_and_cache\n",
        "ops/reshape_and_cache.py": "from ms_kvcache._spec import get_spec\n",
    })
    _, edges, _ = S.import_graph(root)
    assert ("ms_kvcache._spec", "ms_kvcache.ops") in edges
    assert S.import_cycles(edges) == [["ms_kvcache._spec", "ms_kvcache.ops", "ms_kvcache.ops.reshape_and_cache"]]
    lines = S.import_problems(root)
    assert any("ms_kvcache._spec:2: imports ms_kvcache.ops, a higher layer" in ln for ln in lines), lines
    assert any(ln.startswith("import cycle among ms_kvcache._spec, ms_kvcache.ops,") for ln in lines), lines


def test_scanner_resolves_relative_and_from_package_imports(tmp_path):
    root = _fixture(tmp_path, {
        "ops/__init__.py": "",
        "ops/_quant.py": "",
        "ops/reshape_and_cache.py": "from . import _quant as Q\nfrom .reshape_and_cache_quant import x\n",
        "ops/reshape_and_cache_quant.py": "x = 1\ndef f():\n    from ..ops.reshape_and_cache import y\n",
    })
    _, edges, _ = S.import_graph(root)
    assert ("ms_kvcache.ops.reshape_and_cache", "ms_kvcache.ops._quant") in edges
    assert ("ms_kvcache.ops.reshape_and_cache", "ms_kvcache.ops.reshape_and_cache_quant") in edges
    assert ("ms_kvcache.ops.reshape_and_cache_quant", "ms_kvcache.ops.reshape_and_cache") in edges
    assert S.import_cycles(edges) == [["ms_kvcache.ops.reshape_and_cache", "ms_kvcache.ops.reshape_and_cache_quant"]]


def test_scanner_follows_lazy_names_and_skips_extensions(tmp_path):
    root = _fixture(tmp_path, {
        "__init__.py": "_OPS = ('reshape_and_cache',)\n_LAZY = {**{n: 'ms_kvcache.ops' for n in _OPS}}\n",
        "ops/__init__.py": "",
        "_validate.py": "def f():\n    from ms_kvcache import _cpu\n    import ms_kvcache\n"
                        "    return ms_kvcache.reshape_and_cache\n",
        "_custom.py": "def g():\n    from ms_kvcache import reshape_and_cache, _not_there\n",
    })
    _, edges, problems = S.import_graph(root)
    assert ("ms_kvcache._validate", "ms_kvcache.ops") in edges and ("ms_kvcache._custom", "ms_kvcache.ops") in edges
    assert not any(b.endswith("_cpu") for _, b in edges)
    assert problems == ["ms_kvcache._custom:2: imports ms_kvcache._not_there, which is neither a module, a compiled "
                        "extension (_cpu, _sim, _cpu_pyboost, _ascend_pyboost) nor a name of ms_kvcache/__init__.py"]


def test_scanner_reports_unlisted_run_time_imports(tmp_path):
    root = _fixture(tmp_path, {"_backend.py": "import importlib\ndef m(n):\n"
                                              "    return importlib.import_module(f'ms_kvcache._backends.{n}')\n"})
    _, _, problems = S.import_graph(root)
    assert len(problems) == 1 and problems[0].startswith("ms_kvcache._backend:3: imports a module named at run time")


def test_scanner_reports_a_module_in_no_layer(tmp_path):
    root = _fixture(tmp_path, {"_misc.py": ""})
    assert "ms_kvcache._misc: in no layer of LAYERS (tools/mskv_structure.py): add it where it belongs" in \
        S.import_problems(root)


def test_cli_flag(capsys):
    rc = S.main(["--imports"])
    out = capsys.readouterr().out
    # the exempt edges are not exempt on the command line: it reports exactly them until they are gone
    if rc:
        assert all(any(f"{a}:" in ln or a in ln for a, _ in _BROKEN_ON_ANOTHER_BRANCH) for ln in out.splitlines())
    else:
        assert out.startswith("OK: ") and "import downward only" in out


# ------------------------------------------------------------------------------ the registry needs no wrappers
def test_registry_is_complete_without_the_op_wrappers():
    """``import ms_kvcache`` declares every op (ms_kvcache._opspecs) without importing MindSpore or the wrappers;
    importing the wrappers adds no spec, and each wrapper's SPEC is the registry's object."""
    code = textwrap.dedent("""
        import sys
        import ms_kvcache
        from ms_kvcache._spec import all_specs, get_spec
        before = [s.name for s in all_specs()]
        assert 'mindspore' not in sys.modules and 'ms_kvcache.ops' not in sys.modules, sorted(sys.modules)
        import importlib
        import ms_kvcache.ops
        after = [s.name for s in all_specs()]
        assert before == after, (before, after)
        for name in after:
            mod = importlib.import_module(f'ms_kvcache.ops.{name}')
            assert mod.SPEC is get_spec(name), name
        print(len(after))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert int(res.stdout.strip()) >= 17


# --------------------------------------------------------------------------- the picture in docs/design.md
def _token(pattern):
    """How the picture names the modules of a LAYERS pattern (a path), or None for a bare package docstring."""
    if pattern == "":
        return "ms_kvcache/__init__.py"
    if pattern == "ops.*_quant":
        return "ops/<op>_quant.py"
    if pattern == "ops.*":
        return "ops/<op>.py"
    if pattern == "ops":
        return "ops/__init__.py"
    if pattern == "_backends":
        return None  # the backends package's own __init__ holds only its docstring
    base = pattern[:-2] if pattern.endswith(".*") else pattern
    path = base.replace(".", "/")
    return f"{path}/" if (ROOT / "ms_kvcache" / path).is_dir() else f"{path}.py"


def test_design_picture_lists_the_layers_in_order():
    text = (ROOT / "docs" / "design.md").read_text()
    block = text.split("\n## Layers\n", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    spans = []
    for name, patterns in S.LAYERS:
        tokens = sorted({_token(p) for p in patterns} - {None})
        where = {tok: next((i for i, ln in enumerate(lines) if tok in ln), None) for tok in tokens}
        assert None not in where.values(), f"docs/design.md, Layers: layer {name!r} does not show {where}"
        spans.append((name, min(where.values()), max(where.values())))
    # the picture goes from the public op down: every layer is drawn below the layer above it
    for (low, low_first, _), (high, _, high_last) in zip(spans, spans[1:]):
        assert low_first > high_last, f"docs/design.md, Layers: {low!r} is not drawn below {high!r}"
