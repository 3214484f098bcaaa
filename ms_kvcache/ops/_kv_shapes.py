"""Shape checks shared by the copy writes and their quantizing variants (below both: a base op and its
``_quant`` module import this, never each other's checks)."""
from ms_kvcache._opspecs.copy import BLOCK_CACHE_RANKS

__all__ = ["cache_geometry", "check_kv_rows", "check_block_mapping_shape", "BLOCK_CACHE_RANKS"]


def cache_geometry(op, name, shape, layout):
    """(num_blocks, block_size, num_kv_heads, head_size) of a rank-4 cache in ``layout``."""
    if layout == "BSND":
        nb, bs, h, d = shape
    else:
        nb, h, bs, d = shape
    return nb, bs, h, d


def check_kv_rows(op, name, shape, num_tokens, heads, head_size):
    """key/value: [T', H, D] or [T', H*D] with T' >= num_tokens."""
    if len(shape) == 3:
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
