"""reshape_and_cache_merged: write new tokens' K and V rows into one merged paged cache per layer."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Slots
from ms_kvcache._formats import CACHE_LAYOUT_CODES, CACHE_LAYOUTS
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, AttrSpec, OpSpec, TensorSpec, dtype_name, register
from ms_kvcache._nz import MERGED_SHAPES, cache_geometry
from ms_kvcache.ops.reshape_and_cache import check_kv_rows

__all__ = ["reshape_and_cache_merged", "SPEC"]

SPEC = register(OpSpec(
    name="reshape_and_cache_merged",
    op_type="MskvReshapeAndCacheMerged",
    inputs=(
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("kv_cache", "T", (5,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=(AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),),
))


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
    """Write the K and V rows of the first ``len(slot_mapping)`` tokens into a merged paged cache, in place.

    Same semantics as :func:`ms_kvcache.reshape_and_cache` (vLLM's ``reshape_and_cache_flash``), for
    the merged per-layer format :attr:`ms_kvcache.KVCacheFormat.MERGED_KV` (vLLM 0.9 style): one tensor
    holding the K plane at index 0 and the V plane at index 1.

    Args:
        key (Tensor): ``[T', num_kv_heads, head_size]`` or ``[T', num_kv_heads * head_size]``;
            float16, bfloat16, float32 or int8.
        value (Tensor): same shape rules and dtype as ``key``.
        kv_cache (Tensor | Parameter; a whole Parameter in a graph): ``[2, num_blocks, block_size, num_kv_heads,
            head_size]`` for ``cache_layout="BSND"`` or ``[2, num_blocks, num_kv_heads, block_size, head_size]`` for
            ``"BNSD"``, ``[2, num_blocks, num_kv_heads * head_size // C0, block_size, C0]`` for ``"NZ"`` (C0 = 16 /
            16 / 32 for float16 / bfloat16 / int8); same dtype as ``key``; contiguous. Written in place (plane 0
            from key, plane 1 from value).
        slot_mapping (Tensor): int32 or int64 ``[T]``, ``T <= T'``. Token ``t`` goes to block
            ``slot // block_size``, row ``slot % block_size`` of both planes. ``slot < 0`` skips the
            token; rows ``T..T'-1`` of key/value are ignored.
        cache_layout (str): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (FRACTAL_NZ, docs/ops-copy.md).
        k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache: keyword only; quantized
            writes into an int8 / float8 ``kv_cache``, exactly as :func:`ms_kvcache.reshape_and_cache`
            (static scales ``[]``, ``[num_kv_heads]`` or ``[num_kv_heads, head_size]``; dynamic scale caches
            ``[num_blocks, block_size, num_kv_heads, 1]`` (BSND) / ``[num_blocks, num_kv_heads,
            block_size, 1]`` (BNSD), one per plane). See docs/quantization.md.

    Returns:
        None. The cache is modified in place (no copy; in graph mode the write is ordered before later
        reads of the cache in the same graph).

    Raises:
        TypeError: an argument is not a Tensor; dtypes of key/value/kv_cache differ or are unsupported;
            slot_mapping is not int32/int64.
        ValueError: ``key``, ``value``, ``slot_mapping`` or a scale sharing memory with ``kv_cache`` (or a
            scale cache) (PyNative; in a graph a RuntimeError at launch on cpu and sim, nothing written);
            unknown ``cache_layout``; a rank or shape mismatch (``kv_cache.shape[0] != 2``, key/value rows
            not ``num_kv_heads * head_size``, ``len(slot_mapping)`` > rows of key); a slot ``>= num_blocks *
            block_size`` or a duplicated non-negative slot (PyNative only; in graph mode out-of-range slots are
            skipped, and a slot given twice keeps the later token's row on the cpu backend, fails the call on the
            sim backend and is undefined on ascend); a non-contiguous cache (PyNative; a view as the cache without
            the fast path).
            Quantized writes: as :func:`ms_kvcache.reshape_and_cache`.
        TypeError (GRAPH_MODE / ``@ms.jit``, at compile time): ``kv_cache`` not a whole Parameter (a
            slice, split or reshape of one, an op's result, a Tensor attribute or argument: MindSpore would
            write a temporary copy); a Python list or numpy array where a Tensor is expected.
        RuntimeError (GRAPH_MODE / ``@ms.jit``): a kernel failure, with its message in the exception text
            (e.g. a repeated slot on the sim backend, a launch the AscendC tiling rejects).
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


# quantized writes (routed to ms_kvcache/ops/reshape_and_cache_quant.py)
from ms_kvcache.ops import _quant as Q  # noqa: E402
from ms_kvcache.ops import reshape_and_cache_quant as _quant_op  # noqa: E402

