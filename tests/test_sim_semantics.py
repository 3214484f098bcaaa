"""Semantics of the emulated AscendC APIs, bit for bit against independent numpy references:
half / bfloat16_t scalar conversions, vector arithmetic (fp32 per-op rounding, half computed exactly
and rounded once to nearest even, integer wrap-around), Cast with every round mode, DataCopyPad /
DataCopyParams layouts, repeat / mask / counter forms of vector instructions.

Kernels: tests/sim_kernels/good/sim_semantics.cpp. Imports only ms_kvcache.sim (runs under ASan too).
"""
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ms_kvcache import sim

HERE = Path(__file__).resolve().parent
BF16 = ml_dtypes.bfloat16
# inputs deliberately include inf and values that overflow half while numpy builds the references
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def sem():
    return sim.build("sim_semantics", [HERE / "sim_kernels" / "good" / "sim_semantics.cpp"])


def tiling(n, scalar_f=0.0, scalar_i=0):
    t = np.zeros(1, dtype=[("n", "<u4"), ("f", "<f4"), ("i", "<i4"), ("pad", "<u4")])
    t["n"], t["f"], t["i"] = n, scalar_f, scalar_i
    return t.tobytes()


def interesting_floats(rng, n):
    """float32 values across the half / bf16 ranges incl. subnormals, ties and overflow edges."""
    base = rng.standard_normal(n).astype(np.float64) * np.exp2(rng.integers(-30, 17, n))
    edges = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65519.0, 65520.0, 70000.0, -1e9, 6.103515625e-05,
                      5.960464477539063e-08, 2.98e-08, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8,
                      1 + 3 * 2.0 ** -8, 3.0e38, -3.0e38, np.inf, -np.inf, 2.5, -2.5, 0.5, 1.5])
    x = np.concatenate([edges, base])[:n]
    return x.astype(np.float32)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same_bits(actual, expected, what):
    a, e = bits(actual), bits(expected)
    bad = np.nonzero(a != e)[0]
    assert bad.size == 0, (f"{what}: {bad.size} elements differ, first {bad[:5].tolist()}: "
                           f"got {a[bad[:5]]}, expected {e[bad[:5]]}")


# ------------------------------------------------------------------------------ scalar conversions
def test_scalar_half_bf16_conversions(sem, rng=np.random.default_rng(1)):
    n = 2048
    x = interesting_floats(rng, n)
    x[100] = np.nan
    yh = np.zeros(n, np.uint16)
    yb = np.zeros(n, np.uint16)
    back = np.zeros(2 * n, np.float32)
    sim.launch_kernel("sem_scalar_convert", [x, yh, yb, back], 1, tiling=tiling(n))
    ok = ~np.isnan(x)
    assert_same_bits(yh[ok], x[ok].astype(np.float16), "float -> half (RNE)")
    assert_same_bits(yb[ok], x[ok].astype(BF16), "float -> bfloat16 (RNE)")
    assert np.isnan(yh.view(np.float16)[100]) and np.isnan(yb.view(BF16)[100])
    assert_same_bits(back[:n][ok], x[ok].astype(np.float16).astype(np.float32), "half -> float")
    assert_same_bits(back[n:][ok], x[ok].astype(BF16).astype(np.float32), "bf16 -> float")


# ------------------------------------------------------------------------------ vector arithmetic
OPS = ["add", "sub", "mul", "adds", "muls", "max", "min", "maxs", "mins", "abs", "relu"]
TYPES = [np.float16, np.float32, np.int16, np.int32]


def _vec_ref(op, a, b, s, t):
    if op in ("max", "min", "maxs", "mins", "abs", "relu"):  # exact operations
        st = np.array(s).astype(t)
        with np.errstate(invalid="ignore"):
            r = {"max": np.where(a >= b, a, b), "min": np.where(a <= b, a, b), "maxs": np.where(a >= st, a, st),
                 "mins": np.where(a <= st, a, st), "abs": np.abs(a) if t in (np.float16, np.float32) else a,
                 "relu": np.where(a > 0, a, np.zeros_like(a))}[op]
        return r.astype(t)
    if t == np.float16:
        a64, b64, s64 = a.astype(np.float64), b.astype(np.float64), float(np.float16(s))
        r = {"add": a64 + b64, "sub": a64 - b64, "mul": a64 * b64, "adds": a64 + s64, "muls": a64 * s64}[op]
        return r.astype(np.float16)
    if t == np.float32:
        s32 = np.float32(s)
        with np.errstate(over="ignore"):
            return {"add": a + b, "sub": a - b, "mul": a * b, "adds": a + s32, "muls": a * s32}[op]
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    r = {"add": a64 + b64, "sub": a64 - b64, "mul": a64 * b64, "adds": a64 + s, "muls": a64 * s}[op]
    return r.astype(t)  # wraps around


VALID = {"abs": (np.float16, np.float32), "relu": (np.float16, np.float32, np.int32)}  # documented dtypes
VEC_CASES = [(op, t) for op in OPS for t in TYPES if t in VALID.get(op, TYPES)]


@pytest.mark.parametrize("op,t", VEC_CASES, ids=[f"{np.dtype(t).name}-{op}" for op, t in VEC_CASES])
def test_vector_arithmetic(sem, op, t):
    rng = np.random.default_rng(zlib.crc32(f"{op}/{np.dtype(t).name}".encode()))
    n = 2048
    if np.issubdtype(t, np.integer):
        info = np.iinfo(t)
        a = rng.integers(info.min, info.max, n, dtype=t, endpoint=True)
        b = rng.integers(info.min, info.max, n, dtype=t, endpoint=True)
        s_f, s_i = 0.0, int(rng.integers(-1000, 1000))
    else:
        a = (rng.standard_normal(n) * np.exp2(rng.integers(-12, 12, n))).astype(t)
        b = (rng.standard_normal(n) * np.exp2(rng.integers(-12, 12, n))).astype(t)
        a[:4] = [60000, -60000, 1, 0]
        b[:4] = [60000, -60000, 2.0 ** -24 if t == np.float16 else 1e-30, -0.0]
        s_f, s_i = -1.375, 0
    y = np.zeros(n, t)
    key = 10 * OPS.index(op) + TYPES.index(t)
    sim.launch_kernel("sem_vec", [a, b, y], 1, tiling=tiling(n, s_f, s_i), tiling_key=key)
    assert_same_bits(y, _vec_ref(op, a, b, s_i if np.issubdtype(t, np.integer) else s_f, t), f"{op} {t}")


def test_half_overflow_saturates_on_310p(sem):
    n = 16
    a = np.full(n, 60000, np.float16)
    y = np.zeros(n, np.float16)
    sim.launch_kernel("sem_vec", [a, a.copy(), y], 1, tiling=tiling(n), tiling_key=0, soc="Ascend910B1")
    assert np.all(np.isinf(y))  # A2: IEEE inf/NaN mode
    sim.launch_kernel("sem_vec", [a, a.copy(), y], 1, tiling=tiling(n), tiling_key=0, soc="Ascend310P3")
    assert np.all(y == np.float16(65504))  # 310P: saturation mode


# ------------------------------------------------------------------------------ Cast
RM = {"NONE": 0, "RINT": 1, "FLOOR": 2, "CEIL": 3, "ROUND": 4, "TRUNC": 5, "ODD": 6}
CODE = {np.float32: 0, np.float16: 1, BF16: 2, np.int32: 3, np.int8: 4, np.int16: 5}


def _ord(b, nbits):
    sign = b >> (nbits - 1)
    mag = (b & ((1 << (nbits - 1)) - 1)).astype(np.int64)
    return np.where(sign == 1, -mag, mag)


def _from_ord(o, nbits, dt):
    b = np.where(o < 0, (1 << (nbits - 1)) | (-o), o).astype({16: np.uint16, 32: np.uint32}[nbits])
    return b.view(dt)


def _round_to_float(x64, dt, mode):
    """Round exact float64 values to the float grid of dt under a CANN round mode (reference)."""
    nb = np.dtype(dt).itemsize * 8
    near = x64.astype(np.float32).astype(dt) if dt is BF16 else x64.astype(dt)  # RNE
    nv = near.astype(np.float64)
    o = _ord(bits(near).astype(np.int64), nb)
    below = _from_ord(np.where(nv > x64, o - 1, o), nb, dt)
    above = _from_ord(np.where(nv < x64, o + 1, o), nb, dt)
    lo, hi = below.astype(np.float64), above.astype(np.float64)
    exact = lo == hi
    if mode in ("RINT", "NONE"):
        r = near
    elif mode == "FLOOR":
        r = below
    elif mode == "CEIL":
        r = above
    elif mode == "TRUNC":
        r = np.where(x64 >= 0, below, above)
    elif mode == "ROUND":
        dl, dh = x64 - lo, hi - x64
        r = np.where(dl < dh, below, np.where(dh < dl, above, np.where(x64 >= 0, above, below)))
    elif mode == "ODD":
        r = np.where(bits(below) & 1, below, above)
    r = np.where(exact, near, r).astype(dt)
    zero = r.astype(np.float64) == 0
    r[zero] = np.copysign(0.0, x64[zero]).astype(dt)  # a result rounded to zero keeps the sign
    return r


def _round_to_int(x64, dt, mode):
    f = {"RINT": np.rint, "NONE": np.rint, "FLOOR": np.floor, "CEIL": np.ceil, "TRUNC": np.trunc,
         "ROUND": lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5)}[mode]
    info = np.iinfo(dt)
    with np.errstate(invalid="ignore"):
        r = np.clip(f(np.nan_to_num(x64, nan=0.0, posinf=np.inf, neginf=-np.inf)), info.min, info.max)
    return r.astype(dt)


CAST_CASES = (
    [(np.float32, np.float16, m) for m in ("NONE", "RINT", "FLOOR", "CEIL", "ROUND", "TRUNC", "ODD")]
    + [(np.float32, BF16, m) for m in ("RINT", "FLOOR", "CEIL", "ROUND", "TRUNC")]
    + [(np.float32, np.int32, m) for m in ("RINT", "FLOOR", "CEIL", "ROUND", "TRUNC")]
    + [(np.float32, np.float32, m) for m in ("FLOOR", "ROUND", "TRUNC", "CEIL", "RINT")]
    + [(np.float16, np.float32, "NONE"), (BF16, np.float32, "NONE"), (np.float16, np.int8, "NONE"),
       (np.float16, np.int8, "FLOOR"), (np.float16, np.int32, "ROUND"), (np.int32, np.float32, "RINT"),
       (np.int32, np.float32, "TRUNC"), (np.int32, np.int16, "NONE"), (np.int16, np.float16, "CEIL"),
       (np.int16, np.float16, "ROUND")]
)


@pytest.mark.parametrize("src,dst,mode", CAST_CASES,
                         ids=[f"{np.dtype(s).name}-{np.dtype(d).name}-{m}" for s, d, m in CAST_CASES])
def test_cast_round_modes(sem, src, dst, mode):
    rng = np.random.default_rng(CAST_CASES.index((src, dst, mode)))
    n = 1024
    if src in (np.int32, np.int16):
        x = rng.integers(np.iinfo(src).min, np.iinfo(src).max, n, dtype=src, endpoint=True)
        x[:6] = [0, 1, -1, np.iinfo(src).max, np.iinfo(src).min, 2049 if src == np.int16 else 2 ** 25 + 3]
    else:
        x = interesting_floats(rng, n)
        if np.dtype(dst).itemsize < 4 and dst != np.float32 and np.dtype(dst).kind == "f" and dst is not BF16:
            x = np.clip(x, -65504, 65504)  # in range; overflow has its own test
        x = x.astype(src)
    y = np.zeros(n, dst)
    code = 1000 * CODE[src] + 10 * CODE[dst] + RM[mode]
    sim.launch_kernel("sem_cast", [x, y], 1, tiling=tiling(n, 0.0, code))
    x64 = x.astype(np.float64)
    if np.dtype(dst).kind == "f" and dst is not np.float32 or dst is BF16:
        ref = _round_to_float(x64, dst, mode)
    elif dst == np.float32 and src == np.float32:
        f = {"RINT": np.rint, "FLOOR": np.floor, "CEIL": np.ceil, "TRUNC": np.trunc,
             "ROUND": lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5)}[mode]
        with np.errstate(invalid="ignore"):
            ref = np.where(np.isfinite(x64), f(x64), x64)
        ref = np.copysign(ref, x64).astype(np.float32)  # integral results keep the sign (-0.4 -> -0)
    elif dst == np.float32:
        ref = x64.astype(np.float32) if src != np.int32 else _round_to_float(x64, np.float32, mode)
    else:
        ref = _round_to_int(x64, dst, mode)
    assert_same_bits(y, ref, f"Cast {np.dtype(src).name} -> {np.dtype(dst).name} {mode}")


@pytest.mark.parametrize("mode,expect", [("RINT", [np.inf, -np.inf]), ("TRUNC", [65504, -65504]),
                                         ("FLOOR", [65504, -np.inf]), ("CEIL", [np.inf, -65504]),
                                         ("ODD", [65504, -65504])])
def test_cast_float_to_half_overflow(sem, mode, expect):
    x = np.array([1e6, -1e6] * 8, np.float32)
    y = np.zeros(16, np.float16)
    sim.launch_kernel("sem_cast", [x, y], 1, tiling=tiling(16, 0.0, 10 + RM[mode]))
    assert y[:2].astype(np.float64).tolist() == expect


# ------------------------------------------------------------------------------ data movement
def test_datacopypad_and_params_layouts(sem):
    x = np.arange(256, dtype=np.float32) + 1000
    y = np.zeros(256, np.float32)
    z = np.full(256, 5.0, np.float32)
    sim.launch_kernel("sem_pad", [x, y, z], 1)
    e = np.full(256, -1.0, np.float32)
    for r in range(3):  # (a) rows of 5 from GM every 7 floats, pads 1 + 2 of -7, UB row pitch 16
        e[16 * r: 16 * r + 8] = [-7.0, *x[7 * r: 7 * r + 5], -7.0, -7.0]
    for r in range(2):  # (b) no pads: the dummy tail repeats the row's first element
        row = x[100 + 5 * r: 105 + 5 * r]
        e[64 + 8 * r: 72 + 8 * r] = [*row, row[0], row[0], row[0]]
    e[96:104] = x[200:208]  # (c) DataCopyParams GM gap 1 block, UB gap 2 blocks
    e[120:128] = x[216:224]
    np.testing.assert_array_equal(y, e)
    ez = np.full(256, 5.0, np.float32)  # (d) UB rows t[0:6), t[16:22) -> GM every 7 floats
    ez[0:6] = e[0:6]
    ez[7:13] = e[16:22]
    np.testing.assert_array_equal(z, ez)


def test_repeat_mask_and_counter_forms(sem):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(1024) * 4).astype(np.float32)
    y = np.zeros(1024, np.float32)
    st = sim.launch_kernel("sem_repeat", [x, y], 1)
    e = np.full(1024, -1.0, np.float32)
    e[:512] = x[:512] + x[512:]
    e[:40] += np.float32(100)
    for r in range(4):
        for k in range(40):
            e[512 + 64 * r + k] = x[128 * r + (k // 8) * 16 + k % 8] * np.float32(3)
    h = np.zeros(256, np.float16)
    h[1::2] = x[1:256:2].astype(np.float16)
    e[768:] = h.astype(np.float32)
    np.testing.assert_array_equal(y, e)
    assert st["vector_ops_per_core"][0] == 7


# ------------------------------------------------------------------------------ Div, Sqrt, Gather
@pytest.mark.parametrize("t", [np.float16, np.float32], ids=["half", "float"])
@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_div_correctly_rounded(sem, t, soc):
    # one rounding of the exact quotient (float64 holds it to 53 bits: no double-rounding midpoint for
    # half / float operands); IEEE inf / NaN on A2, saturation on 310P
    rng = np.random.default_rng(11)
    n = 2048
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-10, 10, n))).astype(t)
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-10, 10, n))).astype(t)
    a[:6] = [1, -1, 0, 3, 1, 60000]
    b[:6] = [0, 0, 0, 3, 3, 1e-3 if t == np.float16 else 1e-30]
    y = np.zeros(n, t)
    sim.launch_kernel("sem_divsqrt", [a, b, y], 1, tiling=tiling(n), tiling_key=int(t == np.float32), soc=soc)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ref = (a.astype(np.float64) / b.astype(np.float64)).astype(t)
    if soc == "Ascend310P3":  # saturation mode: +-inf -> +-max, NaN -> 0
        big = np.finfo(t).max
        ref = np.where(np.isnan(ref), t(0), np.where(np.isinf(ref), np.sign(ref) * big, ref)).astype(t)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(y), nan)
    assert_same_bits(y[~nan], ref[~nan], f"Div {np.dtype(t).name} {soc}")


@pytest.mark.parametrize("t", [np.float16, np.float32], ids=["half", "float"])
def test_sqrt_correctly_rounded(sem, t):
    rng = np.random.default_rng(12)
    n = 2048
    a = np.abs(rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(t)
    a[a == 0] = t(1)
    a[:4] = [np.finfo(t).tiny, np.finfo(t).max, 2, np.inf]  # smallest normal, largest, exact root of 4 below
    a[4] = 4
    y = np.zeros(n, t)
    sim.launch_kernel("sem_divsqrt", [a, a.copy(), y], 1, tiling=tiling(n), tiling_key=10 + int(t == np.float32))
    assert_same_bits(y, np.sqrt(a.astype(np.float64)).astype(t), f"Sqrt {np.dtype(t).name}")


GATHER_TYPES = [(np.float16, 0), (np.float32, 1), (np.int32, 2), (BF16, 3), (np.int16, 4), (np.uint32, 5)]


@pytest.mark.parametrize("t,key", GATHER_TYPES, ids=[np.dtype(t).name for t, _ in GATHER_TYPES])
def test_gather_permutes_by_byte_offsets(sem, t, key):
    rng = np.random.default_rng(key)
    src = rng.integers(-30000, 30000, 512).astype(np.int64).astype(np.float32).astype(t) if t != np.uint32 else \
        rng.integers(0, 2 ** 32, 512, dtype=np.uint64).astype(np.uint32)
    n, size = 256, np.dtype(t).itemsize
    base = 16 * size                                    # srcBaseAddr: element 16 of src
    idx = rng.integers(0, 512 - 16, n)                  # any element from there on, repeats allowed
    off = (idx * size).astype(np.uint32)
    y = np.zeros(n, t)
    sim.launch_kernel("sem_gather", [src, off, y], 1, tiling=tiling(n, 0.0, base), tiling_key=key)
    assert_same_bits(y, src[16 + idx], f"Gather {np.dtype(t).name}")
