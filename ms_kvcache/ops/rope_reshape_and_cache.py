"""rope_reshape_and_cache: rotary position embedding on query and key fused with the paged-cache write
of the rotated key and the value (one pass over K)."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Positions, Slots
from ms_kvcache._opspecs.rope import ROPE_RESHAPE_AND_CACHE as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache._nz import NZ_C0, nz_head_split
from ms_kvcache.ops import _rope_common as R
from ms_kvcache.ops._kv_shapes import cache_geometry
from ms_kvcache.ops import _quant as Q
from ms_kvcache.ops import rope_reshape_and_cache_quant as _quant_op

__all__ = ["rope_reshape_and_cache", "SPEC"]



def _check_static(p_shape, p_dtype, q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype, cs_shape, cs_dtype,
                  kc_shape, kc_dtype, vc_shape, vc_dtype, s_shape, s_dtype, is_neox_style, cache_layout):
    op = SPEC.name
    R.check_bool(op, "is_neox_style", is_neox_style)
    SPEC.check_attrs({"cache_layout": cache_layout})
    SPEC.check_ranks({"positions": p_shape, "query": q_shape, "key": k_shape, "value": v_shape,
                      "cos_sin_cache": cs_shape, "key_cache": kc_shape, "value_cache": vc_shape,
                      "slot_mapping": s_shape})
    SPEC.check_dtypes({"positions": dtype_name(p_dtype), "key": dtype_name(k_dtype), "query": dtype_name(q_dtype),
                       "value": dtype_name(v_dtype), "cos_sin_cache": dtype_name(cs_dtype),
                       "key_cache": dtype_name(kc_dtype), "value_cache": dtype_name(vc_dtype),
                       "slot_mapping": dtype_name(s_dtype)})
    if tuple(vc_shape) != tuple(kc_shape):
        raise ValueError(f"{op}: argument 'value_cache': expected shape {tuple(kc_shape)} (same as "
                         f"'key_cache'), got {tuple(vc_shape)}")
    nb, bs, h, d = cache_geometry(op, "key_cache", kc_shape, cache_layout, kc_dtype)
    if h is None:  # NZ: the head split from the key rows
        h, d = nz_head_split(op, "key", k_shape, d, NZ_C0[dtype_name(kc_dtype)], "the rotary embedding")
    rows, max_position = R.check_gqa(op, p_shape, q_shape, k_shape, v_shape, cs_shape, s_shape, h, d)
    return nb * bs, max_position


_check_static_graph = constexpr(_check_static)
_Prim = prim_class(SPEC)


@constexpr
def _graph_backend(backend):
    return R.require_backend(SPEC.name, backend)


#: PyNative branch (fast path when available): checks of index values, then one launch. The static
#: check returns (num_slots, max_position); T' = 0 launches nothing (empty outputs).
_EAGER = EagerOp(SPEC, _check_static, index_checks=(Positions("positions", 1), Slots("slot_mapping", 0)),
                 skip_if_empty=("key",))


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP = 'rope_reshape_and_cache'
_GRAPH_ARGS = ('positions', 'query', 'key', 'value', 'cos_sin_cache', 'key_cache', 'value_cache', 'slot_mapping')

def rope_reshape_and_cache(positions, query, key, value, cos_sin_cache, key_cache, value_cache, slot_mapping,
                           *, is_neox_style=True, cache_layout="BSND", k_scale=None, v_scale=None, k_offset=None,
                           v_offset=None, k_scale_cache=None, v_scale_cache=None):
    """Rotate ``query`` and ``key`` (RoPE) and write the rotated key and the value rows into a paged cache, in
    one pass; returns the rotated query and key.

    vLLM ``rotary_embedding`` (``cos_sin_cache`` layout, NeoX / GPT-J pairs, partial rotary) followed by
    ``reshape_and_cache``. Conventions, numerics and errors: docs/ops-rope.md; quantized caches (the rotated
    key is quantized): docs/quantization.md.

    Args:
        positions (Tensor): ``[T']`` int32 or int64, in ``[0, max_position)``: the table row of each row.
        query (Tensor): ``[T', num_heads, head_size]`` or ``[T', num_heads * head_size]``; float16, bfloat16
            or float32; not modified.
        key (Tensor): ``[T', num_kv_heads, head_size]`` or flattened; dtype of ``query``; not modified.
        value (Tensor): shape and dtype of ``key``; cached unrotated.
        cos_sin_cache (Tensor): ``[max_position, rotary_dim]``, cos then sin halves (vLLM); float32
            (recommended) or the dtype of ``query``; ``rotary_dim`` even, ``<= head_size``.
        key_cache (Tensor | Parameter): ``[num_blocks, block_size, num_kv_heads, head_size]`` (BSND) or
            ``[num_blocks, num_kv_heads, block_size, head_size]`` (BNSD); dtype of ``query`` (int8 / float8
            when quantizing); contiguous; written in place (in a graph: a whole Parameter).
        value_cache (Tensor | Parameter): shape, dtype and layout of ``key_cache``; written in place (a whole
            Parameter in a graph).
        slot_mapping (Tensor): ``[T]`` int32 or int64, ``T <= T'``; ``slot < 0`` skips the token; rows ``T..T'-1``
            are rotated and returned but not cached; in a graph a slot given twice keeps the later token's row on
            the cpu backend, fails the call on the sim backend and is undefined on ascend.
        is_neox_style (bool | numpy.bool_, keyword): True (default): pairs ``(i, i + rotary_dim / 2)``;
            False: ``(2i, 2i+1)``.
        cache_layout (str, keyword): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (``[num_blocks, H*D // C0, block_size, C0]``).
        k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache (keyword): int8 / float8 caches:
            as for :func:`ms_kvcache.reshape_and_cache`.

    Returns:
        tuple(Tensor, Tensor): ``(query_out, key_out)``, new tensors shaped like ``query`` and ``key``, all
        ``T'`` rows rotated (fp32, rounded to nearest even). The caches are written in place.

    Raises:
        TypeError: a non-Tensor argument; a non-bool ``is_neox_style``; mixed or unsupported dtypes; a float8
            cache on sim / ascend; in a graph, a cache that is not a whole Parameter.
        ValueError: a shape mismatch; ``rotary_dim`` odd or > head_size; an invalid scale; in PyNative a
            position or slot out of range, a repeated slot, memory shared between a cache and an argument.
        RuntimeError: in a graph, at launch: caches sharing memory or a bad scale value (cpu, sim; nothing
            written), a kernel failure. Per mode and backend: docs/ops-rope.md, "Indices and bad input".
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(positions), F.typeof(query), F.typeof(key),
                          F.typeof(value), F.typeof(cos_sin_cache), F.typeof(key_cache), F.typeof(value_cache),
                          F.typeof(slot_mapping))
        if Q.routes_graph(key.dtype, key_cache.dtype, k_scale is None, v_scale is None, k_offset is None,
                          v_offset is None, k_scale_cache is None, v_scale_cache is None):
            return _quant_op.rope_reshape_and_cache_quant(positions, query, key, value, cos_sin_cache, key_cache,
                                                          value_cache, slot_mapping, is_neox_style, cache_layout,
                                                          Q.SEPARATE, k_scale, v_scale, k_offset, v_offset,
                                                          k_scale_cache, v_scale_cache)
        _check_static_graph(positions.shape, positions.dtype, query.shape, query.dtype, key.shape, key.dtype,
                            value.shape, value.dtype, cos_sin_cache.shape, cos_sin_cache.dtype,
                            key_cache.shape, key_cache.dtype, value_cache.shape, value_cache.dtype,
                            slot_mapping.shape, slot_mapping.dtype, is_neox_style, cache_layout)
        query_out, key_out = _get_cache_prim(_Prim)(_graph_backend(graph_backend()), is_neox_style, cache_layout)(
            positions, query, key, value, cos_sin_cache, key_cache, value_cache, slot_mapping)
    else:
        if Q.routes(key, key_cache, k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache):
            return _quant_op.rope_reshape_and_cache_quant(positions, query, key, value, cos_sin_cache, key_cache,
                                                          value_cache, slot_mapping, is_neox_style, cache_layout,
                                                          Q.SEPARATE, k_scale, v_scale, k_offset, v_offset,
                                                          k_scale_cache, v_scale_cache)
        if type(is_neox_style) is not bool:  # noqa: E721 - np.bool_ -> bool (other types raise TypeError)
            is_neox_style = R.check_bool(SPEC.name, "is_neox_style", is_neox_style)
        query_out, key_out = _EAGER(R.require_backend(SPEC.name, _backend.get_backend()), (is_neox_style, cache_layout),
                                    positions, query, key, value, cos_sin_cache, key_cache, value_cache, slot_mapping)
    return query_out, key_out
