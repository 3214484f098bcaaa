"""Shape/dtype/value checks shared by the fused RoPE-write ops (rope_reshape_and_cache,
rope_reshape_and_cache_merged, rope_concat_and_cache_mla, rerope_cached_keys).

Conventions (vLLM ``rotary_embedding`` / ``get_rope``):

- ``cos_sin_cache`` is ``[max_position, rotary_dim]``: row ``p`` holds ``cos(p * inv_freq)`` in its
  first ``rotary_dim / 2`` columns and ``sin(p * inv_freq)`` in the last ``rotary_dim / 2``
  (:func:`ms_kvcache.build_cos_sin_cache` builds one). Its dtype is float32 (recommended: the
  kernels compute in fp32, so an fp32 table adds no rounding) or the dtype of the rotated data.
- NeoX style (``is_neox_style=True``) rotates the pairs ``(i, i + rotary_dim/2)``; GPT-J style the
  pairs ``(2i, 2i+1)``. Only the first ``rotary_dim`` elements of each head rotate; the rest pass
  through unchanged (partial rotary).
- Pair ``(x, y)`` with angle index ``i`` becomes ``(x*cos_i - y*sin_i, y*cos_i + x*sin_i)``,
  evaluated in fp32 (two products, one add/subtract, no FMA) and rounded to nearest even.
- positions outside ``[0, max_position)`` raise ``ValueError`` in PyNative. In graph mode (no value
  checks) the kernels never read the table out of bounds: such a token gets zero rows in the
  rotated outputs and is not written to any cache.
"""
import numpy as np

from ms_kvcache._opspecs.rope import COS_SIN_RULE, out_like  # noqa: F401  (re-exported)

__all__ = [
    "COS_SIN_RULE", "table_geometry", "heads_of", "check_positions_shape", "check_position_values",
    "check_bool", "out_like", "BACKENDS", "require_backend", "check_gqa",
]

#: Backends with kernels for the RoPE-write family: the native cpu kernels (cpu_kernel/) and the AscendC
#: kernels (op_kernel/ + op_host/), run through the emulation ("sim") or the CANN package ("ascend").
BACKENDS = ("cpu", "sim", "ascend")



def require_backend(op, backend):
    """Raise NotImplementedError unless ``backend`` has kernels for this family; returns ``backend``."""
    if backend not in BACKENDS:
        raise NotImplementedError(f"{op}: backend {backend!r} has no kernel for this op yet (implemented: "
                                  f"{', '.join(BACKENDS)}); use ms_kvcache.set_backend('cpu')")
    return backend


def check_bool(op, name, value):
    """``value`` as a Python bool: a bool or a numpy bool (``np.bool_``, as read from a config array);
    anything else (``1``, ``"yes"``, ``None``) raises TypeError naming the argument."""
    if type(value) is bool:  # noqa: E721 - the common case, exact type
        return value
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{op}: argument '{name}': expected a bool (or numpy.bool_), got {type(value).__name__} "
                    f"{value!r}")


def table_geometry(op, shape, head_size, name="cos_sin_cache", limit="head_size"):
    """(max_position, rotary_dim) of ``cos_sin_cache``; rotary_dim even and in (0, head_size]. ``limit``
    names ``head_size`` in the message (MLA: the rope_dim of ``k_pe`` / ``k_pe_cache``)."""
    if len(shape) != 2:
        raise ValueError(f"{op}: argument '{name}': expected shape [max_position, rotary_dim], got "
                         f"{tuple(shape)}")
    max_position, rotary_dim = int(shape[0]), int(shape[1])
    if max_position < 1:
        raise ValueError(f"{op}: argument '{name}': expected max_position >= 1 rows, got shape {tuple(shape)}")
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"{op}: argument '{name}': expected an even rotary_dim >= 2 (shape[1]), got "
                         f"{rotary_dim} (shape {tuple(shape)})")
    if rotary_dim > head_size:
        raise ValueError(f"{op}: argument '{name}': expected rotary_dim (shape[1]) <= {limit} = {head_size}, "
                         f"got {rotary_dim} (shape {tuple(shape)})")
    return max_position, rotary_dim


def heads_of(op, name, shape, head_size, what="num_heads"):
    """Number of heads of a ``[T', H, head_size]`` or ``[T', H * head_size]`` tensor."""
    if len(shape) == 3:
        if shape[2] != head_size:
            raise ValueError(f"{op}: argument '{name}': expected shape [T', {what}, {head_size}] (head_size of "
                             f"the cache), got {tuple(shape)}")
        return int(shape[1])
    if len(shape) != 2:
        raise ValueError(f"{op}: argument '{name}': expected rank 2 or 3, got shape {tuple(shape)}")
    if shape[1] == 0 or shape[1] % head_size:
        raise ValueError(f"{op}: argument '{name}': expected shape [T', {what} * {head_size}] (a multiple of "
                         f"head_size of the cache), got {tuple(shape)}")
    return int(shape[1]) // head_size


def check_positions_shape(op, name, shape, rows, rows_of="query"):
    if len(shape) != 1 or shape[0] != rows:
        raise ValueError(f"{op}: argument '{name}': expected shape [{rows}] (one position per row of "
                         f"'{rows_of}'), got {tuple(shape)}")


def check_position_values(op, name, values, max_position):
    """PyNative value check: every position in [0, max_position)."""
    if values.size == 0:
        return
    bad = (values < 0) | (values >= max_position)
    if bad.any():
        idx = int(np.argmax(bad))
        raise ValueError(f"{op}: argument '{name}': expected positions in [0, {max_position}) (rows of "
                         f"cos_sin_cache), got {int(values[idx])} at index {idx}")


def check_gqa(op, p_shape, q_shape, k_shape, v_shape, cs_shape, s_shape, heads, head_size):
    """Shape checks of rope_reshape_and_cache(_merged) and their quantizing variant; returns (rows,
    max_position)."""
    rows = int(k_shape[0])
    kh = heads_of(op, "key", k_shape, head_size, "num_kv_heads")
    if kh != heads:
        raise ValueError(f"{op}: argument 'key': expected num_kv_heads = {heads} (heads of the cache), got "
                         f"{kh} (shape {tuple(k_shape)})")
    vh = heads_of(op, "value", v_shape, head_size, "num_kv_heads")
    if vh != heads or v_shape[0] != rows:
        raise ValueError(f"{op}: argument 'value': expected {rows} rows of {heads} heads x {head_size} "
                         f"(like 'key'), got shape {tuple(v_shape)}")
    heads_of(op, "query", q_shape, head_size, "num_heads")
    if q_shape[0] != rows:
        raise ValueError(f"{op}: argument 'query': expected {rows} rows (same T' as 'key'), got shape "
                         f"{tuple(q_shape)}")
    check_positions_shape(op, "positions", p_shape, rows, "key")
    if len(s_shape) != 1 or s_shape[0] > rows:
        raise ValueError(f"{op}: argument 'slot_mapping': expected shape [T] with T <= {rows} (rows of "
                         f"'key'), got {tuple(s_shape)}")
    max_position, _ = table_geometry(op, cs_shape, head_size)
    return rows, max_position
