"""rope_reshape_and_cache_merged: rope_reshape_and_cache with the merged per-layer cache
``[2, num_blocks, ...]`` (KVCacheFormat.MERGED_KV)."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Positions, Slots
from ms_kvcache._formats import CACHE_LAYOUT_CODES, CACHE_LAYOUTS
from ms_kvcache._spec import FLOAT_DTYPES, INDEX_DTYPES, AttrSpec, OpSpec, TensorSpec, dtype_name, register
from ms_kvcache._nz import MERGED_SHAPES, NZ_C0, cache_geometry, nz_head_split
from ms_kvcache.ops import _rope_common as R
from ms_kvcache.ops.rope_reshape_and_cache import check_gqa

__all__ = ["rope_reshape_and_cache_merged", "SPEC"]

SPEC = register(OpSpec(
    name="rope_reshape_and_cache_merged",
    op_type="MskvRopeReshapeAndCacheMerged",
    inputs=(
        TensorSpec("positions", "P", (1,)),
        TensorSpec("query", "T", (2, 3)),
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("cos_sin_cache", "C", (2,)),
        TensorSpec("kv_cache", "T", (5,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
    ),
    outputs=(
        TensorSpec("query_out", "T", (2, 3)),
        TensorSpec("key_out", "T", (2, 3)),
    ),
    dtype_groups={"T": FLOAT_DTYPES, "C": FLOAT_DTYPES, "P": INDEX_DTYPES, "S": INDEX_DTYPES},
    group_rules=R.COS_SIN_RULE,
    attrs=(
        AttrSpec("is_neox_style", "bool", True, (True, False)),
        AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),
    ),
    extra={"out_shape": R.out_like(1, 2), "out_dtype": R.out_like(1, 2)},
))


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
    _, max_position = check_gqa(op, p_shape, q_shape, k_shape, v_shape, cs_shape, s_shape, h, d)
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
    """:func:`ms_kvcache.rope_reshape_and_cache` for a merged per-layer cache (vLLM 0.9 style,
    ``KVCacheFormat.MERGED_KV``): rotary embedding on ``query`` and ``key``, then the rotated key
    row goes to ``kv_cache[0]`` and the value row to ``kv_cache[1]``, in one pass.

    Follows vLLM's ``rotary_embedding`` (cos_sin_cache layout, NeoX / GPT-J pairs, partial rotary)
    and ``reshape_and_cache`` semantics on the merged layout of ``reshape_and_cache_merged``.

    Args:
        positions (Tensor): int32 or int64 ``[T']``, each in ``[0, max_position)``.
        query (Tensor): ``[T', num_heads, head_size]`` or ``[T', num_heads * head_size]``; float16,
            bfloat16 or float32. Not modified.
        key (Tensor): ``[T', num_kv_heads, head_size]`` or ``[T', num_kv_heads * head_size]``; same
            dtype as ``query``. Not modified.
        value (Tensor): same shape rules and dtype as ``key``.
        cos_sin_cache (Tensor): ``[max_position, rotary_dim]``, cos | sin halves (vLLM layout);
            float32 (recommended) or the dtype of ``query``; ``rotary_dim`` even, ``<= head_size``.
        kv_cache (Tensor | Parameter; a whole Parameter in a graph): ``[2, num_blocks, block_size, num_kv_heads,
            head_size]`` (``"BSND"``) or ``[2, num_blocks, num_kv_heads, block_size, head_size]`` (``"BNSD"``); K at
            index 0, V at index 1; same dtype as ``query``; contiguous. Written in place.
        slot_mapping (Tensor): int32 or int64 ``[T]``, ``T <= T'``; ``slot < 0`` skips the token.
        is_neox_style (bool | numpy.bool_): pairs ``(i, i + rotary_dim/2)`` if True, ``(2i, 2i+1)`` if False.
        cache_layout (str): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (``[2, num_blocks, num_kv_heads *
            head_size // 16, block_size, 16]``, key ``[T', num_kv_heads, head_size]``; docs/ops-copy.md).
        k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache: keyword only; an int8 /
            float8 ``kv_cache``: quantized writes of the rotated key and the value, as
            :func:`ms_kvcache.rope_reshape_and_cache` (docs/quantization.md; backends cpu, and sim / ascend
            for int8 caches).

    Returns:
        tuple(Tensor, Tensor): ``(query_out, key_out)``, new tensors shaped like ``query`` and
        ``key``, every row rotated (fp32 compute, round to nearest even).

    Raises:
        TypeError: as :func:`ms_kvcache.rope_reshape_and_cache` (dtypes, non-Tensor arguments,
            non-bool ``is_neox_style``).
        ValueError: as :func:`ms_kvcache.rope_reshape_and_cache`; also ``kv_cache.shape[0] != 2``.
            In graph mode out-of-range positions give zero output rows and no cache write;
            out-of-range slots are skipped; a slot given twice keeps the later token's rows on the cpu
            backend, fails the call on the sim backend and is undefined on ascend (docs/ops-rope.md).
        TypeError (GRAPH_MODE / ``@ms.jit``, at compile time): ``kv_cache`` not a whole Parameter (a
            slice, split or reshape of one, an op's result, a Tensor attribute or argument: MindSpore would
            write a temporary copy); a Python list or numpy array where a Tensor is expected.
        RuntimeError (GRAPH_MODE / ``@ms.jit``): a kernel failure, with its message in the exception text
            (e.g. a repeated slot on the sim backend, a launch the AscendC tiling rejects).
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


# quantized writes (routed to ms_kvcache/ops/rope_reshape_and_cache_quant.py)
from ms_kvcache.ops import _quant as Q  # noqa: E402
from ms_kvcache.ops import rope_reshape_and_cache_quant as _quant_op  # noqa: E402
