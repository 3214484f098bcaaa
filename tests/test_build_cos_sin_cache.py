"""build_cos_sin_cache against a float64 scalar reference of the Hugging Face rope formulas."""
import math

import mindspore as ms
import numpy as np
import pytest

import ms_kvcache
from conftest import to_np
from rope_ref import assert_ulp_le, round64

LLAMA3_8B = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 8192}


def ref_inv_freq(rotary_dim, base, scaling):
    """Scalar float64 transcription of transformers.modeling_rope_utils (default / linear / llama3)."""
    out = []
    for i in range(rotary_dim // 2):
        f = 1.0 / base ** (2.0 * i / rotary_dim)
        kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
        if kind == "linear":
            f = f / scaling["factor"]
        elif kind == "llama3":
            factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
            old = scaling["original_max_position_embeddings"]
            wavelen = 2.0 * math.pi / f
            if wavelen < old / hi:        # high frequency: unchanged
                pass
            elif wavelen > old / lo:      # low frequency: divided by factor
                f = f / factor
            else:                         # in between: smooth interpolation
                smooth = (old / wavelen - lo) / (hi - lo)
                f = (1.0 - smooth) * f / factor + smooth * f
        out.append(f)
    return out


def ref_rows(rotary_dim, rows, base, scaling):
    inv = ref_inv_freq(rotary_dim, base, scaling)
    return np.array([[math.cos(p * f) for f in inv] + [math.sin(p * f) for f in inv] for p in rows])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rotary_dim,max_position,base,scaling", [
    (128, 8192, 10000.0, None),
    (64, 4096, 10000.0, {"rope_type": "default"}),
    (128, 10000, 1e6, {"rope_type": "linear", "factor": 4.0}),
    (96, 2048, 10000.0, {"type": "linear", "factor": 2.0}),          # legacy key
    (128, 20000, 500000.0, LLAMA3_8B),
    (64, 16384, 500000.0, dict(LLAMA3_8B, factor=32.0, original_max_position_embeddings=4096)),
])
def test_against_hf_formulas(dtype, rotary_dim, max_position, base, scaling):
    t = ms_kvcache.build_cos_sin_cache(rotary_dim, max_position, base=base, rope_scaling=scaling,
                                       dtype=getattr(ms, dtype))
    assert t.shape == (max_position, rotary_dim) and t.dtype == getattr(ms, dtype)
    got = to_np(t)
    rows = [0, 1, 2, 3, 17, 1000, max_position // 2 + 1, max_position - 2, max_position - 1]
    ref = ref_rows(rotary_dim, rows, base, scaling)
    # correctly rounded float64 values (1 ulp allows for the last-bit difference of two libm's)
    assert_ulp_le(got[rows], round64(ref, dtype), dtype, 1, f"{dtype} table")
    exact = (got[rows].astype(np.float64) == round64(ref, dtype).astype(np.float64)).mean()
    assert exact > 0.999
    assert np.array_equal(got[0].astype(np.float64), [1.0] * (rotary_dim // 2) + [0.0] * (rotary_dim // 2))


def test_llama3_bands():
    """Llama-3.1-8B: the fastest frequencies are unchanged, the slowest divided by 8, the band in
    between interpolated (checked through the table's row 1: angle = inv_freq)."""
    t = to_np(ms_kvcache.build_cos_sin_cache(128, 2, base=500000.0, rope_scaling=LLAMA3_8B))
    angle = np.arctan2(t[1, 64:].astype(np.float64), t[1, :64].astype(np.float64))
    plain = 500000.0 ** (-np.arange(0, 128, 2) / 128)
    wavelen = 2 * np.pi / plain
    high, low = wavelen < 8192 / 4, wavelen > 8192 / 1
    assert high.sum() > 0 and low.sum() > 0 and (~high & ~low).sum() > 0
    np.testing.assert_allclose(angle[high], plain[high], rtol=1e-6)
    np.testing.assert_allclose(angle[low], plain[low] / 8, rtol=1e-6)
    mid = ~high & ~low
    assert np.all(angle[mid] < plain[mid]) and np.all(angle[mid] > plain[mid] / 8)


def test_table_feeds_the_ops():
    t = ms_kvcache.build_cos_sin_cache(64, 128, dtype=ms.bfloat16)
    assert t.dtype == ms.bfloat16  # accepted by the ops with bf16 data (see test_table_in_data_dtype)


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"rotary_dim": 63}, ValueError, r"argument 'rotary_dim': expected an even number, got 63"),
    ({"rotary_dim": 0}, ValueError, r"argument 'rotary_dim': expected an int >= 2"),
    ({"max_position": 0}, ValueError, r"argument 'max_position': expected an int >= 1"),
    ({"base": -1.0}, ValueError, r"argument 'base': expected a finite number > 0"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, ValueError,
     r"argument 'rope_scaling': expected 'rope_type' in \('default', 'linear', 'llama3'\), got 'yarn'"),
    ({"rope_scaling": {"rope_type": "linear"}}, ValueError,
     r"argument 'rope_scaling': expected key 'factor' for rope_type 'linear'"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 0}}, ValueError, r"argument 'rope_scaling\['factor'\]': expected a finite number > 0, got 0"),
    ({"rope_scaling": dict(LLAMA3_8B, high_freq_factor=1.0)}, ValueError,
     r"argument 'rope_scaling': expected high_freq_factor > low_freq_factor"),
    ({"rope_scaling": {k: v for k, v in LLAMA3_8B.items() if k != "original_max_position_embeddings"}}, ValueError,
     r"argument 'rope_scaling': expected key 'original_max_position_embeddings'"),
    ({"rope_scaling": "linear"}, TypeError, r"argument 'rope_scaling': expected None or a dict"),
    ({"dtype": ms.int32}, ValueError, r"argument 'dtype': expected float32, float16 or bfloat16"),
])
def test_bad_inputs(kwargs, exc, match):
    args = dict(rotary_dim=64, max_position=16)
    args.update(kwargs)
    with pytest.raises(exc, match="build_cos_sin_cache: " + match):
        ms_kvcache.build_cos_sin_cache(**args)
