"""rope_concat_and_cache_mla_quant: the quantized write of ``rope_concat_and_cache_mla``: RoPE on q_pe /
k_pe, optional RMSNorm of kv_c, then kv_c_out and k_pe_out (as returned) quantized into int8 / float8 MLA
caches, each plane with its own scales, in one pass (docs/quantization.md).

Users call :func:`ms_kvcache.rope_concat_and_cache_mla` with ``kv_c_scale`` / ``k_pe_scale`` or
``kv_c_scale_cache`` / ``k_pe_scale_cache``; it routes here. Kernels: cpu
(cpu_kernel/rope_concat_and_cache_mla_quant.cpp) and AscendC (op_kernel/rope_concat_and_cache_mla_quant.cpp: int8
caches on Atlas A2/A3 and Ascend310P (static scales only there), run by the sim and ascend backends; float8 caches
are refused there, docs/quantization.md).
"""
import numpy as np
from mindspore import Tensor
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, graph_backend
from ms_kvcache._eager import EagerOp
from ms_kvcache._opspecs.quant import ROPE_CONCAT_AND_CACHE_MLA_QUANT as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache.ops import _quant as Q
from ms_kvcache.ops import _rope_common as R
from ms_kvcache.ops.concat_and_cache_mla_quant import check_mla_quant
from ms_kvcache.ops.rope_reshape_and_cache_quant import check_cos_sin_dtype

__all__ = ["rope_concat_and_cache_mla_quant", "SPEC"]

_OP = "rope_concat_and_cache_mla"


#: stands in for kv_c_norm_weight=None (no RMSNorm)
_NO_WEIGHT = Tensor(np.zeros((0,), np.float32))


def _check_static(p_shape, p_dtype, q_shape, q_dtype, k_shape, k_dtype, c_shape, c_dtype, cs_shape, cs_dtype,
                  cc_shape, cc_dtype, kc_shape, kc_dtype, s_shape, s_dtype, w_shape, w_dtype,
                  xs_shape, xs_dtype, ps_shape, ps_dtype, xo_shape, xo_dtype, po_shape, po_dtype,
                  xsc_shape, xsc_dtype, psc_shape, psc_dtype, is_neox_style, epsilon, quant_mode):
    """Shape / dtype / attribute checks; returns (num_slots, op name, max_position, float epsilon)."""
    op = _OP
    R.check_bool(op, "is_neox_style", is_neox_style)
    eps = Q.finite_float(op, "epsilon", epsilon)
    if eps < 0:
        raise ValueError(f"{op}: argument 'epsilon': expected a finite float >= 0, got {epsilon!r}")
    dt = Q.check_data_dtypes(op, {"q_pe": q_dtype, "k_pe": k_dtype, "kv_c": c_dtype})
    check_cos_sin_dtype(op, cs_dtype, q_dtype, "q_pe")
    Q.check_index_dtype(op, "positions", p_shape, p_dtype)
    Q.check_index_dtype(op, "slot_mapping", s_shape, s_dtype)
    nb, bs, rank, rope_dim = check_mla_quant(op, quant_mode, cc_shape, cc_dtype, kc_shape, kc_dtype,
                                             ((xs_shape, xs_dtype), (ps_shape, ps_dtype), (xo_shape, xo_dtype),
                                              (po_shape, po_dtype), (xsc_shape, xsc_dtype), (psc_shape, psc_dtype)))
    rows = int(k_shape[0]) if len(k_shape) else 0
    if len(k_shape) not in (2, 3) or (len(k_shape) == 2 and k_shape[1] != rope_dim) or \
            (len(k_shape) == 3 and tuple(k_shape[1:]) != (1, rope_dim)):
        raise ValueError(f"{op}: argument 'k_pe': expected shape [T', {rope_dim}] or [T', 1, {rope_dim}] (rope_dim "
                         f"of 'k_pe_cache'), got {tuple(k_shape)}")
    if tuple(c_shape) != (rows, rank):
        raise ValueError(f"{op}: argument 'kv_c': expected shape [{rows}, {rank}] (T' of 'k_pe', kv_lora_rank of "
                         f"'kv_c_cache'), got {tuple(c_shape)}")
    R.heads_of(op, "q_pe", q_shape, rope_dim, "num_heads")
    if q_shape[0] != rows:
        raise ValueError(f"{op}: argument 'q_pe': expected {rows} rows (same T' as 'k_pe'), got shape {tuple(q_shape)}")
    R.check_positions_shape(op, "positions", p_shape, rows, "k_pe")
    if s_shape[0] > rows:
        raise ValueError(f"{op}: argument 'slot_mapping': expected shape [T] with T <= {rows} (rows of 'k_pe'), got "
                         f"{tuple(s_shape)}")
    if not Q.absent(w_shape):
        wd = dtype_name(w_dtype)
        if wd not in ("float32", dt):
            raise TypeError(f"{op}: argument 'kv_c_norm_weight': expected dtype in ('float32', '{dt}'), got {wd}")
        if tuple(w_shape) != (rank,):
            raise ValueError(f"{op}: argument 'kv_c_norm_weight': expected shape [{rank}] (kv_lora_rank), got "
                             f"{tuple(w_shape)}")
    max_position, _ = R.table_geometry(op, cs_shape, rope_dim, limit="rope_dim (last dim of 'k_pe' and 'k_pe_cache')")
    return nb * bs, op, max_position, eps


_check_static_graph = constexpr(_check_static)
#: graph-mode messages (not-a-Parameter, aliasing) name the public op and argument
_Prim = Q.quant_prim(SPEC, lambda a: ("rope_concat_and_cache_mla", {}))


@constexpr
def _graph_backend(backend, cache_dtype):
    Q.require_backend(_OP, backend, SPEC)
    return Q.check_kernel_cache(_OP, backend, "kv_c_cache", cache_dtype)


@constexpr
def _graph_eps(epsilon):
    return Q.finite_float(_OP, "epsilon", epsilon)


#: PyNative branch: static check -> (num_slots, op name, max_position, float epsilon); kv_c_norm_weight None
#: reaches the kernel as the empty [0] tensor; T' = 0 launches nothing.
_EAGER = EagerOp(SPEC, _check_static,
                 index_checks=(Q.PublicPositions(), Q.PublicSlots(),
                               *Q.scale_checks("kv_c_scale", "k_pe_scale", "kv_c_offset", "k_pe_offset")),
                 skip_if_empty=("k_pe",), launch_attrs=lambda static, attrs: (attrs[0], static[3], attrs[2]))


def rope_concat_and_cache_mla_quant(positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping,
                                    is_neox_style=False, kv_c_norm_weight=None, epsilon=1e-6, kv_c_scale=None,
                                    k_pe_scale=None, kv_c_offset=None, k_pe_offset=None, kv_c_scale_cache=None,
                                    k_pe_scale_cache=None):
    """Quantizing variant of :func:`ms_kvcache.rope_concat_and_cache_mla`; call that public op instead (it
    routes here); returns ``(q_pe_out, k_pe_out, kv_c_out)``."""
    if _run_in_jit():  # @jit.cond: True
        mode = Q.graph_mode_of(kv_c_scale_cache is None, k_pe_scale_cache is None)
        if kv_c_norm_weight is None:
            kv_c_norm_weight = _NO_WEIGHT
        kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache = Q.present(
            kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache)
        eps = _check_static_graph(positions.shape, positions.dtype, q_pe.shape, q_pe.dtype, k_pe.shape, k_pe.dtype,
                                  kv_c.shape, kv_c.dtype, cos_sin_cache.shape, cos_sin_cache.dtype, kv_c_cache.shape,
                                  kv_c_cache.dtype, k_pe_cache.shape, k_pe_cache.dtype, slot_mapping.shape,
                                  slot_mapping.dtype, kv_c_norm_weight.shape, kv_c_norm_weight.dtype,
                                  kv_c_scale.shape, kv_c_scale.dtype, k_pe_scale.shape, k_pe_scale.dtype,
                                  kv_c_offset.shape, kv_c_offset.dtype, k_pe_offset.shape, k_pe_offset.dtype,
                                  kv_c_scale_cache.shape, kv_c_scale_cache.dtype, k_pe_scale_cache.shape,
                                  k_pe_scale_cache.dtype, is_neox_style, epsilon, mode)[3]
        backend = _graph_backend(graph_backend(), kv_c_cache.dtype)
        q_out, k_out, c_out = _get_cache_prim(_Prim)(backend, is_neox_style, eps, mode)(
            positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping, kv_c_norm_weight,
            kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache)
    else:
        if type(is_neox_style) is not bool:  # noqa: E721 - np.bool_ -> bool (other types raise TypeError)
            is_neox_style = R.check_bool(_OP, "is_neox_style", is_neox_style)
        mode = "static" if kv_c_scale_cache is None and k_pe_scale_cache is None else "dynamic"
        backend = Q.require_backend(_OP, _backend.get_backend(), SPEC)
        Q.check_kernel_cache(_OP, backend, "kv_c_cache", kv_c_cache.dtype)
        try:
            q_out, k_out, c_out = _EAGER(
                backend, (is_neox_style, epsilon, mode), positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache,
                k_pe_cache, slot_mapping, _NO_WEIGHT if kv_c_norm_weight is None else kv_c_norm_weight,
                *Q.present(kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache))
        except (TypeError, ValueError) as exc:
            raise Q.renamed(exc, SPEC.name, _OP) from None
    return q_out, k_out, c_out
