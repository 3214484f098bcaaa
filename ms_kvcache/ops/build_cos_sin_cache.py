"""build_cos_sin_cache: the ``[max_position, rotary_dim]`` cos | sin table consumed by the RoPE ops."""
import math

import mindspore as ms
import numpy as np
from mindspore import Tensor

from ms_kvcache._spec import dtype_arg_name

__all__ = ["build_cos_sin_cache", "ROPE_TYPES"]

#: rope_scaling types understood by :func:`build_cos_sin_cache` ("rope_type", or legacy "type").
ROPE_TYPES = ("default", "linear", "llama3")

_OP = "build_cos_sin_cache"


#: Table dtypes: canonical name -> MindSpore dtype.
_TABLE_DTYPES = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}


def _positive_number(name, value, allow_zero=False):
    """A real number (int/float, numpy ones included; not bool): TypeError otherwise; ValueError unless
    finite and > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{_OP}: argument '{name}': expected a number (int or float), got "
                        f"{type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{_OP}: argument '{name}': expected a finite number > 0, got {value!r}")
    return float(value)


def _positive_int(name, value, minimum):
    """An int (numpy ints included; not bool): TypeError otherwise; ValueError if < ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{_OP}: argument '{name}': expected an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{_OP}: argument '{name}': expected an int >= {minimum}, got {value!r}")
    return int(value)


def _table_dtype(dtype):
    """The MindSpore dtype of the table from a MindSpore dtype, numpy dtype / type or dtype name."""
    name = dtype_arg_name(dtype)
    if name is None:
        raise TypeError(f"{_OP}: argument 'dtype': expected a mindspore dtype, numpy dtype or dtype name, got "
                        f"{type(dtype).__name__} {dtype!r}")
    if name not in _TABLE_DTYPES:
        raise ValueError(f"{_OP}: argument 'dtype': expected float32, float16 or bfloat16 (a mindspore, numpy or "
                         f"str dtype), got {dtype!r}")
    return _TABLE_DTYPES[name]


def _scaling_field(rope_scaling, key):
    if key not in rope_scaling:
        raise ValueError(f"{_OP}: argument 'rope_scaling': expected key {key!r} for rope_type "
                         f"{rope_scaling.get('rope_type', rope_scaling.get('type'))!r}, got keys "
                         f"{sorted(rope_scaling)}")
    return _positive_number(f"rope_scaling['{key}']", rope_scaling[key])


def inv_freq_f64(rotary_dim, base=10000.0, rope_scaling=None):
    """The per-pair inverse frequencies ``[rotary_dim // 2]`` (float64) of the HF rope_scaling types."""
    rotary_dim = _positive_int("rotary_dim", rotary_dim, 2)
    if rotary_dim % 2:
        raise ValueError(f"{_OP}: argument 'rotary_dim': expected an even number, got {rotary_dim}")
    base = _positive_number("base", base)
    inv_freq = 1.0 / (base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))
    if rope_scaling is None:
        return inv_freq
    if not isinstance(rope_scaling, dict):
        raise TypeError(f"{_OP}: argument 'rope_scaling': expected None or a dict (Hugging Face config "
                        f"'rope_scaling'), got {type(rope_scaling).__name__}")
    rope_type = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"{_OP}: argument 'rope_scaling': expected 'rope_type' in {ROPE_TYPES}, got "
                         f"{rope_type!r}")
    if rope_type == "default":
        return inv_freq
    factor = _scaling_field(rope_scaling, "factor")
    if rope_type == "linear":
        # HF _compute_linear_scaling_rope_parameters / vLLM LinearScalingRotaryEmbedding: positions / factor
        return inv_freq / factor
    # llama3: HF _compute_llama3_parameters
    low = _scaling_field(rope_scaling, "low_freq_factor")
    high = _scaling_field(rope_scaling, "high_freq_factor")
    old_len = _scaling_field(rope_scaling, "original_max_position_embeddings")
    if not high > low:
        raise ValueError(f"{_OP}: argument 'rope_scaling': expected high_freq_factor > low_freq_factor, got "
                         f"{high} <= {low}")
    low_freq_wavelen = old_len / low
    high_freq_wavelen = old_len / high
    wavelen = 2.0 * math.pi / inv_freq
    out = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1.0 - smooth) * out / factor + smooth * out
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(medium, smoothed, out)


def _round_f64(x, dtype):
    """float64 -> numpy array of the target dtype, correctly rounded (RNE); bf16 returned as the fp32
    array of the exactly representable bf16 values."""
    if dtype == ms.float32:
        return x.astype(np.float32)
    if dtype == ms.float16:
        return x.astype(np.float16)  # numpy rounds double -> half directly (one rounding)
    # bf16: round to odd into fp32 (exact for the later RNE step since 24 >= 8 + 2), then RNE to bf16
    f = x.astype(np.float32)
    inexact = f.astype(np.float64) != x
    trunc = np.where(np.abs(f.astype(np.float64)) > np.abs(x), np.nextafter(f, np.float32(0)), f)
    odd = np.where(inexact, (trunc.view(np.uint32) | np.uint32(1)).view(np.float32), f)
    u = odd.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def build_cos_sin_cache(rotary_dim, max_position, base=10000.0, rope_scaling=None, dtype=ms.float32):
    """Build the rotary-embedding table ``cos_sin_cache`` ``[max_position, rotary_dim]``.

    Row ``p`` is ``[cos(p * inv_freq), sin(p * inv_freq)]`` (vLLM's ``RotaryEmbedding.cos_sin_cache``
    layout), ``inv_freq[i] = base ** (-2i / rotary_dim)`` scaled as in the Hugging Face configs
    (``transformers.modeling_rope_utils``). Computed in float64 and rounded once (nearest even) to ``dtype``,
    so more accurate at large positions than fp32 tables (docs/ops-rope.md, "Conventions").

    Args:
        rotary_dim (int): even, >= 2 (numpy ints accepted): rotated elements per head (``head_size``, or
            less for partial rotary).
        max_position (int): >= 1, the number of rows (``max_position_embeddings``).
        base (float): ``rope_theta``, > 0 (default 10000).
        rope_scaling (dict | None): None or ``{"rope_type": "default"}`` (unscaled); ``{"rope_type":
            "linear", "factor": f}``; ``{"rope_type": "llama3", "factor", "low_freq_factor",
            "high_freq_factor", "original_max_position_embeddings"}`` (Llama 3.1). ``"type"`` is accepted
            for ``"rope_type"``; other keys are ignored.
        dtype (mindspore.dtype | numpy dtype | str): float32 (default, recommended: the kernels compute in
            fp32), float16 or bfloat16, e.g. ``ms.float32``, ``np.float16`` or ``"bfloat16"``.

    Returns:
        Tensor: ``[max_position, rotary_dim]`` of ``dtype``.

    Raises:
        TypeError: ``rotary_dim`` / ``max_position`` not an int (``8.0``, ``"8"``, a bool); ``base`` or a
            factor not a number; ``rope_scaling`` not None or a dict; ``dtype`` not a dtype or a name.
        ValueError: ``rotary_dim`` odd or < 2; ``max_position`` < 1; a non-positive or non-finite base or
            factor; an unknown ``rope_type`` or missing key; ``high_freq_factor <= low_freq_factor``; a dtype
            other than float32, float16 and bfloat16.
    """
    dtype = _table_dtype(dtype)
    inv_freq = inv_freq_f64(rotary_dim, base, rope_scaling)
    max_position = _positive_int("max_position", max_position, 1)
    angles = np.outer(np.arange(max_position, dtype=np.float64), inv_freq)
    table = np.concatenate([np.cos(angles), np.sin(angles)], axis=1)
    return Tensor(_round_f64(table, dtype), dtype=dtype)
