"""concat_and_cache_mla_quant: the quantized write of ``concat_and_cache_mla`` (float kv_c / k_pe into int8 /
float8 MLA caches, each plane with its own scales; docs/quantization.md).

Users call :func:`ms_kvcache.concat_and_cache_mla` with ``kv_c_scale`` / ``k_pe_scale`` (static) or
``kv_c_scale_cache`` / ``k_pe_scale_cache`` (dynamic: one scale per token and plane); it routes here.
Attribute ``quant_mode``; the unused inputs are absent (empty ``[0]`` tensors). Kernels: cpu
(cpu_kernel/concat_and_cache_mla_quant.cpp) and AscendC (op_kernel/concat_and_cache_mla_quant.cpp: int8
caches, run by the sim and ascend backends; float8 caches are refused there, docs/quantization.md).
"""
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, graph_backend
from ms_kvcache._eager import EagerOp
from ms_kvcache._opspecs.quant import CONCAT_AND_CACHE_MLA_QUANT as SPEC
from ms_kvcache.ops import _quant as Q

__all__ = ["concat_and_cache_mla_quant", "SPEC", "check_mla_quant"]

_OP = "concat_and_cache_mla"



def check_mla_quant(op, quant_mode, cc_shape, cc_dtype, pc_shape, pc_dtype, scales):
    """MLA cache and scale checks shared with rope_concat_and_cache_mla_quant; returns (nb, bs, rank,
    rope_dim). scales: the six ``(shape, dtype)`` pairs kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset,
    kv_c_scale_cache, k_pe_scale_cache."""
    Q.check_attrs(op, quant_mode=quant_mode)
    Q.check_cache_dtype(op, {"kv_c_cache": cc_dtype, "k_pe_cache": pc_dtype})
    for n, s in (("kv_c_cache", cc_shape), ("k_pe_cache", pc_shape)):
        if len(s) != 3:
            raise ValueError(f"{op}: argument '{n}': expected rank 3, got rank {len(s)} (shape {tuple(s)})")
    nb, bs, rank = cc_shape
    if tuple(pc_shape[:2]) != (nb, bs):
        raise ValueError(f"{op}: argument 'k_pe_cache': expected shape [{nb}, {bs}, rope_dim] (num_blocks, "
                         f"block_size of 'kv_c_cache'), got {tuple(pc_shape)}")
    rope = pc_shape[2]
    (cs, csd), (ps, psd), (co, cod), (po, pod), (csc, cscd), (psc, pscd) = scales
    Q.check_pairs(op, ((("kv_c_scale", cs), ("k_pe_scale", ps)), (("kv_c_offset", co), ("k_pe_offset", po)),
                       (("kv_c_scale_cache", csc), ("k_pe_scale_cache", psc))))
    why = "one float32 scale per token: the MLA plane with hidden size 1, [num_blocks, block_size, 1]"
    for p, ch, (s, sd), (o, od), (c, cd) in (("kv_c", rank, (cs, csd), (co, cod), (csc, cscd)),
                                              ("k_pe", rope, (ps, psd), (po, pod), (psc, pscd))):
        Q.check_plane_quant(op, quant_mode, cc_dtype, (f"{p}_scale", s, sd), (f"{p}_offset", o, od),
                            (f"{p}_scale_cache", c, cd), (ch,), (nb, bs, 1), why)
    return nb, bs, rank, rope


def _check_static(c_shape, c_dtype, p_shape, p_dtype, cc_shape, cc_dtype, pc_shape, pc_dtype, s_shape, s_dtype,
                  cs_shape, cs_dtype, ps_shape, ps_dtype, co_shape, co_dtype, po_shape, po_dtype,
                  csc_shape, csc_dtype, psc_shape, psc_dtype, quant_mode):
    """Shape / dtype / attribute checks; returns (num_slots, public op name)."""
    op = _OP
    Q.check_data_dtypes(op, {"kv_c": c_dtype, "k_pe": p_dtype})
    Q.check_index_dtype(op, "slot_mapping", s_shape, s_dtype)
    nb, bs, rank, rope = check_mla_quant(op, quant_mode, cc_shape, cc_dtype, pc_shape, pc_dtype,
                                         ((cs_shape, cs_dtype), (ps_shape, ps_dtype), (co_shape, co_dtype),
                                          (po_shape, po_dtype), (csc_shape, csc_dtype), (psc_shape, psc_dtype)))
    t = s_shape[0]
    if len(c_shape) != 2 or c_shape[1] != rank:
        raise ValueError(f"{op}: argument 'kv_c': expected shape [T', {rank}] (kv_lora_rank of 'kv_c_cache'), "
                         f"got {tuple(c_shape)}")
    if len(p_shape) not in (2, 3) or tuple(p_shape[1:]) not in ((rope,), (1, rope)):
        raise ValueError(f"{op}: argument 'k_pe': expected shape [T', {rope}] or [T', 1, {rope}] (rope_dim of "
                         f"'k_pe_cache'), got {tuple(p_shape)}")
    for n, s in (("kv_c", c_shape), ("k_pe", p_shape)):
        if s[0] < t:
            raise ValueError(f"{op}: argument '{n}': expected at least len(slot_mapping) = {t} rows, got {s[0]}")
    return nb * bs, op


_check_static_graph = constexpr(_check_static)
#: graph-mode messages (not-a-Parameter, aliasing) name the public op and argument
_Prim = Q.quant_prim(SPEC, lambda a: ("concat_and_cache_mla", {}))


@constexpr
def _graph_backend(backend, cache_dtype):
    Q.require_backend(_OP, backend, SPEC)
    return Q.check_kernel_cache(_OP, backend, "kv_c_cache", cache_dtype)


#: PyNative branch: static check -> (num_slots, op name); scale values checked; no slots launches nothing.
_EAGER = EagerOp(SPEC, _check_static,
                 index_checks=(Q.PublicSlots(),
                               *Q.scale_checks("kv_c_scale", "k_pe_scale", "kv_c_offset", "k_pe_offset")),
                 skip_if_empty=("slot_mapping",))


def concat_and_cache_mla_quant(kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping, kv_c_scale=None, k_pe_scale=None,
                               kv_c_offset=None, k_pe_offset=None, kv_c_scale_cache=None, k_pe_scale_cache=None):
    """Quantizing write of :func:`ms_kvcache.concat_and_cache_mla`; call that public op instead (it
    routes here; arguments, formulas and errors are documented there and in docs/quantization.md)."""
    if _run_in_jit():  # @jit.cond: True
        mode = Q.graph_mode_of(kv_c_scale_cache is None, k_pe_scale_cache is None)
        kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache = Q.present(
            kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache)
        _check_static_graph(kv_c.shape, kv_c.dtype, k_pe.shape, k_pe.dtype, kv_c_cache.shape, kv_c_cache.dtype,
                            k_pe_cache.shape, k_pe_cache.dtype, slot_mapping.shape, slot_mapping.dtype,
                            kv_c_scale.shape, kv_c_scale.dtype, k_pe_scale.shape, k_pe_scale.dtype, kv_c_offset.shape,
                            kv_c_offset.dtype, k_pe_offset.shape, k_pe_offset.dtype, kv_c_scale_cache.shape,
                            kv_c_scale_cache.dtype, k_pe_scale_cache.shape, k_pe_scale_cache.dtype, mode)
        _get_cache_prim(_Prim)(_graph_backend(graph_backend(), kv_c_cache.dtype), mode)(
            kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping, kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset,
            kv_c_scale_cache, k_pe_scale_cache)
    else:
        mode = "static" if kv_c_scale_cache is None and k_pe_scale_cache is None else "dynamic"
        backend = Q.require_backend(_OP, _backend.get_backend(), SPEC)
        Q.check_kernel_cache(_OP, backend, "kv_c_cache", kv_c_cache.dtype)
        try:
            _EAGER(backend, (mode,), kv_c, k_pe, kv_c_cache, k_pe_cache, slot_mapping,
                   *Q.present(kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache))
        except (TypeError, ValueError) as exc:
            raise Q.renamed(exc, SPEC.name, _OP) from None
    return None
