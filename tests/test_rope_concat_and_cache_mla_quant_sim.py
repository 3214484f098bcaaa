"""rope_concat_and_cache_mla_quant (rope_concat_and_cache_mla with int8 caches): the AscendC kernel + op_host tiling
run through the emulation ("sim").

q_pe_out / k_pe_out / kv_c_out bit for bit against the models of rope_concat_and_cache_mla's sim tests
(tests/test_rope_concat_and_cache_mla_sim.py Mla: fp32 rotation, the kernel's RMSNorm arithmetic); the int8 codes
and scales of kv_c_out and of the rotated k_pe_out (as returned: quantized AFTER the norm and the rotation)
exactly against the numpy model of docs/quantization.md (tests/test_kv_quant.py: quant_rows / quant_dynamic /
place): static per tensor / per channel with offsets and dynamic per-token scales (one per token and plane),
float16 / bfloat16 / float32 with float32 or data-dtype tables and weights, with and without RMSNorm, NeoX and
GPT-J, on Atlas A2 / A3 and Ascend310P3 (static only, aligned sizes); positions out of range, slot -1,
out-of-range slots, T' > T (padding rows), odd sizes (DataCopyPad); tiling errors; the public op on
set_backend("sim") against the cpu backend, PyNative and GRAPH_MODE.
"""
import numpy as np
import pytest

from _copy_sim_ref import assert_last_launch, expect_tiling_error, launch, public_backend_or_skip, reset_last_launch
from _rope_sim_ref import assert_same
from test_kv_quant import place, quant_dynamic, quant_rows
from test_rope_concat_and_cache_mla_sim import DCODE, Mla

OP = "MskvRopeConcatAndCacheMlaQuant"
E = np.zeros((0,), np.float32)  # an absent optional input
WCODE = {None: 0, "float32": 1}


def _scales(rng, gran, L, R):
    """Static scales / offsets of the two planes (kv_c, k_pe): per tensor, or per channel with offsets."""
    u = lambda shape: rng.uniform(0.004, 0.03, size=shape).astype(np.float32)  # noqa: E731
    if gran == "tensor":
        return u(()), u((1,)), None, None
    return u((L,)), u((R,)), rng.uniform(-3, 3, (L,)).astype(np.float32), rng.uniform(-3, 3, (R,)).astype(np.float32)


def case_inputs(c, rng, gran):
    """int8 caches, the scales and the expected caches / scale caches of case c (an Mla)."""
    q, k, kv, _, _ = c.expected()
    nb, bs, L = c.kvc.shape
    R = c.kpc.shape[2]
    c.kvc = rng.integers(-128, 128, size=(nb, bs, L), dtype=np.int8)
    c.kpc = rng.integers(-128, 128, size=(nb, bs, R), dtype=np.int8)
    t = len(c.slots)
    s64 = np.asarray(c.slots, np.int64)
    sl = np.where((s64 >= 0) & (s64 < nb * bs) & c.valid()[:t], s64, -1)  # never written: -1
    c32 = np.asarray(kv[:t], np.float32)
    p32 = np.asarray(k[:t], np.float32).reshape(t, R)
    if gran == "dynamic":
        csc = rng.uniform(5, 6, (nb, bs, 1)).astype(np.float32)  # sentinels: rows not written keep them
        psc = rng.uniform(5, 6, (nb, bs, 1)).astype(np.float32)
        (qc, sc_), (qp, sp) = quant_dynamic(c32, "int8"), quant_dynamic(p32, "int8")
        scales = [E, E, E, E, csc, psc]
        want_sc = (place(csc, sc_, sl, "BSND"), place(psc, sp, sl, "BSND"))
    else:
        cs, ps, co, po = _scales(rng, gran, L, R)
        qc, qp = quant_rows(c32, "int8", cs, co), quant_rows(p32, "int8", ps, po)
        scales = [cs, ps, E if co is None else co, E if po is None else po, E, E]
        want_sc = None
    return (q, k, kv), scales, (place(c.kvc, qc, sl, "BSND"), place(c.kpc, qp, sl, "BSND")), want_sc, sl


def run_case(soc, dtype, gran, norm=True, table_dtype="float32", weight_dtype="float32", neox=False, rows=13,
             tokens=11, hq=4, rope=64, rank=128, seed=0, **kw):
    """One launch; checks the three outputs, both caches and (dynamic) the scale caches; returns the stats."""
    rng = np.random.default_rng(seed + 5 * rank + rope + 11 * len(dtype + gran) + 3 * norm)
    c = Mla(rng, rows, tokens, hq=hq, rope=rope, rank=rank, dtype=dtype, table_dtype=table_dtype,
            weight_dtype=weight_dtype, norm=norm, neox=neox, bs=8, **kw)
    (q, k, kv), scales, (ekvc, ekpc), want_sc, sl = case_inputs(c, rng, gran)
    arrays = [c.positions, c.q, c.k, c.kv, c.table, c.kvc, c.kpc, c.slots, E if c.w is None else c.w] + scales + \
        [c.q_out, c.k_out, c.kv_out]
    st = launch(OP, arrays, dict(c.attrs(), quant_mode="dynamic" if gran == "dynamic" else "static"), soc)
    what = f"({soc} {dtype}/{table_dtype} {gran} norm={norm} neox={neox} R={rope} L={rank})"
    assert_same(c.q_out, q, f"q_pe_out {what}")
    assert_same(c.k_out, k, f"k_pe_out {what}")
    assert_same(c.kv_out, kv, f"kv_c_out {what}")
    np.testing.assert_array_equal(arrays[5], ekvc, err_msg=f"kv_c_cache {what}")
    np.testing.assert_array_equal(arrays[6], ekpc, err_msg=f"k_pe_cache {what}")
    if want_sc is not None:
        np.testing.assert_array_equal(scales[4].view(np.uint32), want_sc[0].view(np.uint32), err_msg="kv_c_scale_cache")
        np.testing.assert_array_equal(scales[5].view(np.uint32), want_sc[1].view(np.uint32), err_msg="k_pe_scale_cache")
    assert (sl >= 0).any() and (sl < 0).any(), "the case writes some tokens and skips others"
    return st


def _key(gran, pad, wcode, dtype, table_dtype, neox):
    return ((gran == "dynamic") * 100000 + pad * 10000 + wcode * 1000 + DCODE[dtype] * 100 +
            (table_dtype != "float32") * 10 + int(neox))


@pytest.mark.parametrize("gran", ["tensor", "channel_offset", "dynamic"])
@pytest.mark.parametrize("dtype,table_dtype,norm,neox", [("bfloat16", "float32", True, False),
                                                         ("float16", "float16", False, True),
                                                         ("float32", "float32", True, True)])
def test_codes_a2(gran, dtype, table_dtype, norm, neox):
    st = run_case("Ascend910B1", dtype, gran, norm=norm, table_dtype=table_dtype, neox=neox)
    assert st["tiling_key"] == _key(gran, False, 1 if norm else 0, dtype, table_dtype, neox)


@pytest.mark.parametrize("gran", ["channel_offset", "dynamic"])
def test_deepseek_sizes_a3_data_dtype_weight(gran):
    st = run_case("Ascend910_9391", "bfloat16", gran, weight_dtype="bfloat16", hq=16, rope=64, rank=512, rows=21,
                  tokens=17)
    assert st["tiling_key"] == _key(gran, False, 2, "bfloat16", "float32", False)


@pytest.mark.parametrize("gran", ["tensor", "dynamic"])
def test_odd_sizes_use_datacopypad(gran):
    st = run_case("Ascend910B1", "float16", gran, rope=24, rank=40, rd=16, neox=True)
    assert st["tiling_key"] == _key(gran, True, 1, "float16", "float32", True)


def test_310p_static_only():
    for gran in ("tensor", "channel_offset"):
        st = run_case("Ascend310P3", "float16", gran, rope=64, rank=512)
        assert st["tiling_key"] == _key(gran, False, 1, "float16", "float32", False)
    rng = np.random.default_rng(3)
    c = Mla(rng, 5, 4, hq=2, rope=64, rank=128, dtype="float16", bs=8)
    _, scales, _, _, _ = case_inputs(c, rng, "dynamic")
    arrays = [c.positions, c.q, c.k, c.kv, c.table, c.kvc, c.kpc, c.slots, c.w] + scales + [c.q_out, c.k_out, c.kv_out]
    expect_tiling_error(OP, arrays, dict(c.attrs(), quant_mode="dynamic"), "Ascend310P3", "dynamic scales",
                        "Ascend310P")


def test_tiling_errors():
    rng = np.random.default_rng(4)
    c = Mla(rng, 5, 4, hq=2, rope=64, rank=128, dtype="float16", bs=8)
    _, scales, _, _, _ = case_inputs(c, rng, "tensor")
    arrays = [c.positions, c.q, c.k, c.kv, c.table, c.kvc, c.kpc, c.slots, c.w] + scales + [c.q_out, c.k_out, c.kv_out]
    st = dict(c.attrs(), quant_mode="static")
    bad = list(arrays)
    bad[9] = np.ones((3,), np.float32)
    expect_tiling_error(OP, bad, st, "Ascend910B1", "kv_c_scale", "[128]")
    bad = list(arrays)
    bad[9] = E
    expect_tiling_error(OP, bad, st, "Ascend910B1", "kv_c_scale", "static")
    bad = list(arrays)
    bad[11] = np.zeros((128,), np.float32)  # an offset for one plane only
    bad[9] = np.ones((128,), np.float32)
    expect_tiling_error(OP, bad, st, "Ascend910B1", "both or neither")
    bad = list(arrays)
    bad[5] = np.zeros((c.kvc.shape[0], 8, 100), np.int8)
    expect_tiling_error(OP, bad, st, "Ascend910B1", "kv_c")


# ------------------------------------------------------------------------------------------- public op
@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_op_sim_matches_cpu(mode):
    """rope_concat_and_cache_mla with int8 caches on set_backend("sim"): static per channel with offsets (fp32,
    RMSNorm) and dynamic (bf16, no norm) give the cpu backend's bytes (outputs, caches, scale caches), PyNative
    and GRAPH_MODE; padding rows (T' > T) and slot -1. fp16 / bf16 with RMSNorm: see the next test."""
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("rope_concat_and_cache_mla")
    rng = np.random.default_rng(29)
    a = Mla(rng, 15, 12, hq=4, rope=64, rank=128, dtype="float32", norm=True, bad=False, bs=8, nb=3)
    b = Mla(rng, 15, 12, hq=4, rope=64, rank=128, dtype="bfloat16", norm=False, bad=False, bs=8, nb=3)
    b.slots = a.slots.copy()
    a.slots[3] = -1
    cs, ps, co, po = _scales(rng, "channel_offset", 128, 64)
    c0 = rng.integers(-128, 128, size=(3, 8, 128), dtype=np.int8)
    p0 = rng.integers(-128, 128, size=(3, 8, 64), dtype=np.int8)
    sc0 = rng.uniform(1, 2, (3, 8, 1)).astype(np.float32)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.c1 = Parameter(Tensor(c0), name="c1")
            self.p1 = Parameter(Tensor(p0), name="p1")
            self.c2 = Parameter(Tensor(c0.copy()), name="c2")
            self.p2 = Parameter(Tensor(p0.copy()), name="p2")
            self.s1 = Parameter(Tensor(sc0), name="s1")
            self.s2 = Parameter(Tensor(sc0.copy()), name="s2")

        def construct(self, p, q1, k1, kv1, w, q2, k2, kv2, table, s1, s2, x1, x2, x3, x4):
            o1 = mk.rope_concat_and_cache_mla(p, q1, k1, kv1, table, self.c1, self.p1, s1, kv_c_norm_weight=w,
                                              kv_c_scale=x1, k_pe_scale=x2, kv_c_offset=x3, k_pe_offset=x4)
            o2 = mk.rope_concat_and_cache_mla(p, q2, k2, kv2, table, self.c2, self.p2, s2, is_neox_style=True,
                                              kv_c_scale_cache=self.s1, k_pe_scale_cache=self.s2)
            return o1 + o2

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                ins = (Tensor(a.positions), to_ms(a.q), to_ms(a.k), to_ms(a.kv), to_ms(a.w), to_ms(b.q), to_ms(b.k),
                       to_ms(b.kv), Tensor(a.table), Tensor(a.slots), Tensor(b.slots), Tensor(cs), Tensor(ps),
                       Tensor(co), Tensor(po))
                outs = net(*ins) if mode == "graph" else net.construct(*ins)
                results[backend] = [to_np(o) for o in outs] + [to_np(x) for x in (net.c1, net.p1, net.c2, net.p2,
                                                                                   net.s1, net.s2)]
                if backend == "sim":
                    assert_last_launch(OP)  # the dynamic call ran the AscendC kernel
        finally:
            mk.set_backend("cpu")
    for i, (x, y) in enumerate(zip(results["cpu"], results["sim"])):
        np.testing.assert_array_equal(np.ascontiguousarray(x).view(np.uint8), np.ascontiguousarray(y).view(np.uint8),
                                      err_msg=f"output {i}")
    assert (results["sim"][6] != c0).any() and (results["sim"][9] != p0).any() and (results["sim"][10] != sc0).any()


def test_public_op_fp16_norm_codes_follow_the_returned_kv_c_out():
    """fp16 with RMSNorm: kv_c_out may differ from the cpu backend's by 1 ulp (docs/rope.md), so the codes are
    checked exactly against the quantization of each backend's own kv_c_out (and k_pe against the cpu's bytes)."""
    from mindspore import Parameter, Tensor

    from conftest import to_ms, to_np

    mk = public_backend_or_skip("rope_concat_and_cache_mla")
    rng = np.random.default_rng(31)
    c = Mla(rng, 9, 9, hq=2, rope=64, rank=128, dtype="float16", norm=True, bad=False, bs=8, nb=2)
    scale = np.float32(0.01)
    out = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        try:
            kvc = Parameter(Tensor(np.zeros((2, 8, 128), np.int8)), name="kvc")
            kpc = Parameter(Tensor(np.zeros((2, 8, 64), np.int8)), name="kpc")
            o = mk.rope_concat_and_cache_mla(Tensor(c.positions), to_ms(c.q), to_ms(c.k), to_ms(c.kv),
                                             Tensor(c.table), kvc, kpc, Tensor(c.slots), kv_c_norm_weight=to_ms(c.w),
                                             kv_c_scale=Tensor(scale), k_pe_scale=Tensor(scale))
            out[backend] = [to_np(x) for x in o] + [to_np(kvc), to_np(kpc)]
        finally:
            mk.set_backend("cpu")
    for backend, (_, ko, kvo, kvc, kpc) in out.items():
        sl = np.asarray(c.slots, np.int64)
        want = place(np.zeros((2, 8, 128), np.int8), quant_rows(kvo.astype(np.float32), "int8", scale), sl, "BSND")
        np.testing.assert_array_equal(kvc, want, err_msg=f"{backend} kv_c_cache")
    np.testing.assert_array_equal(out["sim"][4].view(np.uint8), out["cpu"][4].view(np.uint8), err_msg="k_pe_cache")
