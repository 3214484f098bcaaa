"""concat_and_cache_mla: write MLA latent (kv_c) and rotary key (k_pe) rows into their paged caches."""
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Slots
from ms_kvcache._opspecs.copy import CONCAT_AND_CACHE_MLA as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache.ops import _quant as Q
from ms_kvcache.ops import concat_and_cache_mla_quant as _quant_op

__all__ = ["concat_and_cache_mla", "SPEC"]



def _check_static(c_shape, c_dtype, p_shape, p_dtype, cc_shape, cc_dtype, pc_shape, pc_dtype, s_shape, s_dtype):
    op = SPEC.name
    SPEC.check_ranks({"kv_c": c_shape, "k_pe": p_shape, "kv_c_cache": cc_shape, "k_pe_cache": pc_shape,
                      "slot_mapping": s_shape})
    SPEC.check_dtypes({"kv_c": dtype_name(c_dtype), "k_pe": dtype_name(p_dtype),
                       "kv_c_cache": dtype_name(cc_dtype), "k_pe_cache": dtype_name(pc_dtype),
                       "slot_mapping": dtype_name(s_dtype)})
    nb, bs, rank = cc_shape
    if tuple(pc_shape[:2]) != (nb, bs):
        raise ValueError(f"{op}: argument 'k_pe_cache': expected shape [{nb}, {bs}, rope_dim] (num_blocks, "
                         f"block_size of 'kv_c_cache'), got {tuple(pc_shape)}")
    rope = pc_shape[2]
    t = s_shape[0]
    if c_shape[1] != rank:
        raise ValueError(f"{op}: argument 'kv_c': expected shape [T', {rank}] (kv_lora_rank of 'kv_c_cache'), "
                         f"got {tuple(c_shape)}")
    if tuple(p_shape[1:]) not in ((rope,), (1, rope)):
        raise ValueError(f"{op}: argument 'k_pe': expected shape [T', {rope}] or [T', 1, {rope}] (rope_dim of "
                         f"'k_pe_cache'), got {tuple(p_shape)}")
    for n, s in (("kv_c", c_shape), ("k_pe", p_shape)):
        if s[0] < t:
            raise ValueError(f"{op}: argument '{n}': expected at least len(slot_mapping) = {t} rows, got {s[0]}")
    return nb * bs


_check_static_graph = constexpr(_check_static)
_Prim = prim_class(SPEC)
#: PyNative branch (fast path when available): static check -> num_slots; no slots launches nothing.
_EAGER = EagerOp(SPEC, _check_static, index_checks=(Slots("slot_mapping"),), skip_if_empty=("slot_mapping",))


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP, _GRAPH_ARGS = 'concat_and_cache_mla', ('kv_c', 'k_pe', 'kv_c_cache', 'k_pe_cache', 'slot_mapping')

def concat_and_cache_mla(kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping, *, kv_c_scale=None, k_pe_scale=None,
                         kv_c_offset=None, k_pe_offset=None, kv_c_scale_cache=None, k_pe_scale_cache=None):
    """Write the MLA latent rows (``kv_c``) and rotary key rows (``k_pe``) of the first
    ``len(slot_mapping)`` tokens into their paged caches, in place.

    Follows vLLM's ``concat_and_cache_mla`` (DeepSeek V2/V3 multi-head latent attention), with the two
    planes of :attr:`ms_kvcache.KVCacheFormat.MLA_KV` kept as two caches instead of one concatenated
    ``[.., kv_lora_rank + rope_dim]`` tensor. Quantized (int8 / float8) caches: each plane has its own
    scales; see the keyword arguments and docs/quantization.md (which FIA antiquant mode could read an
    int8 MLA plane is not documented: torch_npu marks ``key_rope_antiquant_scale`` reserved).

    Args:
        kv_c (Tensor): ``[T', kv_lora_rank]`` (e.g. 512); float16, bfloat16, float32 or int8.
        k_pe (Tensor): ``[T', rope_dim]`` or ``[T', 1, rope_dim]`` (e.g. 64); same dtype as ``kv_c``.
        kv_c_cache (Tensor | Parameter; a whole Parameter in a graph): ``[num_blocks, block_size, kv_lora_rank]``,
            same dtype; contiguous. Written in place.
        k_pe_cache (Tensor | Parameter; a whole Parameter in a graph): ``[num_blocks, block_size, rope_dim]``, same
            dtype; contiguous. Written in place.
        slot_mapping (Tensor): int32 or int64 ``[T]``, ``T <= T'``. Token ``t`` goes to block
            ``slot // block_size``, row ``slot % block_size`` of both caches; ``slot < 0`` skips it;
            rows ``T..T'-1`` are ignored.
        kv_c_scale, k_pe_scale (Tensor | None): keyword only; static quantization into int8 / float8
            caches (kv_c / k_pe float16, bfloat16 or float32): float32, shape ``[]`` (or ``[1]``) per
            tensor or ``[kv_lora_rank]`` / ``[rope_dim]`` per channel, finite and > 0. Formulas as
            :func:`ms_kvcache.reshape_and_cache`: int8 ``q = clamp(round_half_even(x / scale - offset),
            -128, 127)``, read back as ``(q + offset) * scale``; float8 ``q = fp8(clamp(x / scale))``.
        kv_c_offset, k_pe_offset (Tensor | None): keyword only; int8 only, float32 shaped like the
            scale (both or neither).
        kv_c_scale_cache, k_pe_scale_cache (Tensor | Parameter | None): keyword only; dynamic
            per-token scales instead: float32 ``[num_blocks, block_size, 1]`` each (one scale per token
            of the latent row, and one of the rope row), written in place with ``max|x| / 127`` (int8;
            448 / 57344 for float8).

    Returns:
        None. Both caches are modified in place (no copy; in graph mode the write is ordered before
        later reads of the caches in the same graph).

    Raises:
        TypeError: an argument is not a Tensor; dtypes differ between inputs and caches or are
            unsupported; slot_mapping is not int32/int64.
        ValueError: a rank or shape mismatch (kv_lora_rank / rope_dim / num_blocks / block_size between inputs and
            caches, ``len(slot_mapping)`` > rows of kv_c or k_pe); a slot ``>= num_blocks * block_size`` or a
            duplicated non-negative slot (PyNative only; in graph mode out-of-range slots are skipped, and a slot
            given twice keeps the later token's row on the cpu backend, fails the call on the sim backend and is
            undefined on ascend); a non-contiguous cache; the two caches the same tensor or sharing memory
            (PyNative); a tensor the op only reads (kv_c, k_pe, slot_mapping, a scale or offset) sharing memory with a cache (PyNative; in a graph a RuntimeError at launch on cpu and sim, nothing written).
            Quantized writes: missing / mis-shaped / non-float32 scales, scales <= 0 or not finite, offsets
            not finite (PyNative; graph mode: RuntimeError below), offsets with float8, static and dynamic
            arguments together, a cache dtype without a quantization rule; a float8 cache on sim / ascend
            (TypeError: int8 only there).
        TypeError (GRAPH_MODE / ``@ms.jit``, at compile time): ``kv_c_cache`` or ``k_pe_cache`` not a whole
            Parameter (a slice, split or reshape of one, an op's result, a Tensor attribute or argument: MindSpore
            would write a temporary copy); a Python list or numpy array where a Tensor is expected.
        RuntimeError (GRAPH_MODE / ``@ms.jit``, at launch, cpu and sim): ``kv_c_cache`` and ``k_pe_cache`` sharing
            memory (the same Parameter twice, two Parameters over one buffer); nothing is written. On the ascend
            backend the kernel finds it instead and stops the launch (``AscendC::Trap()``, before any write):
            MindSpore raises at the next stream sync with the AI Core exception, not this message (seen in the
            emulation only). A kernel failure's message is in the exception text. Quantized writes: a static
            scale of 0, < 0, NaN or inf or a NaN / inf offset: the cpu kernel fails the launch naming the
            argument (``kv_c_scale`` ...), the AscendC kernels (sim, ascend) trap; nothing is written. On sim the
            message reports rule TRAP, then "; cause: argument 'kv_c_scale': expected finite values > 0, got ... at
            flat index ..." (the cpu kernel's check of the same inputs); on an NPU no reason.
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(kv_c), F.typeof(k_pe), F.typeof(kv_c_cache),
                          F.typeof(k_pe_cache), F.typeof(slot_mapping))
        if Q.routes_graph(kv_c.dtype, kv_c_cache.dtype, kv_c_scale is None, k_pe_scale is None, kv_c_offset is None,
                          k_pe_offset is None, kv_c_scale_cache is None, k_pe_scale_cache is None):
            return _quant_op.concat_and_cache_mla_quant(kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping, kv_c_scale,
                                                        k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache,
                                                        k_pe_scale_cache)
        _check_static_graph(kv_c.shape, kv_c.dtype, k_pe.shape, k_pe.dtype, kv_c_cache.shape, kv_c_cache.dtype,
                            k_pe_cache.shape, k_pe_cache.dtype, slot_mapping.shape, slot_mapping.dtype)
        _get_cache_prim(_Prim)(graph_backend())(kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping)
    else:
        if Q.routes(kv_c, kv_c_cache, kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache,
                    k_pe_scale_cache):
            return _quant_op.concat_and_cache_mla_quant(kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping, kv_c_scale,
                                                        k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache,
                                                        k_pe_scale_cache)
        _EAGER(_backend.get_backend(), (), kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping)
    return None
