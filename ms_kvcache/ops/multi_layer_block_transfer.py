"""multi_layer_block_transfer: whole blocks of every layer between the per-layer paged caches and
token-major host blocks, in one call (block granularity, HeteroFusedKernels "pcieThrough" style).

Op interface (implemented by the cpu kernel ``cpu_kernel/multi_layer_block_transfer.cpp`` and the AscendC kernel
``op_kernel/multi_layer_block_transfer.cpp`` + ``op_host/multi_layer_block_transfer.cpp``, run by the sim and ascend backends):

- inputs, in order: ``block_ids`` int32/int64 ``[n]``; ``staging`` (optional scratch, may be written,
  contents afterwards unspecified - the cpu kernel does not touch it; an empty ``[0]`` tensor when absent); ``host_blocks`` - a list input of one tensor per plane (written for
  ``direction="d2h"``); ``kv_caches`` - a list input of ``num_layers * tensors_per_layer`` caches in
  layer-major order (written for ``"h2d"``). AscendC: two ``ParamType(DYNAMIC)`` inputs and one
  ``OPTIONAL``; MindSpore: the tensors as consecutive inputs of one primitive class, the two list
  lengths per instance (``dyn_input_sizes`` ``[-1, -1, planes, n]``);
- attrs: ``kv_format``, ``direction``, ``cache_layout``, ``num_layers``, ``aiv_num`` (0 = all cores);
- output: the dummy int32 ``[1]`` status.

See :mod:`ms_kvcache.ops._multi_layer` and docs/design.md ("Lists of tensors") for why the layers are
a list input.
"""
import mindspore as ms
from mindspore import Tensor
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache import _validate as V
from ms_kvcache._custom import (_get_cache_prim, _run_in_jit, check_graph_types, empty_input,
                                empty_input_graph, graph_backend, nosync_checker, prim_class)
from ms_kvcache._formats import KVCacheFormat
from ms_kvcache._opspecs.transfer import MULTI_LAYER_BLOCK_TRANSFER
from ms_kvcache._spec import attach_checks
from ms_kvcache.ops import _multi_layer as ML
from ms_kvcache.ops import multi_layer_block_transfer_quant as _QB

__all__ = ["multi_layer_block_transfer", "SPEC"]

_OP = "multi_layer_block_transfer"


def _guess_format(op, kv_format, num_host_planes, host_rank, cache_rank):
    """kv_format given, or inferred from the structure: 3 host planes -> DSA_KV; host planes of rank 4
    ([n, bs, L, hidden]) -> MLA_KV; rank 5 ([n, bs, L, H, D]) -> MERGED_KV when the caches are rank 5,
    else SEPARATE_KV."""
    if kv_format is not None:
        return ML.format_code(op, kv_format)
    if num_host_planes == 3:
        return int(KVCacheFormat.DSA_KV)
    if num_host_planes == 2 and host_rank == 4:
        return int(KVCacheFormat.MLA_KV)
    if num_host_planes == 2 and host_rank == 5:
        return int(KVCacheFormat.MERGED_KV if cache_rank == 5 else KVCacheFormat.SEPARATE_KV)
    raise ValueError(f"{op}: argument 'host_blocks': expected 2 planes [n, block_size, L, H, D] (K, V), "
                     f"2 planes [n, block_size, L, hidden] (MLA) or 3 (DSA), got {num_host_planes} tensors of "
                     f"rank {host_rank}; pass kv_format= to say which format")


def _default_layout(fmt, cache_layout, cache_shape=None):
    """``cache_layout`` if given; else BNSD for MERGED_KV / SEPARATE_KV (pcieThrough's device layout) and
    BSND for MLA_KV / DSA_KV (no head axis). With the default, caches whose head and block axes have the
    same length (``[nb, 16, 16, D]``) are ambiguous - BSND caches (what reshape_and_cache writes by
    default) would be read transposed without any shape error - so they raise ValueError asking for
    ``cache_layout``."""
    if cache_layout is not None:
        return cache_layout
    if fmt in (KVCacheFormat.MLA_KV, KVCacheFormat.DSA_KV):
        return "BSND"
    if cache_shape is not None:
        dims = tuple(int(d) for d in cache_shape)
        dims = dims[1:] if fmt == KVCacheFormat.MERGED_KV else dims  # [2, nb, ...] -> [nb, ...]
        if len(dims) == 4 and dims[1] == dims[2]:
            raise ValueError(f"{_OP}: argument 'cache_layout': the caches {list(cache_shape)} have num_kv_heads == "
                             f"block_size = {dims[1]}, so their layout cannot be told from the shape; pass "
                             f"cache_layout='BSND' ([num_blocks, block_size, num_kv_heads, head_size], the default "
                             f"of reshape_and_cache) or cache_layout='BNSD' ([num_blocks, num_kv_heads, block_size, "
                             f"head_size]) explicitly (this op's default is BNSD)")
    return "BNSD"


def _infer_shape(attrs, ids_shape, staging_shape, host_shapes, cache_shapes):
    """Run in MindSpore's infer step: at graph compile time and at every ops.Custom PyNative call. An
    empty staging tensor stands for "no staging" (the wrapper passes one when ``staging`` is None)."""
    ML.check_block_shapes(_OP, attrs, ids_shape, staging_shape, host_shapes, cache_shapes,
                          ML.numel(staging_shape) > 0)
    return [1]


def _infer_dtype(attrs, ids_dtype, staging_dtype, host_dtypes, cache_dtypes):
    ML.check_index(_OP, "block_ids", (0,), ids_dtype)
    others = {f"host_blocks[{p}]": d for p, d in enumerate(host_dtypes)}
    others["staging"] = staging_dtype  # the empty stand-in has the caches' dtype
    ML.check_kv_dtypes(_OP, attrs["kv_format"], cache_dtypes, others)
    ML.check_nz_dtype(_OP, attrs["cache_layout"], cache_dtypes[0])
    return ms.int32


def _check_static(attr_values, shapes, dtypes, has_staging):
    """Eager shape/dtype checks (memoised by the wrapper): shapes/dtypes of (block_ids, staging, host
    planes, caches); returns what ``_multi_layer.check_block_shapes`` returns."""
    attrs = SPEC.attr_values(attr_values)
    ids_d, st_d, host_d, cache_d = dtypes
    _infer_dtype(attrs, ids_d, st_d if has_staging else cache_d[0], host_d, cache_d)
    ML.check_nz_caches(_OP, attrs["kv_format"], attrs["cache_layout"], shapes[3], cache_d[0])
    return ML.check_block_shapes(_OP, attrs, *shapes, has_staging)


SPEC = attach_checks(MULTI_LAYER_BLOCK_TRANSFER, infer_shape=_infer_shape, infer_dtype=_infer_dtype)


_Prim = prim_class(SPEC)
_STATIC = {}


@constexpr
def _graph_attrs(kv_format, direction, cache_layout, num_host_planes, host_rank, cache_shape, num_tensors, aiv_num,
                 cache_dtype):
    """Compile-time checks of the graph branch; returns (kv_format value, num_layers, cache_layout)."""
    ML.check_aiv_num(_OP, aiv_num)
    ML.check_direction(_OP, direction)
    fmt = _guess_format(_OP, kv_format, num_host_planes, host_rank, len(cache_shape))
    cache_layout = _default_layout(fmt, cache_layout, cache_shape)
    ML.check_layout(_OP, fmt, cache_layout)
    ML.check_nz_caches(_OP, fmt, cache_layout, (cache_shape,), cache_dtype)
    if num_host_planes != ML.planes_of(fmt):
        raise ValueError(f"{_OP}: argument 'host_blocks': expected {ML.planes_of(fmt)} planes "
                         f"{ML.PLANE_NAMES[fmt]} for {KVCacheFormat(fmt).name}, got {num_host_planes}")
    tpl = ML.tensors_per_layer(fmt)
    if num_tensors % tpl:
        raise ValueError(f"{_OP}: argument 'kv_caches': expected num_layers * {tpl} tensors for "
                         f"{KVCacheFormat(fmt).name}, got {num_tensors}")
    return fmt, num_tensors // tpl, cache_layout


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP, _GRAPH_ARGS = 'multi_layer_block_transfer', ('kv_caches[]', 'host_blocks[]', 'block_ids', 'staging?')

def multi_layer_block_transfer(kv_caches, host_blocks, block_ids, *, direction, staging=None, kv_format=None,
                               cache_layout=None, aiv_num=0, scale_caches=None, scale_host_blocks=None):
    """Move whole blocks of every layer between the paged caches and host blocks, in one call.

    ``direction="h2d"`` copies host block ``i`` into block ``block_ids[i]`` of every layer, ``"d2h"`` the
    reverse. Host blocks are token-major, one piece per block and plane (pcieThrough's layout, many blocks,
    both directions). Details: docs/ops-transfer.md.

    Args:
        kv_caches (sequence): one entry per layer as for :func:`multi_layer_kv_transfer`, or flat: BNSD
            ``[num_blocks, H, block_size, D]`` (default) or BSND; MLA / DSA ``[num_blocks, block_size, hidden]``;
            contiguous; written for ``"h2d"`` (in a graph each a whole Parameter).
        host_blocks (sequence of Tensor): one per plane: ``[n, block_size, L, H, D]`` (MERGED_KV / SEPARATE_KV) or
            ``[n, block_size, L, hidden]`` (MLA_KV / DSA_KV); dtype of the caches; contiguous; written for ``"d2h"``
            (in a graph each a whole Parameter).
        block_ids (Tensor): ``[n]`` int64 or int32, the cache block of each host block.
        direction (str, keyword): ``"h2d"`` or ``"d2h"``.
        staging (Tensor, keyword): optional device scratch of the caches' dtype, at least
            ``block_size * L * sum(hidden)`` elements; the AscendC kernels copy through it; written (a whole
            Parameter in a graph).
        kv_format (KVCacheFormat | int | str, keyword): as for :func:`multi_layer_kv_transfer`; None (default):
            inferred from the number and rank of the host planes.
        cache_layout (str, keyword): ``"BNSD"`` (default), ``"BSND"`` or ``"NZ"`` (``[num_blocks, H*D // C0,
            block_size, C0]``, C0 = 32 bytes; host blocks ND); MLA / DSA: BSND only; needed when H == block_size.
        aiv_num (int, keyword): cap on the vector cores (sim, ascend) or threads (cpu); 0 (default) = all.
        scale_caches (sequence, keyword): int8 / float8 caches only: their float32 scale caches, as for
            :func:`multi_layer_kv_transfer`; written for ``"h2d"``; needs ``scale_host_blocks``.
        scale_host_blocks (sequence of Tensor, keyword): float32 ``[n, block_size, L, H]`` per data plane
            (MLA / DSA: ``[n, block_size, L, 1]``); written for ``"d2h"``.

    Returns:
        None: the host blocks (d2h) or the caches (h2d), and ``staging``, are written in place; in a graph
        ordered against other reads and writes of them.

    Raises:
        TypeError: a non-Tensor argument; mixed or unsupported dtypes; in a graph, a written tensor that is not
            a whole Parameter.
        ValueError: shapes that do not match (host blocks, layers, staging smaller than one block), only one of
            the scale arguments, unknown names; in PyNative a block id out of range or repeated (h2d), memory
            shared between a written tensor and another argument.
        RuntimeError: in a graph, at launch: written tensors sharing memory (cpu, sim), a kernel failure. Per
            mode and backend: docs/ops-transfer.md, "Errors".
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(kv_caches), F.typeof(host_blocks), F.typeof(block_ids),
                          F.typeof(staging))
        flat = ML.flatten_graph(kv_caches)
        host = tuple(host_blocks)
        fmt, num_layers, layout = _graph_attrs(kv_format, direction, cache_layout, len(host), len(host[0].shape),
                                               flat[0].shape, len(flat), aiv_num, flat[0].dtype)
        if scale_caches is None and scale_host_blocks is None:
            prim = _get_cache_prim(_Prim)(graph_backend(), (len(host), len(flat)), fmt, direction, layout,
                                          num_layers, aiv_num)
            if staging is None:
                prim(block_ids, empty_input_graph(flat[0].dtype), *host, *flat)
            else:
                prim(block_ids, staging, *host, *flat)
        elif scale_caches is None or scale_host_blocks is None:
            _QB.graph_pair_error(scale_caches is None, scale_host_blocks is None)
        else:
            _QB.transfer_quant_graph(flat, host, block_ids, staging, scale_caches, scale_host_blocks, fmt, direction,
                                     layout, num_layers, aiv_num)
    else:
        _eager(kv_caches, host_blocks, block_ids, direction, staging, kv_format, cache_layout, aiv_num, scale_caches,
               scale_host_blocks)
    return None


def _eager(kv_caches, host_blocks, block_ids, direction, staging, kv_format, cache_layout, aiv_num, scale_caches,
           scale_host_blocks, prepare=False):
    """The PyNative branch: every check, then the launch; with ``prepare`` the checked call instead
    (:class:`ms_kvcache.ops._multi_layer.EagerCall`, what :meth:`ms_kvcache.LayerwiseTransfer.blocks` runs)."""
    op = _OP
    V.require_tensor(op, "block_ids", block_ids)
    V.require_tensor(op, "staging", staging, optional=True)
    ML.check_direction(op, direction)
    if not isinstance(host_blocks, (tuple, list)) or not host_blocks:
        raise TypeError(f"{op}: argument 'host_blocks': expected a tuple of per-plane Tensors, "
                        f"got {type(host_blocks).__name__}")
    for p, x in enumerate(host_blocks):
        if not isinstance(x, Tensor):
            raise TypeError(f"{op}: argument 'host_blocks[{p}]': expected a Tensor, got {type(x).__name__}")
    if not isinstance(kv_caches, (tuple, list)) or not kv_caches:
        raise TypeError(f"{op}: argument 'kv_caches': expected a non-empty list/tuple with one entry per "
                        f"layer, got {type(kv_caches).__name__}")
    first = kv_caches[0][0] if isinstance(kv_caches[0], (tuple, list)) and kv_caches[0] else kv_caches[0]
    fmt = _guess_format(op, kv_format, len(host_blocks), len(host_blocks[0].shape),
                        len(first.shape) if isinstance(first, Tensor) else -1)
    cache_layout = _default_layout(fmt, cache_layout, first.shape if isinstance(first, Tensor) else None)
    ML.check_layout(op, fmt, cache_layout)
    if len(host_blocks) != ML.planes_of(fmt):
        raise ValueError(f"{op}: argument 'host_blocks': expected {ML.planes_of(fmt)} planes "
                         f"{ML.PLANE_NAMES[fmt]} for {KVCacheFormat(fmt).name}, got {len(host_blocks)}")
    flat, num_layers = ML.flatten_eager(op, kv_caches, fmt)
    host = tuple(host_blocks)
    staged = staging is not None
    ML.check_aiv_num(op, aiv_num)
    if scale_caches is not None or scale_host_blocks is not None:
        return _QB.transfer_quant(flat, num_layers, host, block_ids, staging, scale_caches, scale_host_blocks,
                                  fmt, direction, cache_layout, aiv_num, prepare=prepare)
    attr_values = (fmt, direction, cache_layout, num_layers, int(aiv_num))
    planes, n, _ = V.cached_static(_STATIC, _check_static, (
        attr_values,
        (block_ids.shape, staging.shape if staged else (0,), tuple(x.shape for x in host),
         tuple(x.shape for x in flat)),
        (block_ids.dtype, staging.dtype if staged else None, tuple(x.dtype for x in host),
         tuple(x.dtype for x in flat)),
        staged))
    caches = [(f"kv_caches (tensor {i} in layer-major order)", x) for i, x in enumerate(flat)]
    if direction == "d2h":  # whole caches are read in place (a copy would cost more than the op): contiguous
        written, read = [(f"host_blocks[{p}]", x) for p, x in enumerate(host)], caches
    else:  # host blocks are read: a strided view is copied first, as for key/value of the copy ops
        host = tuple(V.contiguous_input(x) for x in host)
        written, read = caches, [(f"host_blocks[{p}]", x) for p, x in enumerate(host)]
    if staged:  # scratch the kernel writes: no memory shared with anything the op touches
        written.append(("staging", staging))
    for name, x in written + read:
        V.require_contiguous(op, name, x)
    # the index tensor is read too: it may not share memory with a written tensor (a
    # strided one is copied before the launch)
    V.require_disjoint(op, written, list(read) + [("block_ids", block_ids)])
    counts = (len(host), len(flat))
    if n == 0:
        return ML.EagerCall(SPEC, None, attr_values, counts, (), planes, 0, written, read) if prepare else None
    backend = _backend.get_backend()
    nosync = nosync_checker(backend)
    if nosync is None:  # ops.Custom path: it would write into a copy of a view
        for name, x in written:
            V.require_not_view(op, name, x)
    V.check_block_id_tensor(op, "block_ids", block_ids, planes[0][0], distinct=(direction == "h2d"),
                            nosync=nosync)
    call = ML.EagerCall(SPEC, backend, attr_values, counts, (V.contiguous_input(block_ids),
                        staging if staged else empty_input(flat[0].dtype), *host, *flat), planes, n, written, read)
    return ML.finish(call, prepare)
