"""Shape checks shared by the copy writes and their quantizing variants (below both: a base op and its
``_quant`` module import this, never each other's checks)."""
import numpy as np

from ms_kvcache._nz import nz_geometry
from ms_kvcache._opspecs.copy import BLOCK_CACHE_RANKS
from ms_kvcache._spec import dtype_name

__all__ = ["cache_geometry", "check_kv_rows", "check_block_mapping_shape", "BLOCK_CACHE_RANKS", "MERGED_SHAPES"]

#: The shape of a merged ``[2, ...]`` cache per layout, for messages.
MERGED_SHAPES = {"BSND": "[2, num_blocks, block_size, num_kv_heads, head_size]",
                 "BNSD": "[2, num_blocks, num_kv_heads, block_size, head_size]",
                 "NZ": "[2, num_blocks, num_kv_heads * head_size // C0, block_size, C0]"}


def cache_geometry(op, name, shape, layout, dtype=None):
    """(num_blocks, block_size, num_kv_heads, head_size) of a rank-4 cache in ``layout``; an NZ cache
    (``dtype`` needed: its C0) has no head split: (num_blocks, block_size, None, num_kv_heads * head_size)."""
    if layout == "NZ":
        nb, bs, hidden, _ = nz_geometry(op, name, shape, dtype_name(dtype))
        return nb, bs, None, hidden
    if layout == "BSND":
        nb, bs, h, d = shape
    else:
        nb, h, bs, d = shape
    return nb, bs, h, d


def check_kv_rows(op, name, shape, num_tokens, heads, head_size):
    """key/value: [T', H, D] or [T', H*D] with T' >= num_tokens; heads None (an NZ cache): any [T', H, D] with
    H * D = head_size (the cache's hidden size) or [T', hidden]."""
    if heads is None:
        ok = int(np.prod(shape[1:], dtype=np.int64)) == head_size
        exp = f"[T', {head_size}] or [T', num_kv_heads, head_size] with num_kv_heads * head_size = {head_size}"
    elif len(shape) == 3:
        ok = tuple(shape[1:]) == (heads, head_size)
        exp = f"[T', {heads}, {head_size}]"
    else:
        ok = shape[1] == heads * head_size
        exp = f"[T', {heads * head_size}]"
    if not ok:
        raise ValueError(f"{op}: argument '{name}': expected shape {exp} (num_kv_heads, head_size of the "
                         f"cache), got {tuple(shape)}")
    if shape[0] < num_tokens:
        raise ValueError(f"{op}: argument '{name}': expected at least len(slot_mapping) = {num_tokens} rows, "
                         f"got {shape[0]}")


def check_block_mapping_shape(op, name, shape):
    """block_mapping of copy_blocks / swap_blocks: ``[n, 2]`` (src, dst block ids)."""
    if len(shape) != 2 or shape[1] != 2:
        raise ValueError(f"{op}: argument '{name}': expected shape [n, 2] (src, dst block ids), got {tuple(shape)}")
