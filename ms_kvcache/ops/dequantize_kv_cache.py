"""dequantize_kv_cache: read an int8 / float8 KV-cache plane back as float32 (docs/quantization.md).

A host helper for tests, debugging and CPU attention: it reads the codes with ``asnumpy()`` (a pipeline
sync), so it is PyNative only and not meant for a hot loop. The formulas invert the quantized writes of
:func:`ms_kvcache.reshape_and_cache` and friends, and are CANN's antiquant rule (``AscendAntiQuant``,
``(q + offset) * scale``), which ``fused_infer_attention_score`` applies to the scales it is given (their
mode, shape and dtype: docs/quantization.md).
"""
import ml_dtypes
import mindspore as ms
import numpy as np
from mindspore import Tensor

from ms_kvcache._formats import CACHE_LAYOUTS
from ms_kvcache._spec import dtype_name

__all__ = ["dequantize_kv_cache"]

_OP = "dequantize_kv_cache"
_FP8 = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def _tensor(name, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{_OP}: argument '{name}': expected a Tensor, got {type(x).__name__}")
    return x


def _codes(cache):
    """The cache's codes as float32 numpy (exact: every int8 / float8 value is a float32)."""
    d = dtype_name(cache.dtype)
    if d == "int8":
        return cache.asnumpy().astype(np.float32)
    if d in _FP8:  # MindSpore's CPU cannot asnumpy() / Cast a float8 tensor: read its bytes
        try:
            raw = cache.view(ms.uint8)
        except TypeError as e:  # MindSpore 2.7: Tensor.view takes only a shape
            raise TypeError(f"{_OP}: argument 'cache': reading a {d} cache needs Tensor.view(dtype), which "
                            f"MindSpore {ms.__version__} does not have (2.8+)") from e
        return raw.asnumpy().view(_FP8[d]).astype(np.float32)
    raise TypeError(f"{_OP}: argument 'cache': expected dtype int8, float8_e4m3fn or float8_e5m2, got {d}")


def _f32(name, x):
    x = _tensor(name, x)
    if dtype_name(x.dtype) != "float32":
        raise TypeError(f"{_OP}: argument '{name}': expected dtype float32, got {dtype_name(x.dtype)}")
    return x.asnumpy()


def dequantize_kv_cache(cache, *, scale=None, offset=None, scale_cache=None, cache_layout="BSND"):
    """Dequantize one int8 / float8 cache plane to float32: ``(q + offset) * scale``.

    The inverse of the quantizing writes and CANN's antiquant rule (``AscendAntiQuant``, what
    fused_infer_attention_score applies). Host computation through numpy (PyNative; a pipeline sync).
    Shapes, values and the reading rules: docs/quantization.md, "Reading a cache back".

    Args:
        cache (Tensor): the codes, int8, float8_e4m3fn or float8_e5m2: a GQA plane ``[num_blocks,
            block_size, num_kv_heads, head_size]`` (BSND) / ``[num_blocks, num_kv_heads, block_size,
            head_size]`` (BNSD) or an MLA plane ``[num_blocks, block_size, hidden]`` (merged: ``kv_cache[0]``).
        scale (Tensor, keyword): the static scales given to the write: float32 ``[]`` / ``[1]``,
            ``[num_kv_heads]`` or ``[num_kv_heads, head_size]`` (MLA: ``[hidden]``); finite, > 0.
        offset (Tensor, keyword): int8 only: float32 shaped like ``scale``, finite; default 0.
        scale_cache (Tensor, keyword): dynamic scales instead: the float32 scale cache the write filled, the
            plane's shape with head_size 1 (a 4-d plane: also without that axis); values not checked.
        cache_layout (str, keyword): ``"BSND"`` (default) or ``"BNSD"``: where a 4-d plane's head axis is
            (no effect on an MLA plane). An NZ cache: pass ``nz_to_nd(cache)`` reshaped to BSND.

    Returns:
        Tensor: float32, shaped like ``cache``.

    Raises:
        TypeError: a non-Tensor argument; a cache dtype without a quantization rule; a scale, offset or scale
            cache that is not float32; a float8 cache on MindSpore 2.7 (its codes cannot be read there).
        ValueError: neither or both of ``scale`` / ``scale_cache``; an offset with a float8 cache or with
            ``scale_cache``; a shape that does not fit the plane; a static scale that is 0, negative, NaN or
            inf, a NaN / inf offset; an unknown ``cache_layout``.
    """
    _tensor("cache", cache)
    if cache_layout == "NZ":
        raise ValueError(f"{_OP}: argument 'cache_layout': expected 'BSND' or 'BNSD', got 'NZ': dequantize an NZ cache "
                         f"as ms_kvcache.nz_to_nd(cache).reshape(num_blocks, block_size, num_kv_heads, head_size) "
                         f"with cache_layout='BSND'")
    if cache_layout not in CACHE_LAYOUTS:
        raise ValueError(f"{_OP}: argument 'cache_layout': expected one of {CACHE_LAYOUTS}, got {cache_layout!r}")
    shape = tuple(cache.shape)
    if len(shape) not in (3, 4):
        raise ValueError(f"{_OP}: argument 'cache': expected rank 3 (MLA plane) or 4 (GQA plane), got shape "
                         f"{list(shape)}")
    q = _codes(cache)
    if (scale is None) == (scale_cache is None):
        raise ValueError(f"{_OP}: argument 'scale': expected exactly one of 'scale' (static) and 'scale_cache' "
                         f"(dynamic), got {'both' if scale is not None else 'neither'}")
    fp8 = dtype_name(cache.dtype) != "int8"
    if offset is not None and (fp8 or scale_cache is not None):
        why = "float8 caches are symmetric" if fp8 else "dynamic scales have no offset"
        raise ValueError(f"{_OP}: argument 'offset': expected None ({why}), got a tensor")
    bnsd = cache_layout == "BNSD" and len(shape) == 4
    heads = shape[1] if bnsd else (shape[2] if len(shape) == 4 else 1)
    if scale_cache is not None:
        sc = _f32("scale_cache", scale_cache)
        want = shape[:-1] + (1,)
        if sc.shape != want and not (len(shape) == 4 and sc.shape == shape[:-1]):
            also = f" or {list(shape[:-1])}" if len(shape) == 4 else " (an MLA plane: the trailing 1 is required)"
            raise ValueError(f"{_OP}: argument 'scale_cache': expected shape {list(want)} (the plane with head_size "
                             f"1){also}, got {list(sc.shape)}")
        return Tensor(q * sc.reshape(want))
    s = _f32("scale", scale)
    o = None if offset is None else _f32("offset", offset)
    if o is not None and o.shape != s.shape:
        raise ValueError(f"{_OP}: argument 'offset': expected shape {list(s.shape)} (same as 'scale'), got "
                         f"{list(o.shape)}")
    for name, v, positive in (("scale", s, True), ("offset", o, False)):
        if v is None:
            continue
        flat = np.asarray(v, np.float32).reshape(-1)
        bad = ~np.isfinite(flat) | ((flat <= 0) if positive else False)
        if bad.any():
            i = int(np.argmax(bad))
            what = "finite values > 0" if positive else "finite values"
            raise ValueError(f"{_OP}: argument '{name}': expected {what} (as the quantized writes), got {flat[i]!r} "
                             f"at flat index {i}")
    d = shape[-1]
    if s.shape in ((), (1,)):
        view = (1,)
    elif len(shape) == 4 and s.shape == (heads,):
        view = (heads, 1, 1) if bnsd else (heads, 1)
    elif len(shape) == 4 and s.shape == (heads, d):
        view = (heads, 1, d) if bnsd else (heads, d)
    elif len(shape) == 3 and s.shape == (d,):
        view = (d,)
    else:
        exp = f"[] or [1] or [{heads}] or [{heads}, {d}]" if len(shape) == 4 else f"[] or [1] or [{d}]"
        raise ValueError(f"{_OP}: argument 'scale': expected shape {exp} for a cache {list(shape)} "
                         f"({cache_layout}), got {list(s.shape)}")
    if o is not None:
        q = q + o.reshape(view)
    return Tensor((q * s.reshape(view)).astype(np.float32))
