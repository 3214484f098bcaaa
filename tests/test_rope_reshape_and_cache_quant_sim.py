"""rope_reshape_and_cache_quant (rope_reshape_and_cache / rope_reshape_and_cache_merged with int8 caches): the
AscendC kernel + op_host tiling run through the emulation ("sim").

query_out / key_out bit for bit against the fp32 model of the rotation (tests/_rope_sim_ref.py, itself checked
against float64 by Gqa.check's reference in test_rope_reshape_and_cache_sim.py); the int8 codes and scales of the
rotated key (as returned) and of the value exactly against the numpy model of docs/quantization.md
(tests/test_kv_quant.py: quant_rows / quant_dynamic / place): static per tensor / per head / per channel with
offsets and dynamic per-token scales, BSND / BNSD, separate and merged caches, float16 / bfloat16 / float32 data
with float32 or data-dtype tables, NeoX and GPT-J, on Atlas A2 (Ascend910B1), A3 (Ascend910_9391) and Ascend310P3
(no bfloat16, aligned heads); positions out of range, slot -1, out-of-range slots, T' > T (padding rows), the
last slot, odd head sizes; tiling errors; GM traffic; the public ops on set_backend("sim") against the cpu
backend, PyNative and GRAPH_MODE.
"""
import numpy as np
import pytest

from _copy_sim_ref import (assert_last_launch, cores_of, expect_sim_graph_trap, launch, public_backend_or_skip,
                           reset_last_launch)
from _rope_sim_ref import assert_same
from test_kv_quant import place, quant_dynamic, quant_rows
from test_reshape_and_cache_quant_sim import _bc, _sc_shape, _scales, assert_quant_caches, gqa_quant_tiling_errors
from test_rope_reshape_and_cache_sim import DCODE, Gqa

OP = "MskvRopeReshapeAndCacheQuant"
E = np.zeros((0,), np.float32)  # an absent optional input


def run_case(soc, layout, dtype, gran, table_dtype="float32", neox=True, rows=11, tokens=9, hq=4, hk=2, d=64,
             rd=None, merged=False, seed=0, bs=8, pdt="int64", sdt="int32", slots_override=None, **kw):
    """One launch; checks query_out, key_out, both caches and (dynamic) the scale caches; returns the stats."""
    rng = np.random.default_rng(seed + 7 * len(layout + dtype + gran) + 3 * d + hk)
    c = Gqa(rng, rows, tokens, hq, hk, d, rd=rd, dtype=dtype, table_dtype=table_dtype, layout=layout, bs=bs,
            pdt=pdt, sdt=sdt, neox=neox, **kw)
    if slots_override is not None:
        c.slots = slots_override
    q, k, _, _ = c.expected()  # the rotated rows (fp32 model), zero for invalid positions
    c.kc = rng.integers(-128, 128, size=c.kc.shape, dtype=np.int8)
    c.vc = rng.integers(-128, 128, size=c.vc.shape, dtype=np.int8)
    dynamic = gran == "dynamic"
    nb = c.kc.shape[0]
    if dynamic:
        ksc = rng.uniform(5, 6, _sc_shape(layout, nb, bs, hk)).astype(np.float32)  # sentinels: rows not written
        vsc = rng.uniform(5, 6, _sc_shape(layout, nb, bs, hk)).astype(np.float32)
        ks = vs = ko = vo = None
    else:
        ks, vs, ko, vo = _scales(rng, gran, hk, d)
        ksc = vsc = None
    t = len(c.slots)
    s64 = np.asarray(c.slots, np.int64)
    sl = np.where((s64 >= 0) & (s64 < nb * bs) & c.valid()[:t], s64, -1)  # never written: -1
    k32 = np.asarray(k[:t], np.float32).reshape(t, hk, d)
    v32 = np.asarray(c.v[:t], np.float32).reshape(t, hk, d)
    if dynamic:
        (qk, sk), (qv, sv) = quant_dynamic(k32, "int8"), quant_dynamic(v32, "int8")
        e_ksc, e_vsc = place(ksc, sk, sl, layout), place(vsc, sv, sl, layout)
    else:
        qk = quant_rows(k32, "int8", _bc(ks, hk), _bc(ko, hk))
        qv = quant_rows(v32, "int8", _bc(vs, hk), _bc(vo, hk))
        e_ksc = e_vsc = None
    ek, ev = place(c.kc, qk, sl, layout), place(c.vc, qv, sl, layout)
    opt = lambda a: E if a is None else a  # noqa: E731
    kc, vc = c.kc.copy(), c.vc.copy()
    caches = [np.stack([kc, vc]), np.zeros((0,), np.int8)] if merged else [kc, vc]
    arrays = [c.positions, c.q, c.k, c.v, c.table, *caches, c.slots, opt(ks), opt(vs), opt(ko), opt(vo), opt(ksc),
              opt(vsc), c.q_out, c.k_out]
    attrs = {"is_neox_style": neox, "cache_layout": layout, "kv_format": 1 if merged else 2,
             "quant_mode": "dynamic" if dynamic else "static"}
    st = launch(OP, arrays, attrs, soc)
    if merged:
        kc, vc = arrays[5][0], arrays[5][1]
    what = f"({soc} {layout} {dtype}/{table_dtype} {gran} neox={neox} d={d} merged={merged})"
    assert_same(c.q_out, q, f"query_out {what}")
    assert_same(c.k_out, k, f"key_out {what}")
    assert_quant_caches((kc, vc, ksc, vsc), (ek, ev, e_ksc, e_vsc), what)
    st["written"] = int(np.count_nonzero(sl >= 0))
    st["case"] = c
    return st


def _key(gran, layout, dtype, table_dtype, neox, pad):
    return ((gran == "dynamic") * 100000 + pad * 10000 + (layout == "BNSD") * 1000 + DCODE[dtype] * 100
            + (table_dtype != "float32") * 10 + int(neox))


# ------------------------------------------------------------------------------------------ codes
@pytest.mark.parametrize("gran,layout,dtype,table_dtype,neox", [
    ("tensor", "BSND", "float16", "float16", True),
    ("head", "BNSD", "bfloat16", "float32", False),
    ("channel_offset", "BSND", "float32", "float32", False),
    ("dynamic", "BNSD", "float16", "float32", True),
    ("dynamic", "BSND", "bfloat16", "bfloat16", False),
])
def test_codes_a2(gran, layout, dtype, table_dtype, neox):
    """Atlas A2: every mode, data and table dtype, style and layout (in five launches); the tiling key."""
    st = run_case("Ascend910B1", layout, dtype, gran, table_dtype, neox)
    assert st["tiling_key"] == _key(gran, layout, dtype, table_dtype, neox, False)
    assert st["written"] > 0


@pytest.mark.parametrize("gran", ["channel_offset", "dynamic"])
def test_a3_merged_odd_head_size_partial_rotary(gran):
    """Atlas A3 (Ascend910_9391), the merged cache (V plane behind the K plane), head_size 40 (codes need
    DataCopyPad; bf16 rows are 80 bytes: the rotation's pitch 48 differs from the codes' 64), rotary_dim 24,
    three kv heads (a dynamic scale row of 12 bytes), more rows than the core count."""
    st = run_case("Ascend910_9391", "BSND" if gran == "dynamic" else "BNSD", "bfloat16", gran, d=40, rd=24, hk=3,
                  hq=5, rows=50, tokens=45, merged=True, bs=16)
    assert st["tiling_key"] // 10000 % 10 == 1  # DataCopyPad


def test_310p():
    """Ascend310P3: float16 / float32 only, head_size a multiple of 32; dynamic scales in BSND caches with 8 kv
    heads (the scale row 32 bytes); the merged cache too."""
    run_case("Ascend310P3", "BNSD", "float16", "head", d=32, hq=8, hk=2)
    run_case("Ascend310P3", "BSND", "float32", "dynamic", d=32, hq=8, hk=8, merged=True, neox=False)


def test_last_slot_padding_rows_and_skipped_tokens():
    """The last slot written, slot -1, slots past the cache and invalid positions skipped (their scale rows
    untouched), padding rows T' > T rotated but not cached; a launch whose one cached-candidate token has slot -1
    writes no cache byte."""
    rng = np.random.default_rng(5)
    nb, bs = 3, 4
    slots = rng.permutation(nb * bs - 1).astype(np.int64)  # 11 tokens, slots 0 .. 10
    slots[0], slots[1], slots[5] = nb * bs - 1, -1, nb * bs + 3
    st = run_case("Ascend910B1", "BSND", "float16", "dynamic", rows=20, tokens=11, d=32, bs=bs, nb=nb,
                  slots_override=slots)
    assert st["written"] == 7  # 11 tokens less slot -1, a slot past the cache, positions -1 and past the table
    st = run_case("Ascend910B1", "BNSD", "float32", "tensor", rows=6, tokens=1, d=32, bad=False, seed=1,
                  slots_override=np.array([-1], np.int32))
    assert st["written"] == 0


# ------------------------------------------------------------------------------------------ errors
def _args(D=32, H=2, cache=np.int8, dyn=False, layout="BSND", dtype=np.float16):
    rows = 3
    shape = (2, 4, H, D) if layout == "BSND" else (2, H, 4, D)
    kc = np.zeros(shape, cache)
    x = np.zeros((rows, H, D), dtype)
    table = np.zeros((8, D), np.float32)
    head = [np.zeros(rows, np.int32), x, x, x, table, kc, kc.copy(), np.zeros(rows, np.int32)]
    out = [x.copy(), x.copy()]
    if dyn:
        sc = np.zeros(_sc_shape(layout, 2, 4, H), np.float32)
        return head + [E, E, E, E, sc, sc.copy()] + out
    return head + [np.ones((), np.float32), np.ones((), np.float32), E, E, E, E] + out


def test_tiling_errors():
    """The GQA quantizing writes' tiling errors (310P rules naming the SoC, a missing or mis-shaped scale); a
    float16 head of 16 elements is 32 bytes (the rotation's rows are aligned) but its codes are 16."""
    gqa_quant_tiling_errors(OP, _args, 8, 16)


def test_float8_cache_tiling_error_names_the_soc():
    from ms_kvcache import sim

    ins = [((3,), "int32")] + [((3, 2, 32), "float16")] * 3 + [((8, 32), "float32")] + \
        [((2, 4, 2, 32), "float8_e4m3fn")] * 2 + [((3,), "int32"), ((), "float32"), ((), "float32"), None, None, None,
                                                  None]
    with pytest.raises(sim.EmulationError, match="float8_e4m3fn|OPDEF_DTYPE_ROW"):
        sim.tiling(OP, ins, {}, "Ascend910B1")


# ------------------------------------------------------------------------------------------ traffic
@pytest.mark.parametrize("gran", ["tensor", "dynamic"])
def test_gm_traffic_within_5_percent_of_the_minimum(gran):
    """GM bytes moved <= 1.05x the minimum: query and key read and written once per row, the value rows of the
    cached tokens read once, their codes (and, dynamic, scales) written once, one table row per row, the
    positions and the slots of the rows with a valid position read once (static per-tensor scales: 8 bytes per
    core)."""
    soc = "Ascend910B1"
    st = run_case(soc, "BSND", "bfloat16", gran, rows=96, tokens=90, hq=8, hk=2, d=128, bs=32, bad=False, seed=3)
    c = st["case"]
    esz = c.q.dtype.itemsize
    rows, hq_d, hk_d = c.q.shape[0], c.q[0].size, c.k[0].size
    w = st["written"]
    minimum = (2 * rows * (hq_d + hk_d) * esz + w * hk_d * esz + w * 2 * hk_d + (w * 2 * 2 * 4 if gran == "dynamic"
               else 8 * st["cores_used"]) + rows * c.table[0].nbytes + c.positions.nbytes + c.slots.nbytes)
    total = st["gm_read_bytes"] + st["gm_write_bytes"]
    assert total <= 1.05 * minimum, (total, minimum)
    assert st["cores_used"] == min(rows, cores_of(soc))


# ------------------------------------------------------------------------------------------ public ops
@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_ops_sim_match_cpu(mode):
    """rope_reshape_and_cache (static per channel with offsets, BNSD, bf16) and rope_reshape_and_cache_merged
    (dynamic, BSND, float16) with int8 caches on set_backend("sim") give the cpu backend's bytes (outputs, caches,
    scale caches), PyNative and GRAPH_MODE; padding rows and slot -1."""
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn

    from _rope_sim_ref import make_table, rand
    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("rope_reshape_and_cache")
    rng = np.random.default_rng(23)
    rows, T, hq, hk, D, nb, bs = 13, 11, 4, 2, 32, 3, 8
    pos = rng.integers(0, 32, rows).astype(np.int64)
    table = make_table(32, D, "float32")
    q, k, v = rand(rng, (rows, hq, D), "bfloat16"), rand(rng, (rows, hk, D), "bfloat16"), \
        rand(rng, (rows, hk, D), "bfloat16")
    q16, k16, v16 = (rand(rng, (rows, h, D), "float16") for h in (hq, hk, hk))
    slots = rng.permutation(nb * bs)[:T].astype(np.int32)
    slots[2] = -1
    slots[4] = nb * bs - 1 if nb * bs - 1 not in slots else slots[4]
    kc0 = rng.integers(-128, 128, size=(nb, hk, bs, D), dtype=np.int8)
    kv0 = rng.integers(-128, 128, size=(2, nb, bs, hk, D), dtype=np.int8)
    sc0 = rng.uniform(1, 2, (nb, bs, hk, 1)).astype(np.float32)
    ks, vs, ko, vo = _scales(rng, "channel_offset", hk, D)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(Tensor(kc0), name="kc")
            self.vc = Parameter(Tensor(kc0.copy()), name="vc")
            self.kv = Parameter(Tensor(kv0), name="kv")
            self.ksc = Parameter(Tensor(sc0), name="ksc")
            self.vsc = Parameter(Tensor(sc0.copy()), name="vsc")

        def construct(self, p, a, b, c, a16, b16, c16, cs, s, x1, x2, x3, x4):
            qo, ko_ = mk.rope_reshape_and_cache(p, a, b, c, cs, self.kc, self.vc, s, cache_layout="BNSD",
                                                k_scale=x1, v_scale=x2, k_offset=x3, v_offset=x4)
            qm, km = mk.rope_reshape_and_cache_merged(p, a16, b16, c16, cs, self.kv, s, is_neox_style=False,
                                                      k_scale_cache=self.ksc, v_scale_cache=self.vsc)
            return qo, ko_, qm, km

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                ins = (Tensor(pos), to_ms(q), to_ms(k), to_ms(v), to_ms(q16), to_ms(k16), to_ms(v16), Tensor(table),
                       ms.Tensor(slots), Tensor(ks), Tensor(vs), Tensor(ko), Tensor(vo))
                outs = net(*ins) if mode == "graph" else net.construct(*ins)
                results[backend] = [to_np(o) for o in outs] + [to_np(p) for p in (net.kc, net.vc, net.kv, net.ksc,
                                                                                    net.vsc)]
                if backend == "sim":
                    assert_last_launch(OP)  # the merged (dynamic) call ran the AscendC kernel
        finally:
            mk.set_backend("cpu")
    for i, (a, b) in enumerate(zip(results["cpu"], results["sim"])):
        np.testing.assert_array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8),
                                      err_msg=f"output {i}")
    assert (results["sim"][4] != kc0).any() and (results["sim"][6] != kv0).any()
    assert (results["sim"][7] != sc0).any()


def test_public_float8_cache_refused_on_sim():
    """A float8 cache on the sim backend: a TypeError naming the public op and the argument before any launch."""
    import ms_kvcache
    from mindspore import Tensor

    from test_kv_quant import fp8_tensor

    mk = public_backend_or_skip("rope_reshape_and_cache")
    kc = fp8_tensor(np.zeros((2, 4, 2, 32), np.uint8), "float8_e4m3fn")
    vc = fp8_tensor(np.zeros((2, 4, 2, 32), np.uint8), "float8_e4m3fn")
    x = Tensor(np.ones((3, 2, 32), np.float16))
    s = Tensor(np.float32(0.1))
    mk.set_backend("sim")
    try:
        with pytest.raises(TypeError, match=r"rope_reshape_and_cache: argument 'key_cache': expected dtype int8"):
            ms_kvcache.rope_reshape_and_cache(Tensor(np.zeros(3, np.int32)), x, x, x,
                                              Tensor(np.ones((8, 32), np.float32)), kc, vc,
                                              Tensor(np.array([0, 1, -1], np.int32)), k_scale=s, v_scale=s)
    finally:
        mk.set_backend("cpu")


def test_bad_static_value_graph_mode_on_sim_names_the_cause():
    """GRAPH_MODE on set_backend("sim"): rope_reshape_and_cache, int8 BSND caches, a per-head v_scale with an inf at
    flat index 1: the kernel traps; the RuntimeError reports rule TRAP, then the cause found on the host from the
    same inputs (public argument name, value, flat index); the caches keep their bytes."""
    from mindspore import Parameter, Tensor, nn

    from _rope_sim_ref import make_table, rand
    from conftest import to_ms, to_np

    mk = public_backend_or_skip("rope_reshape_and_cache")
    rng = np.random.default_rng(41)
    T, hq, hk, D, nb, bs = 7, 4, 2, 32, 3, 8
    pos = rng.integers(0, 32, T).astype(np.int64)
    table = make_table(32, D, "float32")
    q, k, v = (rand(rng, (T, h, D), "float16") for h in (hq, hk, hk))
    slots = rng.permutation(nb * bs)[:T].astype(np.int32)
    kc0 = rng.integers(-128, 128, size=(nb, bs, hk, D), dtype=np.int8)
    ks = rng.uniform(0.004, 0.03, (hk,)).astype(np.float32)
    vs = rng.uniform(0.004, 0.03, (hk,)).astype(np.float32)
    vs[1] = np.inf

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(Tensor(kc0), name="kc_cause")
            self.vc = Parameter(Tensor(kc0.copy()), name="vc_cause")

        def construct(self, p, a, b, c, cs, s, x1, x2):
            return mk.rope_reshape_and_cache(p, a, b, c, cs, self.kc, self.vc, s, k_scale=x1, v_scale=x2)

    def run(net):
        outs = net(Tensor(pos), to_ms(q), to_ms(k), to_ms(v), Tensor(table), Tensor(slots), Tensor(ks), Tensor(vs))
        [to_np(o) for o in outs]

    expect_sim_graph_trap(mk, Net, run, "; cause: argument 'v_scale': expected finite values > 0, got inf at flat index 1",
                          lambda net: [(net.kc, kc0), (net.vc, kc0)])
