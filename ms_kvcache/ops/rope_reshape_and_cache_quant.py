"""rope_reshape_and_cache_quant: the quantized writes of ``rope_reshape_and_cache`` and
``rope_reshape_and_cache_merged``: RoPE on query and key, then the rotated key (as returned) and the value
quantized into int8 / float8 caches, in one pass (docs/quantization.md).

Users call the public fused ops with ``k_scale`` / ``v_scale`` or ``k_scale_cache`` / ``v_scale_cache``;
they route here. Attributes ``is_neox_style``, ``cache_layout``, ``kv_format`` (2 SEPARATE_KV, 1 MERGED_KV
with ``value_cache`` absent) and ``quant_mode``. Kernels: cpu (cpu_kernel/rope_reshape_and_cache_quant.cpp)
and AscendC (op_kernel/rope_reshape_and_cache_quant.cpp: int8 caches on Atlas A2/A3 and Ascend310P, run by the
sim and ascend backends; float8 caches are refused there, docs/quantization.md).
"""
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, empty_input, empty_input_graph, graph_backend
from ms_kvcache._eager import EagerOp
from ms_kvcache._opspecs.quant import ROPE_RESHAPE_AND_CACHE_QUANT as SPEC
from ms_kvcache._spec import dtype_name
from ms_kvcache.ops import _quant as Q
from ms_kvcache.ops import _rope_common as R
from ms_kvcache.ops.reshape_and_cache_quant import check_gqa_quant, public_name

__all__ = ["rope_reshape_and_cache_quant", "SPEC", "check_cos_sin_dtype"]



def check_cos_sin_dtype(op, cs_dtype, data_dtype, data_name):
    d, t = dtype_name(cs_dtype), dtype_name(data_dtype)
    if d not in ("float32", t):
        raise TypeError(f"{op}: argument 'cos_sin_cache': expected dtype in ('float32', '{t}') (float32 or the dtype of "
                        f"'{data_name}'), got {d}")


def _check_static(p_shape, p_dtype, q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype, cs_shape, cs_dtype,
                  kc_shape, kc_dtype, vc_shape, vc_dtype, s_shape, s_dtype, ks_shape, ks_dtype, vs_shape, vs_dtype,
                  ko_shape, ko_dtype, vo_shape, vo_dtype, ksc_shape, ksc_dtype, vsc_shape, vsc_dtype,
                  is_neox_style, cache_layout, kv_format, quant_mode):
    """Shape / dtype / attribute checks; returns (num_slots, public op name, max_position)."""
    op = public_name(kv_format, "rope_reshape_and_cache_merged", "rope_reshape_and_cache")
    R.check_bool(op, "is_neox_style", is_neox_style)
    Q.check_data_dtypes(op, {"query": q_dtype, "key": k_dtype, "value": v_dtype})
    check_cos_sin_dtype(op, cs_dtype, q_dtype, "query")
    Q.check_index_dtype(op, "positions", p_shape, p_dtype)
    Q.check_index_dtype(op, "slot_mapping", s_shape, s_dtype)
    if kv_format == Q.MERGED and not Q.absent(vc_shape):
        raise ValueError(f"{op}: internal: value_cache given with kv_format MERGED_KV")
    nb, bs, h, d = check_gqa_quant(op, kv_format, cache_layout, quant_mode, kc_shape, kc_dtype, vc_shape, vc_dtype,
                                   ((ks_shape, ks_dtype), (vs_shape, vs_dtype), (ko_shape, ko_dtype),
                                    (vo_shape, vo_dtype), (ksc_shape, ksc_dtype), (vsc_shape, vsc_dtype)), k_shape,
                                   "the rotary embedding and the quantization scales")
    _, max_position = R.check_gqa(op, p_shape, q_shape, k_shape, v_shape, cs_shape, s_shape, h, d)
    return nb * bs, op, max_position


_check_static_graph = constexpr(_check_static)
#: graph-mode messages (not-a-Parameter, aliasing) name the public op and argument
_Prim = Q.quant_prim(SPEC, lambda a: (
    public_name(a["kv_format"], "rope_reshape_and_cache_merged", "rope_reshape_and_cache"),
    {"key_cache": "kv_cache"} if a["kv_format"] == Q.MERGED else {}))


@constexpr
def _graph_backend(backend, kv_format, cache_dtype):
    op = public_name(kv_format, "rope_reshape_and_cache_merged", "rope_reshape_and_cache")
    Q.require_backend(op, backend, SPEC)
    return Q.check_kernel_cache(op, backend, "kv_cache" if kv_format == Q.MERGED else "key_cache", cache_dtype)


#: PyNative branch: static check -> (num_slots, op name, max_position); T' = 0 launches nothing.
_EAGER = EagerOp(SPEC, _check_static,
                 index_checks=(Q.PublicPositions(), Q.PublicSlots(),
                               *Q.scale_checks("k_scale", "v_scale", "k_offset", "v_offset")),
                 skip_if_empty=("key",))


def rope_reshape_and_cache_quant(positions, query, key, value, cos_sin_cache, key_cache, value_cache, slot_mapping,
                                 is_neox_style=True, cache_layout="BSND", kv_format=Q.SEPARATE, k_scale=None,
                                 v_scale=None, k_offset=None, v_offset=None, k_scale_cache=None, v_scale_cache=None):
    """Quantizing variant of :func:`ms_kvcache.rope_reshape_and_cache` (``kv_format=2``) and
    :func:`ms_kvcache.rope_reshape_and_cache_merged` (``kv_format=1``, ``value_cache`` None). Call those
    public ops instead (they route here); returns ``(query_out, key_out)``."""
    if _run_in_jit():  # @jit.cond: True
        mode = Q.graph_mode_of(k_scale_cache is None, v_scale_cache is None)
        if value_cache is None:
            value_cache = empty_input_graph(key_cache.dtype)
        k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache = Q.present(
            k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache)
        _check_static_graph(positions.shape, positions.dtype, query.shape, query.dtype, key.shape, key.dtype,
                            value.shape, value.dtype, cos_sin_cache.shape, cos_sin_cache.dtype, key_cache.shape,
                            key_cache.dtype, value_cache.shape, value_cache.dtype, slot_mapping.shape,
                            slot_mapping.dtype, k_scale.shape, k_scale.dtype, v_scale.shape, v_scale.dtype,
                            k_offset.shape, k_offset.dtype, v_offset.shape, v_offset.dtype, k_scale_cache.shape,
                            k_scale_cache.dtype, v_scale_cache.shape, v_scale_cache.dtype, is_neox_style, cache_layout,
                            kv_format, mode)
        query_out, key_out = _get_cache_prim(_Prim)(_graph_backend(graph_backend(), kv_format, key_cache.dtype), is_neox_style,
                                                    cache_layout, kv_format, mode)(
            positions, query, key, value, cos_sin_cache, key_cache, value_cache, slot_mapping, k_scale, v_scale,
            k_offset, v_offset, k_scale_cache, v_scale_cache)
    else:
        op = public_name(kv_format, "rope_reshape_and_cache_merged", "rope_reshape_and_cache")
        if type(is_neox_style) is not bool:  # noqa: E721 - np.bool_ -> bool (other types raise TypeError)
            is_neox_style = R.check_bool(op, "is_neox_style", is_neox_style)
        mode = "static" if k_scale_cache is None and v_scale_cache is None else "dynamic"
        backend = Q.require_backend(op, _backend.get_backend(), SPEC)
        Q.check_kernel_cache(op, backend, "kv_cache" if kv_format == Q.MERGED else "key_cache", key_cache.dtype)
        try:
            query_out, key_out = _EAGER(
                backend, (is_neox_style, cache_layout, kv_format, mode), positions, query, key, value, cos_sin_cache,
                key_cache, empty_input(key_cache.dtype) if value_cache is None else value_cache, slot_mapping,
                *Q.present(k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache))
        except (TypeError, ValueError) as exc:
            raise Q.renamed(exc, SPEC.name, op) from None
    return query_out, key_out
