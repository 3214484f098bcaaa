"""Quantized writes against an independent float64 numpy reference (issue 17, "exact for the integer codes
except documented round-half cases"), cpu backend:

- int8 codes of reshape_and_cache (static per channel with offsets, dynamic per token): the reference
  computes ``x / s - o`` in float64 and rounds half to even; the kernel computes it in fp32 (one
  division, one subtraction). The codes must be equal except where the float64 value lies within
  ``2^-22 (|x / s| + |o|)`` of a half-integer ``k + 0.5`` (fp32's two roundings move it by at most
  ``2^-24`` of each operand, so the fp32 value can land on, or on the other side of, ``k + 0.5``:
  docs/quantization.md, "Formulas"). The exact-half case of dynamic scales (an element equal to
  ``max / 2`` lands on ``63.5`` in fp32) is built on purpose and checked to give 64.
- float8 (PyNative only on cpu: MindSpore's CPU has no float8 Parameter / Cast) of concat_and_cache_mla
  (static, dynamic), rope_reshape_and_cache(_merged) and rope_concat_and_cache_mla (static, dynamic):
  the reference is ``fp8(clamp(x / s, -max, max))`` with ``x / s`` in float64, saturation of
  huge values and of infinities, NaN staying NaN; equal except where a relative change of ``2^-22``
  of the float64 quotient changes its float8 code (double rounding through fp32). The fused RoPE
  writers' cached codes are those of the rows they return (those rows are compared with the unquantized
  op's outputs).
"""
import ml_dtypes
import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_kvcache

from conftest import random_array, to_ms, to_np
from copy_util import random_slots

CODE_MAX = {"int8": 127.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
FP8 = ("float8_e4m3fn", "float8_e5m2")
TIE_TOL = 2.0 ** -22  # relative: twice the bound of fp32's division + subtraction rounding

needs_fp8 = pytest.mark.skipif(not all(hasattr(ms, c) for c in FP8),
                               reason=f"MindSpore {ms.__version__} has no float8 dtypes")


# --------------------------------------------------------------------------- the float64 reference
def int8_ref(x, s, o=None):
    """(codes, ambiguous mask): float64 ``x / s - o``, NaN -> 0, round half to even, saturate."""
    x = np.asarray(x, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = x / np.asarray(s, np.float64)
    v = q - (0.0 if o is None else np.asarray(o, np.float64))
    tol = TIE_TOL * (np.abs(q) + (0.0 if o is None else np.abs(np.asarray(o, np.float64))))
    frac = np.abs(v - np.floor(v) - 0.5)
    amb = np.isfinite(v) & (frac <= tol) & (np.abs(v) < 128.5)
    v = np.where(np.isnan(v), 0.0, v)
    return np.clip(np.rint(v), -128, 127).astype(np.int8), amb


def fp8_encode64(v, code):
    v = np.asarray(v, np.float64)
    m = CODE_MAX[code]
    return np.clip(v, -m, m).astype(getattr(ml_dtypes, code)).view(np.uint8)  # NaN stays NaN


def fp8_ref(x, s, code):
    """(uint8 codes, ambiguous mask): float64 ``x / s``, saturated to +-max, rounded half to even."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        v = np.asarray(x, np.float64) / np.asarray(s, np.float64)
        amb = fp8_encode64(v * (1 - TIE_TOL), code) != fp8_encode64(v * (1 + TIE_TOL), code)
    return fp8_encode64(v, code), amb


def dyn_scale64(x, code, axis=-1):
    """The documented dynamic scale: max|x| (NaN ignored) / code_max, stored as float32."""
    return np.float32(np.nanmax(np.abs(np.asarray(x, np.float64)), axis=axis, keepdims=True)
                      / CODE_MAX[code]).astype(np.float32)


def expect_rows(cache0, rows, amb_rows, slots, bnsd=False):
    """cache0 with each token's row at its slot (slot < 0 skipped), and the mask of ambiguous elements."""
    exp, amb = cache0.copy(), np.zeros(cache0.shape, bool)
    bs = cache0.shape[2] if bnsd else cache0.shape[1]
    for t, sl in enumerate(np.asarray(slots, np.int64)):
        if sl < 0:
            continue
        b, o = divmod(int(sl), bs)
        idx = (b, slice(None), o) if bnsd else (b, o)
        exp[idx], amb[idx] = rows[t], amb_rows[t]
    return exp, amb


def assert_codes(got, exp, amb, what, max_amb_frac=0.01):
    got, exp = np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(exp).view(np.uint8)
    bad = (got != exp) & ~amb
    assert not bad.any(), f"{what}: {int(bad.sum())} codes differ from the float64 reference outside the " \
                          f"documented tie band (first at {np.argwhere(bad)[:3].tolist()})"
    assert amb.mean() <= max_amb_frac, f"{what}: tie band covers {amb.mean():.3%} of the elements"


def fp8_tensor(codes_u8, code):
    t = Tensor(np.ascontiguousarray(codes_u8, np.uint8))
    try:
        return t.view(getattr(ms, code))
    except TypeError:
        pytest.skip(f"MindSpore {ms.__version__}: Tensor.view(dtype) does not exist, no {code} tensor on CPU")


def fp8_codes(t):
    return t.view(ms.uint8).asnumpy()


# --------------------------------------------------------------------------- int8 integer codes
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
def test_int8_static_codes_vs_float64(dtype, rng):
    nb, bs, h, d, t = 4, 8, 4, 64, 30
    sl = random_slots(rng, t, nb * bs, "int32", pad=3)
    k = (rng.standard_normal((t + 2, h, d)) * 2).astype(np.float32).astype(ml_dtypes.bfloat16
                                                                          if dtype == "bfloat16" else dtype)
    v = random_array(rng, (t + 2, h, d), dtype)
    ks, vs = rng.uniform(0.005, 0.05, (h, d)).astype(np.float32), rng.uniform(0.005, 0.05, (h, d)).astype(np.float32)
    ko, vo = rng.uniform(-3, 3, (h, d)).astype(np.float32), rng.uniform(-3, 3, (h, d)).astype(np.float32)
    kc0, vc0 = (rng.integers(-128, 128, (nb, bs, h, d), dtype=np.int8) for _ in range(2))
    kc, vc = Parameter(Tensor(kc0), name="f64kc"), Parameter(Tensor(vc0), name="f64vc")
    ms_kvcache.reshape_and_cache(to_ms(k), to_ms(v), kc, vc, Tensor(sl), k_scale=Tensor(ks), v_scale=Tensor(vs),
                                 k_offset=Tensor(ko), v_offset=Tensor(vo))
    for name, x, s, o, c0, c in (("key", k, ks, ko, kc0, kc), ("value", v, vs, vo, vc0, vc)):
        rows, amb = int8_ref(np.asarray(x[:t], np.float32), s, o)
        exp, amb = expect_rows(c0, rows, amb, sl)
        assert_codes(c.asnumpy(), exp, amb, f"{dtype} static {name}")


def test_int8_dynamic_codes_vs_float64_and_the_exact_half(rng):
    """bfloat16 rows whose maximum is m and with elements m / 2: x / s = 63.5 / (1 + d) with s =
    fl32(m / 127) = (m / 127)(1 + d), which fp32 rounds to 63.5 exactly for many m (the quotient is within
    half an ulp of 63.5); round half to even gives 64. float64 sees 63.5 / (1 + d), within the tie band."""
    nb, bs, h, d, t = 4, 8, 4, 32, 24
    sl = random_slots(rng, t, nb * bs, "int64", pad=2)
    x = (rng.standard_normal((t, h, d)) * 3).astype(ml_dtypes.bfloat16)
    m = np.max(np.abs(x.astype(np.float32)), axis=-1)  # [t, h]
    half = (m / 2).astype(ml_dtypes.bfloat16)  # exact: halving a bf16 value
    x[:, :, 1] = half
    x[:, :, 2] = -half
    x[0, 0] = 0  # an all-zero token-head: scale 0, codes 0
    c0 = rng.integers(-128, 128, (nb, bs, h, d), dtype=np.int8)
    s0 = rng.uniform(1, 2, (nb, bs, h, 1)).astype(np.float32)
    kc, vc = Parameter(Tensor(c0), name="dk"), Parameter(Tensor(c0.copy()), name="dv")
    ksc, vsc = Parameter(Tensor(s0), name="dks"), Parameter(Tensor(s0.copy()), name="dvs")
    ms_kvcache.reshape_and_cache(to_ms(x), to_ms(x), kc, vc, Tensor(sl), k_scale_cache=ksc, v_scale_cache=vsc)
    s = dyn_scale64(x, "int8")  # [t, h, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        rows, amb = int8_ref(np.asarray(x, np.float32), s)
    rows = np.where(s == 0, np.int8(0), rows)
    amb &= s != 0
    exp, ambc = expect_rows(c0, rows, amb, sl)
    got = kc.asnumpy()
    assert_codes(got, exp, ambc, "dynamic int8", max_amb_frac=0.1)
    exp_s, _ = expect_rows(s0, s, np.zeros(s.shape, bool), sl)
    np.testing.assert_array_equal(ksc.asnumpy(), exp_s)  # the scales: float32(max / 127), bit for bit
    np.testing.assert_array_equal(vc.asnumpy(), got)
    # the exact half: where fp32's quotient is exactly 63.5 the code is 64 (round half to even; half away
    # from zero gives 64 too, 63 being odd), -63.5 -> -64
    written = [(ti, int(sv)) for ti, sv in enumerate(sl) if sv >= 0]
    n_half = 0
    for ti, sv in written:
        b, o = divmod(sv, bs)
        for hi in range(h):
            sf = np.float32(s[ti, hi, 0])
            if sf == 0:
                continue
            qf = np.float32(np.float32(half[ti, hi]) / sf)
            if qf == np.float32(63.5):
                n_half += 1
                assert got[b, o, hi, 1] == 64 and got[b, o, hi, 2] == -64, (ti, hi)
                assert ambc[b, o, hi, 1] and ambc[b, o, hi, 2]  # inside the documented tie band
    assert n_half >= 1, "no exact 63.5 built: the case this test is about did not occur"


# --------------------------------------------------------------------------- float8, MLA and RoPE writers
@needs_fp8
@pytest.mark.parametrize("code", FP8)
def test_fp8_concat_and_cache_mla_vs_float64(code, rng):
    nb, bs, rank, rope = 3, 4, 32, 16
    m = CODE_MAX[code]
    sl = np.array([nb * bs - 1, -1, 0, 5, 6], np.int64)  # + one padding row
    c = (rng.standard_normal((6, rank)) * 3).astype(np.float32)
    p = random_array(rng, (6, rope), "float32")
    c[0, :4] = [1e9, -np.inf, np.nan, 1e-7]  # saturation, infinity saturated, NaN stays NaN, subnormal/0
    cc0, pc0 = (rng.integers(0, 0x70, (nb, bs, n), dtype=np.uint8) for n in (rank, rope))
    cs, ps = rng.uniform(0.005, 0.05, rank).astype(np.float32), np.float32(0.02)
    cc, pc = fp8_tensor(cc0, code), fp8_tensor(pc0, code)
    ms_kvcache.concat_and_cache_mla(Tensor(c), to_ms(p), cc, pc, Tensor(sl), kv_c_scale=Tensor(cs),
                                    k_pe_scale=Tensor(ps))
    t = len(sl)
    for name, x, s, c0, got in (("kv_c", c[:t], cs, cc0, fp8_codes(cc)), ("k_pe", p[:t], ps, pc0, fp8_codes(pc))):
        rows, amb = fp8_ref(np.asarray(x, np.float32), s, code)
        exp, amb = expect_rows(c0, rows, amb, sl)
        assert_codes(got, exp, amb, f"{code} static {name}")
    row = fp8_codes(cc)[nb - 1, bs - 1, :3].view(getattr(ml_dtypes, code)).astype(np.float32)
    assert row[0] == m and row[1] == -m and np.isnan(row[2])
    # dynamic: one scale per token and plane ([nb, bs, 1]); rows not written keep their scale
    c2 = (rng.standard_normal((6, rank)) * 3).astype(np.float32)
    c2[2, 5] = np.nan  # ignored by the max, stays NaN
    cc, pc = fp8_tensor(cc0, code), fp8_tensor(pc0, code)
    s0 = rng.uniform(1, 2, (nb, bs, 1)).astype(np.float32)
    csc, psc = Parameter(Tensor(s0), name=f"c{code}"), Parameter(Tensor(s0.copy()), name=f"p{code}")
    ms_kvcache.concat_and_cache_mla(Tensor(c2), to_ms(p), cc, pc, Tensor(sl), kv_c_scale_cache=csc,
                                    k_pe_scale_cache=psc)
    for name, x, c0, got, sc in (("kv_c", c2[:t], cc0, fp8_codes(cc), csc), ("k_pe", p[:t], pc0, fp8_codes(pc), psc)):
        x = np.asarray(x, np.float32)
        s = dyn_scale64(x, code)
        rows, amb = fp8_ref(x, s, code)
        exp, amb = expect_rows(c0, rows, amb, sl)
        assert_codes(got, exp, amb, f"{code} dynamic {name}")
        exp_s, _ = expect_rows(s0, s, np.zeros(s.shape, bool), sl)
        np.testing.assert_array_equal(sc.asnumpy(), exp_s, err_msg=f"{code} dynamic {name} scales")
    assert np.isnan(fp8_codes(cc)[0, 0, 5:6].view(getattr(ml_dtypes, code)).astype(np.float32)).all()


@needs_fp8
@pytest.mark.parametrize("code", FP8)
def test_fp8_rope_reshape_and_cache_vs_float64(code, rng):
    """static per-channel into BNSD caches (rope_reshape_and_cache) and dynamic into a merged BSND cache
    (rope_reshape_and_cache_merged): the cached codes are the float64 reference's of key_out / value."""
    nb, bs, kvh, d, rows = 3, 4, 2, 16, 6
    pos = rng.integers(0, 32, rows).astype(np.int64)
    q = random_array(rng, (rows, 4, d), "float16")
    k = (rng.standard_normal((rows, kvh, d)) * 4).astype(np.float16)
    v = random_array(rng, (rows, kvh, d), "float16")
    v[1, 0, :2] = [np.inf, -60000]
    cs = rng.uniform(-1, 1, (32, d)).astype(np.float32)
    sl = random_slots(rng, 5, nb * bs, "int32", pad=1, must_include=(nb * bs - 1,))
    sl[1] = 0 if sl[1] < 0 else sl[1]
    t = len(sl)
    ks, vs = rng.uniform(0.002, 0.02, (kvh, d)).astype(np.float32), np.float32(0.01)
    kc0, vc0 = (rng.integers(0, 0x70, (nb, kvh, bs, d), dtype=np.uint8) for _ in range(2))
    kc, vc = fp8_tensor(kc0, code), fp8_tensor(vc0, code)
    ins = [Tensor(a) for a in (pos, q, k, v, cs)]
    qo, ko = ms_kvcache.rope_reshape_and_cache(*ins, kc, vc, Tensor(sl), cache_layout="BNSD", k_scale=Tensor(ks),
                                               v_scale=Tensor(vs))
    fk, fv = Tensor(np.zeros((nb, kvh, bs, d), np.float16)), Tensor(np.zeros((nb, kvh, bs, d), np.float16))
    qp, kp = ms_kvcache.rope_reshape_and_cache(*ins, fk, fv, Tensor(sl), cache_layout="BNSD")
    np.testing.assert_array_equal(to_np(qo), to_np(qp))
    np.testing.assert_array_equal(to_np(ko), to_np(kp))
    kr = to_np(ko).astype(np.float32)[:t]
    for name, x, s, c0, got in (("key", kr, ks, kc0, fp8_codes(kc)), ("value", v[:t], vs, vc0, fp8_codes(vc))):
        r, amb = fp8_ref(np.asarray(x, np.float32), s, code)
        exp, amb = expect_rows(c0, r, amb, sl, bnsd=True)
        assert_codes(got, exp, amb, f"{code} rope static {name}")
    # dynamic, merged BSND
    mc0 = rng.integers(0, 0x70, (2, nb, bs, kvh, d), dtype=np.uint8)
    mc = fp8_tensor(mc0, code)
    s0 = rng.uniform(1, 2, (nb, bs, kvh, 1)).astype(np.float32)
    ksc, vsc = Parameter(Tensor(s0), name=f"rk{code}"), Parameter(Tensor(s0.copy()), name=f"rv{code}")
    v2 = random_array(rng, (rows, kvh, d), "float16")
    ins[3] = Tensor(v2)
    _, ko2 = ms_kvcache.rope_reshape_and_cache_merged(*ins, mc, Tensor(sl), k_scale_cache=ksc, v_scale_cache=vsc)
    np.testing.assert_array_equal(to_np(ko2), to_np(kp))
    got = fp8_codes(mc)
    for i, (name, x, sc) in enumerate((("key", to_np(ko2).astype(np.float32)[:t], ksc),
                                       ("value", v2[:t].astype(np.float32), vsc))):
        s = dyn_scale64(x, code)
        r, amb = fp8_ref(x, s, code)
        exp, amb = expect_rows(mc0[i], r, amb, sl)
        assert_codes(got[i], exp, amb, f"{code} rope dynamic {name}")
        exp_s, _ = expect_rows(s0, s, np.zeros(s.shape, bool), sl)
        np.testing.assert_array_equal(sc.asnumpy(), exp_s, err_msg=f"{code} rope dynamic {name} scales")


@needs_fp8
@pytest.mark.parametrize("code", FP8)
@pytest.mark.parametrize("quant", ("static", "dynamic"))
def test_fp8_rope_concat_and_cache_mla_vs_float64(code, quant, rng):
    nb, bs, rank, rope, heads, rows = 2, 4, 32, 16, 2, 5
    pos = rng.integers(0, 16, rows).astype(np.int32)
    q_pe = random_array(rng, (rows, heads, rope), "bfloat16")
    k_pe = random_array(rng, (rows, rope), "bfloat16")
    kv_c = (rng.standard_normal((rows, rank)) * 5).astype(ml_dtypes.bfloat16)
    cs = rng.uniform(-1, 1, (16, rope)).astype(np.float32)
    sl = np.array([nb * bs - 1, -1, 3, 0], np.int64)
    t = len(sl)
    cc0, pc0 = (rng.integers(0, 0x70, (nb, bs, n), dtype=np.uint8) for n in (rank, rope))
    cc, pc = fp8_tensor(cc0, code), fp8_tensor(pc0, code)
    ins = [Tensor(pos), to_ms(q_pe), to_ms(k_pe), to_ms(kv_c), Tensor(cs)]
    s0 = rng.uniform(1, 2, (nb, bs, 1)).astype(np.float32)
    if quant == "static":
        scs, sps = rng.uniform(0.001, 0.02, rank).astype(np.float32), np.float32(0.01)
        kw = dict(kv_c_scale=Tensor(scs), k_pe_scale=Tensor(sps))
    else:
        csc, psc = Parameter(Tensor(s0), name=f"mc{code}{quant}"), Parameter(Tensor(s0.copy()), name=f"mp{code}{quant}")
        kw = dict(kv_c_scale_cache=csc, k_pe_scale_cache=psc)
    out = ms_kvcache.rope_concat_and_cache_mla(*ins, cc, pc, Tensor(sl), is_neox_style=False, **kw)
    fcc = Tensor(np.zeros((nb, bs, rank), np.float32), dtype=ms.bfloat16)
    fpc = Tensor(np.zeros((nb, bs, rope), np.float32), dtype=ms.bfloat16)
    ref = ms_kvcache.rope_concat_and_cache_mla(*ins, fcc, fpc, Tensor(sl), is_neox_style=False)
    assert len(out) == len(ref) == 3
    for a, b in zip(out, ref):  # the returned rows: equal to the unquantized op's
        np.testing.assert_array_equal(to_np(a), to_np(b))
    k_pe_out, kv_c_out = to_np(out[1]).astype(np.float32), to_np(out[2]).astype(np.float32)
    assert k_pe_out.shape == (rows, rope) and kv_c_out.shape == (rows, rank)
    for name, x, c0, got, si in (("kv_c", kv_c_out[:t], cc0, fp8_codes(cc), 0), ("k_pe", k_pe_out[:t], pc0,
                                                                                  fp8_codes(pc), 1)):
        if quant == "static":
            s = (scs, sps)[si]
        else:
            s = dyn_scale64(x, code)
            exp_s, _ = expect_rows(s0, s, np.zeros(s.shape, bool), sl)
            np.testing.assert_array_equal((csc, psc)[si].asnumpy(), exp_s, err_msg=f"{code} {name} scales")
        r, amb = fp8_ref(x, s, code)
        exp, amb = expect_rows(c0, r, amb, sl)
        assert_codes(got, exp, amb, f"{code} rope mla {quant} {name}")
