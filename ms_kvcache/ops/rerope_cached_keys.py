"""rerope_cached_keys: move cached (already rotated) keys to new positions in place: undo RoPE at the
old position and apply it at the new one, in one pass (reuse of cached KV at another offset)."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Positions, Slots
from ms_kvcache._opspecs.rope import REROPE_CACHED_KEYS as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache.ops import _rope_common as R

__all__ = ["rerope_cached_keys", "SPEC"]



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
    """Re-rotate cached keys in place: the key heads at ``slot_mapping[i]``, rotated for
    ``old_positions[i]``, become rotated for ``new_positions[i]`` (reuse of cached KV at a new offset).

    One pass over the cache rows: each pair is rotated once by ``R(new) R(old)^-1``, computed in fp64 from the
    two table rows and applied in fp32 (docs/ops-rope.md, "Numerics"); ``old == new`` is the identity.
    Conventions of vLLM ``rotary_embedding``.

    Args:
        key_cache (Tensor | Parameter): ``[num_blocks, block_size, num_kv_heads, head_size]`` (BSND),
            ``[num_blocks, num_kv_heads, block_size, head_size]`` (BNSD) or a one-head plane
            ``[num_blocks, block_size, head_size]`` (e.g. MLA ``k_pe_cache``); float16, bfloat16 or float32;
            contiguous; rotated in place (in a graph: a whole Parameter).
        slot_mapping (Tensor): ``[N]`` int32 or int64, the slots to re-rotate, distinct; ``slot < 0`` skips.
        old_positions (Tensor): ``[N]`` int32 or int64, in ``[0, max_position)``: what the keys hold.
        new_positions (Tensor): ``[N]``, same dtype as ``old_positions``, in ``[0, max_position)``.
        cos_sin_cache (Tensor): ``[max_position, rotary_dim]``, cos then sin halves; float32 (recommended) or
            the cache dtype; ``rotary_dim`` even, ``<= head_size`` (only those elements change).
        is_neox_style (bool | numpy.bool_, keyword): True (default): pairs ``(i, i + rotary_dim / 2)``;
            False: ``(2i, 2i+1)``.
        cache_layout (str, keyword): ``"BSND"`` (default) or ``"BNSD"``; ignored for a rank-3 plane.

    Returns:
        None: ``key_cache`` is rotated in place (in a graph, ordered before later reads of it).

    Raises:
        TypeError: a non-Tensor argument; unsupported or mixed dtypes; non-bool ``is_neox_style``; in a graph,
            a cache that is not a whole Parameter.
        ValueError: a shape mismatch; ``rotary_dim`` odd or > head_size; in PyNative a position or slot out of
            range, a repeated slot, a non-contiguous cache, a read input sharing memory with the cache.
        RuntimeError: in a graph, at launch: a read input over the cache (cpu, sim), a kernel failure. Graph
            mode skips out-of-range entries: docs/ops-rope.md, "Indices and bad input".
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
