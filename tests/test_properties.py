"""Property tests (hypothesis), one per op family, against numpy references (issue 15, item 7).

Random geometries (odd head sizes included), dtypes, layouts, index dtypes and slot patterns (-1 padding,
the last slot, repeated slots, padded key/value rows), in PyNative and GRAPH_MODE, on cpu and sim. Every
cache and buffer is compared byte for byte with the reference, so a byte changed outside the rows an op
should write fails. Repeated slots: PyNative raises ValueError and writes nothing; a GRAPH_MODE call on
cpu keeps the later token's row (sim fails such a call; tests/test_doc_rules.py checks that, and the
property tests give sim distinct slots). How the written tensors are passed is drawn too: a slice of a
Parameter or a Tensor argument in GRAPH_MODE must be refused at compile time with nothing written (old code
lost the write silently); a reshape view in PyNative is written through on the cpu fast path and refused
on the ops.Custom path (sim). Run time (CI): a dozen or two examples per family in PyNative, five or six
in GRAPH_MODE (each compiles a graph); geometries drawn from small sets so compiled Cells are reused
(one Cell per geometry, its Parameters refilled with ``set_data``).
"""
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from mindspore import Parameter, Tensor, nn

import ms_kvcache as mk

from _multi_layer_ref import DSA, MERGED, MLA, SEPARATE, Geometry, pack_buffer, ref_gather, ref_scatter, unpack_buffer
from conftest import NP_DTYPES, assert_bits_equal, ms_mode, random_array, to_ms, to_np
from rope_ref import assert_close_rope, rope64, rope_f32_model

COMBOS = [("pynative", "cpu"), ("graph", "cpu"), ("pynative", "sim"), ("graph", "sim")]
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_names = itertools.count()


def _run(body, combo, *, pynative, graph):
    """``body(combo, data)`` under hypothesis with ``pynative`` / ``graph`` examples: a GRAPH_MODE example
    compiles a graph (~1 s), so graph combinations draw fewer examples to keep each test a few seconds."""
    n = graph if combo[0] == "graph" else pynative
    settings(max_examples=n, **SETTINGS)(given(data=st.data())(body))(combo)


def _sim_ok():
    from ms_kvcache._backends import sim

    return sim.available()[0]


@pytest.fixture(params=COMBOS, ids=["-".join(c) for c in COMBOS])
def combo(request):
    mode, be = request.param
    if be == "sim" and not _sim_ok():
        pytest.skip("sim backend not built")
    old = mk.get_backend()
    mk.set_backend(be)
    try:
        with ms_mode(mode):
            yield mode, be
    finally:
        mk.set_backend(old)


def _param(arr):
    return Parameter(to_ms(arr), name=f"prop{next(_names)}")


def _refill(params, arrays):
    for p, a in zip(params, arrays):
        p.set_data(to_ms(a))


class _Cell(nn.Cell):
    """One Cell per (backend, op, geometry): ``fn(*inputs, *caches, **kw)`` in ``construct``."""

    def __init__(self, fn, caches):
        super().__init__()
        self.fn, self.caches = fn, tuple(caches)

    def construct(self, *inputs):
        return self.fn(inputs, self.caches)


class _SliceCell(nn.Cell):
    """The first cache passed as ``self.big[0]``, a slice of a [2, ...] Parameter (refused at compile time)."""

    def __init__(self, fn, big, rest):
        super().__init__()
        self.fn, self.big, self.rest = fn, big, tuple(rest)

    def construct(self, *inputs):
        return self.fn(inputs, (self.big[0],) + self.rest)


class _ArgCell(nn.Cell):
    """Every tensor passed as a Cell argument: ``construct(*inputs, *tensors)`` (plain Tensors are refused
    at compile time where the op writes them)."""

    def __init__(self, fn, n_inputs):
        super().__init__()
        self.fn, self.n = fn, n_inputs

    def construct(self, *args):
        return self.fn(args[:self.n], args[self.n:])


NOT_A_PARAM = r"expected a Parameter \(a whole Parameter, not a slice or a computed tensor\)"
_CELLS = {}


def _graph_cell(key, fn, cache_arrays):
    cell = _CELLS.get(key)
    if cell is None:
        cell = _CELLS[key] = _Cell(fn, [_param(a) for a in cache_arrays])
    else:
        _refill(cell.caches, cache_arrays)
    return cell


def _slot_pattern(draw, num_slots, tokens, allow_repeats):
    """Slots with -1 padding, the last slot and (optionally) a repeated slot."""
    choices = draw(st.lists(st.sampled_from(["pad", "fresh", "last", "repeat"] if allow_repeats else
                                            ["pad", "fresh", "last"]), min_size=tokens, max_size=tokens))
    free = list(np.random.default_rng(draw(st.integers(0, 2**31))).permutation(num_slots - 1)) if num_slots > 1 else []
    used, out = [], []
    last_used = False
    for c in choices:
        if c == "last" and not last_used:
            out.append(num_slots - 1)
            last_used = True
        elif c == "repeat" and used:
            out.append(draw(st.sampled_from(used)))
        elif c in ("fresh", "repeat", "last") and free:
            out.append(int(free.pop()))
        else:
            out.append(-1)
        if out[-1] >= 0:
            used.append(out[-1])
    return out


def _repeats(slots):
    valid = [s for s in slots if s >= 0]
    return len(valid) != len(set(valid))


def _last_writer(slots):
    """token index whose row ends in each slot (the later token for a repeated slot)."""
    return {s: t for t, s in enumerate(slots) if s >= 0}


def _set_row(cache, layout, bs, slot, row):
    b, o = divmod(slot, bs)
    if layout == "BSND":
        cache[b, o] = row
    else:
        cache[b, :, o] = row


# ================================================================================= copy family
COPY_GEOMS = [(2, 4, 1, 5), (3, 8, 2, 16), (1, 16, 3, 7), (4, 2, 2, 33)]  # nb, bs, H, D (odd head sizes)


@st.composite
def copy_case(draw, allow_repeats, graph):
    op = draw(st.sampled_from(["reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla"]))
    nb, bs, h, d = draw(st.sampled_from(COPY_GEOMS))
    dtype = draw(st.sampled_from(["float16", "bfloat16", "float32", "int8"]))
    layout = "BSND" if op == "concat_and_cache_mla" else draw(st.sampled_from(["BSND", "BNSD"]))
    tokens = draw(st.sampled_from([0, 1, 5, 9]))
    slots = _slot_pattern(draw, nb * bs, tokens, allow_repeats)
    # how the caches are passed: graph mode writes whole Parameters and refuses a slice; PyNative writes
    # Tensors and Parameters, and a whole-tensor reshape view is written through on the cpu fast path but
    # refused on the ops.Custom path (sim)
    kind = draw(st.sampled_from(["param", "slice"] if graph else ["tensor", "param", "view"]))
    return dict(op=op, geom=(nb, bs, h, d), dtype=dtype, layout=layout, slots=slots, kind=kind,
                pad=draw(st.sampled_from([0, 2])), slot_dtype=draw(st.sampled_from([np.int32, np.int64])),
                seed=draw(st.integers(0, 2**31)))


def _copy_call(op, layout):
    def rc(ins, caches):
        return mk.reshape_and_cache(ins[0], ins[1], caches[0], caches[1], ins[2], cache_layout=layout)

    def rcm(ins, caches):
        return mk.reshape_and_cache_merged(ins[0], ins[1], caches[0], ins[2], cache_layout=layout)

    def mla(ins, caches):
        return mk.concat_and_cache_mla(ins[0], ins[1], caches[0], caches[1], ins[2])

    return {"reshape_and_cache": rc, "reshape_and_cache_merged": rcm, "concat_and_cache_mla": mla}[op]


def _copy_arrays(c, rng):
    nb, bs, h, d = c["geom"]
    rows = len(c["slots"]) + c["pad"]
    dt = c["dtype"]
    if c["op"] == "concat_and_cache_mla":
        data = [random_array(rng, (rows, h * d), dt), random_array(rng, (rows, d), dt)]
        caches = [random_array(rng, (nb, bs, h * d), dt), random_array(rng, (nb, bs, d), dt)]
    else:
        shape = (nb, bs, h, d) if c["layout"] == "BSND" else (nb, h, bs, d)
        data = [random_array(rng, (rows, h, d), dt), random_array(rng, (rows, h, d), dt)]
        caches = [random_array(rng, shape, dt), random_array(rng, shape, dt)]
        if c["op"] == "reshape_and_cache_merged":
            caches = [np.stack(caches)]
    return data, caches


def _copy_expected(c, data, caches):
    nb, bs, h, d = c["geom"]
    exp = [x.copy() for x in caches]
    planes = [exp[0][0], exp[0][1]] if c["op"] == "reshape_and_cache_merged" else exp
    layout = "BSND" if c["op"] == "concat_and_cache_mla" else c["layout"]
    for s, t in _last_writer(c["slots"]).items():
        for p in range(2):
            _set_row(planes[p], layout, bs, s, data[p][t])
    return exp


def _copy_property(combo, data):
    mode, be = combo
    c = data.draw(copy_case(allow_repeats=not (mode == "graph" and be == "sim"), graph=mode == "graph"))
    rng = np.random.default_rng(c["seed"])
    inputs, caches = _copy_arrays(c, rng)
    slots = np.asarray(c["slots"], c["slot_dtype"])
    fn = _copy_call(c["op"], c["layout"])
    ins = (to_ms(inputs[0]), to_ms(inputs[1]), Tensor(slots))
    repeated = _repeats(c["slots"])
    kind = c["kind"]
    if mode == "pynative":
        if kind == "view":  # a whole-tensor reshape of a flat tensor: a view with storage offset 0
            bases = [to_ms(a.reshape(-1)) for a in caches]
            cache_t = [b.reshape(a.shape) for b, a in zip(bases, caches)]
        elif kind == "param":
            cache_t = [_param(a) for a in caches]
        else:
            cache_t = [to_ms(a) for a in caches]
        if kind == "view" and be == "sim" and len(slots):  # checked before the slot values; no tokens: no launch
            with pytest.raises(ValueError, match="expected a tensor that owns its memory"):
                fn(ins, cache_t)
            expected = caches
        elif repeated:
            with pytest.raises(ValueError, match="expected distinct non-negative slots"):
                fn(ins, cache_t)
            expected = caches
        else:
            fn(ins, cache_t)
            expected = _copy_expected(c, inputs, caches)
        got = [to_np(b).reshape(a.shape) for b, a in zip(bases, caches)] if kind == "view" else \
            [to_np(x) for x in cache_t]
    elif kind == "slice":
        big = _param(np.stack([caches[0], caches[0]]))
        rest = [_param(a) for a in caches[1:]]
        with pytest.raises(TypeError, match=rf"{c['op']}: argument '\w+': " + NOT_A_PARAM):
            _SliceCell(fn, big, rest)(*ins)
        expected = [np.stack([caches[0], caches[0]])] + caches[1:]
        got = [to_np(big)] + [to_np(x) for x in rest]
    else:
        cell = _graph_cell((be, c["op"], c["layout"], c["dtype"], c["geom"]), fn, caches)
        cell(*ins)
        expected = _copy_expected(c, inputs, caches)  # cpu: the later token of a repeated slot
        got = [to_np(x) for x in cell.caches]
    for i, (g, e) in enumerate(zip(got, expected)):
        assert_bits_equal(g, e, f"{c['op']} cache {i} ({mode}, {be}, {c})")


def test_copy_family_property(combo):
    _run(_copy_property, combo, pynative=20, graph=6)


# ================================================================================= transfer family
TRANSFER_GEOMS = [(SEPARATE, "BSND", 2, 3, 4, 2, 5), (MERGED, "BNSD", 1, 2, 8, 3, 16), (MLA, "BSND", 3, 2, 4, 1, 0),
                  (DSA, "BSND", 2, 4, 2, 1, 0)]  # fmt, layout, L, nb, bs, H, D (MLA/DSA: fixed planes)


@st.composite
def transfer_case(draw, allow_repeats):
    fmt, layout, L, nb, bs, h, d = draw(st.sampled_from(TRANSFER_GEOMS))
    direction = draw(st.sampled_from(["d2h", "h2d"]))
    tokens = draw(st.sampled_from([1, 4, 7]))
    # a repeated slot: a gather (d2h) reads it twice, fine everywhere; a scatter (h2d) is rejected in
    # PyNative and undefined in a graph (docs/ops-transfer.md), so only PyNative draws it
    slots = _slot_pattern(draw, nb * bs, tokens, direction == "d2h" or allow_repeats)
    return dict(geom=(fmt, layout, L, nb, bs, h, d), direction=direction, slots=slots,
                args=draw(st.booleans()),  # graph: every tensor a Cell argument (refused where written)
                dtype=draw(st.sampled_from(["float16", "bfloat16", "float32", "int8"])),
                slot_dtype=draw(st.sampled_from([np.int32, np.int64])), seed=draw(st.integers(0, 2**31)))


def _geometry(g):
    fmt, layout, L, nb, bs, h, d = g
    if fmt in (MLA, DSA):
        return Geometry(fmt, layout, L, nb, bs, mla=(9, 3), dsa_index=5)
    return Geometry(fmt, layout, L, nb, bs, heads=h, head_size=d)


def _flat(geo, planes):
    if geo.fmt == MERGED:
        return [np.stack(layer) for layer in planes]
    return [x for layer in planes for x in layer]


def _unflat(geo, flat):
    if geo.fmt == MERGED:
        return [[x[0], x[1]] for x in flat]
    return [flat[l * geo.P:(l + 1) * geo.P] for l in range(geo.L)]


def _transfer_call(fmt, direction, layout):
    def call(ins, tensors):
        return mk.multi_layer_kv_transfer(tensors[0], tensors[1:], ins[0], kv_format=fmt, direction=direction,
                                          cache_layout=layout)
    return call


def _transfer_property(combo, data):
    mode, be = combo
    c = data.draw(transfer_case(allow_repeats=mode == "pynative"))
    geo = _geometry(c["geom"])
    rng = np.random.default_rng(c["seed"])
    dt = c["dtype"]
    planes = geo.random_planes(rng, dt)
    slots = c["slots"]
    T = len(slots)
    hidden = tuple(geo.hidden) if geo.fmt in (MLA, DSA) else geo.hidden[0]
    shape = mk.transfer_buffer_shape(geo.fmt, geo.L, T, hidden)
    buf = random_array(rng, shape, dt)
    if c["direction"] == "d2h":
        exp_buf, exp_planes = pack_buffer(geo, ref_gather(geo, planes, slots)), planes
    else:
        winners = _last_writer(slots)
        eff = [s if s >= 0 and winners[s] == t else -1 for t, s in enumerate(slots)]
        exp_buf, exp_planes = buf, ref_scatter(geo, planes, unpack_buffer(geo, buf, T), eff)
    flat = _flat(geo, planes)
    fn = _transfer_call(int(geo.fmt), c["direction"], geo.layout)
    ins = (Tensor(np.asarray(slots, c["slot_dtype"])),)
    if mode == "pynative":
        tensors = [to_ms(buf)] + [to_ms(x) for x in flat]
        if c["direction"] == "h2d" and _repeats(slots):
            with pytest.raises(ValueError, match="expected distinct non-negative slots"):
                fn(ins, tensors)
            exp_buf, exp_planes = buf, planes
        else:
            fn(ins, tensors)
    elif c["args"]:  # the written tensors as plain Tensor arguments: refused at compile time, nothing written
        tensors = [to_ms(buf)] + [to_ms(x) for x in flat]
        with pytest.raises(TypeError, match=r"multi_layer_kv_transfer: argument '(buffer|kv_caches\[0\])': " +
                           NOT_A_PARAM):
            _ArgCell(fn, 1)(*ins, *tensors)
        exp_buf, exp_planes = buf, planes
    else:
        key = (be, c["geom"], dt, c["direction"], T)  # the buffer is a Parameter of the Cell: its shape has T
        cell = _graph_cell(key, fn, [buf] + flat)
        cell(*ins)
        tensors = cell.caches
    assert_bits_equal(to_np(tensors[0]), exp_buf, f"buffer ({mode}, {be}, {c})")
    got = _unflat(geo, [to_np(x) for x in tensors[1:]])
    for l in range(geo.L):
        for p in range(geo.P):
            assert_bits_equal(got[l][p], exp_planes[l][p], f"layer {l} plane {p} ({mode}, {be}, {c})")


def test_transfer_family_property(combo):
    _run(_transfer_property, combo, pynative=20, graph=6)


# ================================================================================= rope family
ROPE_GEOMS = [(2, 4, 3, 1, 9, 8), (3, 8, 4, 2, 16, 16), (1, 16, 2, 2, 34, 12)]  # nb, bs, Hq, Hkv, D, rotary_dim


def _table(max_pos, rd):
    inv = 1.0 / (10000.0 ** (np.arange(0, rd, 2, dtype=np.float64) / rd))
    ang = np.outer(np.arange(max_pos, dtype=np.float64), inv)
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)


@st.composite
def rope_case(draw, allow_repeats):
    nb, bs, hq, hk, d, rd = draw(st.sampled_from(ROPE_GEOMS))
    tokens = draw(st.sampled_from([1, 6]))
    return dict(geom=(nb, bs, hq, hk, d, rd), dtype=draw(st.sampled_from(["float16", "bfloat16", "float32"])),
                layout=draw(st.sampled_from(["BSND", "BNSD"])), neox=draw(st.booleans()),
                slots=_slot_pattern(draw, nb * bs, tokens, allow_repeats), pad=draw(st.sampled_from([0, 1])),
                slice=draw(st.booleans()), seed=draw(st.integers(0, 2**31)))


def _rope_call(layout, neox):
    def call(ins, caches):
        return mk.rope_reshape_and_cache(ins[0], ins[1], ins[2], ins[3], ins[4], caches[0], caches[1], ins[5],
                                         is_neox_style=neox, cache_layout=layout)
    return call


def _rand_rope(rng, shape, dtype):
    if dtype == "float32":
        return rng.uniform(-1, 1, size=shape).astype(np.float32)
    return rng.standard_normal(size=shape).astype(np.float32).astype(NP_DTYPES[dtype])


def _rope_property(combo, data):
    mode, be = combo
    c = data.draw(rope_case(allow_repeats=not (mode == "graph" and be == "sim")))
    nb, bs, hq, hk, d, rd = c["geom"]
    dt, layout, neox = c["dtype"], c["layout"], c["neox"]
    rng = np.random.default_rng(c["seed"])
    rows = len(c["slots"]) + c["pad"]
    table = _table(32, rd)
    pos = rng.integers(0, 32, size=rows).astype(np.int64)
    q, k, v = (_rand_rope(rng, (rows, h, d), dt) for h in (hq, hk, hk))
    shape = (nb, bs, hk, d) if layout == "BSND" else (nb, hk, bs, d)
    kc, vc = _rand_rope(rng, shape, dt), _rand_rope(rng, shape, dt)
    cs = table[pos]
    cos, sin = cs[:, None, : rd // 2], cs[:, None, rd // 2:]
    k_rot = rope_f32_model(k, cos, sin, rd, neox, dt)
    ekc, evc = kc.copy(), vc.copy()
    repeated = _repeats(c["slots"])
    if not (mode == "pynative" and repeated):
        for s, t in _last_writer(c["slots"]).items():
            _set_row(ekc, layout, bs, s, k_rot[t])
            _set_row(evc, layout, bs, s, v[t])
    fn = _rope_call(layout, neox)
    ins = (Tensor(pos), to_ms(q), to_ms(k), to_ms(v), Tensor(table), Tensor(np.asarray(c["slots"], np.int32)))
    if mode == "pynative":
        caches = [to_ms(kc), to_ms(vc)]
        if repeated:
            with pytest.raises(ValueError, match="expected distinct non-negative slots"):
                fn(ins, caches)
            outs = None
        else:
            outs = fn(ins, caches)
    elif c["slice"]:  # key_cache as a slice of a Parameter: refused at compile time, nothing written
        big = _param(np.stack([kc, kc]))
        caches = [big, _param(vc)]
        with pytest.raises(TypeError, match="rope_reshape_and_cache: argument 'key_cache': " + NOT_A_PARAM):
            _SliceCell(fn, big, caches[1:])(*ins)
        ekc, evc, outs = np.stack([kc, kc]), vc, None
    else:
        cell = _graph_cell((be, "rope", c["geom"], dt, layout, neox), fn, [kc, vc])
        outs = cell(*ins)
        caches = cell.caches
    assert_bits_equal(to_np(caches[0]), ekc, f"key_cache ({mode}, {be}, {c})")
    assert_bits_equal(to_np(caches[1]), evc, f"value_cache ({mode}, {be}, {c})")
    if outs is not None:
        for x, out, name in ((q, outs[0], "query_out"), (k, outs[1], "key_out")):
            ref, scale = rope64(x, cos, sin, rd, neox)
            assert_close_rope(to_np(out), ref, scale, dt, f"{name} vs float64 ({mode}, {be})")


def test_rope_family_property(combo):
    _run(_rope_property, combo, pynative=12, graph=5)
