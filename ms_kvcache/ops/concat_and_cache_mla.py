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
    """Write the MLA latent rows (``kv_c``) and rotary key rows (``k_pe``) of the first ``len(slot_mapping)``
    tokens into their paged caches, in place.

    vLLM ``concat_and_cache_mla`` (DeepSeek V2/V3 multi-head latent attention), with the two planes of
    ``KVCacheFormat.MLA_KV`` kept as two caches. Errors: docs/ops-copy.md; quantized caches (each plane with
    its own scales): docs/quantization.md.

    Args:
        kv_c (Tensor): ``[T', kv_lora_rank]``, ``T' >= T``; float16, bfloat16, float32 or int8.
        k_pe (Tensor): ``[T', rope_dim]`` or ``[T', 1, rope_dim]``; dtype of ``kv_c``.
        kv_c_cache (Tensor | Parameter): ``[num_blocks, block_size, kv_lora_rank]``; dtype of ``kv_c``
            (int8 / float8 when quantizing); contiguous; written in place (in a graph: a whole Parameter).
        k_pe_cache (Tensor | Parameter): ``[num_blocks, block_size, rope_dim]``; as ``kv_c_cache`` (a whole
            Parameter in a graph).
        slot_mapping (Tensor): ``[T]`` int32 or int64; token ``t`` goes to block ``slot // block_size``, row
            ``slot % block_size`` of both caches; ``slot < 0`` skips it; in a graph a slot given twice keeps the
            later token's row on the cpu backend, fails the call on the sim backend and is undefined on ascend.
        kv_c_scale, k_pe_scale (Tensor, keyword): static scales, float32 ``[]`` / ``[1]`` or
            ``[kv_lora_rank]`` / ``[rope_dim]``, finite, > 0; kv_c / k_pe then float16, bfloat16 or float32.
        kv_c_offset, k_pe_offset (Tensor, keyword): int8 caches only: float32 shaped like the scale; both or
            neither.
        kv_c_scale_cache, k_pe_scale_cache (Tensor | Parameter, keyword): dynamic scales instead: float32
            ``[num_blocks, block_size, 1]`` each (one scale per token and plane); written in place.

    Returns:
        None: both caches (and the scale caches) are written in place; in a graph the write is ordered before
        later reads of them.

    Raises:
        TypeError: a non-Tensor argument; mixed or unsupported dtypes; a float8 cache on sim / ascend; in a
            graph, a cache that is not a whole Parameter.
        ValueError: a shape mismatch between inputs and caches; an invalid scale; in PyNative a slot out of
            range or repeated, a non-contiguous cache, memory shared between a cache and another argument.
        RuntimeError: in a graph, at launch: caches sharing memory or a bad scale value (cpu, sim; nothing
            written), a kernel failure. Per mode and backend: docs/ops-copy.md, "Errors".
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
