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
import numpy as np
import mindspore as ms
from mindspore import Tensor
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache import _validate as V
from ms_kvcache._custom import (_get_cache_prim, _run_in_jit, check_graph_types, eager_launcher, empty_input,
                                empty_input_graph, graph_backend, nosync_checker, prim_class)
from ms_kvcache._formats import KVCacheFormat
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, OpSpec, TensorSpec, register
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


def _host_plane_shape(fmt, n, plane, num_layers):
    nb, bs, h, d = plane
    if fmt in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV):
        return (n, bs, num_layers, h, d)
    return (n, bs, num_layers, h * d)


def _check_shapes(attrs, ids_shape, staging_shape, host_shapes, cache_shapes, has_staging):
    """Shape checks (eager and infer); returns (planes, n, staging elements needed per block)."""
    fmt, layout, num_layers = attrs["kv_format"], attrs["cache_layout"], attrs["num_layers"]
    planes_n = ML.planes_of(fmt)
    if len(host_shapes) != planes_n:
        raise ValueError(f"{_OP}: argument 'host_blocks': expected {planes_n} planes {ML.PLANE_NAMES[fmt]} for "
                         f"{KVCacheFormat(fmt).name}, got {len(host_shapes)}")
    planes = ML.cache_planes(_OP, fmt, layout, num_layers, cache_shapes)
    if len(ids_shape) != 1:
        raise ValueError(f"{_OP}: argument 'block_ids': expected rank 1, got shape {tuple(ids_shape)}")
    n = int(ids_shape[0])
    names = ML.PLANE_NAMES[fmt]
    for p in range(planes_n):
        expected = _host_plane_shape(fmt, n, planes[p], num_layers)
        got = tuple(int(d) for d in host_shapes[p])
        if layout == "NZ" and len(got) == 5 and got[:3] == expected[:3] and got[3] * got[4] == expected[3] * expected[4]:
            continue  # NZ caches: the usual ND host blocks [n, bs, L, H, D], any H * D = the NZ hidden size
        if layout == "NZ":
            hid = expected[3] * expected[4]
            raise ValueError(f"{_OP}: argument 'host_blocks[{p}]': expected the {names[p]} host blocks [n, block_size, "
                             f"num_layers, num_kv_heads, head_size] = {expected[:3]} + (H, D) with H * D = {hid} (the "
                             f"NZ caches' hidden size), got {got}")
        if got != expected:
            layout_txt = "[n, block_size, num_layers, num_kv_heads, head_size]" if len(expected) == 5 else \
                "[n, block_size, num_layers, hidden]"
            raise ValueError(f"{_OP}: argument 'host_blocks[{p}]': expected the {names[p]} host blocks "
                             f"{layout_txt} = {expected} (n = len(block_ids), geometry of the caches read as "
                             f"cache_layout={layout!r} - this op's default is BNSD for MERGED_KV / SEPARATE_KV, "
                             f"pass cache_layout='BSND' for [num_blocks, block_size, num_kv_heads, head_size] caches "
                             f"- num_layers = {num_layers}), got {got}")
    per_block = sum(bs * num_layers * h * d for (_, bs, h, d) in planes)
    if has_staging:
        size = _numel(staging_shape)
        if size < per_block:
            raise ValueError(f"{_OP}: argument 'staging': expected at least one block of every plane, "
                             f"block_size * num_layers * sum(hidden) = {per_block} elements, got {size} "
                             f"(shape {tuple(staging_shape)})")
    return planes, n, per_block


def _numel(shape):
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _infer_shape(attrs, ids_shape, staging_shape, host_shapes, cache_shapes):
    """Run in MindSpore's infer step: at graph compile time and at every ops.Custom PyNative call. An
    empty staging tensor stands for "no staging" (the wrapper passes one when ``staging`` is None)."""
    _check_shapes(attrs, ids_shape, staging_shape, host_shapes, cache_shapes, _numel(staging_shape) > 0)
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
    planes, caches); returns what :func:`_check_shapes` returns."""
    attrs = SPEC.attr_values(attr_values)
    ids_d, st_d, host_d, cache_d = dtypes
    _infer_dtype(attrs, ids_d, st_d if has_staging else cache_d[0], host_d, cache_d)
    ML.check_nz_caches(_OP, attrs["kv_format"], attrs["cache_layout"], shapes[3], cache_d[0])
    return _check_shapes(attrs, *shapes, has_staging)


SPEC = register(OpSpec(
    name=_OP,
    op_type="MskvMultiLayerBlockTransfer",
    inputs=(
        TensorSpec("block_ids", "S", (1,)),
        TensorSpec("staging", "T", (1, 2, 3, 4, 5), inplace=True, optional=True),
        TensorSpec("host_blocks", "T", (4, 5), dynamic=True, inplace_if=("direction", "d2h")),
        TensorSpec("kv_caches", "T", (3, 4, 5), dynamic=True, inplace_if=("direction", "h2d")),
    ),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=ML.transfer_attrs("h2d", "BNSD"),
    doc="Whole blocks of every layer between per-layer paged caches and token-major host blocks.",
    extra={"infer_shape": _infer_shape, "infer_dtype": _infer_dtype},
))


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

    ``direction="h2d"`` copies host block ``i`` into device block ``block_ids[i]`` of every layer (load);
    ``"d2h"`` copies device block ``block_ids[i]`` of every layer into host block ``i`` (offload). Host
    blocks are token-major, one contiguous piece per block and plane, as offload stores keep them
    (HeteroFusedKernels' pcieThrough layout, extended to many blocks and both directions).

    Args:
        kv_caches (sequence): one entry per layer, as in :func:`multi_layer_kv_transfer` (MERGED_KV
            tensor, ``(key_cache, value_cache)``, MLA ``(kv_c_cache, k_pe_cache)``, DSA adds
            ``indexer_k_cache``), or the flat layer-major sequence. Device caches per layer are BNSD
            ``[num_blocks, H, block_size, D]`` by default or BSND ``[num_blocks, block_size, H, D]``
            (``cache_layout``); MLA/DSA planes ``[num_blocks, block_size, hidden]``. Written for ``"h2d"``
            (in a graph then each a whole Parameter).
        host_blocks (sequence of Tensor): one tensor per plane - ``(key_blocks, value_blocks)`` for
            MERGED/SEPARATE, each ``[n, block_size, L, H, D]``; ``(kv_c_blocks [n, block_size, L,
            kv_lora_rank], k_pe_blocks [n, block_size, L, rope_dim])`` for MLA, plus ``indexer_blocks
            [n, block_size, L, index_head_dim]`` for DSA. Same dtype as the caches; contiguous; written
            for ``"d2h"`` (in a graph then each a whole Parameter; a buffer from
            :func:`ms_kvcache.alloc_host_buffer` is the usual choice).
        block_ids (Tensor): int64 (or int32) ``[n]``, device block of each host block; n may be large.
        direction (str): keyword-only, ``"h2d"`` or ``"d2h"``.
        staging (Tensor, optional): a device buffer of the caches' dtype with at least
            ``block_size * L * sum(hidden)`` elements (one block of every plane). When given, host blocks
            go through it ("fused memcpy"): the AscendC kernel (sim, ascend) gives each core a slice of
            the buffer, copies the host rows of up to a slice of (block, layer) units into it with large
            strided copies, then scatters/gathers on device; without it the kernel reads/writes host
            memory directly (zero-copy). Both give identical caches and host blocks on every backend. The
            buffer is scratch: its dtype and size are checked on every backend, its contents after the call
            are unspecified. The cpu backend (host memory is its device memory, so staging buys nothing)
            checks it and runs the zero-copy path. See docs/ops-transfer.md, "AscendC kernels". Written
            (scratch), so in a graph a whole Parameter.
        kv_format (KVCacheFormat | int | str, optional): a ``KVCacheFormat`` member, its int value (1-4)
            or a string in any case, the member name or its short form (``"MERGED_KV"`` / ``"merged"``,
            ``"SEPARATE_KV"`` / ``"separate"``, ``"MLA_KV"`` / ``"mla"``, ``"DSA_KV"`` / ``"dsa"``);
            inferred when None: 3 host planes -> DSA_KV,
            rank-4 host planes -> MLA_KV, rank-5 host planes -> MERGED_KV if the caches are rank 5 else
            SEPARATE_KV.
        cache_layout (str, optional): ``"BNSD"`` (the default for MERGED/SEPARATE, as pcieThrough), ``"BSND"`` or
            ``"NZ"`` (``[num_blocks, H*D // C0, block_size, C0]``, host blocks still ND; docs/ops-transfer.md); MLA/DSA caches have no head axis and only take ``"BSND"`` (their default). Note the
            other ops default to BSND: pass ``cache_layout="BSND"`` for caches written by
            ``reshape_and_cache`` with its default. Without ``cache_layout``, MERGED/SEPARATE caches with
            num_kv_heads == block_size raise ValueError (the layout cannot be told from the shape).
        aiv_num (int): keyword-only cap on the vector cores (AIV) the AscendC kernel uses (sim, ascend),
            like pcieThrough's ``aivNum`` (leave cores to concurrent compute); on the cpu backend a cap on
            threads. 0 (default) = all.
        scale_caches (sequence, optional): keyword-only; the float32 scale caches of int8 / float8
            ``kv_caches``, one per layer and data plane, nested or flat as in
            :func:`multi_layer_kv_transfer` (MERGED_KV / SEPARATE_KV ``(k_scale_cache, v_scale_cache)``
            ``[nb, H, bs(, 1)]`` BNSD / ``[nb, bs, H(, 1)]`` BSND; MLA / DSA one ``[nb, bs, 1]`` per plane),
            moved in the same call. Written for ``"h2d"``. Needs ``scale_host_blocks``.
        scale_host_blocks (sequence of Tensor, optional): keyword-only; the scales' host blocks, one
            float32 tensor per data plane, token-major like ``host_blocks``: ``[n, block_size, L, H]``
            (MLA / DSA ``[n, block_size, L, 1]``). Written for ``"d2h"``. With scales a ``staging`` buffer
            must hold ``block_size * L * (sum(hidden) + 4 * sum(scales))`` one-byte elements (one block of
            every data and scale plane). Every backend: cpu (int8 and float8), sim / ascend (the AscendC
            kernel of ``op_kernel/multi_layer_block_transfer_quant.cpp``: int8 caches; on Ascend310P only
            where every data and scale row is a multiple of 32 bytes, i.e. BSND with H a multiple of 8, else
            a tiling error naming the SoC).

    Returns:
        None. Host blocks (d2h) or caches (h2d) are written in place, without copies, in PyNative,
        GRAPH_MODE and ``@ms.jit``, ordered against other reads/writes of the same Parameters.

    Raises:
        TypeError: non-Tensor arguments; dtypes differing between layers, planes, host blocks and staging;
            block_ids not int32/int64; scale caches with caches that are not int8 / float8, or scale caches /
            scale host blocks that are not float32.
        TypeError: float8 caches with scale caches on sim / ascend (int8 there).
        ValueError: only one of ``scale_caches`` / ``scale_host_blocks``; scale caches missing for a layer or
            plane, or of shapes that do not match the caches or the host blocks; unknown ``direction``/``kv_format``/``cache_layout``; ``aiv_num`` not an int >= 0;
            shapes differing between layers;
            host blocks whose shape does not match (``n``, block_size, layer count, heads, head size);
            a staging buffer smaller than one block; a block id outside ``[0, num_blocks)`` or (h2d) a
            repeated id (PyNative only: in graph mode such ids are skipped by h2d and give zero host
            blocks in d2h, never a write outside a cache); a non-contiguous tensor that would be written, or
            (without the PyNative fast path, where ops.Custom would write into a copy) a view; a written
            tensor sharing memory with another one or with a tensor the op reads (the caches or host blocks of
            the other direction, ``block_ids``) (PyNative).
        TypeError (GRAPH_MODE / ``@ms.jit``, at compile time): a written tensor (host blocks for d2h, caches for
            h2d, ``staging``) not a whole Parameter (a slice, split or reshape of one, an op's result, a Tensor
            attribute or argument: MindSpore would write a temporary copy); a Python list or numpy array where a
            Tensor is expected.
        RuntimeError (GRAPH_MODE / ``@ms.jit``, at launch, cpu and sim): a written tensor sharing memory (the same
            Parameter twice, two Parameters over one buffer), or a written tensor over one the call reads (e.g.
            ``staging`` over a cache); nothing is written. On the ascend backend the kernel finds it instead and
            stops the launch (``AscendC::Trap()``, before any write): MindSpore raises at the next stream sync with
            the AI Core exception, not this message (seen in the emulation only). A kernel failure's message is in
            the exception text.
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
                                      fmt, direction, cache_layout, aiv_num)
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
        if n == 0:
            return None
        backend = _backend.get_backend()
        nosync = nosync_checker(backend)
        if nosync is None:  # ops.Custom path: it would write into a copy of a view
            for name, x in written:
                V.require_not_view(op, name, x)
        V.check_block_id_tensor(op, "block_ids", block_ids, planes[0][0], distinct=(direction == "h2d"),
                                nosync=nosync)
        eager_launcher(SPEC, backend, attr_values, (len(host), len(flat)))(
            V.contiguous_input(block_ids), staging if staged else empty_input(flat[0].dtype), *host, *flat)
    return None
