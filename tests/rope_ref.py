"""Independent numpy references for the RoPE-write tests.

- ``rope64``: float64 rotation (the "exact" result given the table values actually used).
- ``rope_f32_model``: the fp32 evaluation the kernels promise (two products and one add/subtract per
  output, each rounded to fp32, no FMA), rounded to the output dtype with RNE. numpy float32 ops are
  IEEE-exact, so the kernels must match this bit for bit.
- ``round64``: correctly rounded float64 -> fp16/bf16/fp32 (nearest, ties to even), computed by
  picking between the two neighbouring representable values, independent of any library's
  double-rounding behaviour.
- ``assert_close_rope``: the accuracy contract (see its docstring).
"""
import ctypes

import ml_dtypes
import numpy as np

BITS = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32}
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
MANT = {"float16": 10, "bfloat16": 7, "float32": 23}


def ordered(x, dtype):
    """Map values of ``dtype`` to integers whose difference counts ulps (+0 and -0 both map to 0)."""
    u = np.ascontiguousarray(x).view(BITS[dtype]).astype(np.int64)
    sign = 1 << (8 * np.dtype(BITS[dtype]).itemsize - 1)
    return np.where(u & sign, -(u & (sign - 1)), u)


def from_ordered(k, dtype):
    sign = 1 << (8 * np.dtype(BITS[dtype]).itemsize - 1)
    u = np.where(k < 0, (-k) | sign, k).astype(BITS[dtype])
    return u.view(NP[dtype])


def round64(x, dtype):
    """float64 -> dtype, correctly rounded (ties to even). Finite inputs within range."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "float32":
        return x.astype(np.float32)
    guess = x.astype(np.float32).astype(NP[dtype])  # within 1 ulp of the correct result
    k = ordered(guess, dtype)
    cands = np.stack([k - 1, k, k + 1])
    vals = from_ordered(cands, dtype).astype(np.float64)
    err = np.abs(vals - x[None])
    best = err.min(axis=0)
    # nearest; among equally near candidates the even significand (|ordered| even)
    score = np.where(err == best[None], np.where(np.abs(cands) % 2 == 0, 0, 1), 2)
    pick = np.take_along_axis(cands, np.argmin(score, axis=0)[None], axis=0)[0]
    return from_ordered(pick, dtype)


def ulp_of(ref_rounded, dtype):
    """Size of one ulp at each (rounded) reference value, as float64."""
    a = np.abs(ref_rounded.astype(np.float64))
    k = ordered(np.abs(ref_rounded).astype(NP[dtype]), dtype)
    nxt = from_ordered(k + 1, dtype).astype(np.float64)
    return nxt - a


def split(cs, rd):
    cs = np.asarray(cs)
    return cs[..., : rd // 2], cs[..., rd // 2: rd]


def rope64(x, cos, sin, rd, neox):
    """Rotate the first rd elements of the last axis of x (float64). cos/sin broadcast to [..., rd/2].

    Returns (out, scale): scale[j] = |x_j cos| + |y_j sin| of the terms of output j (0 where the
    element passes through); used for the fp32 evaluation bound.
    """
    x = np.asarray(x, dtype=np.float64)
    c = np.asarray(cos, dtype=np.float64)
    s = np.asarray(sin, dtype=np.float64)
    out = x.copy()
    scale = np.zeros_like(x)
    if neox:
        a, b = x[..., : rd // 2], x[..., rd // 2: rd]
        out[..., : rd // 2] = a * c - b * s
        out[..., rd // 2: rd] = b * c + a * s
        scale[..., : rd // 2] = np.abs(a * c) + np.abs(b * s)
        scale[..., rd // 2: rd] = np.abs(b * c) + np.abs(a * s)
    else:
        a, b = x[..., 0:rd:2], x[..., 1:rd:2]
        out[..., 0:rd:2] = a * c - b * s
        out[..., 1:rd:2] = b * c + a * s
        scale[..., 0:rd:2] = np.abs(a * c) + np.abs(b * s)
        scale[..., 1:rd:2] = np.abs(b * c) + np.abs(a * s)
    return out, scale


def rope_f32_model(x, cos, sin, rd, neox, dtype):
    """The kernels' fp32 arithmetic, rounded to ``dtype`` (RNE). cos/sin are fp32 arrays."""
    x32 = np.asarray(x).astype(np.float32)
    c = np.asarray(cos, dtype=np.float32)
    s = np.asarray(sin, dtype=np.float32)
    out = x32.copy()
    if neox:
        a, b = x32[..., : rd // 2], x32[..., rd // 2: rd]
        out[..., : rd // 2] = a * c - b * s
        out[..., rd // 2: rd] = b * c + a * s
    else:
        a, b = x32[..., 0:rd:2], x32[..., 1:rd:2]
        out[..., 0:rd:2] = a * c - b * s
        out[..., 1:rd:2] = b * c + a * s
    res = out.astype(NP[dtype])
    res[..., rd:] = np.asarray(x)[..., rd:]
    return res


def assert_close_rope(actual, ref64, scale, dtype, msg=""):
    """Accuracy contract of the RoPE kernels against the float64 reference.

    float32 outputs: |actual - ref| <= 1e-5 * max(1, |ref|) (1e-5 absolute for |x| <= 1).
    float16 / bfloat16: within 1 ulp of the correctly rounded reference, except where the fp32
    evaluation itself carries more error than that: x*c - y*s evaluated in fp32 has an absolute
    error up to 2**-23 * (|x c| + |y s|), which exceeds one ulp of the result only when the result
    cancels to below ~2**-15 of its terms. There the bound is ulp + 2**-22 * scale, and such
    elements must be rare (checked), so the 1-ulp rule is what is really tested.
    """
    actual = np.asarray(actual)
    if dtype == "float32":
        err = np.abs(actual.astype(np.float64) - ref64)
        tol = 1e-5 * np.maximum(1.0, np.abs(ref64))
        bad = err > tol
        assert not bad.any(), f"{msg}: {bad.sum()} fp32 elements off by more than 1e-5 (max err {err.max():.3g})"
        return
    ref_r = round64(ref64, dtype)
    dist = np.abs(ordered(actual.astype(NP[dtype]), dtype) - ordered(ref_r, dtype))
    far = dist > 1
    if far.any():
        err = np.abs(actual.astype(np.float64) - ref64)
        allowed = ulp_of(ref_r, dtype) + 2.0 ** -22 * scale
        bad = far & (err > allowed)
        assert not bad.any(), (f"{msg}: {bad.sum()} elements beyond 1 ulp and the fp32 evaluation bound; "
                               f"first at {np.argwhere(bad)[:3].tolist()}, max ulp distance {dist.max()}")
        assert far.sum() <= max(2, far.size // 10000), f"{msg}: {far.sum()} of {far.size} elements beyond 1 ulp"


def assert_ulp_le(actual, expected, dtype, ulps=1, msg=""):
    """Elementwise distance in ulps (of ``dtype``) between two arrays of that dtype."""
    d = np.abs(ordered(np.asarray(actual).astype(NP[dtype]), dtype) -
               ordered(np.asarray(expected).astype(NP[dtype]), dtype))
    assert d.max(initial=0) <= ulps, f"{msg}: max {d.max()} ulps > {ulps} ({(d > ulps).sum()} elements)"


# ------------------------------------------------------------------ ISA switch of the CPU kernels

def _lib():
    from ms_kvcache import _cpu
    return ctypes.CDLL(_cpu.__file__)


def set_isa(isa):
    """0 = portable path, 1 = AVX2/F16C, 2 = AVX-512, 3 = AVX-512 + AVX512_BF16 (if the CPU has it);
    returns the active path."""
    f = _lib().MskvRopeSetIsa
    f.restype = ctypes.c_int
    return f(ctypes.c_int(isa))


def available_isas():
    """The instruction-set paths this CPU runs (leaves the best one active)."""
    out = [i for i in (0, 1, 2, 3) if set_isa(i) == i]
    set_isa(out[-1])
    return out


def reset_isa():
    set_isa(available_isas()[-1])


def convert(kind, src, n_out_dtype):
    """Run the kernels' row conversion ``kind`` (0 f16->f32, 1 bf16->f32, 2 f32->f16, 3 f32->bf16)."""
    src = np.ascontiguousarray(src)
    dst = np.empty(src.shape, dtype=n_out_dtype)
    f = _lib().MskvRopeConvert
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    f(kind, src.ctypes.data, dst.ctypes.data, src.size)
    return dst
