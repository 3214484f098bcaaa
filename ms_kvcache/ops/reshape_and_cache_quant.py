"""reshape_and_cache_quant: the quantized writes of ``reshape_and_cache`` and ``reshape_and_cache_merged``
(float K/V into int8 / float8 caches; docs/quantization.md).

Users call :func:`ms_kvcache.reshape_and_cache` / :func:`ms_kvcache.reshape_and_cache_merged` with
``k_scale`` / ``v_scale`` (static) or ``k_scale_cache`` / ``v_scale_cache`` (dynamic); they route here.
One op covers both cache formats (attribute ``kv_format``: 2 SEPARATE_KV, 1 MERGED_KV with
``value_cache`` absent) and both modes (attribute ``quant_mode``), with the unused inputs absent
(empty ``[0]`` tensors; AscendC OPTIONAL). Kernels: cpu (cpu_kernel/reshape_and_cache_quant.cpp) and
AscendC (op_kernel/reshape_and_cache_quant.cpp: int8 caches on Atlas A2/A3 and Ascend310P, run by the sim
and ascend backends; float8 caches are a tiling error there, docs/quantization.md).
"""
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, empty_input, empty_input_graph, graph_backend
from ms_kvcache._eager import EagerOp
from ms_kvcache._opspecs.quant import RESHAPE_AND_CACHE_QUANT as SPEC
from ms_kvcache.ops import _quant as Q
from ms_kvcache._nz import NZ_C0, nz_head_split
from ms_kvcache.ops._kv_shapes import MERGED_SHAPES, cache_geometry, check_kv_rows

__all__ = ["reshape_and_cache_quant", "SPEC", "check_gqa_quant"]

#: (the other quantizing ops' marker, kept here for their imports)
PENDING = Q.PENDING



def public_name(kv_format, merged_name, separate_name):
    return merged_name if kv_format == Q.MERGED else separate_name


def check_gqa_quant(op, kv_format, cache_layout, quant_mode, kc_shape, kc_dtype, vc_shape, vc_dtype, scales,
                    key_shape=None, why_heads="quantization scales"):
    """Cache and scale checks shared with rope_reshape_and_cache_quant; returns (nb, bs, H, D).

    kc / vc: key_cache (the merged ``[2, ...]`` cache for MERGED_KV) and value_cache (absent for
    MERGED_KV); scales: the six ``(shape, dtype)`` pairs k_scale, v_scale, k_offset, v_offset,
    k_scale_cache, v_scale_cache; key_shape: an NZ cache's H and D come from it (``_nz.nz_head_split``)."""
    Q.check_attrs(op, cache_layout=cache_layout, quant_mode=quant_mode, kv_format=kv_format)
    merged = kv_format == Q.MERGED
    cname = "kv_cache" if merged else "key_cache"
    if merged:
        Q.check_cache_dtype(op, {cname: kc_dtype})
        if len(kc_shape) != 5 or kc_shape[0] != 2:
            raise ValueError(f"{op}: argument 'kv_cache': expected shape {MERGED_SHAPES[cache_layout]} (K plane, V "
                             f"plane), got {tuple(kc_shape)}")
        nb, bs, h, d = cache_geometry(op, cname, tuple(kc_shape[1:]), cache_layout, kc_dtype)
    else:
        Q.check_cache_dtype(op, {cname: kc_dtype, "value_cache": vc_dtype})
        if len(kc_shape) != 4:
            raise ValueError(f"{op}: argument 'key_cache': expected rank 4, got rank {len(kc_shape)} (shape "
                             f"{tuple(kc_shape)})")
        if tuple(vc_shape) != tuple(kc_shape):
            raise ValueError(f"{op}: argument 'value_cache': expected shape {tuple(kc_shape)} (same as 'key_cache'), "
                             f"got {tuple(vc_shape)}")
        nb, bs, h, d = cache_geometry(op, cname, tuple(kc_shape), cache_layout, kc_dtype)
    if h is None:  # NZ: the head split from the key rows; the scale cache is ND [nb, bs, H(, 1)]
        h, d = nz_head_split(op, "key", key_shape, d, NZ_C0["int8"], why_heads)
    sc_shape = (nb, h, bs, 1) if cache_layout == "BNSD" else (nb, bs, h, 1)
    why = (f"the {cache_layout} {cname} with head_size 1: [num_blocks, num_kv_heads, block_size, 1]"
           if cache_layout == "BNSD" else
           f"the BSND {cname} with head_size 1: [num_blocks, block_size, num_kv_heads, 1]"
           if cache_layout == "BSND" else
           "one float32 per token and head, ND [num_blocks, block_size, num_kv_heads, 1] beside an NZ cache")
    (ks, kd), (vs, vd), (ko, kod), (vo, vod), (ksc, kscd), (vsc, vscd) = scales
    Q.check_pairs(op, ((("k_scale", ks), ("v_scale", vs)), (("k_offset", ko), ("v_offset", vo)),
                       (("k_scale_cache", ksc), ("v_scale_cache", vsc))))
    for p, (s, sd), (o, od), (c, cd) in (("k", (ks, kd), (ko, kod), (ksc, kscd)), ("v", (vs, vd), (vo, vod), (vsc, vscd))):
        Q.check_plane_quant(op, quant_mode, kc_dtype, (f"{p}_scale", s, sd), (f"{p}_offset", o, od),
                            (f"{p}_scale_cache", c, cd), (h, d), sc_shape, why)
    return nb, bs, h, d


def _check_static(k_shape, k_dtype, v_shape, v_dtype, kc_shape, kc_dtype, vc_shape, vc_dtype, s_shape, s_dtype,
                  ks_shape, ks_dtype, vs_shape, vs_dtype, ko_shape, ko_dtype, vo_shape, vo_dtype,
                  ksc_shape, ksc_dtype, vsc_shape, vsc_dtype, cache_layout, kv_format, quant_mode):
    """Shape / dtype / attribute checks; returns (num_slots, public op name)."""
    op = public_name(kv_format, "reshape_and_cache_merged", "reshape_and_cache")
    Q.check_data_dtypes(op, {"key": k_dtype, "value": v_dtype})
    Q.check_index_dtype(op, "slot_mapping", s_shape, s_dtype)
    for n, s in (("key", k_shape), ("value", v_shape)):
        if len(s) not in (2, 3):
            raise ValueError(f"{op}: argument '{n}': expected rank 2 or 3, got rank {len(s)} (shape {tuple(s)})")
    if kv_format == Q.MERGED and not Q.absent(vc_shape):
        raise ValueError(f"{op}: internal: value_cache given with kv_format MERGED_KV")
    nb, bs, h, d = check_gqa_quant(op, kv_format, cache_layout, quant_mode, kc_shape, kc_dtype, vc_shape, vc_dtype,
                                   ((ks_shape, ks_dtype), (vs_shape, vs_dtype), (ko_shape, ko_dtype),
                                    (vo_shape, vo_dtype), (ksc_shape, ksc_dtype), (vsc_shape, vsc_dtype)), k_shape)
    t = s_shape[0]
    check_kv_rows(op, "key", k_shape, t, h, d)
    check_kv_rows(op, "value", v_shape, t, h, d)
    return nb * bs, op


_check_static_graph = constexpr(_check_static)
#: graph-mode messages (not-a-Parameter, aliasing) name the public op and argument
_Prim = Q.quant_prim(SPEC, lambda a: (
    public_name(a["kv_format"], "reshape_and_cache_merged", "reshape_and_cache"),
    {"key_cache": "kv_cache"} if a["kv_format"] == Q.MERGED else {}))


@constexpr
def _graph_backend(backend, kv_format, cache_dtype):
    op = public_name(kv_format, "reshape_and_cache_merged", "reshape_and_cache")
    Q.require_backend(op, backend, SPEC)
    return Q.check_kernel_cache(op, backend, "kv_cache" if kv_format == Q.MERGED else "key_cache", cache_dtype)


#: PyNative branch: static check -> (num_slots, public op name); scales' values checked (fast path: no
#: sync; the strict kernel re-checks); no slots launches nothing (scale caches untouched too).
_EAGER = EagerOp(SPEC, _check_static,
                 index_checks=(Q.PublicSlots(),
                               *Q.scale_checks("k_scale", "v_scale", "k_offset", "v_offset")),
                 skip_if_empty=("slot_mapping",))


def reshape_and_cache_quant(key, value, key_cache, value_cache, slot_mapping, cache_layout="BSND", kv_format=Q.SEPARATE,
                            k_scale=None, v_scale=None, k_offset=None, v_offset=None, k_scale_cache=None,
                            v_scale_cache=None):
    """Quantizing write of :func:`ms_kvcache.reshape_and_cache` (``kv_format=2``, SEPARATE_KV) or
    :func:`ms_kvcache.reshape_and_cache_merged` (``kv_format=1``: ``key_cache`` is the merged
    ``[2, ...]`` cache, ``value_cache`` None). Call those public ops instead: they route here; the
    arguments, formulas and errors are documented there and in docs/quantization.md."""
    if _run_in_jit():  # @jit.cond: True
        mode = Q.graph_mode_of(k_scale_cache is None, v_scale_cache is None)
        if value_cache is None:
            value_cache = empty_input_graph(key_cache.dtype)
        k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache = Q.present(
            k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache)
        _check_static_graph(key.shape, key.dtype, value.shape, value.dtype, key_cache.shape, key_cache.dtype,
                            value_cache.shape, value_cache.dtype, slot_mapping.shape, slot_mapping.dtype,
                            k_scale.shape, k_scale.dtype, v_scale.shape, v_scale.dtype, k_offset.shape, k_offset.dtype,
                            v_offset.shape, v_offset.dtype, k_scale_cache.shape, k_scale_cache.dtype,
                            v_scale_cache.shape, v_scale_cache.dtype, cache_layout, kv_format, mode)
        _get_cache_prim(_Prim)(_graph_backend(graph_backend(), kv_format, key_cache.dtype), cache_layout, kv_format,
                               mode)(
            key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, k_offset, v_offset, k_scale_cache,
            v_scale_cache)
    else:
        mode = "static" if k_scale_cache is None and v_scale_cache is None else "dynamic"
        op = public_name(kv_format, "reshape_and_cache_merged", "reshape_and_cache")
        backend = Q.require_backend(op, _backend.get_backend(), SPEC)
        Q.check_kernel_cache(op, backend, "kv_cache" if kv_format == Q.MERGED else "key_cache", key_cache.dtype)
        try:
            _EAGER(backend, (cache_layout, kv_format, mode), key, value, key_cache,
                   empty_input(key_cache.dtype) if value_cache is None else value_cache, slot_mapping,
                   *Q.present(k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache))
        except (TypeError, ValueError) as exc:
            raise Q.renamed(exc, SPEC.name, op) from None
    return None
