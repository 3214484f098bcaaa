"""rope_reshape_and_cache: rotary position embedding on query and key fused with the paged-cache write
of the rotated key and the value (one pass over K)."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Positions, Slots
from ms_kvcache._formats import CACHE_LAYOUT_CODES, CACHE_LAYOUTS
from ms_kvcache._nz import NZ_C0, cache_geometry, nz_head_split
from ms_kvcache._spec import FLOAT_DTYPES, INDEX_DTYPES, AttrSpec, OpSpec, TensorSpec, dtype_name, register
from ms_kvcache.ops import _rope_common as R

__all__ = ["rope_reshape_and_cache", "SPEC"]

SPEC = register(OpSpec(
    name="rope_reshape_and_cache",
    op_type="MskvRopeReshapeAndCache",
    inputs=(
        TensorSpec("positions", "P", (1,)),
        TensorSpec("query", "T", (2, 3)),
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("cos_sin_cache", "C", (2,)),
        TensorSpec("key_cache", "T", (4,), inplace=True),
        TensorSpec("value_cache", "T", (4,), inplace=True),
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


def check_gqa(op, p_shape, q_shape, k_shape, v_shape, cs_shape, s_shape, heads, head_size):
    """Shape checks shared with rope_reshape_and_cache_merged; returns (rows, max_position)."""
    rows = int(k_shape[0])
    kh = R.heads_of(op, "key", k_shape, head_size, "num_kv_heads")
    if kh != heads:
        raise ValueError(f"{op}: argument 'key': expected num_kv_heads = {heads} (heads of the cache), got "
                         f"{kh} (shape {tuple(k_shape)})")
    vh = R.heads_of(op, "value", v_shape, head_size, "num_kv_heads")
    if vh != heads or v_shape[0] != rows:
        raise ValueError(f"{op}: argument 'value': expected {rows} rows of {heads} heads x {head_size} "
                         f"(like 'key'), got shape {tuple(v_shape)}")
    R.heads_of(op, "query", q_shape, head_size, "num_heads")
    if q_shape[0] != rows:
        raise ValueError(f"{op}: argument 'query': expected {rows} rows (same T' as 'key'), got shape "
                         f"{tuple(q_shape)}")
    R.check_positions_shape(op, "positions", p_shape, rows, "key")
    if len(s_shape) != 1 or s_shape[0] > rows:
        raise ValueError(f"{op}: argument 'slot_mapping': expected shape [T] with T <= {rows} (rows of "
                         f"'key'), got {tuple(s_shape)}")
    max_position, _ = R.table_geometry(op, cs_shape, head_size)
    return rows, max_position


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
    rows, max_position = check_gqa(op, p_shape, q_shape, k_shape, v_shape, cs_shape, s_shape, h, d)
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
    """Apply rotary position embedding to ``query`` and ``key`` and write the rotated key and the
    value rows into a paged KV cache, in one pass (saves the re-read of K of a separate
    rope + ``reshape_and_cache``).

    Follows vLLM's ``rotary_embedding`` (``cos_sin_cache`` layout, NeoX / GPT-J pairing, partial
    rotary) followed by vLLM's ``reshape_and_cache`` (slot mapping, ``slot < 0`` skips).

    Args:
        positions (Tensor): int32 or int64 ``[T']``: the position of each row, used to gather row
            ``positions[t]`` of ``cos_sin_cache``. Must be in ``[0, max_position)``.
        query (Tensor): ``[T', num_heads, head_size]`` or the flattened view
            ``[T', num_heads * head_size]``; float16, bfloat16 or float32. Not modified.
        key (Tensor): ``[T', num_kv_heads, head_size]`` or ``[T', num_kv_heads * head_size]``;
            same dtype as ``query``. Not modified.
        value (Tensor): same shape rules and dtype as ``key``; copied into ``value_cache`` unrotated.
        cos_sin_cache (Tensor): ``[max_position, rotary_dim]``, cos in the first ``rotary_dim/2``
            columns and sin in the last ``rotary_dim/2`` (vLLM layout; see
            :func:`ms_kvcache.build_cos_sin_cache`). float32 (recommended) or the dtype of
            ``query``. ``rotary_dim`` must be even and ``<= head_size``; elements
            ``rotary_dim..head_size-1`` of every head pass through unchanged.
        key_cache (Tensor | Parameter; a whole Parameter in a graph): ``[num_blocks, block_size, num_kv_heads,
            head_size]`` for ``cache_layout="BSND"`` or ``[num_blocks, num_kv_heads, block_size, head_size]`` for
            ``"BNSD"``; same dtype as ``query``; contiguous. Written in place.
        value_cache (Tensor | Parameter; a whole Parameter in a graph): same shape, dtype and layout as ``key_cache``.
        slot_mapping (Tensor): int32 or int64 ``[T]``, ``T <= T'``. Rotated key row ``t`` and
            value row ``t`` go to block ``slot // block_size``, row ``slot % block_size``;
            ``slot < 0`` skips the token. Rows ``T..T'-1`` are rotated (returned) but not cached.
        is_neox_style (bool | numpy.bool_): True: rotate pairs ``(i, i + rotary_dim/2)`` (GPT-NeoX / Llama);
            False: pairs ``(2i, 2i+1)`` (GPT-J). Keyword only.
        cache_layout (str): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (caches ``[num_blocks, num_kv_heads *
            head_size // 16, block_size, 16]``, key ``[T', num_kv_heads, head_size]``; docs/ops-copy.md). Keyword only.
        k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache: keyword only; int8 / float8
            caches: the rotated key (``key_out`` as returned) and the value are quantized into them,
            with the arguments, formulas and errors of :func:`ms_kvcache.reshape_and_cache` (static
            scales ``[]`` / ``[num_kv_heads]`` / ``[num_kv_heads, head_size]``, or dynamic scale caches
            written in place);
            see docs/quantization.md. Backends: cpu (int8, float8) and the AscendC kernel
            (op_kernel/rope_reshape_and_cache_quant.cpp, sim and ascend: int8 caches; float8 caches are a
            TypeError there; Ascend310P: no bfloat16, head_size a multiple of 32, dynamic scales in BSND
            caches with num_kv_heads a multiple of 8).

    Returns:
        tuple(Tensor, Tensor): ``(query_out, key_out)``, new tensors with the shapes and dtype of
        ``query`` and ``key``: all ``T'`` rows rotated. Pair ``(x, y)`` with angle index ``i``
        becomes ``(x*cos_i - y*sin_i, y*cos_i + x*sin_i)`` computed in fp32 and rounded to nearest
        even. The caches are written in place (no copy; in graph mode the write is ordered before
        later reads of the caches in the same graph).

    Raises:
        TypeError: an argument is not a Tensor; ``is_neox_style`` is not a bool or numpy.bool_;
            query, key, value and the caches differ in dtype or are not float16/bfloat16/float32;
            ``cos_sin_cache`` is neither float32 nor the query dtype; positions/slot_mapping are not
            int32/int64.
        ValueError: unknown ``cache_layout``; a rank or shape mismatch (head_size or num_kv_heads of
            key/value versus the cache, T' of query/key/value/positions, ``len(slot_mapping) > T'``);
            ``rotary_dim`` odd or ``> head_size``; PyNative only: a position outside
            ``[0, max_position)``, a slot ``>= num_blocks * block_size`` or a duplicated
            non-negative slot; a non-contiguous cache. In graph mode, where index values cannot be
            checked, a token with an out-of-range position gets zero rows in ``query_out`` /
            ``key_out`` and is not cached, and out-of-range slots are skipped: nothing is ever read
            or written out of bounds; a slot given twice keeps the later token's rows on the cpu
            backend, fails the call on the sim backend and is undefined on ascend (docs/ops-rope.md);
            ``key_cache`` and ``value_cache`` the same tensor or sharing memory (PyNative);
            a tensor the op only reads (positions, query, key, value, cos_sin_cache, slot_mapping, a scale) sharing memory with a cache (PyNative; in a graph a RuntimeError at launch on cpu and sim, nothing written).
        TypeError (GRAPH_MODE / ``@ms.jit``, at compile time): ``key_cache`` or ``value_cache`` not a whole
            Parameter (a slice, split or reshape of one, an op's result, a Tensor attribute or argument: MindSpore
            would write a temporary copy); a Python list or numpy array where a Tensor is expected.
        RuntimeError (GRAPH_MODE / ``@ms.jit``, at launch, cpu and sim): ``key_cache`` and ``value_cache`` sharing
            memory (the same Parameter twice, two Parameters over one buffer); nothing is written. On the ascend
            backend the kernel finds it instead and stops the launch (``AscendC::Trap()``, before any write):
            MindSpore raises at the next stream sync with the AI Core exception, not this message (seen in the
            emulation only). A kernel failure's message is in the exception text. Quantized writes: a static
            scale of 0, < 0, NaN or inf or a NaN / inf offset: the cpu kernel fails the launch naming the
            argument (``k_scale`` ...); the AscendC kernels (sim, ascend) trap, nothing is written; on sim the
            message reports rule TRAP, then "; cause: argument 'k_scale': expected finite values > 0, got ... at
            flat index ..." (the cpu kernel's check of the same inputs); on an NPU no reason.
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


# quantized writes (routed to ms_kvcache/ops/rope_reshape_and_cache_quant.py)
from ms_kvcache.ops import _quant as Q  # noqa: E402
from ms_kvcache.ops import rope_reshape_and_cache_quant as _quant_op  # noqa: E402
