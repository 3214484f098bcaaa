"""Docstrings and docs agree with the OpSpecs and with what the backends do (issue 15, item 6).

- Index dtypes (slot_mapping, block_mapping, block_ids, positions): every docstring entry and every API
  table row of docs/ops-*.md names exactly the dtypes the OpSpec accepts (copy_blocks used to document an
  int64 block_mapping while accepting int32).
- The graph-mode rule for a slot given twice is stated the same way in every scatter op's docstring, and
  it is what happens: the cpu backend keeps the later token's row, the sim backend fails the call
  (reshape_and_cache used to say such slots are "skipped, never written").
- Every written argument's docstring entry says it must be a whole Parameter in a graph, every op with
  several written tensors documents the graph-mode alias error, and the three op-family pages have an
  "In-place rules" section quoting the compile-time error the code raises.
"""
import pathlib
import re

import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

import ms_kvcache as mk
from ms_kvcache import _custom, _spec
from ms_kvcache._spec import INDEX_DTYPES

from _inplace_cases import BS, H, D, NB, T, _cos_sin, _f32
from conftest import assert_bits_equal, ms_mode, to_np

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = {name: (ROOT / "docs" / name).read_text() for name in ("ops-copy.md", "ops-transfer.md", "ops-rope.md")}
SPECS = [s for s in _spec.all_specs() if hasattr(mk, s.name)]
INTS = ("int8", "int16", "int32", "int64", "uint8")


def _arg_entry(doc, name):
    """The text of argument ``name``'s entry in a Google-style docstring's Args section."""
    args = doc.split("Args:", 1)[1].split("Returns:", 1)[0]
    m = re.search(rf"^ {{8}}{re.escape(name)} \(.*?(?=^ {{8}}\S|\Z)", args, re.S | re.M)
    assert m, f"no Args entry for {name!r}"
    return m.group(0)


def _index_inputs(spec):
    return [t for t in spec.inputs if set(spec.group_dtypes(t.group)) <= set(INDEX_DTYPES)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_docstring_index_dtypes_match_the_spec(spec):
    doc = getattr(mk, spec.name).__doc__
    for t in _index_inputs(spec):
        entry = _arg_entry(doc, t.name)
        same = re.search(r"same dtype as ``(\w+)``", entry)
        if same and spec.input(same.group(1)).group == t.group:  # "same dtype as ``old_positions``"
            continue
        said = {d for d in INTS if re.search(rf"\b{d}\b", entry)}
        assert said == set(spec.group_dtypes(t.group)), (f"{spec.name}: '{t.name}' documented as {sorted(said)}, "
                                                         f"accepts {spec.group_dtypes(t.group)}")


@pytest.mark.parametrize("page", sorted(DOCS))
def test_docs_api_tables_index_dtypes_match_the_spec(page):
    """A table row or bullet that gives an index argument a dtype gives all the dtypes the op accepts."""
    checked = 0
    for spec in SPECS:
        for line in DOCS[page].splitlines():
            if f"`{spec.name}(" not in line or not line.startswith(("|", "-")):
                continue
            for t in _index_inputs(spec):
                for m in re.finditer(rf"\b{t.name}\b((?:[ /]*(?:or )?(?:{'|'.join(INTS)})\b)+)", line):
                    said = set(re.findall("|".join(INTS), m.group(1)))
                    assert said == set(spec.group_dtypes(t.group)), f"{page}: {line.strip()[:100]}"
                    checked += 1
    if page == "ops-copy.md":
        assert checked >= 2  # copy_blocks' and swap_blocks' block_mapping


def test_docs_dtype_bullet_matches_the_copy_specs():
    bullet = next(ln for ln in DOCS["ops-copy.md"].splitlines() if ln.startswith("- **dtypes**"))
    for name in ("reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks"):
        spec = _spec.get_spec(name)
        data = next(t for t in spec.inputs if t.inplace)
        for d in spec.group_dtypes(data.group):
            assert d in bullet, (name, d)


# ----------------------------------------------------------------------------- duplicated slots in a graph
SCATTER_OPS = ["reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla", "rope_reshape_and_cache",
               "rope_reshape_and_cache_merged", "rope_concat_and_cache_mla"]


@pytest.mark.parametrize("op", SCATTER_OPS)
def test_docstring_states_the_duplicate_slot_rule(op):
    doc = " ".join(getattr(mk, op).__doc__.split())
    assert re.search(r"a slot given twice keeps the later token's rows? on the cpu backend, fails the call on the "
                     r"sim backend and is undefined on ascend", doc), op
    assert "never written" not in doc, op


def _scatter_args(op, rng, slots, mkp):
    k, v = Tensor(_f32(rng, T, H, D)), Tensor(_f32(rng, T, H, D))
    s = Tensor(np.asarray(slots, np.int32))
    pos = Tensor(np.array([3, 7, 11], np.int32))
    if op == "reshape_and_cache":
        return (k, v, mkp("kc", (NB, BS, H, D)), mkp("vc", (NB, BS, H, D)), s), (2, 3)
    if op == "reshape_and_cache_merged":
        return (k, v, mkp("kv", (2, NB, BS, H, D)), s), (2,)
    if op == "concat_and_cache_mla":
        return (Tensor(_f32(rng, T, 32)), Tensor(_f32(rng, T, 16)), mkp("c", (NB, BS, 32)), mkp("p", (NB, BS, 16)),
                s), (2, 3)
    q = Tensor(_f32(rng, T, 4, D))
    if op == "rope_reshape_and_cache":
        return (pos, q, k, v, _cos_sin(), mkp("kc", (NB, BS, H, D)), mkp("vc", (NB, BS, H, D)), s), (5, 6)
    if op == "rope_reshape_and_cache_merged":
        return (pos, q, k, v, _cos_sin(), mkp("kv", (2, NB, BS, H, D)), s), (5,)
    return (pos, q, Tensor(_f32(rng, T, D)), Tensor(_f32(rng, T, 32)), _cos_sin(), mkp("c", (NB, BS, 32)),
            mkp("p", (NB, BS, D)), s), (5, 6)


class _Call(nn.Cell):
    def __init__(self, fn, args):
        super().__init__()
        self.fn, self.args = fn, args

    def construct(self):
        return self.fn(*self.args)


@pytest.mark.parametrize("op", SCATTER_OPS)
def test_duplicate_slot_rule_is_what_the_backends_do(op):
    """Graph mode, token 0 and token 1 both at slot 5: on cpu the caches equal those of a call that writes
    token 1 alone (PyNative); on sim the call fails saying a slot is repeated."""
    fn = getattr(mk, op)
    zero = lambda name, shape, tag: Parameter(Tensor(np.zeros(shape, np.float32)), name=f"dup_{op}_{name}_{tag}")  # noqa: E731
    ref_args, written = _scatter_args(op, np.random.default_rng(1), [-1, 5, -1], lambda n, s: zero(n, s, "ref"))
    with ms_mode("pynative"):
        fn(*ref_args)
    mk.set_backend("cpu")
    with ms_mode("graph"):
        args, _ = _scatter_args(op, np.random.default_rng(1), [5, 5, -1], lambda n, s: zero(n, s, "cpu"))
        _Call(fn, args)()
        for i in written:
            assert_bits_equal(to_np(args[i]), to_np(ref_args[i]), f"{op}: cpu keeps the later token's row")
    from ms_kvcache._backends import sim

    if not sim.available()[0]:
        pytest.skip("sim backend not built")
    mk.set_backend("sim")
    try:
        with ms_mode("graph"):
            args, _ = _scatter_args(op, np.random.default_rng(1), [5, 5, -1], lambda n, s: zero(n, s, "sim"))
            with pytest.raises(RuntimeError, match="slot_mapping repeats a non-negative slot"):
                _Call(fn, args)()
            for i in written:
                assert not to_np(args[i]).any(), f"{op}: sim wrote although the call failed"
    finally:
        mk.set_backend("cpu")


# ----------------------------------------------------------------------------- in-place rules
def _written_names(spec):
    return [t.name for t in spec.inputs if t.inplace or t.inplace_if is not None]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_written_arguments_documented_as_parameters_in_a_graph(spec):
    doc = getattr(mk, spec.name).__doc__
    for name in _written_names(spec):
        entry = " ".join(_arg_entry(doc, name).split())
        assert re.search(r"(a )?whole Parameter", entry), f"{spec.name}: '{name}' does not say 'whole Parameter'"
    flat = " ".join(doc.split())
    # one Raises entry per class: the graph-mode compile-time refusal under TypeError, the launch-time alias
    # refusal (cpu, sim) under RuntimeError; the details per mode and backend on the family page ("Errors")
    raises = flat.split("Raises:", 1)[1]
    assert re.search(r"TypeError: [^:]*?in a graph, an? [^:]*?not a whole Parameter", raises), spec.name
    if len(_written_names(spec)) > 1 or any(t.dynamic and (t.inplace or t.inplace_if) for t in spec.inputs):
        assert re.search(r"RuntimeError: in a graph, at launch: [^.]*?sharing memory[^.]*?\(cpu, sim", raises), spec.name
    assert re.search(r"docs/ops-(copy|rope|transfer)\.md", raises), spec.name
    assert "not detected" not in flat, spec.name


@pytest.mark.parametrize("page", sorted(DOCS))
def test_in_place_rules_sections(page):
    text = DOCS[page]
    assert "\n## In-place rules\n" in text, page
    section = text.split("\n## In-place rules\n", 1)[1].split("\n## ", 1)[0]
    flat = " ".join(section.split())
    # the compile-time error as the code raises it
    first = _custom.NOT_A_PARAMETER.split(", got", 1)[0]
    assert first in flat, page
    for word in ("PyNative", "GRAPH_MODE", "@ms.jit", "TypeError", "RuntimeError", "ValueError", "ascend"):
        assert word in flat, (page, word)
