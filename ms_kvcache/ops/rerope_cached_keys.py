"""rerope_cached_keys: move cached (already rotated) keys to new positions in place: undo RoPE at the
old position and apply it at the new one, in one pass (reuse of cached KV at another offset)."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Positions, Slots
from ms_kvcache._formats import ND_CACHE_LAYOUT_CODES, ND_CACHE_LAYOUTS
from ms_kvcache._spec import FLOAT_DTYPES, INDEX_DTYPES, AttrSpec, OpSpec, TensorSpec, dtype_name, register
from ms_kvcache.ops import _rope_common as R

__all__ = ["rerope_cached_keys", "SPEC"]

SPEC = register(OpSpec(
    name="rerope_cached_keys",
    op_type="MskvReropeCachedKeys",
    inputs=(
        TensorSpec("key_cache", "T", (3, 4), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
        TensorSpec("old_positions", "P", (1,)),
        TensorSpec("new_positions", "P", (1,)),
        TensorSpec("cos_sin_cache", "C", (2,)),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "C": FLOAT_DTYPES, "P": INDEX_DTYPES, "S": INDEX_DTYPES},
    group_rules=R.COS_SIN_RULE,
    attrs=(
        AttrSpec("is_neox_style", "bool", True, (True, False)),
        AttrSpec("cache_layout", "str", "BSND", ND_CACHE_LAYOUTS, ND_CACHE_LAYOUT_CODES),  # no NZ: see _check_static
    ),
))


def _check_static(kc_shape, kc_dtype, s_shape, s_dtype, o_shape, o_dtype, n_shape, n_dtype, cs_shape, cs_dtype,
                  is_neox_style, cache_layout):
    op = SPEC.name
    R.check_bool(op, "is_neox_style", is_neox_style)
    if cache_layout == "NZ":
        raise ValueError(f"{op}: argument 'cache_layout': expected 'BSND' or 'BNSD', got 'NZ' (NZ key caches "
                         f"cannot be re-rotated in place by this op)")
    SPEC.check_attrs({"cache_layout": cache_layout})
    SPEC.check_ranks({"key_cache": kc_shape, "slot_mapping": s_shape, "old_positions": o_shape,
                      "new_positions": n_shape, "cos_sin_cache": cs_shape})
    SPEC.check_dtypes({"key_cache": dtype_name(kc_dtype), "slot_mapping": dtype_name(s_dtype),
                       "old_positions": dtype_name(o_dtype), "new_positions": dtype_name(n_dtype),
                       "cos_sin_cache": dtype_name(cs_dtype)})
    if len(kc_shape) == 3:
        nb, bs, d = kc_shape
    elif cache_layout == "BSND":
        nb, bs, _, d = kc_shape
    else:
        nb, _, bs, d = kc_shape
    n = s_shape[0]
    for name, shape in (("old_positions", o_shape), ("new_positions", n_shape)):
        R.check_positions_shape(op, name, shape, n, "slot_mapping")
    max_position, _ = R.table_geometry(op, cs_shape, d)
    return nb * bs, max_position


_check_static_graph = constexpr(_check_static)
_Prim = prim_class(SPEC)


@constexpr
def _graph_backend(backend):
    return R.require_backend(SPEC.name, backend)


#: PyNative branch: static check -> (num_slots, max_position); no entries launches nothing.
_EAGER = EagerOp(SPEC, _check_static, index_checks=(Positions("old_positions", 1), Positions("new_positions", 1),
                                                    Slots("slot_mapping", 0)),
                 skip_if_empty=("slot_mapping",))


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP = 'rerope_cached_keys'
_GRAPH_ARGS = ('key_cache', 'slot_mapping', 'old_positions', 'new_positions', 'cos_sin_cache')

def rerope_cached_keys(key_cache, slot_mapping, old_positions, new_positions, cos_sin_cache, *,
                       is_neox_style=True, cache_layout="BSND"):
    """Re-rotate cached keys in place: for each ``i``, the key heads stored at ``slot_mapping[i]``
    (rotated for position ``old_positions[i]``) are rotated for ``new_positions[i]`` instead, in one
    pass over the cache rows (CacheBlend-style reuse of cached KV at a new offset).

    Each pair is rotated once by the delta ``R(new) R(old)^-1``, computed per angle index in fp64
    from the two fp32 table rows (``cd = (cn*co + sn*so) / (co^2 + so^2)``,
    ``sd = (sn*co - cn*so) / (co^2 + so^2)``), rounded to fp32, then applied like a forward RoPE in
    fp32 with round-to-nearest-even. ``old == new`` is the identity (up to the sign of zero);
    ``old -> new`` equals a fresh rope at ``new`` of the key the cache holds. Convention: vLLM
    ``rotary_embedding`` (cos_sin_cache layout, NeoX / GPT-J pairs, partial rotary).

    Args:
        key_cache (Tensor | Parameter; a whole Parameter in a graph): ``[num_blocks, block_size, num_kv_heads,
            head_size]`` (``"BSND"``), ``[num_blocks, num_kv_heads, block_size, head_size]`` (``"BNSD"``), or a
            one-head plane ``[num_blocks, block_size, head_size]`` such as the MLA ``k_pe_cache``; float16, bfloat16
            or float32; contiguous. Rotated in place.
        slot_mapping (Tensor): int32 or int64 ``[N]``: the slots to re-rotate; ``slot < 0``
            skips the entry. Non-negative slots must be distinct.
        old_positions (Tensor): int32 or int64 ``[N]``: the positions the cached keys were rotated
            for, in ``[0, max_position)``.
        new_positions (Tensor): ``[N]``, same dtype as ``old_positions``, in ``[0, max_position)``.
        cos_sin_cache (Tensor): ``[max_position, rotary_dim]``, cos | sin halves (vLLM layout);
            float32 (recommended) or the cache dtype; ``rotary_dim`` even and ``<= head_size``;
            only the first ``rotary_dim`` elements of each head change.
        is_neox_style (bool | numpy.bool_): pairs ``(i, i + rotary_dim/2)`` if True, ``(2i, 2i+1)`` if False.
        cache_layout (str): ``"BSND"`` (default) or ``"BNSD"``; ignored for a rank-3 plane.

    Returns:
        None. ``key_cache`` is modified in place (ordered before later reads in graph mode).

    Raises:
        TypeError: non-Tensor arguments; unsupported dtypes; old/new positions of different dtypes;
            ``cos_sin_cache`` neither float32 nor the cache dtype; non-bool ``is_neox_style``.
        ValueError: ``slot_mapping``, a positions tensor or ``cos_sin_cache`` sharing memory with ``key_cache``
            (PyNative; in a graph a RuntimeError at launch on cpu and sim, nothing written); unknown
            ``cache_layout``; rank/shape mismatches (positions not ``[N]``);
            odd ``rotary_dim`` or ``rotary_dim > head_size``; PyNative only: positions outside
            ``[0, max_position)``, slots ``>= num_blocks * block_size``, duplicated non-negative
            slots; a non-contiguous cache. In graph mode entries with an out-of-range slot or
            position are skipped (left unchanged); duplicated slots there leave those rows
            unspecified (still inside the cache).
        TypeError (GRAPH_MODE / ``@ms.jit``, at compile time): ``key_cache`` not a whole Parameter (a
            slice, split or reshape of one, an op's result, a Tensor attribute or argument: MindSpore would
            write a temporary copy); a Python list or numpy array where a Tensor is expected.
        RuntimeError (GRAPH_MODE / ``@ms.jit``): a kernel failure, with its message in the exception text
            (e.g. a repeated slot on the sim backend, a launch the AscendC tiling rejects).
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(key_cache), F.typeof(slot_mapping),
                          F.typeof(old_positions), F.typeof(new_positions), F.typeof(cos_sin_cache))
        _check_static_graph(key_cache.shape, key_cache.dtype, slot_mapping.shape, slot_mapping.dtype,
                            old_positions.shape, old_positions.dtype, new_positions.shape, new_positions.dtype,
                            cos_sin_cache.shape, cos_sin_cache.dtype, is_neox_style, cache_layout)
        _get_cache_prim(_Prim)(_graph_backend(graph_backend()), is_neox_style, cache_layout)(
            key_cache, slot_mapping, old_positions, new_positions, cos_sin_cache)
    else:
        if type(is_neox_style) is not bool:  # noqa: E721 - np.bool_ -> bool (other types raise TypeError)
            is_neox_style = R.check_bool(SPEC.name, "is_neox_style", is_neox_style)
        _EAGER(R.require_backend(SPEC.name, _backend.get_backend()), (is_neox_style, cache_layout),
               key_cache, slot_mapping, old_positions, new_positions, cos_sin_cache)
    return None
