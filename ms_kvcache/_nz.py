"""FRACTAL_NZ paged caches (``cache_layout="NZ"``): the layout's checks and the ND <-> NZ conversions.

An NZ cache holds the ND cache ``[num_blocks, block_size, hidden]`` (``hidden = num_kv_heads * head_size``) as
``[num_blocks, hidden // C0, block_size, C0]``: element ``(b, t, h)`` sits at flat index
``((b * (hidden // C0) + h // C0) * block_size + t) * C0 + h % C0``, C0 = 32 bytes of elements (16 for float16 /
bfloat16, 32 for int8). It is the layout the Ascend 310P paged attention reads (docs/ops-copy.md, "NZ caches").
:func:`nd_to_nz` / :func:`nz_to_nd` are the layout's definition in code; the tests use them as the oracle.
"""
import numpy as np

from ms_kvcache._formats import NZ_C0
from ms_kvcache._spec import dtype_name as _dtype_name

__all__ = ["NZ_C0", "NZ_BLOCK_ALIGN", "nz_c0", "nz_geometry", "nz_head_split", "nd_to_nz", "nz_to_nd", "NZ_RANK_TEXT"]

#: block_size of an NZ cache is a multiple of this (the fractal is 16 tokens tall).
NZ_BLOCK_ALIGN = 16

#: The NZ cache shape, for messages.
NZ_RANK_TEXT = "[num_blocks, num_kv_heads * head_size // C0, block_size, C0]"


def nz_c0(op, name, dtype):
    """C0 of an NZ cache of ``dtype`` (a dtype name): 16 for float16 / bfloat16, 32 for int8; TypeError
    naming ``op`` and argument ``name`` for any other dtype."""
    c0 = NZ_C0.get(dtype)
    if c0 is None:
        raise TypeError(f"{op}: argument '{name}': expected dtype float16, bfloat16 or int8 for an NZ cache (C0 = 16, "
                        f"16, 32: 32 bytes per fractal row), got {dtype}")
    return c0


def nz_geometry(op, name, shape, dtype):
    """``(num_blocks, block_size, hidden, C0)`` of an NZ cache ``[num_blocks, hidden // C0, block_size, C0]``.

    Raises:
        TypeError: ``dtype`` has no C0 (float32, float8).
        ValueError: not rank 4, last dim not C0, block_size not a multiple of 16."""
    c0 = nz_c0(op, name, dtype)
    shape = tuple(int(d) for d in shape)
    if len(shape) != 4 or shape[3] != c0:
        raise ValueError(f"{op}: argument '{name}': expected an NZ cache {NZ_RANK_TEXT} with C0 = {c0} for {dtype}, "
                         f"got shape {shape}")
    nb, f, bs, _ = shape
    if bs % NZ_BLOCK_ALIGN:
        raise ValueError(f"{op}: argument '{name}': expected block_size (dim 2 of an NZ cache) a multiple of "
                         f"{NZ_BLOCK_ALIGN}, got {bs} (shape {shape})")
    return nb, bs, f * c0, c0


def nz_head_split(op, name, shape, hidden, c0, why):
    """``(num_kv_heads, head_size)`` of an NZ cache's rows from ``shape`` = ``[T', num_kv_heads, head_size]``
    (``name``, e.g. key): the writes that work per head (quantization scales, rotary embedding: ``why``) need it,
    the NZ cache has only ``hidden``. ValueError unless rank 3, ``num_kv_heads * head_size == hidden`` and
    ``head_size`` a multiple of C0 (each head a whole number of fractal columns)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 3:
        raise ValueError(f"{op}: argument '{name}': expected [T', num_kv_heads, head_size] (rank 3) with an NZ cache "
                         f"({why} work per head, and an NZ cache holds num_kv_heads * head_size = {hidden} only), got "
                         f"shape {shape}")
    h, d = shape[1], shape[2]
    if h * d != hidden or d % c0:
        raise ValueError(f"{op}: argument '{name}': expected num_kv_heads * head_size = {hidden} (the NZ cache's "
                         f"hidden size) with head_size a multiple of C0 = {c0}, got shape {shape}")
    return h, d


def _dtype_name_of(x):
    return str(x.dtype) if isinstance(x, np.ndarray) else _dtype_name(x.dtype)


def _as_numpy(op, x):
    """(numpy array, was a Tensor) of ``x``; TypeError for anything else."""
    if isinstance(x, np.ndarray):
        return x, False
    from mindspore import Tensor

    if isinstance(x, Tensor):
        return x.asnumpy(), True
    raise TypeError(f"{op}: argument 'cache': expected a numpy array or a MindSpore Tensor, got {type(x).__name__}")


def _back(a, was_tensor):
    if not was_tensor:
        return a
    from mindspore import Tensor

    return Tensor(np.ascontiguousarray(a))


def nd_to_nz(cache):
    """ND cache -> NZ cache (the NZ layout's definition).

    Args:
        cache (numpy.ndarray | Tensor): ``[num_blocks, block_size, num_kv_heads, head_size]`` (BSND) or
            ``[num_blocks, block_size, hidden]``; float16, bfloat16 or int8; ``hidden`` a multiple of C0
            (16 / 16 / 32), ``block_size`` a multiple of 16.

    Returns:
        The same kind (numpy array or Tensor), ``[num_blocks, hidden // C0, block_size, C0]``:
        ``out[b, h // C0, t, h % C0] = cache[b, t, h]``.

    Raises:
        TypeError: not a numpy array / Tensor, or a dtype without C0.
        ValueError: rank not 3 or 4, ``hidden`` not a multiple of C0, ``block_size`` not a multiple of 16.
    """
    op = "nd_to_nz"
    a, was_tensor = _as_numpy(op, cache)
    c0 = nz_c0(op, "cache", _dtype_name_of(cache))
    if a.ndim not in (3, 4):
        raise ValueError(f"{op}: argument 'cache': expected [num_blocks, block_size, num_kv_heads, head_size] or "
                         f"[num_blocks, block_size, hidden], got shape {a.shape}")
    nb, bs = a.shape[:2]
    hidden = int(np.prod(a.shape[2:], dtype=np.int64))
    if hidden % c0 or bs % NZ_BLOCK_ALIGN:
        raise ValueError(f"{op}: argument 'cache': expected hidden = num_kv_heads * head_size a multiple of C0 = {c0} "
                         f"and block_size a multiple of {NZ_BLOCK_ALIGN}, got shape {a.shape}")
    out = a.reshape(nb, bs, hidden // c0, c0).transpose(0, 2, 1, 3)
    return _back(np.ascontiguousarray(out), was_tensor)


def nz_to_nd(cache):
    """NZ cache -> ND cache ``[num_blocks, block_size, hidden]`` (the inverse of :func:`nd_to_nz`).

    Args:
        cache (numpy.ndarray | Tensor): ``[num_blocks, hidden // C0, block_size, C0]``; float16, bfloat16 or
            int8 (C0 = 16 / 16 / 32).

    Returns:
        The same kind, ``[num_blocks, block_size, hidden]``: ``out[b, t, h] = cache[b, h // C0, t, h % C0]``
        (reshape it to ``[num_blocks, block_size, num_kv_heads, head_size]`` for a BSND view).

    Raises:
        TypeError: not a numpy array / Tensor, or a dtype without C0.
        ValueError: not rank 4 or the last dim not C0.
    """
    op = "nz_to_nd"
    a, was_tensor = _as_numpy(op, cache)
    c0 = nz_c0(op, "cache", _dtype_name_of(cache))
    if a.ndim != 4 or a.shape[3] != c0:
        raise ValueError(f"{op}: argument 'cache': expected an NZ cache {NZ_RANK_TEXT} with C0 = {c0}, got shape "
                         f"{a.shape}")
    nb, f, bs, _ = a.shape
    out = a.transpose(0, 2, 1, 3).reshape(nb, bs, f * c0)
    return _back(np.ascontiguousarray(out), was_tensor)
