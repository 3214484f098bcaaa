"""rope_concat_and_cache_mla: DeepSeek MLA. RoPE on q_pe / k_pe, optional RMSNorm of kv_c, and the
write of both cache planes (kv_c and k_pe), in one pass."""
import math

import numpy as np
from mindspore import Tensor
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, check_graph_types, graph_backend, prim_class
from ms_kvcache._eager import EagerOp, Positions, Slots
from ms_kvcache._opspecs.rope import ROPE_CONCAT_AND_CACHE_MLA as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache.ops import _rope_common as R
from ms_kvcache.ops import _quant as Q
from ms_kvcache.ops import rope_concat_and_cache_mla_quant as _quant_op

__all__ = ["rope_concat_and_cache_mla", "SPEC"]


#: stands in for kv_c_norm_weight=None (no RMSNorm) on the cpu backend
_NO_WEIGHT = Tensor(np.zeros((0,), np.float32))


def _check_static(p_shape, p_dtype, q_shape, q_dtype, k_shape, k_dtype, c_shape, c_dtype, cs_shape, cs_dtype,
                  cc_shape, cc_dtype, kc_shape, kc_dtype, s_shape, s_dtype, w_shape, w_dtype, is_neox_style,
                  epsilon):
    """Shape/dtype/attr checks (w_shape None = no norm weight); returns (num_slots, max_position, eps)."""
    op = SPEC.name
    R.check_bool(op, "is_neox_style", is_neox_style)
    if isinstance(epsilon, (bool, np.bool_)) or not isinstance(epsilon, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: argument 'epsilon': expected a float, got {type(epsilon).__name__} {epsilon!r}")
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ValueError(f"{op}: argument 'epsilon': expected a finite float >= 0, got {epsilon!r}")
    shapes = {"positions": p_shape, "q_pe": q_shape, "k_pe": k_shape, "kv_c": c_shape, "cos_sin_cache": cs_shape,
              "kv_c_cache": cc_shape, "k_pe_cache": kc_shape, "slot_mapping": s_shape, "kv_c_norm_weight": w_shape}
    SPEC.check_ranks(shapes)
    SPEC.check_dtypes({"positions": dtype_name(p_dtype), "q_pe": dtype_name(q_dtype), "k_pe": dtype_name(k_dtype),
                       "kv_c": dtype_name(c_dtype), "cos_sin_cache": dtype_name(cs_dtype),
                       "kv_c_cache": dtype_name(cc_dtype), "k_pe_cache": dtype_name(kc_dtype),
                       "slot_mapping": dtype_name(s_dtype),
                       "kv_c_norm_weight": None if w_shape is None else dtype_name(w_dtype)})
    nb, bs, rank = cc_shape
    if tuple(kc_shape[:2]) != (nb, bs):
        raise ValueError(f"{op}: argument 'k_pe_cache': expected shape [{nb}, {bs}, rope_dim] (num_blocks, "
                         f"block_size of 'kv_c_cache'), got {tuple(kc_shape)}")
    rope_dim = int(kc_shape[2])
    rows = int(k_shape[0])
    if (len(k_shape) == 2 and k_shape[1] != rope_dim) or (len(k_shape) == 3 and tuple(k_shape[1:]) != (1, rope_dim)):
        raise ValueError(f"{op}: argument 'k_pe': expected shape [T', {rope_dim}] or [T', 1, {rope_dim}] (rope_dim "
                         f"of 'k_pe_cache'), got {tuple(k_shape)}")
    if tuple(c_shape) != (rows, rank):
        raise ValueError(f"{op}: argument 'kv_c': expected shape [{rows}, {rank}] (T' of 'k_pe', kv_lora_rank "
                         f"of 'kv_c_cache'), got {tuple(c_shape)}")
    R.heads_of(op, "q_pe", q_shape, rope_dim, "num_heads")
    if q_shape[0] != rows:
        raise ValueError(f"{op}: argument 'q_pe': expected {rows} rows (same T' as 'k_pe'), got shape "
                         f"{tuple(q_shape)}")
    R.check_positions_shape(op, "positions", p_shape, rows, "k_pe")
    if s_shape[0] > rows:
        raise ValueError(f"{op}: argument 'slot_mapping': expected shape [T] with T <= {rows} (rows of 'k_pe'), "
                         f"got {tuple(s_shape)}")
    if w_shape is not None and tuple(w_shape) != (rank,):
        raise ValueError(f"{op}: argument 'kv_c_norm_weight': expected shape [{rank}] (kv_lora_rank), got "
                         f"{tuple(w_shape)}")
    max_position, _ = R.table_geometry(op, cs_shape, rope_dim,
                                       limit="rope_dim (last dim of 'k_pe' and 'k_pe_cache')")
    return nb * bs, max_position, float(epsilon)


_check_static_graph = constexpr(_check_static)
_Prim = prim_class(SPEC)


@constexpr
def _graph_backend(backend):
    return R.require_backend(SPEC.name, backend)


#: PyNative branch: static check -> (num_slots, max_position, float epsilon); kv_c_norm_weight=None
#: reaches the kernel as the empty [0] tensor; T' = 0 launches nothing (empty outputs).
_EAGER = EagerOp(SPEC, _check_static, index_checks=(Positions("positions", 1), Slots("slot_mapping", 0)),
                 skip_if_empty=("k_pe",), absent={"kv_c_norm_weight": _NO_WEIGHT},
                 launch_attrs=lambda static, attrs: (attrs[0], static[2]))


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP = 'rope_concat_and_cache_mla'
_GRAPH_ARGS = (
    'positions', 'q_pe', 'k_pe', 'kv_c', 'cos_sin_cache',
    'kv_c_cache', 'k_pe_cache', 'slot_mapping', 'kv_c_norm_weight?',
)

def rope_concat_and_cache_mla(positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping, *,
                              is_neox_style=False, kv_c_norm_weight=None, epsilon=1e-6, kv_c_scale=None,
                              k_pe_scale=None, kv_c_offset=None, k_pe_offset=None, kv_c_scale_cache=None,
                              k_pe_scale_cache=None):
    """DeepSeek MLA in one pass: RoPE on ``q_pe`` and ``k_pe``, optional RMSNorm of the latent ``kv_c``, and
    the write of ``kv_c`` and ``k_pe`` into their cache planes (``KVCacheFormat.MLA_KV``).

    vLLM's DeepSeek path: ``rotary_embedding`` on the rope part (GPT-J pairs by default), the model's
    ``kv_a_layernorm`` and ``concat_and_cache_mla``. Numerics and errors: docs/ops-rope.md; quantized caches:
    docs/quantization.md.

    Args:
        positions (Tensor): ``[T']`` int32 or int64, in ``[0, max_position)``.
        q_pe (Tensor): ``[T', num_heads, rope_dim]`` or flattened; float16, bfloat16 or float32.
        k_pe (Tensor): ``[T', rope_dim]`` or ``[T', 1, rope_dim]``; dtype of ``q_pe``.
        kv_c (Tensor): ``[T', kv_lora_rank]``; dtype of ``q_pe``.
        cos_sin_cache (Tensor): ``[max_position, rotary_dim]``, cos then sin halves; float32 (recommended) or
            the dtype of ``q_pe``; ``rotary_dim`` even, ``<= rope_dim``.
        kv_c_cache (Tensor | Parameter): ``[num_blocks, block_size, kv_lora_rank]``; dtype of ``q_pe``
            (int8 / float8 when quantizing); contiguous; written in place (in a graph: a whole Parameter).
        k_pe_cache (Tensor | Parameter): ``[num_blocks, block_size, rope_dim]``; as ``kv_c_cache`` (a whole
            Parameter in a graph).
        slot_mapping (Tensor): ``[T]`` int32 or int64, ``T <= T'``; ``slot < 0`` skips the token; in a graph a slot
            given twice keeps the later token's row on the cpu backend, fails the call on the sim backend and is
            undefined on ascend.
        is_neox_style (bool | numpy.bool_, keyword): False (default, DeepSeek): pairs ``(2i, 2i+1)``; True:
            ``(i, i + rotary_dim / 2)``.
        kv_c_norm_weight (Tensor, keyword): ``[kv_lora_rank]``, float32 or the dtype of ``kv_c``: if given,
            ``kv_c`` is RMS-normalised (``kv_c / sqrt(mean(kv_c ** 2) + epsilon) * weight``) before caching.
        epsilon (float, keyword): RMSNorm epsilon, >= 0 (default 1e-6).
        kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache (keyword):
            int8 / float8 caches: as for :func:`ms_kvcache.concat_and_cache_mla`.

    Returns:
        tuple(Tensor, Tensor, Tensor): ``(q_pe_out, k_pe_out, kv_c_out)``, new tensors shaped like the
        inputs: rotated q_pe / k_pe and the normalised (or copied) kv_c, i.e. what was cached.

    Raises:
        TypeError: a non-Tensor argument; non-bool ``is_neox_style``; non-number ``epsilon``; mixed or
            unsupported dtypes; a float8 cache on sim / ascend; in a graph, a cache not a whole Parameter.
        ValueError: a shape mismatch; ``rotary_dim`` odd or > rope_dim; negative or non-finite ``epsilon``; an
            invalid scale; in PyNative a position or slot out of range, a repeated slot, shared memory.
        RuntimeError: in a graph, at launch: caches sharing memory or a bad scale value (cpu, sim), a kernel
            failure. Per mode and backend: docs/ops-rope.md, "Indices and bad input".
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(positions), F.typeof(q_pe), F.typeof(k_pe), F.typeof(kv_c),
                          F.typeof(cos_sin_cache), F.typeof(kv_c_cache), F.typeof(k_pe_cache), F.typeof(slot_mapping),
                          F.typeof(kv_c_norm_weight))
        if Q.routes_graph(kv_c.dtype, kv_c_cache.dtype, kv_c_scale is None, k_pe_scale is None, kv_c_offset is None,
                          k_pe_offset is None, kv_c_scale_cache is None, k_pe_scale_cache is None):
            return _quant_op.rope_concat_and_cache_mla_quant(positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache,
                                                             k_pe_cache, slot_mapping, is_neox_style, kv_c_norm_weight,
                                                             epsilon, kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset,
                                                             kv_c_scale_cache, k_pe_scale_cache)
        if kv_c_norm_weight is None:
            eps = _check_static_graph(positions.shape, positions.dtype, q_pe.shape, q_pe.dtype, k_pe.shape,
                                      k_pe.dtype, kv_c.shape, kv_c.dtype, cos_sin_cache.shape, cos_sin_cache.dtype,
                                      kv_c_cache.shape, kv_c_cache.dtype, k_pe_cache.shape, k_pe_cache.dtype,
                                      slot_mapping.shape, slot_mapping.dtype, None, None, is_neox_style,
                                      epsilon)[2]
            weight = _NO_WEIGHT
        else:
            eps = _check_static_graph(positions.shape, positions.dtype, q_pe.shape, q_pe.dtype, k_pe.shape,
                                      k_pe.dtype, kv_c.shape, kv_c.dtype, cos_sin_cache.shape, cos_sin_cache.dtype,
                                      kv_c_cache.shape, kv_c_cache.dtype, k_pe_cache.shape, k_pe_cache.dtype,
                                      slot_mapping.shape, slot_mapping.dtype, kv_c_norm_weight.shape,
                                      kv_c_norm_weight.dtype, is_neox_style, epsilon)[2]
            weight = kv_c_norm_weight
        q_out, k_out, c_out = _get_cache_prim(_Prim)(_graph_backend(graph_backend()), is_neox_style, eps)(
            positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping, weight)
    else:
        if Q.routes(kv_c, kv_c_cache, kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache,
                    k_pe_scale_cache):
            return _quant_op.rope_concat_and_cache_mla_quant(positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache,
                                                             k_pe_cache, slot_mapping, is_neox_style, kv_c_norm_weight,
                                                             epsilon, kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset,
                                                             kv_c_scale_cache, k_pe_scale_cache)
        if type(is_neox_style) is not bool:  # noqa: E721 - np.bool_ -> bool (other types raise TypeError)
            is_neox_style = R.check_bool(SPEC.name, "is_neox_style", is_neox_style)
        q_out, k_out, c_out = _EAGER(R.require_backend(SPEC.name, _backend.get_backend()), (is_neox_style, epsilon),
                                     positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache, k_pe_cache, slot_mapping,
                                     kv_c_norm_weight)
    return q_out, k_out, c_out
