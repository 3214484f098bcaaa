"""reshape_and_cache: write new tokens' K and V rows into a paged cache by slot mapping."""
import numpy as np
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Slots
from ms_kvcache._formats import CACHE_LAYOUT_CODES, CACHE_LAYOUTS
from ms_kvcache._nz import MERGED_SHAPES, cache_geometry  # noqa: F401  (shared with the other writers)
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, AttrSpec, OpSpec, TensorSpec, dtype_name, register

__all__ = ["reshape_and_cache", "SPEC"]

SPEC = register(OpSpec(
    name="reshape_and_cache",
    op_type="MskvReshapeAndCache",
    inputs=(
        TensorSpec("key", "T", (2, 3)),
        TensorSpec("value", "T", (2, 3)),
        TensorSpec("key_cache", "T", (4,), inplace=True),
        TensorSpec("value_cache", "T", (4,), inplace=True),
        TensorSpec("slot_mapping", "S", (1,)),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=(AttrSpec("cache_layout", "str", "BSND", CACHE_LAYOUTS, CACHE_LAYOUT_CODES),),
))


def check_kv_rows(op, name, shape, num_tokens, heads, head_size):
    """key/value: [T', H, D] or [T', H*D] with T' >= num_tokens; heads None (an NZ cache): any [T', H, D] with
    H * D = head_size (the cache's hidden size) or [T', hidden]."""
    if heads is None:
        ok = int(np.prod(shape[1:], dtype=np.int64)) == head_size
        exp = f"[T', {head_size}] or [T', num_kv_heads, head_size] with num_kv_heads * head_size = {head_size}"
    elif len(shape) == 3:
        ok = tuple(shape[1:]) == (heads, head_size)
        exp = f"[T', {heads}, {head_size}]"
    else:
        ok = shape[1] == heads * head_size
        exp = f"[T', {heads * head_size}]"
    if not ok:
        raise ValueError(f"{op}: argument '{name}': expected shape {exp} (num_kv_heads, head_size of the "
                         f"cache), got {tuple(shape)}")
    if shape[0] < num_tokens:
        raise ValueError(f"{op}: argument '{name}': expected at least len(slot_mapping) = {num_tokens} rows, "
                         f"got {shape[0]}")


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
    """Write the K and V rows of the first ``len(slot_mapping)`` tokens into a paged cache, in place.

    Follows vLLM's ``reshape_and_cache`` / ``reshape_and_cache_flash`` semantics. With quantization
    arguments (or float key/value and an int8 / float8 cache) the rows are quantized on the way in:
    see "Quantized caches" below and docs/quantization.md.

    Args:
        key (Tensor): ``[T', num_kv_heads, head_size]`` or the flattened view
            ``[T', num_kv_heads * head_size]``; float16, bfloat16, float32 or int8.
        value (Tensor): same shape rules and dtype as ``key``.
        key_cache (Tensor | Parameter; a whole Parameter in a graph): ``[num_blocks, block_size, num_kv_heads,
            head_size]`` for ``cache_layout="BSND"`` or ``[num_blocks, num_kv_heads, block_size, head_size]`` for
            ``"BNSD"``, ``[num_blocks, num_kv_heads * head_size // C0, block_size, C0]`` for ``"NZ"`` (C0 = 16
            for float16 / bfloat16, 32 for int8; docs/ops-copy.md); same dtype as ``key``; contiguous. Written in place.
        value_cache (Tensor | Parameter; a whole Parameter in a graph): same shape, dtype and layout as ``key_cache``.
        slot_mapping (Tensor): int32 or int64 ``[T]``, ``T <= T'``. Token ``t`` goes to block
            ``slot // block_size``, row ``slot % block_size``. ``slot < 0`` skips the token; rows
            ``T..T'-1`` of key/value (padding) are ignored.
        cache_layout (str): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (FRACTAL_NZ, Ascend 310P attention).
        k_scale, v_scale (Tensor | None): keyword only. Static quantization: float32 scales, shape ``[]``
            (or ``[1]``) per tensor, ``[num_kv_heads]`` per head or ``[num_kv_heads, head_size]`` per
            channel, finite and > 0. The
            caches are then int8, float8_e4m3fn or float8_e5m2 and key/value float16, bfloat16 or
            float32. int8: ``q = clamp(round_half_even(x / scale - offset), -128, 127)`` (NaN -> 0),
            read back as ``(q + offset) * scale`` (CANN's antiquant rule). fused_infer_attention_score
            reads it with ``key_antiquant_mode=0``, but takes per-channel / per-tensor scales and offsets
            in the query's dtype (float16 / bfloat16), reshaped ``(1, num_kv_heads, 1, head_size)``: not
            these float32 tensors as they are; cast, they change value unless chosen exact in that dtype
            (docs/quantization.md, "Reading the cache with fused_infer_attention_score"; not run on an
            NPU). float8: ``q = fp8(clamp(x / scale, -max, max))`` (vLLM's ``x / scale`` with
            saturation, max 448 / 57344, round half to even, NaN stays NaN), read back as ``q * scale``.
        k_offset, v_offset (Tensor | None): keyword only; int8 only: float32, shaped like the scale
            (finite; both or neither). Default: no offset (symmetric).
        k_scale_cache, v_scale_cache (Tensor | Parameter | None): keyword only. Dynamic per-token
            quantization instead of static scales: float32 scale caches laid out like the data cache
            with head_size 1 (``[num_blocks, block_size, num_kv_heads, 1]`` for BSND,
            ``[num_blocks, num_kv_heads, block_size, 1]`` for BNSD; the same without the trailing 1 is
            accepted; in graph mode Parameters), contiguous, written in place: each
            written token-head gets ``scale = max|x| / 127`` (int8; 448 / 57344 for float8; an all-zero
            row gets scale 0 and codes 0) and ``q`` as above without offset. One scale per token and
            head: fused_infer_attention_score's ``key_antiquant_mode=5`` (paged, float32, decode only),
            which takes ``(num_blocks, num_kv_heads, block_size)`` = the BNSD scale cache reshaped
            (BSND: also transposed); not mode 1 (one scale per token for all heads, not paged). Same
            docs section; not run on an NPU.

    Returns:
        None. The caches are modified in place (no copy is made; in graph mode the write is ordered
        before later reads of the caches in the same graph).

    Quantized caches:
        Slots < 0 and padding rows write nothing, scale cache rows included. The codes are exact
        integers of the formulas above (fp32 division, then round half to even; a float64
        recomputation can differ by one code only where ``x / scale - offset`` lies within fp32
        rounding of a half-integer). float8 caches: PyNative only on CPU (MindSpore 2.10 has no CPU
        float8 Parameter). Backends: cpu (int8, float8); sim and ascend: int8 caches (AscendC kernel
        ``reshape_and_cache_quant``; a float8 cache is a TypeError there). Formulas, conventions and bounds:
        docs/quantization.md.

    Raises:
        TypeError: an argument is not a Tensor, dtypes differ between key/value/caches, or a dtype is
            unsupported (slot_mapping must be int32/int64; an NZ cache float16, bfloat16 or int8).
        ValueError: unknown ``cache_layout``; rank or shape mismatch between key/value and the caches (NZ: last
            dim not C0, block_size not a multiple of 16; with quantization, key not ``[T', H, D]``);
            ``len(slot_mapping)`` > rows of key; a slot ``>= num_blocks * block_size`` or
            a duplicated non-negative slot (PyNative only; in graph mode out-of-range slots are
            skipped, and a slot given twice keeps the later token's row on the cpu backend, fails the
            call on the sim backend and is undefined on ascend);
            a non-contiguous cache; ``key_cache`` and ``value_cache`` the same tensor or sharing memory
            (PyNative; a view as a cache without the fast path); a tensor the op only reads (key, value, slot_mapping, a scale or offset) sharing memory with a cache (PyNative; in a graph a RuntimeError at launch on cpu and sim, nothing written).
            Quantized writes: a missing, mis-shaped or non-float32 scale, a scale that is 0, negative or
            not finite or an offset not finite (PyNative; graph mode: RuntimeError below), offsets with a float8 cache,
            static and dynamic arguments together, or a cache dtype without a quantization rule
            (e.g. hifloat8).
        TypeError (GRAPH_MODE / ``@ms.jit``, at compile time): ``key_cache`` or ``value_cache`` not a whole
            Parameter (a slice, split or reshape of one, an op's result, a Tensor attribute or argument: MindSpore
            would write a temporary copy); a Python list or numpy array where a Tensor is expected.
        RuntimeError (GRAPH_MODE / ``@ms.jit``, at launch, cpu and sim): ``key_cache`` and ``value_cache`` sharing
            memory (the same Parameter twice, two Parameters over one buffer); nothing is written. On the ascend
            backend the kernel finds it instead and stops the launch (``AscendC::Trap()``, before any write):
            MindSpore raises at the next stream sync with the AI Core exception, not this message (seen in the
            emulation only). A kernel failure's message is in the exception text. Quantized writes: a static
            scale of 0, < 0, NaN or inf or a NaN / inf offset (graph code never sees the values): the cpu kernel
            fails the launch with "reshape_and_cache: argument 'k_scale': expected finite values > 0, got ...";
            the AscendC kernels (sim, ascend) stop it with ``AscendC::Trap()``; nothing is written. On sim the
            message reports rule TRAP, then the cause the cpu kernel's check finds in the same inputs ("...;
            cause: argument 'k_scale': expected finite values > 0, got 0 at flat index 3"); on an NPU no reason.
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


# quantized writes (ms_kvcache/ops/reshape_and_cache_quant.py imports this module: imported last)
from ms_kvcache.ops import _quant as Q  # noqa: E402
from ms_kvcache.ops import reshape_and_cache_quant as _quant_op  # noqa: E402
