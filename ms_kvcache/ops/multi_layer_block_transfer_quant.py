"""multi_layer_block_transfer_quant: :func:`ms_kvcache.multi_layer_block_transfer` of quantized (int8 /
float8) caches together with their float32 scale caches and the scales' host blocks, in one call
(issue 17; docs/ops-transfer.md, "Quantized caches").

Users call ``multi_layer_block_transfer(..., scale_caches=..., scale_host_blocks=...)``; it routes here.
Op interface (cpu kernel ``cpu_kernel/multi_layer_block_transfer.cpp``, ``MskvMultiLayerBlockTransferQuant``):

- inputs, in order: ``block_ids``, ``staging`` (optional, empty ``[0]`` when absent), ``host_blocks``
  (list, one per plane, the cache dtype), ``kv_caches`` (list, ``L * tensors_per_layer``),
  ``scale_host_blocks`` (list, one float32 tensor per plane: ``[n, block_size, L, H]``, MLA / DSA
  ``[n, block_size, L, 1]``), ``scale_caches`` (list, ``L * planes`` float32); host blocks written for
  ``"d2h"``, caches for ``"h2d"``, staging (scratch) always;
- attrs: those of ``multi_layer_block_transfer``; output: the dummy int32 ``[1]`` status.

The scale planes are extra planes of the transfer (rows of ``4 * H`` bytes): a staging buffer must then
hold one block of every data plane and every scale plane, ``block_size * L * (sum(hidden) + 4 *
sum(scales))`` one-byte elements.

Backends: cpu (int8 and float8 caches); AscendC (sim, ascend: kernel ``op_kernel/multi_layer_block_transfer_quant.cpp``,
the kernel of multi_layer_block_transfer moving every plane as bytes) int8 caches on Ascend910B / Ascend910_93, and on
Ascend310P where every row is a multiple of 32 bytes (BSND scale rows of ``4 * H`` bytes with H a multiple of 8).
float8 caches: cpu only.
"""
import mindspore as ms
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache import _validate as V
from ms_kvcache._custom import (_get_cache_prim, check_graph_types, empty_input, empty_input_graph,
                                graph_backend, nosync_checker)
from ms_kvcache._formats import KVCacheFormat
from ms_kvcache._opspecs.quant import MULTI_LAYER_BLOCK_TRANSFER_QUANT
from ms_kvcache._spec import QUANT_CACHE_DTYPES, attach_checks
from ms_kvcache.ops import _multi_layer as ML

__all__ = ["SPEC", "transfer_quant", "transfer_quant_graph", "check_pair", "graph_pair_error"]

_OP = "multi_layer_block_transfer"


def _check_shapes(attrs, ids_shape, staging_shape, host_shapes, cache_shapes, shost_shapes, scale_shapes,
                  has_staging):
    fmt, layout, num_layers = attrs["kv_format"], attrs["cache_layout"], attrs["num_layers"]
    planes, n, per_block = ML.check_block_shapes(_OP, attrs, ids_shape, staging_shape, host_shapes, cache_shapes, False)
    scales = ML.scale_planes(_OP, fmt, layout, num_layers, planes, scale_shapes)
    P = ML.planes_of(fmt)
    if len(shost_shapes) != P:
        raise ValueError(f"{_OP}: argument 'scale_host_blocks': expected {P} float32 planes (one per data plane "
                         f"{ML.PLANE_NAMES[fmt]}) for {KVCacheFormat(fmt).name}, got {len(shost_shapes)}")
    for p in range(P):
        expected = (n, planes[p][1], num_layers, scales[p])
        got = tuple(int(d) for d in shost_shapes[p])
        if got != expected:
            raise ValueError(f"{_OP}: argument 'scale_host_blocks[{p}]': expected the host blocks of "
                             f"{ML.SCALE_PLANE_NAMES[fmt][p]} [n, block_size, num_layers, scales per token] = "
                             f"{expected}, got {got}")
    per_block += ML.SCALE_BYTES * sum(planes[p][1] * num_layers * scales[p] for p in range(P))
    if has_staging:
        size = ML.numel(staging_shape)
        if size < per_block:
            raise ValueError(f"{_OP}: argument 'staging': expected at least one block of every data and scale "
                             f"plane, block_size * num_layers * (sum(hidden) + 4 * sum(scales)) = {per_block} "
                             f"elements, got {size} (shape {tuple(staging_shape)})")
    return planes, n


def _infer_shape(attrs, ids_shape, staging_shape, host_shapes, cache_shapes, shost_shapes, scale_shapes):
    _check_shapes(attrs, ids_shape, staging_shape, host_shapes, cache_shapes, shost_shapes, scale_shapes,
                  ML.numel(staging_shape) > 0)
    return [1]


def _infer_dtype(attrs, ids_dtype, staging_dtype, host_dtypes, cache_dtypes, shost_dtypes, scale_dtypes):
    ML.check_index(_OP, "block_ids", (0,), ids_dtype)
    others = {f"host_blocks[{p}]": d for p, d in enumerate(host_dtypes)}
    others["staging"] = staging_dtype
    ML.check_kv_dtypes(_OP, attrs["kv_format"], cache_dtypes, others, QUANT_CACHE_DTYPES)
    ML.check_scale_dtypes(_OP, attrs["kv_format"], cache_dtypes[0], scale_dtypes)
    ML.check_nz_dtype(_OP, attrs["cache_layout"], cache_dtypes[0])
    for p, d in enumerate(shost_dtypes):
        if ML.dtype_name(d) != "float32":
            raise TypeError(f"{_OP}: argument 'scale_host_blocks[{p}]': expected dtype float32, got "
                            f"{ML.dtype_name(d)}")
    return ms.int32


def _check_static(attr_values, shapes, dtypes, has_staging):
    attrs = SPEC.attr_values(attr_values)
    ids_d, st_d, host_d, cache_d, shost_d, scale_d = dtypes
    _infer_dtype(attrs, ids_d, st_d if has_staging else cache_d[0], host_d, cache_d, shost_d, scale_d)
    ML.check_nz_caches(_OP, attrs["kv_format"], attrs["cache_layout"], shapes[3], cache_d[0])
    return _check_shapes(attrs, *shapes, has_staging)


SPEC = attach_checks(MULTI_LAYER_BLOCK_TRANSFER_QUANT, infer_shape=_infer_shape, infer_dtype=_infer_dtype)

_Prim = ML.public_prim(SPEC, _OP)  # graph-mode messages name the public op
_STATIC = {}


def check_pair(op, scale_caches_none, scale_host_blocks_none):
    """Both or neither of ``scale_caches`` / ``scale_host_blocks``; ValueError naming the missing one."""
    if scale_caches_none != scale_host_blocks_none:
        given, missing = ("scale_host_blocks", "scale_caches") if scale_caches_none else \
            ("scale_caches", "scale_host_blocks")
        raise ValueError(f"{op}: argument '{missing}': expected it together with '{given}' (the scale caches and "
                         f"their host blocks move together), got None")


@constexpr
def graph_pair_error(scale_caches_none, scale_host_blocks_none):
    """Graph-mode :func:`check_pair` (raises at compile time)."""
    check_pair(_OP, scale_caches_none, scale_host_blocks_none)
    return True


@constexpr
def _graph_check(fmt, num_tensors, num_shost, num_scales, scale_caches_none, scale_host_blocks_none, cache_dtype):
    check_pair(_OP, scale_caches_none, scale_host_blocks_none)
    tpl, P = ML.tensors_per_layer(fmt), ML.planes_of(fmt)
    L = num_tensors // tpl
    if num_scales != L * P:
        raise ValueError(f"{_OP}: argument 'scale_caches': expected {L} layers x {P} scale caches "
                         f"{ML.SCALE_PLANE_NAMES[fmt]} = {L * P} tensors, got {num_scales}")
    if num_shost != P:
        raise ValueError(f"{_OP}: argument 'scale_host_blocks': expected {P} float32 planes, got {num_shost}")
    ML.require_quant_backend(_OP, _backend.get_backend(), cache_dtype)
    return True


def transfer_quant_graph(flat, host, block_ids, staging, scale_caches, scale_host_blocks, fmt, direction, layout,
                         num_layers, aiv_num):
    check_graph_types(_OP, ("scale_caches[]", "scale_host_blocks[]"), F.typeof(scale_caches),
                      F.typeof(scale_host_blocks))
    sflat = ML.flatten_graph(scale_caches)
    shost = tuple(scale_host_blocks)
    _graph_check(fmt, len(flat), len(shost), len(sflat), False, False, flat[0].dtype)
    prim = _get_cache_prim(_Prim)(graph_backend(), (len(host), len(flat), len(shost), len(sflat)), fmt, direction,
                                  layout, num_layers, aiv_num)
    if staging is None:
        prim(block_ids, empty_input_graph(flat[0].dtype), *host, *flat, *shost, *sflat)
    else:
        prim(block_ids, staging, *host, *flat, *shost, *sflat)


def transfer_quant(flat, num_layers, host, block_ids, staging, scale_caches, scale_host_blocks, fmt, direction,
                   cache_layout, aiv_num, prepare=False):
    """PyNative branch: ``flat`` / ``host`` checked by the caller; with ``prepare`` the checked call
    (:class:`ms_kvcache.ops._multi_layer.EagerCall`) instead of the launch."""
    op = _OP
    check_pair(op, scale_caches is None, scale_host_blocks is None)
    sflat = ML.flatten_scales_eager(op, scale_caches, fmt, num_layers)
    if not isinstance(scale_host_blocks, (tuple, list)):
        raise TypeError(f"{op}: argument 'scale_host_blocks': expected a tuple of per-plane float32 Tensors, got "
                        f"{type(scale_host_blocks).__name__}")
    shost = tuple(scale_host_blocks)
    for p, x in enumerate(shost):
        V.require_tensor(op, f"scale_host_blocks[{p}]", x)
    staged = staging is not None
    attr_values = (fmt, direction, cache_layout, num_layers, int(aiv_num))
    planes, n = V.cached_static(_STATIC, _check_static, (
        attr_values,
        (block_ids.shape, staging.shape if staged else (0,), tuple(x.shape for x in host),
         tuple(x.shape for x in flat), tuple(x.shape for x in shost), tuple(x.shape for x in sflat)),
        (block_ids.dtype, staging.dtype if staged else None, tuple(x.dtype for x in host),
         tuple(x.dtype for x in flat), tuple(x.dtype for x in shost), tuple(x.dtype for x in sflat)),
        staged))
    caches = [(f"kv_caches (tensor {i} in layer-major order)", x) for i, x in enumerate(flat)]
    caches += [(f"scale_caches (tensor {i} in layer-major order)", x) for i, x in enumerate(sflat)]
    if direction == "d2h":
        written = [(f"host_blocks[{p}]", x) for p, x in enumerate(host)]
        written += [(f"scale_host_blocks[{p}]", x) for p, x in enumerate(shost)]
        read = caches
    else:
        host = tuple(V.contiguous_input(x) for x in host)
        shost = tuple(V.contiguous_input(x) for x in shost)
        written = caches
        read = [(f"host_blocks[{p}]", x) for p, x in enumerate(host)]
        read += [(f"scale_host_blocks[{p}]", x) for p, x in enumerate(shost)]
    if staged:
        written.append(("staging", staging))
    for name, x in written + read:
        V.require_contiguous(op, name, x)
    # the index tensor is read too: it may not share memory with a written tensor (a
    # strided one is copied before the launch)
    V.require_disjoint(op, written, list(read) + [("block_ids", block_ids)])
    backend = ML.require_quant_backend(_OP, _backend.get_backend(), flat[0].dtype)
    counts = (len(host), len(flat), len(shost), len(sflat))
    if n == 0:
        return ML.EagerCall(SPEC, backend, attr_values, counts, (), planes, 0, written, read) if prepare else None
    nosync = nosync_checker(backend)
    if nosync is None:
        for name, x in written:
            V.require_not_view(op, name, x)
    V.check_block_id_tensor(op, "block_ids", block_ids, planes[0][0], distinct=(direction == "h2d"), nosync=nosync)
    call = ML.EagerCall(SPEC, backend, attr_values, counts, (V.contiguous_input(block_ids),
                        staging if staged else empty_input(flat[0].dtype), *host, *flat, *shost, *sflat), planes, n,
                        written, read)
    return ML.finish(call, prepare)
