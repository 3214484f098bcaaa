"""reshape_and_cache: write new tokens' K and V rows into a paged cache by slot mapping."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Slots
from ms_kvcache._opspecs.copy import RESHAPE_AND_CACHE as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache.ops import _quant as Q
from ms_kvcache.ops import reshape_and_cache_quant as _quant_op
from ms_kvcache.ops._kv_shapes import cache_geometry, check_kv_rows

__all__ = ["reshape_and_cache", "SPEC"]



def _check_static(k_shape, k_dtype, v_shape, v_dtype, kc_shape, kc_dtype, vc_shape, vc_dtype,
                  s_shape, s_dtype, cache_layout):
    op = SPEC.name
    SPEC.check_attrs({"cache_layout": cache_layout})
    SPEC.check_ranks({"key": k_shape, "value": v_shape, "key_cache": kc_shape, "value_cache": vc_shape,
                      "slot_mapping": s_shape})
    SPEC.check_dtypes({"key": dtype_name(k_dtype), "value": dtype_name(v_dtype),
                       "key_cache": dtype_name(kc_dtype), "value_cache": dtype_name(vc_dtype),
                       "slot_mapping": dtype_name(s_dtype)})
    if tuple(vc_shape) != tuple(kc_shape):
        raise ValueError(f"{op}: argument 'value_cache': expected shape {tuple(kc_shape)} (same as "
                         f"'key_cache'), got {tuple(vc_shape)}")
    nb, bs, h, d = cache_geometry(op, "key_cache", kc_shape, cache_layout, kc_dtype)
    t = s_shape[0]
    check_kv_rows(op, "key", k_shape, t, h, d)
    check_kv_rows(op, "value", v_shape, t, h, d)
    return nb * bs


_check_static_graph = constexpr(_check_static)
_Prim = prim_class(SPEC)


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP, _GRAPH_ARGS = 'reshape_and_cache', ('key', 'value', 'key_cache', 'value_cache', 'slot_mapping')

def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, cache_layout="BSND", *, k_scale=None,
                      v_scale=None, k_offset=None, v_offset=None, k_scale_cache=None, v_scale_cache=None):
    """Write the K/V rows of the first ``len(slot_mapping)`` tokens into a paged cache, in place.

    vLLM ``reshape_and_cache_flash`` semantics. With a quantization argument (or float key / value and an
    int8 / float8 cache) the rows are quantized on the way in. Layouts and errors by mode and backend:
    docs/ops-copy.md; formulas, backends and reading the cache with fused_infer_attention_score:
    docs/quantization.md.

    Args:
        key (Tensor): ``[T', num_kv_heads, head_size]`` or ``[T', num_kv_heads * head_size]``, ``T' >= T``;
            float16, bfloat16, float32 or int8. Rows ``T..T'-1`` (padding) are ignored.
        value (Tensor): shape and dtype of ``key``.
        key_cache (Tensor | Parameter): ``[num_blocks, block_size, num_kv_heads, head_size]`` (BSND),
            ``[num_blocks, num_kv_heads, block_size, head_size]`` (BNSD) or ``[num_blocks, num_kv_heads *
            head_size // C0, block_size, C0]`` (NZ, C0 = 16 / 32 for 2- / 1-byte dtypes); dtype of ``key``, or int8 / float8
            when quantizing; contiguous; written in place (in a graph: a whole Parameter).
        value_cache (Tensor | Parameter): shape, dtype and layout of ``key_cache``; written in place (a whole
            Parameter in a graph).
        slot_mapping (Tensor): ``[T]`` int32 or int64; token ``t`` goes to block ``slot // block_size``, row
            ``slot % block_size``; ``slot < 0`` skips it; in a graph a slot given twice keeps the later token's row
            on the cpu backend, fails the call on the sim backend and is undefined on ascend.
        cache_layout (str): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (FRACTAL_NZ, docs/ops-copy.md).
        k_scale, v_scale (Tensor, keyword): static scales, float32 ``[]`` / ``[1]``, ``[num_kv_heads]`` or
            ``[num_kv_heads, head_size]``, finite, > 0; key / value then float16, bfloat16 or float32.
        k_offset, v_offset (Tensor, keyword): int8 caches only: float32 shaped like the scale, finite; both
            or neither (default: none, symmetric).
        k_scale_cache, v_scale_cache (Tensor | Parameter, keyword): dynamic scale per token and head
            instead: float32, the cache's shape with head_size 1 (or without that axis); written in place.

    Returns:
        None: the caches (and the scale caches) are written in place; in a graph the write is ordered before
        later reads of them.

    Raises:
        TypeError: a non-Tensor argument; mixed or unsupported dtypes; a float8 cache on sim / ascend; in a
            graph, a cache that is not a whole Parameter.
        ValueError: a shape or layout mismatch; a missing, mis-shaped or invalid scale; in PyNative a slot out
            of range or repeated, a non-contiguous cache, memory shared between a cache and another argument.
        RuntimeError: in a graph, at launch: caches sharing memory or a bad scale value (cpu, sim; nothing
            written), a kernel failure. Per mode and backend: docs/ops-copy.md, "Errors".
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(key), F.typeof(value), F.typeof(key_cache),
                          F.typeof(value_cache), F.typeof(slot_mapping))
        if Q.routes_graph(key.dtype, key_cache.dtype, k_scale is None, v_scale is None, k_offset is None,
                          v_offset is None, k_scale_cache is None, v_scale_cache is None):
            return _quant_op.reshape_and_cache_quant(key, value, key_cache, value_cache, slot_mapping, cache_layout,
                                                     Q.SEPARATE, k_scale, v_scale, k_offset, v_offset, k_scale_cache,
                                                     v_scale_cache)
        _check_static_graph(key.shape, key.dtype, value.shape, value.dtype, key_cache.shape,
                            key_cache.dtype, value_cache.shape, value_cache.dtype, slot_mapping.shape,
                            slot_mapping.dtype, cache_layout)
        _get_cache_prim(_Prim)(graph_backend(), cache_layout)(
            key, value, key_cache, value_cache, slot_mapping)
    else:
        if Q.routes(key, key_cache, k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache):
            return _quant_op.reshape_and_cache_quant(key, value, key_cache, value_cache, slot_mapping, cache_layout,
                                                     Q.SEPARATE, k_scale, v_scale, k_offset, v_offset, k_scale_cache,
                                                     v_scale_cache)
        _EAGER(_backend.get_backend(), (cache_layout,), key, value, key_cache, value_cache, slot_mapping)
    return None


#: PyNative branch (fast path when available): static check -> num_slots; no slots launches nothing.
_EAGER = EagerOp(SPEC, _check_static, index_checks=(Slots("slot_mapping"),), skip_if_empty=("slot_mapping",))

