"""multi_layer_block_transfer: whole blocks of every layer between the per-layer paged caches and
token-major host blocks, in one call (block granularity, HeteroFusedKernels "pcieThrough" style).

Op interface (what the cpu kernel implements today and an AscendC kernel implements later):

- inputs, in order: ``block_ids`` int32/int64 ``[n]``; ``staging`` (optional, written); ``host_blocks``
  - a dynamic input of one tensor per plane (written for ``direction="d2h"``); ``kv_caches`` - a
  dynamic input of ``num_layers * tensors_per_layer`` caches in layer-major order (written for
  ``"h2d"``). AscendC: two ``ParamType(DYNAMIC)`` inputs and one ``OPTIONAL``; MindSpore: the tensors as
  consecutive positional arguments (the host-plane count, 2 or 3, and the presence of ``staging`` select
  one of eight primitive classes; the layer list is variadic);
- attrs: ``kv_format``, ``direction``, ``cache_layout``, ``num_layers``, ``aiv_num`` (0 = all cores);
- output: the dummy int32 ``[1]`` status.

See :mod:`ms_kvcache.ops._multi_layer` and docs/design.md ("Lists of per-layer caches") for why the
layers are a dynamic input.
"""
import numpy as np
import mindspore as ms
from mindspore import Tensor
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache import _validate as V
from ms_kvcache._custom import _get_cache_prim, _run_in_jit, eager_op, graph_backend, prim_class
from ms_kvcache._formats import CACHE_LAYOUTS, KVCacheFormat
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, AttrSpec, OpSpec, TensorSpec, register
from ms_kvcache.ops import _multi_layer as ML

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


def _default_layout(fmt, cache_layout):
    if cache_layout is not None:
        return cache_layout
    return "BSND" if fmt in (KVCacheFormat.MLA_KV, KVCacheFormat.DSA_KV) else "BNSD"


def _host_plane_shape(fmt, n, plane, num_layers):
    nb, bs, h, d = plane
    if fmt in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV):
        return (n, bs, num_layers, h, d)
    return (n, bs, num_layers, h * d)


def _check_shapes(attrs, shapes, has_staging):
    """Shape checks (eager and infer); returns (planes, n, staging elements needed per block)."""
    fmt, layout, num_layers = attrs["kv_format"], attrs["cache_layout"], attrs["num_layers"]
    planes_n = ML.planes_of(fmt)
    ids_shape = shapes[0]
    staging_shape = shapes[1] if has_staging else None
    host_shapes = shapes[1 + has_staging: 1 + has_staging + planes_n]
    cache_shapes = shapes[1 + has_staging + planes_n:]
    planes = ML.cache_planes(_OP, fmt, layout, num_layers, cache_shapes)
    if len(ids_shape) != 1:
        raise ValueError(f"{_OP}: argument 'block_ids': expected rank 1, got shape {tuple(ids_shape)}")
    n = int(ids_shape[0])
    names = ML.PLANE_NAMES[fmt]
    for p in range(planes_n):
        expected = _host_plane_shape(fmt, n, planes[p], num_layers)
        got = tuple(int(d) for d in host_shapes[p])
        if got != expected:
            layout_txt = "[n, block_size, num_layers, num_kv_heads, head_size]" if len(expected) == 5 else \
                "[n, block_size, num_layers, hidden]"
            raise ValueError(f"{_OP}: argument 'host_blocks[{p}]': expected the {names[p]} host blocks "
                             f"{layout_txt} = {expected} (n = len(block_ids), geometry of the caches, "
                             f"num_layers = {num_layers}), got {got}")
    per_block = sum(bs * num_layers * h * d for (_, bs, h, d) in planes)
    if has_staging:
        size = int(np.prod(staging_shape, dtype=np.int64)) if len(staging_shape) else 1
        if size < per_block:
            raise ValueError(f"{_OP}: argument 'staging': expected at least one block of every plane, "
                             f"block_size * num_layers * sum(hidden) = {per_block} elements, got {size} "
                             f"(shape {tuple(staging_shape)})")
    return planes, n, per_block


def _split_counts(attrs, count):
    planes_n = ML.planes_of(attrs["kv_format"])
    caches = attrs["num_layers"] * ML.tensors_per_layer(attrs["kv_format"])
    has_staging = count - 1 - planes_n - caches
    if has_staging not in (0, 1):
        raise ValueError(f"{_OP}: expected block_ids, [staging], {planes_n} host planes and {caches} caches, "
                         f"got {count} tensors")
    return has_staging


def _infer_shape(attrs, *shapes):
    """Run in MindSpore's infer step: at graph compile time and at every PyNative call."""
    _check_shapes(attrs, shapes, _split_counts(attrs, len(shapes)))
    return [1]


def _infer_dtype(attrs, *dtypes):
    has_staging = _split_counts(attrs, len(dtypes))
    planes_n = ML.planes_of(attrs["kv_format"])
    ML.check_index(_OP, "block_ids", (0,), dtypes[0])
    others = {f"host_blocks[{p}]": dtypes[1 + has_staging + p] for p in range(planes_n)}
    if has_staging:
        others["staging"] = dtypes[1]
    ML.check_kv_dtypes(_OP, attrs["kv_format"], dtypes[1 + has_staging + planes_n:], others)
    return ms.int32


SPEC = register(OpSpec(
    name=_OP,
    op_type="MultiLayerBlockTransfer",
    inputs=(
        TensorSpec("block_ids", "S", (1,)),
        TensorSpec("staging", "T", (1, 2, 3, 4, 5), inplace=True, optional=True),
        TensorSpec("host_blocks", "T", (4, 5), dynamic=True, inplace_if=("direction", "d2h")),
        TensorSpec("kv_caches", "T", (3, 4, 5), dynamic=True, inplace_if=("direction", "h2d")),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=(
        AttrSpec("kv_format", "int", int(KVCacheFormat.MERGED_KV), tuple(int(f) for f in KVCacheFormat)),
        AttrSpec("direction", "str", "h2d", ML.DIRECTIONS),
        AttrSpec("cache_layout", "str", "BNSD", CACHE_LAYOUTS),
        AttrSpec("num_layers", "int", 1),
        AttrSpec("aiv_num", "int", 0),
    ),
    doc="Whole blocks of every layer between per-layer paged caches and token-major host blocks.",
    extra={"infer_shape": _infer_shape, "infer_dtype": _infer_dtype},
))


def _variant(direction, num_host_planes, staged):
    return prim_class(SPEC, written=SPEC.written_inputs({"direction": direction}),
                      counts={"host_blocks": num_host_planes}, absent=() if staged else ("staging",))


#: one class per (direction, host planes, staging given); the layer list is variadic in each.
_PRIMS = {(d, p, s): _variant(d, p, s) for d in ML.DIRECTIONS for p in (2, 3) for s in (False, True)}


@constexpr
def _graph_attrs(kv_format, direction, cache_layout, num_host_planes, host_rank, cache_rank, num_tensors, staged):
    """Compile-time checks of the graph branch; returns (kv_format value, num_layers, class key)."""
    ML.check_direction(_OP, direction)
    fmt = _guess_format(_OP, kv_format, num_host_planes, host_rank, cache_rank)
    cache_layout = _default_layout(fmt, cache_layout)
    ML.check_layout(_OP, fmt, cache_layout)
    if num_host_planes != ML.planes_of(fmt):
        raise ValueError(f"{_OP}: argument 'host_blocks': expected {ML.planes_of(fmt)} planes "
                         f"{ML.PLANE_NAMES[fmt]} for {KVCacheFormat(fmt).name}, got {num_host_planes}")
    tpl = ML.tensors_per_layer(fmt)
    if num_tensors % tpl:
        raise ValueError(f"{_OP}: argument 'kv_caches': expected num_layers * {tpl} tensors for "
                         f"{KVCacheFormat(fmt).name}, got {num_tensors}")
    return fmt, num_tensors // tpl, (direction, num_host_planes, staged), cache_layout


def multi_layer_block_transfer(kv_caches, host_blocks, block_ids, *, direction, staging=None, kv_format=None,
                               cache_layout=None):
    """Move whole blocks of every layer between the paged caches and host blocks, in one call.

    ``direction="h2d"`` copies host block ``i`` into device block ``block_ids[i]`` of every layer (load);
    ``"d2h"`` copies device block ``block_ids[i]`` of every layer into host block ``i`` (offload). Host
    blocks are token-major, one contiguous piece per block and plane, as offload stores keep them
    (HeteroFusedKernels' pcieThrough layout, extended to many blocks and both directions).

    Args:
        kv_caches (sequence): one entry per layer, as in :func:`multi_layer_kv_transfer` (MERGED_KV
            tensor, ``(key_cache, value_cache)``, MLA ``(kv_c_cache, k_pe_cache)``, DSA adds
            ``indexer_k_cache``), or the flat layer-major sequence. Device caches per layer are BNSD
            ``[num_blocks, H, block_size, D]`` by default or BSND ``[num_blocks, block_size, H, D]``
            (``cache_layout``); MLA/DSA planes ``[num_blocks, block_size, hidden]``. Written for ``"h2d"``.
        host_blocks (sequence of Tensor): one tensor per plane - ``(key_blocks, value_blocks)`` for
            MERGED/SEPARATE, each ``[n, block_size, L, H, D]``; ``(kv_c_blocks [n, block_size, L,
            kv_lora_rank], k_pe_blocks [n, block_size, L, rope_dim])`` for MLA, plus ``indexer_blocks
            [n, block_size, L, index_head_dim]`` for DSA. Same dtype as the caches; contiguous; written
            for ``"d2h"`` (a buffer from :func:`ms_kvcache.alloc_host_buffer` is the usual choice).
        block_ids (Tensor): int64 (or int32) ``[n]``, device block of each host block; n may be large.
        direction (str): keyword-only, ``"h2d"`` or ``"d2h"``.
        staging (Tensor, optional): a device buffer of the caches' dtype with at least
            ``block_size * L * sum(hidden)`` elements (one block of every plane). When given, host blocks
            go through it: on Ascend one DMA per chunk of ``staging.size // that`` blocks, then the
            scatter/gather on device ("fused memcpy"); without it the kernel reads/writes host memory
            directly (zero-copy). Both give identical results on every backend (the cpu backend stages
            through the given buffer).
        kv_format (KVCacheFormat | int | str, optional): inferred when None: 3 host planes -> DSA_KV,
            rank-4 host planes -> MLA_KV, rank-5 host planes -> MERGED_KV if the caches are rank 5 else
            SEPARATE_KV.
        cache_layout (str, optional): ``"BNSD"`` (the default for MERGED/SEPARATE, as pcieThrough) or
            ``"BSND"``; MLA/DSA caches have no head axis and only take ``"BSND"`` (their default).

    Returns:
        None. Host blocks (d2h) or caches (h2d) are written in place, without copies, in PyNative,
        GRAPH_MODE and ``@ms.jit``, ordered against other reads/writes of the same Parameters.

    Raises:
        TypeError: non-Tensor arguments; dtypes differing between layers, planes, host blocks and staging;
            block_ids not int32/int64.
        ValueError: unknown ``direction``/``kv_format``/``cache_layout``; shapes differing between layers;
            host blocks whose shape does not match (``n``, block_size, layer count, heads, head size);
            a staging buffer smaller than one block; a block id outside ``[0, num_blocks)`` or (h2d) a
            repeated id (PyNative only: in graph mode such ids are skipped by h2d and give zero host
            blocks in d2h, never a write outside a cache); a non-contiguous tensor that would be written.
    """
    if _run_in_jit():  # @jit.cond: True
        flat = ML.flatten_graph(kv_caches)
        host = tuple(host_blocks)
        fmt, num_layers, key, layout = _graph_attrs(kv_format, direction, cache_layout, len(host), len(host[0].shape),
                                            len(flat[0].shape), len(flat), staging is not None)
        if staging is None:
            _get_cache_prim(_PRIMS[key])(graph_backend(), fmt, direction, layout, num_layers, 0)(
                block_ids, *host, *flat)
        else:
            _get_cache_prim(_PRIMS[key])(graph_backend(), fmt, direction, layout, num_layers, 0)(
                block_ids, staging, *host, *flat)
    else:
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
        cache_layout = _default_layout(fmt, cache_layout)
        ML.check_layout(op, fmt, cache_layout)
        if len(host_blocks) != ML.planes_of(fmt):
            raise ValueError(f"{op}: argument 'host_blocks': expected {ML.planes_of(fmt)} planes "
                             f"{ML.PLANE_NAMES[fmt]} for {KVCacheFormat(fmt).name}, got {len(host_blocks)}")
        flat, num_layers = ML.flatten_eager(op, kv_caches, fmt)
        staged = staging is not None
        attrs = {"kv_format": fmt, "direction": direction, "cache_layout": cache_layout, "num_layers": num_layers}
        args = (block_ids,) + ((staging,) if staged else ()) + tuple(host_blocks) + flat
        _infer_dtype(attrs, *(x.dtype for x in args))
        planes, n, _ = _check_shapes(attrs, [x.shape for x in args], int(staged))
        written = list(host_blocks) if direction == "d2h" else list(flat)
        names = [f"host_blocks[{p}]" for p in range(len(host_blocks))] if direction == "d2h" else \
            [f"kv_caches (tensor {i} in layer-major order)" for i in range(len(flat))]
        if staged:
            written.append(staging)
            names.append("staging")
        for name, x in zip(names, written):
            V.require_contiguous(op, name, x)
        if n == 0:
            return None
        ids = V.index_values(block_ids)
        V.check_block_ids(op, "block_ids", ids, planes[0][0])
        if direction == "h2d" and ids.size > 1:
            uniq, counts = np.unique(ids, return_counts=True)
            if uniq.size != ids.size:
                dup = int(uniq[np.argmax(counts > 1)])
                where = np.nonzero(ids == dup)[0][:2].tolist()
                raise ValueError(f"{op}: argument 'block_ids': expected distinct ids for h2d (two host blocks "
                                 f"cannot load into one device block), got {dup} at indices {where}")
        cls = _PRIMS[(direction, len(host_blocks), staged)]
        eager_op(SPEC, _backend.get_backend(), (fmt, direction, cache_layout, num_layers, 0), cls=cls)(*args)
    return None
