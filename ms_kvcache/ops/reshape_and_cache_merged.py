"""reshape_and_cache_merged: write new tokens' K and V rows into one merged paged cache per layer."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Slots
from ms_kvcache._opspecs.copy import RESHAPE_AND_CACHE_MERGED as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache.ops._kv_shapes import MERGED_SHAPES, cache_geometry, check_kv_rows
from ms_kvcache.ops import _quant as Q
from ms_kvcache.ops import reshape_and_cache_quant as _quant_op

__all__ = ["reshape_and_cache_merged", "SPEC"]



def _check_static(k_shape, k_dtype, v_shape, v_dtype, c_shape, c_dtype, s_shape, s_dtype, cache_layout):
    op = SPEC.name
    SPEC.check_attrs({"cache_layout": cache_layout})
    SPEC.check_ranks({"key": k_shape, "value": v_shape, "kv_cache": c_shape, "slot_mapping": s_shape})
    SPEC.check_dtypes({"key": dtype_name(k_dtype), "value": dtype_name(v_dtype), "kv_cache": dtype_name(c_dtype),
                       "slot_mapping": dtype_name(s_dtype)})
    if c_shape[0] != 2:
        raise ValueError(f"{op}: argument 'kv_cache': expected shape {MERGED_SHAPES[cache_layout]} (K plane, V plane), "
                         f"got {tuple(c_shape)}")
    nb, bs, h, d = cache_geometry(op, "kv_cache", tuple(c_shape[1:]), cache_layout, c_dtype)
    t = s_shape[0]
    check_kv_rows(op, "key", k_shape, t, h, d)
    check_kv_rows(op, "value", v_shape, t, h, d)
    return nb * bs


_check_static_graph = constexpr(_check_static)
_Prim = prim_class(SPEC)
#: PyNative branch (fast path when available): static check -> num_slots; no slots launches nothing.
_EAGER = EagerOp(SPEC, _check_static, index_checks=(Slots("slot_mapping"),), skip_if_empty=("slot_mapping",))


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP, _GRAPH_ARGS = 'reshape_and_cache_merged', ('key', 'value', 'kv_cache', 'slot_mapping')

def reshape_and_cache_merged(key, value, kv_cache, slot_mapping, cache_layout="BSND", *, k_scale=None, v_scale=None,
                             k_offset=None, v_offset=None, k_scale_cache=None, v_scale_cache=None):
    """Write the K/V rows of the first ``len(slot_mapping)`` tokens into a merged paged cache, in place.

    :func:`ms_kvcache.reshape_and_cache` for the merged per-layer format ``KVCacheFormat.MERGED_KV`` (vLLM 0.9
    style): one tensor with the K plane at index 0 and the V plane at index 1. Layouts and errors:
    docs/ops-copy.md; quantized caches: docs/quantization.md.

    Args:
        key (Tensor): ``[T', num_kv_heads, head_size]`` or ``[T', num_kv_heads * head_size]``, ``T' >= T``;
            float16, bfloat16, float32 or int8. Rows ``T..T'-1`` (padding) are ignored.
        value (Tensor): shape and dtype of ``key``.
        kv_cache (Tensor | Parameter): ``[2, num_blocks, block_size, num_kv_heads, head_size]`` (BSND),
            ``[2, num_blocks, num_kv_heads, block_size, head_size]`` (BNSD) or ``[2, num_blocks, num_kv_heads *
            head_size // C0, block_size, C0]`` (NZ, C0 = 16 / 32 for 2- / 1-byte dtypes); dtype of ``key`` (int8 / float8
            when quantizing); contiguous; written in place (in a graph: a whole Parameter).
        slot_mapping (Tensor): ``[T]`` int32 or int64; token ``t`` goes to block ``slot // block_size``, row
            ``slot % block_size`` of both planes; ``slot < 0`` skips it; in a graph a slot given twice keeps the
            later token's row on the cpu backend, fails the call on the sim backend and is undefined on ascend.
        cache_layout (str): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (FRACTAL_NZ, docs/ops-copy.md).
        k_scale, v_scale, k_offset, v_offset (Tensor, keyword): static quantization of the K / V plane, as
            for :func:`ms_kvcache.reshape_and_cache`.
        k_scale_cache, v_scale_cache (Tensor | Parameter, keyword): dynamic scales, one scale cache per
            plane shaped as for :func:`ms_kvcache.reshape_and_cache`; written in place.

    Returns:
        None: ``kv_cache`` (and the scale caches) are written in place; in a graph the write is ordered before
        later reads of them.

    Raises:
        TypeError: a non-Tensor argument; mixed or unsupported dtypes; in a graph, a ``kv_cache`` that is not
            a whole Parameter.
        ValueError: ``kv_cache.shape[0] != 2`` or another shape mismatch; an invalid scale; in PyNative a slot
            out of range or repeated, a non-contiguous cache, a read input sharing memory with the cache.
        RuntimeError: in a graph, at launch: a kernel failure (a repeated slot on sim, a launch the AscendC
            tiling rejects, a bad scale value). Per mode and backend: docs/ops-copy.md, "Errors".
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(key), F.typeof(value), F.typeof(kv_cache),
                          F.typeof(slot_mapping))
        if Q.routes_graph(key.dtype, kv_cache.dtype, k_scale is None, v_scale is None, k_offset is None,
                          v_offset is None, k_scale_cache is None, v_scale_cache is None):
            return _quant_op.reshape_and_cache_quant(key, value, kv_cache, None, slot_mapping, cache_layout, Q.MERGED,
                                                     k_scale, v_scale, k_offset, v_offset, k_scale_cache,
                                                     v_scale_cache)
        _check_static_graph(key.shape, key.dtype, value.shape, value.dtype, kv_cache.shape, kv_cache.dtype,
                            slot_mapping.shape, slot_mapping.dtype, cache_layout)
        _get_cache_prim(_Prim)(graph_backend(), cache_layout)(key, value, kv_cache, slot_mapping)
    else:
        if Q.routes(key, kv_cache, k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache):
            return _quant_op.reshape_and_cache_quant(key, value, kv_cache, None, slot_mapping, cache_layout, Q.MERGED,
                                                     k_scale, v_scale, k_offset, v_offset, k_scale_cache,
                                                     v_scale_cache)
        _EAGER(_backend.get_backend(), (cache_layout,), key, value, kv_cache, slot_mapping)
    return None
