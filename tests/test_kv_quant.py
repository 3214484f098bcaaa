"""Quantized KV-cache writes (issue 17; the cpu backend): reshape_and_cache(_merged),
concat_and_cache_mla and the fused RoPE writers with int8 / float8 caches, static (per tensor, per head,
per channel, int8 offsets) and dynamic per-token scales, against an independent numpy model of the
documented formulas (docs/quantization.md); PyNative, GRAPH_MODE and @ms.jit; slot -1, padding rows, zero
tokens, the last slot, saturation, round-half-even; the quant -> dequant round trip within its bound;
dequantize_kv_cache; bad input; on sim / ascend: float8 caches refused (no AscendC Cast to fp8) and a spec
marked kernel-pending refused (none is: every quantizing op has its AscendC kernel, run through the emulation
in tests/test_*_quant_sim.py). The float64 reference of the integer codes and the float8 MLA / RoPE paths:
tests/test_kv_quant_f64.py."""
import itertools
import sys
from pathlib import Path

import ml_dtypes
import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_kvcache
from ms_kvcache._formats import ND_CACHE_LAYOUTS as ND_LAYOUTS  # NZ: tests/test_nz_layout.py
from ms_kvcache import _spec
from ms_kvcache.ops import _quant

from conftest import MODES, NP_DTYPES as NP_DTYPES_, ms_mode, random_array, to_ms, to_np
from copy_util import fast_path, random_slots, run

FLOATS = ("float16", "bfloat16", "float32")
CODE_MAX = {"int8": 127.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
FP8_NP = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
_ids = itertools.count()


# --------------------------------------------------------------------------- the numpy model
def encode(v, code):
    """Codes of fp32 values v (already ``x / scale - offset``): int8 round half to even, NaN -> 0,
    saturate to [-128, 127]; float8 saturate to +-max, then round half to even (ml_dtypes' cast)."""
    v = np.asarray(v, np.float32)
    if code == "int8":
        v = np.where(np.isnan(v), np.float32(0), v)
        return np.clip(np.rint(v), -128, 127).astype(np.int8)
    m = np.float32(CODE_MAX[code])
    return np.clip(v, -m, m).astype(FP8_NP[code]).view(np.uint8)


def quant_rows(x, code, scale=None, offset=None):
    """Static: rows x [..., H, D] (any float dtype) quantized with a broadcastable fp32 scale / offset,
    each step one fp32 operation as documented."""
    v = np.asarray(x, np.float32) / np.asarray(scale, np.float32)
    if offset is not None:
        v = v - np.asarray(offset, np.float32)
    return encode(v, code)


def quant_dynamic(x, code):
    """Dynamic: per row of the last axis, scale = max|x| / code_max (fp32; NaN ignored), codes of x /
    scale; a zero row gets scale 0 and codes 0, a row with an infinite element scale inf and codes 0.
    Returns (codes, scales[..., 1])."""
    x = np.asarray(x, np.float32)
    s = (np.nanmax(np.abs(x), axis=-1, keepdims=True) / np.float32(CODE_MAX[code])).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = encode(x / s, code)
    q = np.where((s == 0) | np.isinf(s), np.zeros((), q.dtype), q)  # a zero or infinite row: codes 0
    return q, s


def place(cache, rows, slots, layout):
    """cache (numpy, a copy is returned) with token t's row [H, D] (or [hidden] for a 3-d cache) at
    slots[t]; slot < 0 skipped."""
    cache = cache.copy()
    bs = cache.shape[2] if (layout == "BNSD" and cache.ndim == 4) else cache.shape[1]
    for t, s in enumerate(np.asarray(slots, np.int64)):
        if s < 0:
            continue
        b, o = divmod(int(s), bs)
        if cache.ndim == 4 and layout == "BNSD":
            cache[b, :, o] = rows[t]
        else:
            cache[b, o] = rows[t]
    return cache


def cache_shape(layout, nb, bs, h, d):
    return (nb, bs, h, d) if layout == "BSND" else (nb, h, bs, d)


def codes_of(a):
    """Raw codes of a cache read back (int8 or the uint8 view of float8) for a bit comparison."""
    return np.ascontiguousarray(a).view(np.uint8)


def fp8_tensor(codes_u8, code):
    """A float8 Tensor holding the given uint8 codes (MindSpore's CPU can neither Cast to float8 nor
    build a float8 Parameter: the bytes are viewed). MindSpore 2.7's Tensor.view takes only a shape, so
    there the test skips: no float8 tensor can be built on its CPU."""
    t = Tensor(np.ascontiguousarray(codes_u8, np.uint8))
    try:
        return t.view(getattr(ms, code))
    except TypeError:
        if tuple(int(x) for x in ms.__version__.split(".")[:2]) < (2, 8):
            pytest.skip(f"MindSpore {ms.__version__}: Tensor.view(dtype) does not exist (2.8+), so no {code} "
                        "tensor can be built on CPU")
        raise


def fp8_codes(t):
    return t.view(ms.uint8).asnumpy()


def rand_scale(rng, shape, lo=0.005, hi=0.05):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


# --------------------------------------------------------------------------- GQA writes, int8
GRANULARITY = ("tensor", "head", "channel_offset")


def static_scales(rng, gran, h, d):
    if gran == "tensor":
        return rand_scale(rng, ()), rand_scale(rng, ()), None, None
    if gran == "head":
        return rand_scale(rng, (h,)), rand_scale(rng, (h,)), None, None
    return (rand_scale(rng, (h, d)), rand_scale(rng, (h, d)), rng.uniform(-3, 3, (h, d)).astype(np.float32),
            rng.uniform(-3, 3, (h, d)).astype(np.float32))


def bcast(s, h, d):
    """A static scale / offset as stored, broadcast against rows [T, H, D]."""
    if s is None:
        return None
    return s.reshape(h, 1) if s.shape == (h,) else s


@pytest.mark.parametrize("layout", ND_LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
def test_int8_static(mode, layout, rng):
    """reshape_and_cache (per channel with offsets, int64 slots) and reshape_and_cache_merged (per head or
    per tensor, int32 slots) in one call each: padding rows, slots -1/-2, the last slot and slot 0;
    untouched rows keep their old codes."""
    nb, bs, h, d = 3, 8, 2, 12
    dt_a, dt_b = ("float16", "bfloat16") if layout == "BSND" else ("float32", "float16")
    gran_b = "head" if layout == "BSND" else "tensor"
    sl_a = random_slots(rng, 7, nb * bs, "int64", pad=2, must_include=(nb * bs - 1, 0))
    sl_b = random_slots(rng, 6, nb * bs, "int32", pad=1, must_include=(nb * bs - 1,))
    k_a, v_a = (random_array(rng, (9, h, d), dt_a) for _ in range(2))
    k_b, v_b = (random_array(rng, (8, h * d), dt_b) for _ in range(2))
    kc, vc = (rng.integers(-128, 128, cache_shape(layout, nb, bs, h, d), dtype=np.int8) for _ in range(2))
    mc = rng.integers(-128, 128, (2,) + cache_shape(layout, nb, bs, h, d), dtype=np.int8)
    ks_a, vs_a, ko_a, vo_a = static_scales(rng, "channel_offset", h, d)
    ks_b, vs_b, _, _ = static_scales(rng, gran_b, h, d)

    def call(caches, k1, v1, k2, v2, s1, s2, a, b, c, e, f, g):
        ms_kvcache.reshape_and_cache(k1, v1, caches[0], caches[1], s1, layout, k_scale=a, v_scale=b, k_offset=c,
                                     v_offset=e)
        ms_kvcache.reshape_and_cache_merged(k2, v2, caches[2], s2, layout, k_scale=f, v_scale=g)

    after, reads, _ = run(mode, call, [kc, vc, mc], [k_a, v_a, k_b, v_b, sl_a, sl_b, ks_a, vs_a, ko_a, vo_a, ks_b,
                                                     vs_b])
    t_a, t_b = len(sl_a), len(sl_b)
    e_kc = place(kc, quant_rows(k_a[:t_a], "int8", ks_a, ko_a), sl_a, layout)
    e_vc = place(vc, quant_rows(v_a[:t_a], "int8", vs_a, vo_a), sl_a, layout)
    kb = k_b[:t_b].reshape(t_b, h, d)
    vb = v_b[:t_b].reshape(t_b, h, d)
    e_mc = np.stack([place(mc[0], quant_rows(kb, "int8", bcast(ks_b, h, d)), sl_b, layout),
                     place(mc[1], quant_rows(vb, "int8", bcast(vs_b, h, d)), sl_b, layout)])
    for i, (a, e) in enumerate(zip(after, (e_kc, e_vc, e_mc))):
        np.testing.assert_array_equal(a, e, err_msg=f"{mode} {layout} cache {i}")
    if reads is not None:
        for i, (r, e) in enumerate(zip(reads, (e_kc, e_vc, e_mc))):
            np.testing.assert_array_equal(r, e.astype(np.float32), err_msg=f"{mode} {layout} in-graph read {i}")


@pytest.mark.parametrize("layout", ND_LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
def test_int8_dynamic(mode, layout, rng):
    """Dynamic per-token scales: reshape_and_cache with [nb, bs, H, 1]-style scale caches and
    reshape_and_cache_merged with the 3-d [nb, bs, H] form; the scale caches' rows of slot -1 and of
    unwritten slots keep their old values; an all-zero token-head gets scale 0 and codes 0."""
    nb, bs, h, d = 3, 4, 3, 16
    dt = "bfloat16" if layout == "BSND" else "float32"
    sl = random_slots(rng, 6, nb * bs, "int32", pad=2, must_include=(nb * bs - 1,))
    k, v = (random_array(rng, (7, h, d), dt) for _ in range(2))
    k[np.nonzero(sl >= 0)[0][0], 1] = 0  # a zero head of a written token
    kc, vc = (rng.integers(-128, 128, cache_shape(layout, nb, bs, h, d), dtype=np.int8) for _ in range(2))
    mc = rng.integers(-128, 128, (2,) + cache_shape(layout, nb, bs, h, d), dtype=np.int8)
    sc4 = cache_shape(layout, nb, bs, h, 1)
    ksc, vsc = rand_scale(rng, sc4, 1, 2), rand_scale(rng, sc4, 1, 2)
    mksc, mvsc = rand_scale(rng, sc4[:3], 1, 2), rand_scale(rng, sc4[:3], 1, 2)

    def call(caches, k1, v1, s1):
        ms_kvcache.reshape_and_cache(k1, v1, caches[0], caches[1], s1, layout, k_scale_cache=caches[3],
                                     v_scale_cache=caches[4])
        ms_kvcache.reshape_and_cache_merged(k1, v1, caches[2], s1, layout, k_scale_cache=caches[5],
                                            v_scale_cache=caches[6])

    after, reads, same_ptr = run(mode, call, [kc, vc, mc, ksc, vsc, mksc, mvsc], [k, v, sl])
    assert same_ptr
    t = len(sl)
    qk, sk = quant_dynamic(k[:t], "int8")
    qv, sv = quant_dynamic(v[:t], "int8")
    assert (sk == 0).any()
    exp = [place(kc, qk, sl, layout), place(vc, qv, sl, layout),
           np.stack([place(mc[0], qk, sl, layout), place(mc[1], qv, sl, layout)]),
           place(ksc, sk, sl, layout), place(vsc, sv, sl, layout),
           place(mksc[..., None], sk, sl, layout)[..., 0], place(mvsc[..., None], sv, sl, layout)[..., 0]]
    for i, (a, e) in enumerate(zip(after, exp)):
        np.testing.assert_array_equal(a, e, err_msg=f"{mode} {layout} output {i}")
    if reads is not None:
        for i, (r, e) in enumerate(zip(reads, exp)):
            np.testing.assert_array_equal(r, e.astype(np.float32), err_msg=f"{mode} {layout} in-graph read {i}")


@pytest.mark.parametrize("fast", (True, False), ids=("fast_path", "ops_custom"))
def test_int8_edges_pynative(fast, rng):
    """Saturation (|x / scale| far beyond 127), exact halves (round half to even: 0.5 -> 0, 1.5 -> 2,
    -2.5 -> -2), NaN -> 0, offsets moving values into saturation; zero tokens write nothing (scale
    caches too); both PyNative paths (the pyboost fast path and ops.Custom)."""
    nb, bs, h, d = 2, 4, 1, 8
    halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5], np.float32)
    sat = np.array([1e4, -1e4, 129.0, -129.0, 127.49, -128.49, np.nan, 0.0], np.float32)
    scale = np.float32(0.25)  # a power of two: x / scale is exact
    k = np.stack([halves * scale, sat * scale]).reshape(2, h, d).astype(np.float32)
    v = -k
    sl = np.array([nb * bs - 1, 0], np.int64)
    kc, vc = (np.zeros((nb, bs, h, d), np.int8) for _ in range(2))
    off = np.float32(-0.5)  # x / s - (-0.5): the halves become integers, 127.5 + 0.5 saturates

    def call(caches, k1, v1, s1, sc, of):
        ms_kvcache.reshape_and_cache(k1, v1, caches[0], caches[1], s1, k_scale=sc, v_scale=sc, k_offset=of,
                                     v_offset=of)

    with fast_path(fast):
        after, _, _ = run("pynative", call, [kc, vc], [k, v, sl, np.array(scale), np.array(off)])
    got_k = after[0][nb - 1, bs - 1, 0]
    np.testing.assert_array_equal(got_k, [1, 2, 3, 0, -1, -2, 127, 127])  # x/s + 0.5: exact integers, saturated
    np.testing.assert_array_equal(after[0][0, 0, 0], [127, -128, 127, -128, 127, -128, 0, 0])  # NaN -> 0; 0.5 -> 0
    np.testing.assert_array_equal(after[0], place(kc, quant_rows(k, "int8", scale, off), sl, "BSND"))
    np.testing.assert_array_equal(after[1], place(vc, quant_rows(v, "int8", scale, off), sl, "BSND"))
    # no offset: round half to even on the exact halves
    with fast_path(fast):
        after, _, _ = run("pynative", lambda c, k1, v1, s1, sc: ms_kvcache.reshape_and_cache(
            k1, v1, c[0], c[1], s1, k_scale=sc, v_scale=sc), [kc, vc], [k, v, sl, np.array(scale)])
    np.testing.assert_array_equal(after[0][nb - 1, bs - 1, 0], [0, 2, 2, 0, -2, -2, 126, 127])
    # zero tokens: nothing written, the scale caches included
    ksc = rand_scale(rng, (nb, bs, h, 1))
    with fast_path(fast):
        after, _, _ = run("pynative", lambda c, k1, v1, s1: ms_kvcache.reshape_and_cache(
            k1, v1, c[0], c[1], s1, k_scale_cache=c[2], v_scale_cache=c[3]),
            [kc + 5, vc + 7, ksc, ksc + 1], [k, v, np.zeros((0,), np.int32)])
    for a, e in zip(after, [kc + 5, vc + 7, ksc, ksc + 1]):
        np.testing.assert_array_equal(a, e)


def _near_steps(scale, offset, ulps=3):
    """float32 x with x / scale - offset at and within a few ulps of every step of the int8 code (the
    half-integers -128.5 .. 127.5), where a rounding or saturation slip would change it."""
    centre = ((np.arange(-129, 129, dtype=np.float64) + 0.5 + offset) * scale).astype(np.float32)
    out = [centre]
    up, down = centre.copy(), centre.copy()
    for _ in range(ulps):
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
        out += [up, down]
    return np.concatenate(out)


def test_int8_vector_paths_exact_at_every_step(rng):
    """The cpu kernel's int8 vector paths (AVX-512: 16 lanes, masked min, rounding convert, saturating
    narrow; AVX2: 8 lanes; cpu_kernel/quant_body.inl) give the fp32 division's codes at and a few ulps
    around every rounding step -128.5 .. 127.5, beyond them (saturation), for inexact scales (0.1, 3,
    0.0137...), large offsets cancelling large quotients, NaN / +-inf, per tensor and per channel, and
    dynamic scales."""
    h, d = 2, 64  # head_size a multiple of 8: every element on the vector path
    for scale, offset in ((0.1, 0.0), (3.0, 0.0), (0.0137, 0.3), (1e-3, -1e6 + 17.25), (7.7e-5, 2.5)):
        x = _near_steps(scale, offset)
        x = np.concatenate([x, np.array([np.nan, np.inf, -np.inf, 0.0], np.float32)])
        x = np.concatenate([x, rng.permutation(x)[: (-len(x)) % (h * d)]])
        rows = rng.permutation(x).reshape(-1, h, d)
        t = rows.shape[0]
        nb, bs = 2, t
        kc = np.zeros((nb, bs, h, d), np.int8)
        sl = rng.permutation(nb * bs)[:t].astype(np.int64)
        sc, of = np.float32(scale), np.float32(offset)
        after, _, _ = run("pynative", lambda c, k1, s1, a, b: ms_kvcache.reshape_and_cache(
            k1, k1, c[0], c[1], s1, k_scale=a, v_scale=a, k_offset=b, v_offset=b), [kc, kc.copy()],
            [rows, sl, np.array(sc), np.array(of)])
        np.testing.assert_array_equal(after[0], place(kc, quant_rows(rows, "int8", sc, of), sl, "BSND"),
                                      err_msg=f"scale {scale} offset {offset}")
        # per channel: every channel its own inexact scale, no offset
        pc = (np.float32(scale) * (1 + rng.random((h, d)).astype(np.float32))).astype(np.float32)
        xr = (rows / np.float32(scale) * pc).astype(np.float32)
        after, _, _ = run("pynative", lambda c, k1, s1, a: ms_kvcache.reshape_and_cache(
            k1, k1, c[0], c[1], s1, k_scale=a, v_scale=a), [kc, kc.copy()], [xr, sl, pc])
        np.testing.assert_array_equal(after[0], place(kc, quant_rows(xr, "int8", pc), sl, "BSND"),
                                      err_msg=f"per channel, scale ~{scale}")
    # dynamic: rows whose max makes s = max / 127 inexact, the others near its steps
    base = _near_steps(np.float32(1.7) / np.float32(127), 0.0, ulps=1)[: 8 * 64 - 1]
    rows = np.concatenate([base, [np.float32(1.7)]]).astype(np.float32)
    rows = np.stack([rng.permutation(rows) for _ in range(4)]).reshape(-1, 1, 64)
    t = rows.shape[0]
    kc, ksc = np.zeros((2, t, 1, 64), np.int8), np.zeros((2, t, 1, 1), np.float32)
    sl = rng.permutation(2 * t)[:t].astype(np.int64)
    after, _, _ = run("pynative", lambda c, k1, s1: ms_kvcache.reshape_and_cache(
        k1, k1, c[0], c[1], s1, k_scale_cache=c[2], v_scale_cache=c[3]), [kc, kc.copy(), ksc, ksc.copy()],
        [rows, sl])
    want, ws = quant_dynamic(rows, "int8")
    np.testing.assert_array_equal(after[0], place(kc, want, sl, "BSND"))
    np.testing.assert_array_equal(after[2], place(ksc, ws, sl, "BSND"))


@pytest.mark.parametrize("dt", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("d", (64, 128, 80))
def test_int8_dynamic_one_pass_heads(d, dt, rng):
    """Dynamic int8 scales of the usual head sizes (64, 128: the cpu kernel's one-pass AVX-512 path keeps a
    head in registers between its abs-max and the division, cpu_kernel/quant_body.inl DynamicInt8Head; 80:
    the two-pass path) against the numpy model: codes and scales bit for bit, with NaN elements (ignored by
    the max, code 0), +-inf (scale inf, codes 0), an all-zero head (scale 0, codes 0), a head whose max is
    a negative element, and rows whose max makes max / 127 inexact."""
    t, h = 9, 4
    x = (rng.standard_normal((t, h, d)) * rng.uniform(0.01, 30, (t, h, 1))).astype(np.float32)
    x[0, 0, [3, d - 1]] = np.nan
    x[1, 1, 5] = np.inf
    x[2, 2, 7] = -np.inf
    x[3, 3] = 0
    x[4, 0, d // 2] = -1e3
    x[5, 1] = np.linspace(-1.7, 1.7, d, dtype=np.float32)
    x = x.astype(NP_DTYPES_[dt])
    nb, bs = 4, 4
    kc = rng.integers(-128, 128, (nb, bs, h, d), dtype=np.int8)
    ksc = rand_scale(rng, (nb, bs, h, 1), 1, 2)
    sl = rng.permutation(nb * bs)[:t].astype(np.int64)
    after, _, _ = run("pynative", lambda c, k1, s1: ms_kvcache.reshape_and_cache(
        k1, k1, c[0], c[1], s1, k_scale_cache=c[2], v_scale_cache=c[3]), [kc, kc.copy(), ksc, ksc.copy()],
        [x, sl])
    with np.errstate(invalid="ignore"):
        want, ws = quant_dynamic(x, "int8")
    assert ws[3, 3, 0] == 0 and np.isinf(ws[1, 1, 0]) and np.isinf(ws[2, 2, 0]) and np.isfinite(ws[0, 0, 0])
    np.testing.assert_array_equal(after[0], place(kc, want, sl, "BSND"), err_msg=f"codes d={d} {dt}")
    np.testing.assert_array_equal(after[2].view(np.uint32), place(ksc, ws, sl, "BSND").view(np.uint32),
                                  err_msg=f"scales d={d} {dt}")


@pytest.mark.parametrize("mode", ("graph",))
def test_int8_edges_graph(mode, rng):
    """GRAPH_MODE: slot -1 rows (and their scale-cache rows) untouched, a slot beyond the cache skipped
    (graph mode does not raise), zero tokens write nothing."""
    nb, bs, h, d = 2, 4, 2, 8
    k, v = (random_array(rng, (4, h, d), "float16") for _ in range(2))
    sl = np.array([-1, nb * bs - 1, nb * bs + 3, 2], np.int32)
    kc, vc = (rng.integers(-128, 128, (nb, bs, h, d), dtype=np.int8) for _ in range(2))
    ksc, vsc = rand_scale(rng, (nb, bs, h, 1)), rand_scale(rng, (nb, bs, h, 1))

    def call(c, k1, v1, s1):
        ms_kvcache.reshape_and_cache(k1, v1, c[0], c[1], s1, k_scale_cache=c[2], v_scale_cache=c[3])

    after, _, _ = run(mode, call, [kc, vc, ksc, vsc], [k, v, sl])
    keep = np.array([-1, nb * bs - 1, -1, 2], np.int64)
    qk, sk = quant_dynamic(k, "int8")
    qv, sv = quant_dynamic(v, "int8")
    exp = [place(kc, qk, keep, "BSND"), place(vc, qv, keep, "BSND"), place(ksc, sk, keep, "BSND"),
           place(vsc, sv, keep, "BSND")]
    for a, e in zip(after, exp):
        np.testing.assert_array_equal(a, e)
    after, _, _ = run(mode, call, [kc, vc, ksc, vsc], [k[:1], v[:1], np.zeros((0,), np.int32)])
    for a, e in zip(after, [kc, vc, ksc, vsc]):
        np.testing.assert_array_equal(a, e)


# --------------------------------------------------------------------------- float8 (PyNative)
@pytest.mark.parametrize("code", ("float8_e4m3fn", "float8_e5m2"))
def test_fp8_static_and_dynamic(code, rng):
    """float8 caches (PyNative: MindSpore 2.10 CPU has no float8 Parameter, so no graph mode): static
    per-tensor / per-channel scales with saturation at +-max (values far beyond), subnormal codes, and
    dynamic per-token scales (max|x| / 448 or 57344) into the merged cache."""
    nb, bs, h, d = 2, 4, 2, 8
    m = CODE_MAX[code]
    sl = np.array([nb * bs - 1, -1, 0, 5], np.int32)
    k = (rng.standard_normal((5, h, d)) * 2).astype(np.float32)
    k[0, 0, :4] = [4 * m * 0.01, -4 * m * 0.01, 1e-7, -3e-6]  # saturated (scale 0.01) and subnormal codes
    v = random_array(rng, (5, h, d), "bfloat16")
    ks, vs = np.float32(0.01), rand_scale(rng, (h, d))
    kc0, vc0 = (rng.integers(0, 0x70, (nb, bs, h, d), dtype=np.uint8) for _ in range(2))
    kc, vc = fp8_tensor(kc0, code), fp8_tensor(vc0, code)
    kb = k.astype(ml_dtypes.bfloat16)
    ms_kvcache.reshape_and_cache(to_ms(kb), to_ms(v), kc, vc, Tensor(sl), k_scale=Tensor(ks), v_scale=Tensor(vs))
    t = len(sl)
    np.testing.assert_array_equal(fp8_codes(kc), place(kc0, quant_rows(kb[:t], code, ks), sl, "BSND"))
    np.testing.assert_array_equal(fp8_codes(vc), place(vc0, quant_rows(v[:t], code, vs), sl, "BSND"))
    sat = fp8_codes(kc)[nb - 1, bs - 1, 0, :2].view(FP8_NP[code]).astype(np.float32)
    np.testing.assert_array_equal(sat, [m, -m])
    # dynamic, merged cache, BNSD
    mc0 = rng.integers(0, 0x70, (2, nb, h, bs, d), dtype=np.uint8)
    mc = fp8_tensor(mc0, code)
    ksc0, vsc0 = rand_scale(rng, (nb, h, bs, 1)), rand_scale(rng, (nb, h, bs, 1))
    ksc, vsc = Parameter(Tensor(ksc0), name="f8ksc"), Parameter(Tensor(vsc0), name="f8vsc")
    vf = v.astype(np.float32)
    ms_kvcache.reshape_and_cache_merged(Tensor(k), Tensor(vf), mc, Tensor(sl), "BNSD", k_scale_cache=ksc,
                                        v_scale_cache=vsc)
    qk, sk = quant_dynamic(k[:t], code)
    qv, sv = quant_dynamic(vf[:t], code)
    got = fp8_codes(mc)
    np.testing.assert_array_equal(got[0], place(mc0[0], qk, sl, "BNSD"))
    np.testing.assert_array_equal(got[1], place(mc0[1], qv, sl, "BNSD"))
    np.testing.assert_array_equal(ksc.asnumpy(), place(ksc0, sk, sl, "BNSD"))
    np.testing.assert_array_equal(vsc.asnumpy(), place(vsc0, sv, sl, "BNSD"))


@pytest.mark.parametrize("code", ("float8_e4m3fn", "float8_e5m2"))
@pytest.mark.parametrize("d", (8, 128, 13))
def test_fp8_dynamic_row_with_an_infinite_element(code, d, rng):
    """docs/quantization.md: a dynamic row with an infinite element gets scale inf and codes 0 (it reads
    back NaN, every element). The old kernel wrote the +-inf element's code as x / s = inf / inf = NaN, with
    the sign bit set (0xff / 0xfe), the finite ones 0: the doc and the codes disagreed. Both +inf and
    -inf, with a NaN and a huge finite value in other heads, every head size path (8-lane, tail)."""
    t, h = 4, 3
    x = (rng.standard_normal((t, h, d)) * 3).astype(np.float32)
    x[0, 0, d // 2] = np.inf
    x[1, 2, 0] = -np.inf
    x[2, 1, d - 1] = np.nan
    x[3, 0, 1 % d] = 3e38
    nb, bs = 2, 4
    kc0 = rng.integers(0, 0x70, (nb, bs, h, d), dtype=np.uint8)
    kc, vc = fp8_tensor(kc0, code), fp8_tensor(kc0.copy(), code)
    ksc0 = rand_scale(rng, (nb, bs, h, 1))
    ksc, vsc = Parameter(Tensor(ksc0), name=f"f8i{next(_ids)}"), Parameter(Tensor(ksc0.copy()), name=f"f8i{next(_ids)}")
    sl = np.array([5, 0, 7, 2], np.int64)
    ms_kvcache.reshape_and_cache(Tensor(x), Tensor(x), kc, vc, Tensor(sl), k_scale_cache=ksc, v_scale_cache=vsc)
    got, sc = fp8_codes(kc), ksc.asnumpy()
    assert np.isinf(sc[1, 1, 0, 0]) and np.isinf(sc[0, 0, 2, 0]), "scale inf"  # slots 5 and 0
    assert not got[1, 1, 0].any() and not got[0, 0, 2].any(), "codes 0 for the infinite rows"
    with np.errstate(invalid="ignore", over="ignore"):
        want, ws = quant_dynamic(x, code)
    np.testing.assert_array_equal(got, place(kc0, want, sl, "BSND"))
    np.testing.assert_array_equal(sc.view(np.uint32), place(ksc0, ws, sl, "BSND").view(np.uint32))
    # read back: NaN for every element of an infinite row, finite elsewhere
    back = ms_kvcache.dequantize_kv_cache(kc, scale_cache=ksc).asnumpy()
    assert np.isnan(back[1, 1, 0]).all() and np.isnan(back[0, 0, 2]).all()
    assert np.isfinite(back[0, 2]).all()  # slot 2: 3e38 is finite


# --------------------------------------------------------------------------- MLA
@pytest.mark.parametrize("mode", MODES)
def test_mla_int8(mode, rng):
    """concat_and_cache_mla: static (kv_c per channel with offsets, k_pe per tensor; float16) and dynamic
    (one scale per token and plane, [nb, bs, 1]; bfloat16 k_pe given as [T', 1, rope_dim])."""
    nb, bs, rank, rope = 3, 4, 24, 8
    sl = random_slots(rng, 6, nb * bs, "int64", pad=2, must_include=(nb * bs - 1,))
    c1, p1 = random_array(rng, (8, rank), "float16"), random_array(rng, (8, rope), "float16")
    c2, p2 = random_array(rng, (7, rank), "bfloat16"), random_array(rng, (7, 1, rope), "bfloat16")
    cc1, pc1, cc2, pc2 = (rng.integers(-128, 128, (nb, bs, n), dtype=np.int8) for n in (rank, rope, rank, rope))
    csc, psc = rand_scale(rng, (nb, bs, 1), 1, 2), rand_scale(rng, (nb, bs, 1), 1, 2)
    cs, ps, co, po = (rand_scale(rng, (rank,)), rand_scale(rng, ()), rng.uniform(-2, 2, (rank,)).astype(np.float32),
                      np.float32(0.75))

    def call(c, x1, y1, x2, y2, s1, a, b, e, f):
        ms_kvcache.concat_and_cache_mla(x1, y1, c[0], c[1], s1, kv_c_scale=a, k_pe_scale=b, kv_c_offset=e,
                                        k_pe_offset=f)
        ms_kvcache.concat_and_cache_mla(x2, y2, c[2], c[3], s1, kv_c_scale_cache=c[4], k_pe_scale_cache=c[5])

    after, reads, _ = run(mode, call, [cc1, pc1, cc2, pc2, csc, psc], [c1, p1, c2, p2, sl, cs, ps, co, po])
    t = len(sl)
    qc, sc = quant_dynamic(c2[:t], "int8")
    qp, sp = quant_dynamic(p2[:t, 0], "int8")
    exp = [place(cc1, quant_rows(c1[:t], "int8", cs, co), sl, "BSND"),
           place(pc1, quant_rows(p1[:t], "int8", ps, po), sl, "BSND"),
           place(cc2, qc, sl, "BSND"), place(pc2, qp, sl, "BSND"), place(csc, sc, sl, "BSND"),
           place(psc, sp, sl, "BSND")]
    for i, (a, e) in enumerate(zip(after, exp)):
        np.testing.assert_array_equal(a, e, err_msg=f"{mode} output {i}")
    if reads is not None:
        for i, (r, e) in enumerate(zip(reads, exp)):
            np.testing.assert_array_equal(r, e.astype(np.float32), err_msg=f"{mode} in-graph read {i}")


# --------------------------------------------------------------------------- fused RoPE writes
def _rope_inputs(rng, dtype, rows=6, heads=4, kv_heads=2, d=16, max_pos=32):
    pos = rng.integers(0, max_pos, rows).astype(np.int64)
    q = random_array(rng, (rows, heads, d), dtype)
    k = random_array(rng, (rows, kv_heads, d), dtype)
    v = random_array(rng, (rows, kv_heads, d), dtype)
    cs = rng.uniform(-1, 1, (max_pos, d)).astype(np.float32)
    return pos, q, k, v, cs


@pytest.mark.parametrize("mode", MODES)
def test_rope_reshape_and_cache_quant(mode, rng):
    """rope_reshape_and_cache (static per-channel int8, BNSD) and rope_reshape_and_cache_merged (dynamic,
    BSND): query_out / key_out equal the unquantized op's outputs bit for bit, and the caches hold the
    codes of the returned key_out and of value (quantization after the rotation)."""
    nb, bs, kvh, d = 3, 4, 2, 16
    pos, q, k, v, cs = _rope_inputs(rng, "float16")
    sl = random_slots(rng, 5, nb * bs, "int32", pad=1, must_include=(nb * bs - 1,))
    kc, vc = (rng.integers(-128, 128, (nb, kvh, bs, d), dtype=np.int8) for _ in range(2))
    mc = rng.integers(-128, 128, (2, nb, bs, kvh, d), dtype=np.int8)
    fkc, fvc = np.zeros((nb, kvh, bs, d), np.float16), np.zeros((nb, kvh, bs, d), np.float16)
    ksc, vsc = rand_scale(rng, (nb, bs, kvh, 1)), rand_scale(rng, (nb, bs, kvh, 1))
    ks, vs = rand_scale(rng, (kvh, d)), rand_scale(rng, (kvh, d))

    def call(c, p1, q1, k1, v1, cs1, s1, a, b):
        ms_kvcache.rope_reshape_and_cache(p1, q1, k1, v1, cs1, c[0], c[1], s1, cache_layout="BNSD", k_scale=a,
                                          v_scale=b)
        ms_kvcache.rope_reshape_and_cache_merged(p1, q1, k1, v1, cs1, c[2], s1, k_scale_cache=c[3],
                                                 v_scale_cache=c[4])
        ms_kvcache.rope_reshape_and_cache(p1, q1, k1, v1, cs1, c[5], c[6], s1, cache_layout="BNSD")

    after, reads, _ = run(mode, call, [kc, vc, mc, ksc, vsc, fkc, fvc], [pos, q, k, v, cs, sl, ks, vs])
    t = len(sl)
    # the plain op's rotated key rows (read back from its float cache) give key_out's written rows
    kp = np.zeros((len(pos), kvh, d), np.float16)
    for i, s in enumerate(sl):
        if s >= 0:
            kp[i] = after[5][s // bs, :, s % bs]
    qk, sk = quant_dynamic(kp[:t], "int8")
    qv, sv = quant_dynamic(v[:t], "int8")
    exp = {0: place(kc, quant_rows(kp[:t], "int8", ks), sl, "BNSD"), 1: place(vc, quant_rows(v[:t], "int8", vs), sl,
                                                                               "BNSD"),
           2: np.stack([place(mc[0], qk, sl, "BSND"), place(mc[1], qv, sl, "BSND")]),
           3: place(ksc, sk, sl, "BSND"), 4: place(vsc, sv, sl, "BSND")}
    for i, e in exp.items():  # (rows of slot -1 tokens: kp is 0 there, and place() skips them)
        np.testing.assert_array_equal(after[i], e, err_msg=f"{mode} output {i}")
    if mode == "pynative":  # the returned rows: equal to the unquantized op's
        ins = [Tensor(x) for x in (pos, q, k, v, cs)]
        qp, kp2 = ms_kvcache.rope_reshape_and_cache(*ins, Tensor(fkc), Tensor(fvc), Tensor(sl), cache_layout="BNSD")
        qo, ko = ms_kvcache.rope_reshape_and_cache(*ins, Tensor(kc), Tensor(vc), Tensor(sl), cache_layout="BNSD",
                                                   k_scale=Tensor(ks), v_scale=Tensor(vs))
        qm, km = ms_kvcache.rope_reshape_and_cache_merged(*ins, Tensor(mc), Tensor(sl), k_scale_cache=Tensor(ksc),
                                                          v_scale_cache=Tensor(vsc))
        for name, a, b in (("query_out", qo, qp), ("key_out", ko, kp2), ("merged query_out", qm, qp),
                           ("merged key_out", km, kp2)):
            np.testing.assert_array_equal(to_np(a), to_np(b), err_msg=name)


@pytest.mark.parametrize("mode", ("pynative", "graph"))
def test_rope_concat_and_cache_mla_quant(mode, rng):
    """rope_concat_and_cache_mla with RMSNorm and dynamic int8 caches: the cached codes and scales are
    those of the returned kv_c_out and k_pe_out; the outputs equal the unquantized op's."""
    nb, bs, rank, rope, heads, rows, max_pos = 2, 4, 32, 16, 2, 5, 16
    pos = rng.integers(0, max_pos, rows).astype(np.int32)
    q_pe = random_array(rng, (rows, heads, rope), "bfloat16")
    k_pe = random_array(rng, (rows, rope), "bfloat16")
    kv_c = random_array(rng, (rows, rank), "bfloat16")
    cs = rng.uniform(-1, 1, (max_pos, rope)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, rank).astype(np.float32)
    sl = np.array([nb * bs - 1, -1, 3, 0], np.int64)
    cc, pc = (rng.integers(-128, 128, (nb, bs, n), dtype=np.int8) for n in (rank, rope))
    csc, psc = rand_scale(rng, (nb, bs, 1)), rand_scale(rng, (nb, bs, 1))
    fcc = np.zeros((nb, bs, rank), ml_dtypes.bfloat16)
    fpc = np.zeros((nb, bs, rope), ml_dtypes.bfloat16)

    def call(c, p1, q1, k1, c1, cs1, s1, w1):
        ms_kvcache.rope_concat_and_cache_mla(p1, q1, k1, c1, cs1, c[0], c[1], s1, is_neox_style=False,
                                             kv_c_norm_weight=w1, kv_c_scale_cache=c[2], k_pe_scale_cache=c[3])
        ms_kvcache.rope_concat_and_cache_mla(p1, q1, k1, c1, cs1, c[4], c[5], s1, is_neox_style=False,
                                             kv_c_norm_weight=w1)

    after, _, _ = run(mode, call, [cc, pc, csc, psc, fcc, fpc], [pos, q_pe, k_pe, kv_c, cs, sl, w])
    t = len(sl)
    c_out = np.zeros((t, rank), ml_dtypes.bfloat16)
    p_out = np.zeros((t, rope), ml_dtypes.bfloat16)
    for i, s in enumerate(sl):
        if s >= 0:
            c_out[i], p_out[i] = after[4][s // bs, s % bs], after[5][s // bs, s % bs]
    qc, sc = quant_dynamic(c_out, "int8")
    qp, sp = quant_dynamic(p_out, "int8")
    for i, e in enumerate([place(cc, qc, sl, "BSND"), place(pc, qp, sl, "BSND"), place(csc, sc, sl, "BSND"),
                           place(psc, sp, sl, "BSND")]):
        np.testing.assert_array_equal(after[i], e, err_msg=f"{mode} output {i}")


# --------------------------------------------------------------------------- round trip, dequantize
def test_round_trip_and_dequantize(rng):
    """quant -> dequantize_kv_cache vs the float64 input: int8 static |err| <= scale / 2 for values
    inside the code range (offsets included), int8 dynamic <= max|x| / 254, float8_e4m3fn dynamic
    relative <= 2^-4 (3 mantissa bits, round to nearest) or, in the subnormal range, <= scale * 2^-10;
    dequantize_kv_cache equals a direct numpy evaluation of (q + offset) * scale."""
    nb, bs, h, d = 2, 8, 2, 32
    x = rng.standard_normal((nb * bs, h, d)).astype(np.float32)
    x64 = x.astype(np.float64)
    sl = Tensor(np.arange(nb * bs, dtype=np.int32))
    zeros = lambda: Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name=f"rt{next(_ids)}")  # noqa: E731
    # int8 static, per channel, with offsets (BNSD)
    s = rand_scale(rng, (h, d), 0.03, 0.05)
    o = rng.uniform(-5, 5, (h, d)).astype(np.float32)
    kc = Parameter(Tensor(np.zeros((nb, h, bs, d), np.int8)), name="rt_bnsd")
    vc = Parameter(Tensor(np.zeros((nb, h, bs, d), np.int8)), name="rt_bnsd_v")
    ms_kvcache.reshape_and_cache(Tensor(x), Tensor(x), kc, vc, sl, "BNSD", k_scale=Tensor(s), v_scale=Tensor(s),
                                 k_offset=Tensor(o), v_offset=Tensor(o))
    deq = ms_kvcache.dequantize_kv_cache(kc, scale=Tensor(s), offset=Tensor(o), cache_layout="BNSD").asnumpy()
    assert deq.dtype == np.float32
    codes = kc.asnumpy().astype(np.float32)
    np.testing.assert_array_equal(deq, (codes + o[None, :, None, :]) * s[None, :, None, :])
    back = deq.transpose(0, 2, 1, 3).reshape(nb * bs, h, d).astype(np.float64)
    inside = np.abs(x64 / s - o) <= 127
    assert inside.mean() > 0.9
    err = np.abs(back - x64)[inside]
    bound = np.broadcast_to(s.astype(np.float64) / 2, x.shape)[inside] * (1 + 1e-5)
    assert (err <= bound).all(), float((err - bound).max())
    # per head static
    sh = rand_scale(rng, (h,), 0.03, 0.05)
    kc, vc = zeros(), zeros()
    ms_kvcache.reshape_and_cache(Tensor(x), Tensor(x), kc, vc, sl, k_scale=Tensor(sh), v_scale=Tensor(sh))
    deq = ms_kvcache.dequantize_kv_cache(kc, scale=Tensor(sh)).asnumpy().reshape(nb * bs, h, d)
    inside = np.abs(x64 / sh[:, None]) <= 127
    assert (np.abs(deq - x64)[inside] <= np.broadcast_to(sh[:, None] / 2, x.shape)[inside] * (1 + 1e-5)).all()
    # int8 dynamic
    kc, vc = zeros(), zeros()
    ksc = Parameter(Tensor(np.zeros((nb, bs, h, 1), np.float32)), name="rt_ksc")
    vsc = Parameter(Tensor(np.zeros((nb, bs, h, 1), np.float32)), name="rt_vsc")
    ms_kvcache.reshape_and_cache(Tensor(x), Tensor(x), kc, vc, sl, k_scale_cache=ksc, v_scale_cache=vsc)
    deq = ms_kvcache.dequantize_kv_cache(kc, scale_cache=ksc).asnumpy().reshape(nb * bs, h, d)
    amax = np.abs(x64).max(-1, keepdims=True)
    assert (np.abs(deq - x64) <= amax / 254 * (1 + 1e-5)).all()
    # float8_e4m3fn dynamic
    fc, fv = fp8_tensor(np.zeros((nb, bs, h, d), np.uint8), "float8_e4m3fn"), \
        fp8_tensor(np.zeros((nb, bs, h, d), np.uint8), "float8_e4m3fn")
    ms_kvcache.reshape_and_cache(Tensor(x), Tensor(x), fc, fv, sl, k_scale_cache=ksc, v_scale_cache=vsc)
    deq = ms_kvcache.dequantize_kv_cache(fc, scale_cache=ksc).asnumpy().reshape(nb * bs, h, d)
    sc = ksc.asnumpy().reshape(nb * bs, h, 1).astype(np.float64)
    np.testing.assert_allclose(sc, amax / 448, rtol=1e-6)
    err = np.abs(deq - x64)
    bound = np.maximum(np.abs(x64) * 2.0 ** -4, sc * 2.0 ** -10) * (1 + 1e-5)
    assert (err <= bound).all(), float((err - bound).max())


def test_dequantize_errors():
    c = Tensor(np.zeros((2, 4, 2, 8), np.int8))
    with pytest.raises(ValueError, match=r"dequantize_kv_cache: argument 'scale': expected exactly one"):
        ms_kvcache.dequantize_kv_cache(c)
    with pytest.raises(ValueError, match=r"argument 'scale': expected shape \[\] or \[1\] or \[2\] or \[2, 8\]"):
        ms_kvcache.dequantize_kv_cache(c, scale=Tensor(np.ones((8,), np.float32)))
    with pytest.raises(TypeError, match=r"argument 'scale': expected dtype float32, got float16"):
        ms_kvcache.dequantize_kv_cache(c, scale=Tensor(np.ones((), np.float16)))
    with pytest.raises(TypeError, match=r"argument 'cache': expected dtype int8, float8_e4m3fn or float8_e5m2"):
        ms_kvcache.dequantize_kv_cache(Tensor(np.zeros((2, 4, 8), np.float16)), scale=Tensor(np.float32(1)))
    with pytest.raises(ValueError, match=r"argument 'offset': expected None \(float8"):
        ms_kvcache.dequantize_kv_cache(fp8_tensor(np.zeros((2, 4, 8), np.uint8), "float8_e5m2"),
                                       scale=Tensor(np.float32(1)), offset=Tensor(np.float32(0)))



def test_dequantize_docstring_rules():
    """dequantize_kv_cache does what its docstring says: an MLA plane takes the scale cache [nb, bs, 1] only
    (the old code also took [nb, bs]), a 4-d plane also without the last axis; a static scale of 0 /
    negative / NaN / inf or a NaN / inf offset is refused as by the writes (the old code returned -0.0 / inf
    / NaN); cache_layout has no effect on a 3-d plane; a negative code times a scale-cache 0 is -0.0."""
    m = np.arange(-12, 12, dtype=np.int8).reshape(2, 3, 4)  # MLA plane [nb=2, bs=3, hidden=4]
    with pytest.raises(ValueError, match=r"argument 'scale_cache': expected shape \[2, 3, 1\] .*an MLA plane: "
                                         r"the trailing 1 is required\), got \[2, 3\]"):
        ms_kvcache.dequantize_kv_cache(Tensor(m), scale_cache=Tensor(np.ones((2, 3), np.float32)))
    sc = np.array([0.5, 0.0, 2.0, 1.0, 0.25, 4.0], np.float32).reshape(2, 3, 1)
    r = ms_kvcache.dequantize_kv_cache(Tensor(m), scale_cache=Tensor(sc)).asnumpy()
    np.testing.assert_array_equal(r, m.astype(np.float32) * sc)
    assert np.signbit(r[0, 1, 0]) and r[0, 1, 0] == 0  # code -8 times scale 0: -0.0, as documented
    for lay in ND_LAYOUTS:  # no head axis: the layout does not matter
        np.testing.assert_array_equal(ms_kvcache.dequantize_kv_cache(Tensor(m), scale=Tensor(np.float32(0.5)),
                                                                     cache_layout=lay).asnumpy(), m * np.float32(0.5))
    g = Tensor(np.zeros((2, 4, 3, 8), np.int8))
    assert ms_kvcache.dequantize_kv_cache(g, scale_cache=Tensor(np.ones((2, 4, 3), np.float32))).shape == (2, 4, 3, 8)
    for bad, shown in ((0.0, "0.0"), (-1.0, "-1.0"), (np.nan, "nan"), (np.inf, "inf")):
        with pytest.raises(ValueError, match=rf"argument 'scale': expected finite values > 0 \(as the quantized "
                                             rf"writes\), got {shown} at flat index 1"):
            ms_kvcache.dequantize_kv_cache(g, scale=Tensor(np.array([1.0, bad, 1.0], np.float32)))
    with pytest.raises(ValueError, match=r"argument 'offset': expected finite values \(as the quantized writes\), "
                                         r"got nan at flat index 0"):
        ms_kvcache.dequantize_kv_cache(g, scale=Tensor(np.float32(1)), offset=Tensor(np.float32(np.nan)))


# --------------------------------------------------------------------------- bad input, backends
def _gqa(nb=2, bs=4, h=2, d=8, t=3, cache_dtype=np.int8):
    rng = np.random.default_rng(1)
    k = Tensor(rng.standard_normal((t, h, d)).astype(np.float32))
    kc = Tensor(np.zeros((nb, bs, h, d), cache_dtype))
    vc = Tensor(np.zeros((nb, bs, h, d), cache_dtype))
    return k, kc, vc, Tensor(np.arange(t, dtype=np.int32))


F1 = Tensor(np.float32(0.1))


@pytest.mark.parametrize("kwargs,exc,msg", [
    ({}, ValueError, r"reshape_and_cache: argument 'k_scale': expected a float32 scale, shape \[\] or \[1\] \(per "
                     r"tensor\), \[2\] \(per head\) or \[2, 8\] \(per channel\), for a quantized cache write"),
    ({"k_scale": F1}, ValueError, r"reshape_and_cache: argument 'v_scale': expected a tensor since 'k_scale'"),
    ({"k_scale": Tensor(np.ones((3,), np.float32)), "v_scale": F1}, ValueError,
     r"argument 'k_scale': expected shape \[\] or \[1\] \(per tensor\), \[2\] \(per head\) or \[2, 8\]"),
    ({"k_scale": Tensor(np.float16(1)), "v_scale": F1}, TypeError, r"argument 'k_scale': expected dtype float32"),
    ({"k_scale": Tensor(np.float32(0)), "v_scale": F1}, ValueError,
     r"argument 'k_scale': expected finite values > 0, got 0\.0 at flat index 0"),
    ({"k_scale": F1, "v_scale": Tensor(np.array([1, np.nan], np.float32))}, ValueError,
     r"argument 'v_scale': expected finite values > 0, got nan at flat index 1"),
    ({"k_scale": F1, "v_scale": Tensor(np.float32(-1))}, ValueError, r"'v_scale': expected finite values > 0"),
    ({"k_scale": F1, "v_scale": F1, "k_offset": Tensor(np.float32(np.inf)), "v_offset": F1}, ValueError,
     r"argument 'k_offset': expected finite values, got inf"),
    ({"k_scale": F1, "v_scale": F1, "k_scale_cache": Tensor(np.zeros((2, 4, 2, 1), np.float32)),
      "v_scale_cache": Tensor(np.zeros((2, 4, 2, 1), np.float32))}, ValueError,
     r"argument 'k_scale': expected None with dynamic scales"),
    ({"k_scale_cache": Tensor(np.zeros((2, 4, 2, 2), np.float32)),
      "v_scale_cache": Tensor(np.zeros((2, 4, 2, 1), np.float32))}, ValueError,
     r"argument 'k_scale_cache': expected shape \[2, 4, 2, 1\] or \[2, 4, 2\]"),
    ({"k_scale_cache": Tensor(np.zeros((2, 4, 2, 1), np.float16)),
      "v_scale_cache": Tensor(np.zeros((2, 4, 2, 1), np.float32))}, TypeError,
     r"argument 'k_scale_cache': expected dtype float32, got float16"),
])
def test_bad_input(kwargs, exc, msg):
    k, kc, vc, sl = _gqa()
    before = kc.asnumpy().copy()
    with pytest.raises(exc, match=msg):
        ms_kvcache.reshape_and_cache(k, k, kc, vc, sl, **kwargs)
    np.testing.assert_array_equal(kc.asnumpy(), before)


def test_bad_input_dtypes_and_slots():
    k, kc, vc, sl = _gqa()
    with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'k_offset': expected None for a float8_e5m2"):
        ms_kvcache.reshape_and_cache(k, k, fp8_tensor(np.zeros((2, 4, 2, 8), np.uint8), "float8_e5m2"),
                                     fp8_tensor(np.zeros((2, 4, 2, 8), np.uint8), "float8_e5m2"), sl, k_scale=F1,
                                     v_scale=F1, k_offset=F1, v_offset=F1)
    with pytest.raises(TypeError, match=r"reshape_and_cache: argument 'key': expected dtype in \('float16', "
                                        r"'bfloat16', 'float32'\) for a quantized cache write"):
        ms_kvcache.reshape_and_cache(Tensor(np.zeros((3, 2, 8), np.int8)), Tensor(np.zeros((3, 2, 8), np.int8)), kc,
                                     vc, sl, k_scale=F1, v_scale=F1)
    with pytest.raises(TypeError, match=r"reshape_and_cache: argument 'key_cache': expected dtype in \('int8', "
                                        r"'float8_e4m3fn', 'float8_e5m2'\) when quantizing"):
        ms_kvcache.reshape_and_cache(k, k, Tensor(np.zeros((2, 4, 2, 8), np.float16)),
                                     Tensor(np.zeros((2, 4, 2, 8), np.float16)), sl, k_scale=F1, v_scale=F1)
    with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'slot_mapping'.*8"):
        ms_kvcache.reshape_and_cache(k, k, kc, vc, Tensor(np.array([0, 8, 1], np.int32)), k_scale=F1, v_scale=F1)
    with pytest.raises(ValueError, match=r"reshape_and_cache_merged: argument 'k_scale'"):
        ms_kvcache.reshape_and_cache_merged(k, k, Tensor(np.zeros((2, 2, 4, 2, 8), np.int8)), sl)
    with pytest.raises(ValueError, match=r"concat_and_cache_mla: argument 'kv_c_scale': expected shape \[\] or \[1\] "
                                        r"\(per tensor\) or \[16\]"):
        ms_kvcache.concat_and_cache_mla(Tensor(np.ones((3, 16), np.float32)), Tensor(np.ones((3, 4), np.float32)),
                                        Tensor(np.zeros((2, 4, 16), np.int8)), Tensor(np.zeros((2, 4, 4), np.int8)),
                                        sl, kv_c_scale=Tensor(np.ones((2,), np.float32)), k_pe_scale=F1)


def test_bad_input_graph():
    """GRAPH_MODE: the shape checks run at compile time with the same messages."""
    k, kc, vc, sl = _gqa()

    def call(c, k1, s1):
        ms_kvcache.reshape_and_cache(k1, k1, c[0], c[1], s1, k_scale=c[2])

    with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'v_scale': expected a tensor since 'k_scale'"):
        run("graph", call, [kc.asnumpy(), vc.asnumpy(), np.float32(0.1)], [k.asnumpy(), sl.asnumpy()])


def test_missing_scale_lists_every_accepted_shape():
    """Float data into int8 caches without scales: the message lists exactly the accepted static shapes (the
    ones the shape check takes: per head included; MLA: per tensor or per channel)."""
    k, kc, vc, sl = _gqa()
    with pytest.raises(ValueError, match=r"reshape_and_cache_merged: argument 'k_scale': expected a float32 scale, "
                                        r"shape \[\] or \[1\] \(per tensor\), \[2\] \(per head\) or \[2, 8\] "
                                        r"\(per channel\)"):
        ms_kvcache.reshape_and_cache_merged(k, k, Tensor(np.zeros((2, 2, 4, 2, 8), np.int8)), sl)
    with pytest.raises(ValueError, match=r"concat_and_cache_mla: argument 'kv_c_scale': expected a float32 scale, "
                                        r"shape \[\] or \[1\] \(per tensor\) or \[16\] \(per channel\), for a"):
        ms_kvcache.concat_and_cache_mla(Tensor(np.ones((3, 16), np.float32)), Tensor(np.ones((3, 4), np.float32)),
                                        Tensor(np.zeros((2, 4, 16), np.int8)), Tensor(np.zeros((2, 4, 4), np.int8)), sl)
    # each listed shape is accepted (the per-head one included)
    for shape in ((), (1,), (2,), (2, 8)):
        s = Tensor(np.full(shape, 0.1, np.float32))
        ms_kvcache.reshape_and_cache(k, k, kc, vc, sl, k_scale=s, v_scale=s)


def _bad(shape, at, value):
    """A valid static scale (or offset) array of ``shape`` with ``value`` at flat index ``at``."""
    a = np.full(shape, 0.05, np.float32)
    a.reshape(-1)[at] = value
    return a


def _graph_call_fails(call, cache_arrays, input_arrays, msg):
    """GRAPH_MODE: the launch raises RuntimeError matching ``msg``; every cache keeps its bytes."""
    from copy_util import OpCell, params, tensors

    caches = params(cache_arrays)
    with ms_mode("graph"):
        with pytest.raises(RuntimeError, match=msg):
            [r.asnumpy() for r in OpCell(call, caches)(*tensors(input_arrays))]
    for c, a in zip(caches, cache_arrays):
        np.testing.assert_array_equal(to_np(c), a, "written before the failure")


_BAD_GQA = [  # (op, argument, bad array, value shown); more values and granularities: the next test
    ("reshape_and_cache", "k_scale", _bad((), 0, 0.0), "0 at flat index 0"),
    ("rope_reshape_and_cache", "v_offset", _bad((2, 8), 3, np.inf), "inf at flat index 3"),
]


@pytest.mark.parametrize("op,arg,bad,shown", _BAD_GQA, ids=[f"{c[0]}-{c[1]}" for c in _BAD_GQA])
def test_bad_static_values_fail_the_graph_launch_cpu(op, arg, bad, shown, rng):
    """GRAPH_MODE, cpu backend: a static scale of 0 / NaN / inf / < 0 or a non-finite offset never reaches Python
    (graph code sees no values), so the kernel refuses it at launch, naming the public op and argument, before
    writing anything (was: saturated or zero codes, no error)."""
    nb, bs, h, d, t = 2, 4, 2, 8, 3
    merged = op.endswith("_merged")
    kc = rng.integers(-128, 128, ((2,) if merged else ()) + (nb, bs, h, d), dtype=np.int8)
    vc = rng.integers(-128, 128, (nb, bs, h, d), dtype=np.int8)
    x = random_array(rng, (t, h, d), "float16")
    sl = np.array([5, -1, 2], np.int32)
    good = np.full(bad.shape, 0.05, np.float32)
    scales = {"k_scale": good, "v_scale": good, "k_offset": np.zeros_like(good), "v_offset": np.zeros_like(good)}
    scales[arg] = bad
    msg = rf"{op}: argument '{arg}': expected finite values{' > 0' if 'scale' in arg else ''}, got {shown} " \
          r"\(checked at launch\); nothing was written"

    def call(c, x1, s1, p1, cs1, ks, vs, ko, vo):
        if op == "reshape_and_cache":
            ms_kvcache.reshape_and_cache(x1, x1, c[0], c[1], s1, k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo)
        elif merged:
            ms_kvcache.reshape_and_cache_merged(x1, x1, c[0], s1, k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo)
        else:
            ms_kvcache.rope_reshape_and_cache(p1, x1, x1, x1, cs1, c[0], c[1], s1, k_scale=ks, v_scale=vs, k_offset=ko,
                                              v_offset=vo)

    pos, cos_sin = np.arange(t, dtype=np.int32), random_array(rng, (4, d), "float16")
    _graph_call_fails(call, [kc] if merged else [kc, vc],
                      [x, sl, pos, cos_sin] + [scales[n] for n in ("k_scale", "v_scale", "k_offset", "v_offset")], msg)


@pytest.mark.parametrize("kv_format,idx,bad,shown", [
    (2, 5, _bad((2,), 1, np.nan), "'k_scale': expected finite values > 0, got nan at flat index 1"),
    (2, 6, _bad((2, 8), 5, -0.5), "'v_scale': expected finite values > 0, got -0.5 at flat index 5"),
    (2, 7, _bad((2, 8), 9, -np.inf), "'k_offset': expected finite values, got -inf at flat index 9"),
    (1, 6, _bad((), 0, np.inf), "'v_scale': expected finite values > 0, got inf at flat index 0"),
])
def test_bad_static_values_fail_the_kernel_launch_cpu(kv_format, idx, bad, shown, rng):
    """The cpu kernel itself (launched as graph mode launches it: no strict mode, no Python value check; here
    through the fast module, without a graph compile) refuses per-head / per-channel / per-tensor scales that are
    NaN, < 0 or inf and non-finite offsets, separate and merged caches, before writing anything."""
    from ms_kvcache import _cpu, _custom
    from ms_kvcache.ops import reshape_and_cache_quant as rq

    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip(f"fast path unavailable: {_custom.fast_path_available('cpu')[1]}")
    spec, mod = rq.SPEC, _custom._fast_module()
    kern = mod.kernel(_cpu.__file__, spec.op_type, spec.name, spec.kernel_attrs(spec.attr_values(
        ("BSND", kv_format, "static"))), list(_custom.output_sources(spec)))
    merged = kv_format == 1
    kc0 = rng.integers(-128, 128, ((2,) if merged else ()) + (2, 4, 2, 8), dtype=np.int8)
    vc0 = rng.integers(-128, 128, (0,) if merged else (2, 4, 2, 8), dtype=np.int8)
    x = to_ms(random_array(rng, (3, 2, 8), "float16"))
    good = np.full(bad.shape, 0.05, np.float32)
    quant = [good, good, np.zeros_like(good), np.zeros_like(good)]
    quant[idx - 5] = bad
    kc, vc = to_ms(kc0), to_ms(vc0)
    mod.run(kern, x, x, kc, vc, Tensor(np.array([5, -1, 2], np.int32)), *(Tensor(q) for q in quant),
            _quant.NO_F32, _quant.NO_F32)
    with pytest.raises(RuntimeError, match=rf"reshape_and_cache_quant: argument {shown} \(checked at launch\); "
                                           r"nothing was written"):
        kc.asnumpy()
    np.testing.assert_array_equal(kc.asnumpy(), kc0)
    np.testing.assert_array_equal(vc.asnumpy(), vc0)


@pytest.mark.parametrize("arg,bad,shown", [("kv_c_scale", _bad((16,), 7, 0.0), "0 at flat index 7")])
def test_bad_static_values_fail_the_graph_launch_cpu_mla(arg, bad, shown, rng):
    """As above for concat_and_cache_mla (per channel)."""
    cc = rng.integers(-128, 128, (2, 4, 16), dtype=np.int8)
    pc = rng.integers(-128, 128, (2, 4, 4), dtype=np.int8)
    a, b = random_array(rng, (3, 16), "float32"), random_array(rng, (3, 4), "float32")
    cs = bad if arg == "kv_c_scale" else np.float32(0.05)
    ps = bad if arg == "k_pe_scale" else np.float32(0.05)

    def call(c, a1, b1, s1, x1, y1):
        ms_kvcache.concat_and_cache_mla(a1, b1, c[0], c[1], s1, kv_c_scale=x1, k_pe_scale=y1)

    _graph_call_fails(call, [cc, pc], [a, b, np.array([1, 6, -1], np.int32), cs, ps],
                      rf"concat_and_cache_mla: argument '{arg}': expected finite values > 0, got {shown}")


@pytest.mark.parametrize("backend", ("sim", "ascend"))
def test_other_backends_refuse_float8_mla_rope(backend, monkeypatch):
    """Every quantizing cache write has its AscendC kernel now (tests/test_*_quant_sim.py); on sim / ascend a
    float8 cache of rope_concat_and_cache_mla is a TypeError naming the public op and kv_c_cache before any launch
    (no fallback), the caches untouched; require_backend still refuses an op whose kernel is pending (a
    spec marked pending by hand: none is any more). (The ascend backend is selected by hand: off an NPU
    set_backend('ascend') refuses.)"""
    from ms_kvcache import _backend
    if backend == "sim":
        ok, why = _backend.backend_module("sim").available()
        if not ok:
            pytest.skip(f"sim backend unavailable: {why}")
    monkeypatch.setattr(_backend, "_current", backend)
    t, rank, rope = 3, 32, 16
    cc = fp8_tensor(np.zeros((2, 4, rank), np.uint8), "float8_e4m3fn")
    pc = fp8_tensor(np.zeros((2, 4, rope), np.uint8), "float8_e4m3fn")
    with pytest.raises(TypeError, match=rf"rope_concat_and_cache_mla: argument 'kv_c_cache': expected dtype int8 on "
                                        rf"backend '{backend}'"):
        ms_kvcache.rope_concat_and_cache_mla(
            Tensor(np.array([0, 1, 2], np.int32)), Tensor(np.ones((t, 2, rope), np.float16)),
            Tensor(np.ones((t, rope), np.float16)), Tensor(np.ones((t, rank), np.float16)),
            Tensor(np.ones((4, rope), np.float16)), cc, pc, Tensor(np.array([0, -1, 5], np.int32)), kv_c_scale=F1,
            k_pe_scale=F1)
    np.testing.assert_array_equal(cc.view(ms.uint8).asnumpy(), np.zeros((2, 4, rank), np.uint8))
    # no quantizing spec is pending any more: one marked pending by hand is still refused
    import dataclasses
    spec = _spec.get_spec("multi_layer_kv_transfer_quant")
    pending = dataclasses.replace(spec, extra={**spec.extra, "ascend_kernel": "not yet"})
    with pytest.raises(NotImplementedError, match=rf"x: quantized cache writes .* no kernel on backend '{backend}'"
                                                  rf" \(its OpSpec is marked as having no AscendC kernel: not yet;"):
        _quant.require_backend("x", backend, pending)
    assert _quant.require_backend("x", backend, spec) == backend


def test_pending_specs_refused_by_aot_and_shims():
    """No quantizing OpSpec declares its AscendC kernel pending any more (every quantizing cache write and both
    scale-carrying multi-layer transfers have one): the pending set is empty, and each has an aclnn shim and the
    sim backend's entry (a spec marked pending again would be refused by the sim backend's aot_func naming the op,
    get no aclnn shim, and the structure check would want no op_kernel file)."""
    from ms_kvcache import _aclnn
    from ms_kvcache._backends import sim
    names = set()
    pending = {s.name for s in _spec.all_specs() if _spec.kernel_pending(s)}
    assert pending == names
    for n in names:
        with pytest.raises(NotImplementedError, match=rf"sim backend: op {n} \(Mskv\w+Quant\) has no AscendC kernel"):
            sim.aot_func(_spec.get_spec(n))
    assert not names & {s.name for s in _aclnn.kernel_specs()}
    # the ones with their AscendC kernel: no marker, an aclnn shim, the sim backend's entry
    for n, t in (("reshape_and_cache_quant", "MskvReshapeAndCacheQuant"),
                 ("concat_and_cache_mla_quant", "MskvConcatAndCacheMlaQuant"),
                 ("rope_reshape_and_cache_quant", "MskvRopeReshapeAndCacheQuant"),
                 ("rope_concat_and_cache_mla_quant", "MskvRopeConcatAndCacheMlaQuant"),
                 ("multi_layer_kv_transfer_quant", "MskvMultiLayerKvTransferQuant"),
                 ("multi_layer_block_transfer_quant", "MskvMultiLayerBlockTransferQuant")):
        assert not _spec.kernel_pending(_spec.get_spec(n))
        assert n in {s.name for s in _aclnn.kernel_specs()}
        assert sim.aot_func(_spec.get_spec(n))[0].endswith(":" + t)


def test_routing_is_cheap_and_exact():
    """Plain writes are not routed (same dtype, no quantization argument); float data into an int8 cache
    or any quantization argument routes to the quantizing variant."""
    k, kc, vc, sl = _gqa()
    assert not _quant.routes(kc, kc, None, None)
    assert _quant.routes(k, kc, None, None)
    assert _quant.routes(kc, kc, None, F1)
    assert not _quant.routes(k, Tensor(np.zeros((1,), np.float32)), None)




def test_kernel_coverage_flags_both_mismatches(tmp_path):
    """_structure.kernel_coverage: a pending op that gained op_kernel/<op>.cpp must drop its marker; an op
    without the marker must have its kernel file; this checkout is consistent."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    import mskv_structure as _structure  # tools/mskv_structure.py, a developer check outside the package
    import dataclasses
    spec = _spec.get_spec("multi_layer_kv_transfer_quant")  # no spec is pending any more: mark one by hand
    specs = [dataclasses.replace(spec, extra={**spec.extra, "ascend_kernel": "not yet"}), _spec.get_spec("reshape_and_cache")]
    (tmp_path / "op_kernel").mkdir()
    (tmp_path / "op_kernel" / "multi_layer_kv_transfer_quant.cpp").write_text("")
    out = _structure.kernel_coverage(tmp_path, specs)
    assert any("MskvMultiLayerKvTransferQuant: op_kernel/multi_layer_kv_transfer_quant.cpp exists" in line
               for line in out), out
    assert any("MskvReshapeAndCache: no op_kernel/reshape_and_cache.cpp" in line for line in out), out
    root = _structure.Path(_structure.__file__).resolve().parent.parent
    assert _structure.kernel_coverage(root, _spec.all_specs()) == []


def _trap_cause(op_type, arrays):
    """ms_kvcache._cpu's MskvQuantTrapCause (the host diagnosis the sim backend appends after a quantizing kernel's
    TRAP) on numpy inputs, no AotExtra (static mode): (length, text)."""
    import ctypes

    from ms_kvcache._backends import cpu

    fn = ctypes.CDLL(cpu.library_path()).MskvQuantTrapCause
    fn.restype = ctypes.c_int
    n = len(arrays)
    arrays = [np.ascontiguousarray(a) for a in arrays]
    params = (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrays])
    ndims = (ctypes.c_int * n)(*[a.ndim for a in arrays])
    shp = [(ctypes.c_int64 * max(a.ndim, 1))(*a.shape) for a in arrays]
    shapes = (ctypes.POINTER(ctypes.c_int64) * n)(*[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64)) for s in shp])
    dtypes = (ctypes.c_char_p * n)(*[str(a.dtype).encode() for a in arrays])
    buf = ctypes.create_string_buffer(256)
    got = fn(op_type.encode(), n, params, ndims, shapes, dtypes, None, buf, 256)
    return got, buf.value.decode()


def test_trap_cause_export_is_the_cpu_check():
    """The sim backend's TRAP diagnosis (cpu_kernel/kv_quant.cpp MskvQuantTrapCause) reports, for the
    reshape_and_cache_quant argument order, the first bad static value in the cpu kernel's order (k_scale,
    k_offset, v_scale, v_offset) with the text of the cpu backend's graph-mode error; nothing for valid values,
    another op or a wrong argument count."""
    H, D = 2, 4
    e = np.zeros((0,), np.float32)
    base = [np.zeros((3, H, D), np.float16), np.zeros((3, H, D), np.float16), np.zeros((1, 4, H, D), np.int8),
            np.zeros((1, 4, H, D), np.int8), np.zeros((3,), np.int32), np.full((H, D), 0.5, np.float32),
            np.full((H, D), 0.5, np.float32), np.zeros((H, D), np.float32), np.zeros((H, D), np.float32), e, e,
            np.zeros((1,), np.int32)]
    assert _trap_cause("MskvReshapeAndCacheQuant", base) == (0, "")
    bad = [a.copy() for a in base]
    bad[8].reshape(-1)[2] = np.inf    # v_offset
    bad[6].reshape(-1)[5] = -2.0      # v_scale
    assert _trap_cause("MskvReshapeAndCacheQuant", bad)[1] == \
        "argument 'v_scale': expected finite values > 0, got -2 at flat index 5"
    bad[7].reshape(-1)[6] = np.nan    # k_offset: before v_*
    got = _trap_cause("MskvReshapeAndCacheQuant", bad)
    assert got == (len(got[1]), "argument 'k_offset': expected finite values, got nan at flat index 6"), got
    assert _trap_cause("MskvReshapeAndCache", bad) == (0, "")
    assert _trap_cause("MskvReshapeAndCacheQuant", bad[:-1]) == (0, "")
    # the fused MLA write's static inputs: kv_c_scale 9, k_pe_scale 10, kv_c_offset 11, k_pe_offset 12 (of 18)
    mla = [np.zeros((1,), np.float32)] * 18
    mla[9], mla[10], mla[11], mla[12] = (np.full((4,), 0.5, np.float32), np.float32(0.5).reshape(()),
                                         np.zeros((4,), np.float32), np.array(np.nan, np.float32))
    assert _trap_cause("MskvRopeConcatAndCacheMlaQuant", mla)[1] == \
        "argument 'k_pe_offset': expected finite values, got nan at flat index 0"


_POISON_CHILD = r"""
import sys, json
import numpy as np, mindspore as ms
from mindspore import Tensor, Parameter, nn
import ms_kvcache as mk
mk.set_backend(sys.argv[1])
ms.set_context(mode=ms.GRAPH_MODE)
class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.kc = Parameter(Tensor(np.zeros((2, 4, 2, 8), np.int8)), name="kc")
        self.vc = Parameter(Tensor(np.zeros((2, 4, 2, 8), np.int8)), name="vc")
    def construct(self, k, v, sl, ks):
        mk.reshape_and_cache(k, v, self.kc, self.vc, sl, k_scale=ks, v_scale=ks)
        return self.kc
x = Tensor(np.random.default_rng(3).standard_normal((3, 2, 8)).astype(np.float32))
sl = Tensor(np.array([0, 5, 2], np.int32))
out = []
net = Net()
for s in (0.5, 0.0, 0.5):
    before = net.kc.asnumpy().copy()
    try:
        net(x, x, sl, Tensor(np.float32(s)))
        out.append(["ok", int(np.count_nonzero(net.kc.asnumpy()))])
    except RuntimeError as e:
        out.append([" ".join(str(e).split())[-1500:], bool(np.array_equal(net.kc.asnumpy(), before))])
fresh = Net()
fresh(x, x, sl, Tensor(np.float32(0.5)))
out.append(["fresh ok", int(np.count_nonzero(fresh.kc.asnumpy()))])
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_graph_launch_refusal_stops_that_graph_until_it_is_rebuilt(backend, tmp_path):
    """Documents MindSpore's behaviour (2.10) that docs/design.md "Kernel errors in graph mode" states: after a
    launch the kernel refused (here a static k_scale of 0), every later run of the same compiled Cell fails
    with MindSpore's "An error occurred in the previous step" (even with good inputs); a new Cell instance
    runs. Nothing is written by the refused call. If MindSpore changes this, the docs must change with it."""
    import json
    import subprocess

    if backend == "sim":
        pytest.importorskip("ms_kvcache._sim")
    child = tmp_path / "graph_refusal_child.py"  # GRAPH_MODE parses the Cell's source: a file, not -c
    child.write_text(_POISON_CHILD)
    p = subprocess.run([sys.executable, str(child), backend], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    first, refused, after, fresh = json.loads(p.stdout.strip().splitlines()[-1])
    assert first[0] == "ok" and first[1] > 0
    assert "'k_scale': expected finite values > 0" in refused[0], refused
    assert refused[1] is True, "the refused call changed key_cache"
    assert "previous step" in after[0], after
    assert fresh[0] == "fresh ok" and fresh[1] > 0
