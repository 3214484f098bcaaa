"""multi_layer_kv_transfer_quant: :func:`ms_kvcache.multi_layer_kv_transfer` of quantized (int8 / float8)
caches together with their float32 scale caches, in one call (issue 17; docs/ops-transfer.md,
"Quantized caches").

Users call ``multi_layer_kv_transfer(..., scale_caches=...)``; it routes here. Op interface (cpu kernel
``cpu_kernel/multi_layer_kv_transfer.cpp``, ``MskvMultiLayerKvTransferQuant``):

- inputs, in order: ``buffer`` (1-D, the cache dtype; written for ``direction="d2h"``), ``slot_mapping``
  int32/int64 ``[T]``, ``kv_caches`` (list input, ``L * tensors_per_layer`` caches, layer-major; written
  for ``"h2d"``), ``scale_caches`` (list input, ``L * planes`` float32 scale caches, layer-major; written
  for ``"h2d"``); ``dyn_input_sizes`` ``[-1, -1, n, L * planes]``;
- attrs: those of ``multi_layer_kv_transfer`` (``kv_format``, ``direction``, ``cache_layout``,
  ``num_layers``, ``aiv_num``);
- output: the dummy int32 ``[1]`` status.

Buffer layout (bytes; every element of an int8 / float8 cache is one byte): the data planes as
without scales (plane-major ``[L, T, hidden_p]``; MERGED/SEPARATE this is ``[2, L, T, H*D]``
flattened), then the scale planes one after another, plane-major, each ``[L, T, s_p]`` float32 in the
machine's byte order (``s_p`` = num_kv_heads, or 1 for MLA / DSA planes): the scale planes travel like
DSA_KV's indexer plane, an extra plane with its own row size (``4 * s_p`` bytes).

Backends: cpu (int8 and float8 caches); AscendC (sim, ascend: kernel ``op_kernel/multi_layer_kv_transfer_quant.cpp``,
the kernel of multi_layer_kv_transfer moving every plane as bytes) int8 caches on Ascend910B / Ascend910_93, and on
Ascend310P where every row is a multiple of 32 bytes (no DataCopyPad there: BSND scale rows of ``4 * H`` bytes with
H a multiple of 8; BNSD and MLA / DSA scale caches are a tiling error naming the SoC). float8 caches: cpu only.
"""
import mindspore as ms
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache import _validate as V
from ms_kvcache._custom import _get_cache_prim, check_graph_types, graph_backend, nosync_checker
from ms_kvcache._formats import KVCacheFormat
from ms_kvcache._opspecs.quant import MULTI_LAYER_KV_TRANSFER_QUANT
from ms_kvcache._spec import QUANT_CACHE_DTYPES, attach_checks
from ms_kvcache.ops import _multi_layer as ML

__all__ = ["SPEC", "transfer_quant", "transfer_quant_graph", "quant_buffer_shape"]

_OP = "multi_layer_kv_transfer"  # the public op named in messages


def quant_buffer_shape(fmt, num_layers, num_tokens, hidden, scales):
    """1-D buffer of L*T*sum(hidden) data bytes followed by L*T*sum(scales) float32 scales (4 bytes each)."""
    return (num_layers * num_tokens * (sum(hidden) + ML.SCALE_BYTES * sum(scales)),)


def _check_shapes(attrs, buffer_shape, slot_shape, cache_shapes, scale_shapes):
    fmt, layout, num_layers = attrs["kv_format"], attrs["cache_layout"], attrs["num_layers"]
    planes = ML.cache_planes(_OP, fmt, layout, num_layers, cache_shapes)
    scales = ML.scale_planes(_OP, fmt, layout, num_layers, planes, scale_shapes)
    if len(slot_shape) != 1:
        raise ValueError(f"{_OP}: argument 'slot_mapping': expected rank 1, got shape {tuple(slot_shape)}")
    num_tokens = int(slot_shape[0])
    hidden = [h * d for (_, _, h, d) in planes]
    expected = quant_buffer_shape(fmt, num_layers, num_tokens, hidden, scales)
    if tuple(int(d) for d in buffer_shape) != expected:
        sz = scales[0] if fmt in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV) else tuple(scales)
        hs = hidden[0] if fmt in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV) else tuple(hidden)
        raise ValueError(f"{_OP}: argument 'buffer': expected shape {expected} with scale caches "
                         f"(transfer_buffer_shape({KVCacheFormat(fmt).name}, num_layers={num_layers}, "
                         f"num_tokens={num_tokens}, hidden_sizes={hs}, scale_sizes={sz}): the data planes, "
                         f"then the float32 scale planes as bytes), got {tuple(buffer_shape)}")
    return planes


def _infer_shape(attrs, buffer_shape, slot_shape, cache_shapes, scale_shapes):
    _check_shapes(attrs, buffer_shape, slot_shape, cache_shapes, scale_shapes)
    return [1]


def _infer_dtype(attrs, buffer_dtype, slot_dtype, cache_dtypes, scale_dtypes):
    ML.check_index(_OP, "slot_mapping", (0,), slot_dtype)
    ML.check_kv_dtypes(_OP, attrs["kv_format"], cache_dtypes, {"buffer": buffer_dtype}, QUANT_CACHE_DTYPES)
    ML.check_scale_dtypes(_OP, attrs["kv_format"], cache_dtypes[0], scale_dtypes)
    ML.check_nz_dtype(_OP, attrs["cache_layout"], cache_dtypes[0])
    return ms.int32


def _check_static(attr_values, buffer_shape, buffer_dtype, slot_shape, slot_dtype, cache_shapes, cache_dtypes,
                  scale_shapes, scale_dtypes):
    attrs = SPEC.attr_values(attr_values)
    _infer_dtype(attrs, buffer_dtype, slot_dtype, cache_dtypes, scale_dtypes)
    ML.check_nz_caches(_OP, attrs["kv_format"], attrs["cache_layout"], cache_shapes, cache_dtypes[0])
    return _check_shapes(attrs, buffer_shape, slot_shape, cache_shapes, scale_shapes)


SPEC = attach_checks(MULTI_LAYER_KV_TRANSFER_QUANT, infer_shape=_infer_shape, infer_dtype=_infer_dtype)

_Prim = ML.public_prim(SPEC, _OP)  # graph-mode messages name the public op
_STATIC = {}


@constexpr
def _graph_check(kv_format, num_tensors, num_scales, cache_dtype):
    fmt = ML.format_code(_OP, kv_format)
    tpl, P = ML.tensors_per_layer(fmt), ML.planes_of(fmt)
    L = num_tensors // tpl
    if num_scales != L * P:
        raise ValueError(f"{_OP}: argument 'scale_caches': expected {L} layers x {P} scale caches "
                         f"{ML.SCALE_PLANE_NAMES[fmt]} = {L * P} tensors for {KVCacheFormat(fmt).name}, got "
                         f"{num_scales}; every layer's caches need their scale caches")
    ML.require_quant_backend(_OP, _backend.get_backend(), cache_dtype)
    return True


def transfer_quant_graph(buffer, flat, scale_caches, slot_mapping, fmt, direction, cache_layout, num_layers,
                         aiv_num):
    """Graph branch (called from multi_layer_kv_transfer's graph branch with the checked attributes)."""
    check_graph_types(_OP, ("scale_caches[]",), F.typeof(scale_caches))
    sflat = ML.flatten_graph(scale_caches)
    _graph_check(fmt, len(flat), len(sflat), flat[0].dtype)
    _get_cache_prim(_Prim)(graph_backend(), (len(flat), len(sflat)), fmt, direction, cache_layout, num_layers,
                           aiv_num)(buffer, slot_mapping, *flat, *sflat)


def transfer_quant(buffer, flat, num_layers, scale_caches, slot_mapping, fmt, direction, cache_layout, aiv_num,
                   prepare=False):
    """PyNative branch: ``flat`` the data caches (checked by the caller), ``scale_caches`` as given; with
    ``prepare`` the checked call (:class:`ms_kvcache.ops._multi_layer.EagerCall`) instead of the launch."""
    op = _OP
    sflat = ML.flatten_scales_eager(op, scale_caches, fmt, num_layers)
    attr_values = (fmt, direction, cache_layout, num_layers, int(aiv_num))
    planes = V.cached_static(_STATIC, _check_static, (
        attr_values, buffer.shape, buffer.dtype, slot_mapping.shape, slot_mapping.dtype,
        tuple(x.shape for x in flat), tuple(x.dtype for x in flat),
        tuple(x.shape for x in sflat), tuple(x.dtype for x in sflat)))
    caches = tuple((f"kv_caches (tensor {i} in layer-major order)", x) for i, x in enumerate(flat))
    caches += tuple((f"scale_caches (tensor {i} in layer-major order)", x) for i, x in enumerate(sflat))
    if direction == "d2h":
        written, read = (("buffer", buffer),), caches
    else:
        buffer = V.contiguous_input(buffer)
        written, read = caches, (("buffer", buffer),)
    for name, x in written + read:
        V.require_contiguous(op, name, x)
    # the index tensor is read too: it may not share memory with a written tensor (a
    # strided one is copied before the launch)
    V.require_disjoint(op, written, list(read) + [("slot_mapping", slot_mapping)])
    backend = ML.require_quant_backend(_OP, _backend.get_backend(), flat[0].dtype)
    counts = (len(flat), len(sflat))
    if slot_mapping.shape[0] == 0:
        return ML.EagerCall(SPEC, backend, attr_values, counts, (), planes, 0, written, read) if prepare else None
    nosync = nosync_checker(backend)
    if nosync is None:
        for name, x in written:
            V.require_not_view(op, name, x)
    nb, bs = planes[0][0], planes[0][1]
    V.check_slot_tensor(op, "slot_mapping", slot_mapping, nb * bs, nosync, allow_duplicates=(direction == "d2h"))
    call = ML.EagerCall(SPEC, backend, attr_values, counts, (buffer, V.contiguous_input(slot_mapping), *flat, *sflat),
                        planes, int(slot_mapping.shape[0]), written, read)
    return ML.finish(call, prepare)
