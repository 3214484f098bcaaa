"""rope_reshape_and_cache_merged: rope_reshape_and_cache with the merged per-layer cache
``[2, num_blocks, ...]`` (KVCacheFormat.MERGED_KV)."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Positions, Slots
from ms_kvcache._opspecs.rope import ROPE_RESHAPE_AND_CACHE_MERGED as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache._nz import NZ_C0, nz_head_split
from ms_kvcache.ops import _rope_common as R
from ms_kvcache.ops._kv_shapes import MERGED_SHAPES, cache_geometry
from ms_kvcache.ops import _quant as Q
from ms_kvcache.ops import rope_reshape_and_cache_quant as _quant_op

__all__ = ["rope_reshape_and_cache_merged", "SPEC"]



def _check_static(p_shape, p_dtype, q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype, cs_shape, cs_dtype,
                  kv_shape, kv_dtype, s_shape, s_dtype, is_neox_style, cache_layout):
    op = SPEC.name
    R.check_bool(op, "is_neox_style", is_neox_style)
    SPEC.check_attrs({"cache_layout": cache_layout})
    SPEC.check_ranks({"positions": p_shape, "query": q_shape, "key": k_shape, "value": v_shape,
                      "cos_sin_cache": cs_shape, "kv_cache": kv_shape, "slot_mapping": s_shape})
    SPEC.check_dtypes({"positions": dtype_name(p_dtype), "key": dtype_name(k_dtype), "query": dtype_name(q_dtype),
                       "value": dtype_name(v_dtype), "cos_sin_cache": dtype_name(cs_dtype),
                       "kv_cache": dtype_name(kv_dtype), "slot_mapping": dtype_name(s_dtype)})
    if kv_shape[0] != 2:
        raise ValueError(f"{op}: argument 'kv_cache': expected shape {MERGED_SHAPES[cache_layout]} (K plane 0, V "
                         f"plane 1), got {tuple(kv_shape)}")
    nb, bs, h, d = cache_geometry(op, "kv_cache", tuple(kv_shape[1:]), cache_layout, kv_dtype)
    if h is None:  # NZ: the head split from the key rows
        h, d = nz_head_split(op, "key", k_shape, d, NZ_C0[dtype_name(kv_dtype)], "the rotary embedding")
    _, max_position = R.check_gqa(op, p_shape, q_shape, k_shape, v_shape, cs_shape, s_shape, h, d)
    return nb * bs, max_position


_check_static_graph = constexpr(_check_static)
_Prim = prim_class(SPEC)


@constexpr
def _graph_backend(backend):
    return R.require_backend(SPEC.name, backend)


#: PyNative branch (see rope_reshape_and_cache): static check -> (num_slots, max_position).
_EAGER = EagerOp(SPEC, _check_static, index_checks=(Positions("positions", 1), Slots("slot_mapping", 0)),
                 skip_if_empty=("key",))


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP = 'rope_reshape_and_cache_merged'
_GRAPH_ARGS = ('positions', 'query', 'key', 'value', 'cos_sin_cache', 'kv_cache', 'slot_mapping')

def rope_reshape_and_cache_merged(positions, query, key, value, cos_sin_cache, kv_cache, slot_mapping, *,
                                  is_neox_style=True, cache_layout="BSND", k_scale=None, v_scale=None, k_offset=None,
                                  v_offset=None, k_scale_cache=None, v_scale_cache=None):
    """:func:`ms_kvcache.rope_reshape_and_cache` for a merged per-layer cache: the rotated key row goes to
    ``kv_cache[0]``, the value row to ``kv_cache[1]``, in one pass; returns the rotated query and key.

    ``KVCacheFormat.MERGED_KV`` (vLLM 0.9 style), the layout of :func:`ms_kvcache.reshape_and_cache_merged`.
    Conventions and errors: docs/ops-rope.md; quantized caches: docs/quantization.md.

    Args:
        positions (Tensor): ``[T']`` int32 or int64, in ``[0, max_position)``.
        query (Tensor): ``[T', num_heads, head_size]`` or flattened; float16, bfloat16 or float32.
        key (Tensor): ``[T', num_kv_heads, head_size]`` or flattened; dtype of ``query``.
        value (Tensor): shape and dtype of ``key``.
        cos_sin_cache (Tensor): ``[max_position, rotary_dim]``, cos then sin halves; float32 (recommended) or
            the dtype of ``query``; ``rotary_dim`` even, ``<= head_size``.
        kv_cache (Tensor | Parameter): ``[2, num_blocks, block_size, num_kv_heads, head_size]`` (BSND) or
            ``[2, num_blocks, num_kv_heads, block_size, head_size]`` (BNSD); dtype of ``query`` (int8 / float8
            when quantizing); contiguous; written in place (in a graph: a whole Parameter).
        slot_mapping (Tensor): ``[T]`` int32 or int64, ``T <= T'``; ``slot < 0`` skips the token; in a graph a slot
            given twice keeps the later token's row on the cpu backend, fails the call on the sim backend and is
            undefined on ascend.
        is_neox_style (bool | numpy.bool_, keyword): True (default): pairs ``(i, i + rotary_dim / 2)``;
            False: ``(2i, 2i+1)``.
        cache_layout (str, keyword): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (``[2, num_blocks,
            num_kv_heads * head_size // C0, block_size, C0]``, C0 = 16 / 32 for 2- / 1-byte dtypes; key
            ``[T', num_kv_heads, head_size]``).
        k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache (keyword): int8 / float8
            ``kv_cache``: as for :func:`ms_kvcache.rope_reshape_and_cache`.

    Returns:
        tuple(Tensor, Tensor): ``(query_out, key_out)``, new tensors shaped like ``query`` and ``key``, every
        row rotated. ``kv_cache`` is written in place.

    Raises:
        TypeError: a non-Tensor argument; non-bool ``is_neox_style``; mixed or unsupported dtypes; a float8
            cache on sim / ascend; in a graph, a ``kv_cache`` that is not a whole Parameter.
        ValueError: as :func:`ms_kvcache.rope_reshape_and_cache`; also ``kv_cache.shape[0] != 2``.
        RuntimeError: in a graph, at launch: a kernel failure (a repeated slot on sim, a launch the AscendC
            tiling rejects, a bad scale value). Per mode and backend: docs/ops-rope.md.
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(positions), F.typeof(query), F.typeof(key),
                          F.typeof(value), F.typeof(cos_sin_cache), F.typeof(kv_cache), F.typeof(slot_mapping))
        if Q.routes_graph(key.dtype, kv_cache.dtype, k_scale is None, v_scale is None, k_offset is None,
                          v_offset is None, k_scale_cache is None, v_scale_cache is None):
            return _quant_op.rope_reshape_and_cache_quant(positions, query, key, value, cos_sin_cache, kv_cache, None,
                                                          slot_mapping, is_neox_style, cache_layout, Q.MERGED,
                                                          k_scale, v_scale, k_offset, v_offset, k_scale_cache,
                                                          v_scale_cache)
        _check_static_graph(positions.shape, positions.dtype, query.shape, query.dtype, key.shape, key.dtype,
                            value.shape, value.dtype, cos_sin_cache.shape, cos_sin_cache.dtype,
                            kv_cache.shape, kv_cache.dtype, slot_mapping.shape, slot_mapping.dtype,
                            is_neox_style, cache_layout)
        query_out, key_out = _get_cache_prim(_Prim)(_graph_backend(graph_backend()), is_neox_style, cache_layout)(
            positions, query, key, value, cos_sin_cache, kv_cache, slot_mapping)
    else:
        if Q.routes(key, kv_cache, k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache):
            return _quant_op.rope_reshape_and_cache_quant(positions, query, key, value, cos_sin_cache, kv_cache, None,
                                                          slot_mapping, is_neox_style, cache_layout, Q.MERGED,
                                                          k_scale, v_scale, k_offset, v_offset, k_scale_cache,
                                                          v_scale_cache)
        if type(is_neox_style) is not bool:  # noqa: E721 - np.bool_ -> bool (other types raise TypeError)
            is_neox_style = R.check_bool(SPEC.name, "is_neox_style", is_neox_style)
        query_out, key_out = _EAGER(R.require_backend(SPEC.name, _backend.get_backend()), (is_neox_style, cache_layout),
                                    positions, query, key, value, cos_sin_cache, kv_cache, slot_mapping)
    return query_out, key_out
