"""multi_layer_kv_transfer: every layer's K/V rows of T tokens between the paged caches and one
contiguous buffer, in one call (token granularity, LMCache "KV_2LTD" style).

Op interface (implemented by the cpu kernel ``cpu_kernel/multi_layer_kv_transfer.cpp`` and the AscendC kernel
``op_kernel/multi_layer_kv_transfer.cpp`` + ``op_host/multi_layer_kv_transfer.cpp``, run by the sim and ascend backends):

- inputs, in order: ``buffer`` (written for ``direction="d2h"``), ``slot_mapping`` int32/int64
  ``[T]``, ``kv_caches`` - a list input (``TensorSpec(dynamic=True)``; AscendC ``ParamType(DYNAMIC)``,
  aclnn ``aclTensorList``) of ``num_layers * tensors_per_layer`` caches in layer-major order (written
  for ``"h2d"``); the primitive gets its length per instance (``dyn_input_sizes`` ``[-1, -1, n]``);
- attrs: ``kv_format`` (KVCacheFormat value), ``direction``, ``cache_layout``, ``num_layers``,
  ``aiv_num`` (cap on cores / threads; 0 = all);
- output: the dummy int32 ``[1]`` status of every in-place op.

Why a list input rather than a table of per-layer base addresses: see :mod:`ms_kvcache.ops._multi_layer`
and docs/design.md ("Lists of tensors").
"""
import operator

import mindspore as ms
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from ms_kvcache import _backend
from ms_kvcache import _validate as V
from ms_kvcache._custom import (_get_cache_prim, _run_in_jit, check_graph_types, graph_backend,
                                nosync_checker, prim_class)
from ms_kvcache._formats import KVCacheFormat
from ms_kvcache._opspecs.transfer import MULTI_LAYER_KV_TRANSFER
from ms_kvcache._spec import attach_checks
from ms_kvcache.ops import _multi_layer as ML
from ms_kvcache.ops import multi_layer_kv_transfer_quant as _QT

__all__ = ["multi_layer_kv_transfer", "transfer_buffer_shape", "SPEC"]

_OP = "multi_layer_kv_transfer"


def _hidden_sizes(op, fmt, hidden_sizes):
    """Per-plane row sizes (elements) from ``hidden_sizes`` as given to transfer_buffer_shape."""
    planes = ML.planes_of(fmt)
    name = KVCacheFormat(fmt).name
    if fmt in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV):
        if isinstance(hidden_sizes, (tuple, list)):
            vals = list(hidden_sizes)
            if len(vals) not in (1, 2) or len(set(vals)) != 1:
                raise ValueError(f"{op}: argument 'hidden_sizes': expected num_kv_heads * head_size (an int, or "
                                 f"K and V sizes that are equal) for {name}, got {hidden_sizes!r}")
            vals = vals[:1] * 2
        else:
            vals = [hidden_sizes] * 2
    else:
        if not isinstance(hidden_sizes, (tuple, list)) or len(hidden_sizes) != planes:
            exp = "(kv_lora_rank, rope_dim), e.g. (512, 64)" if planes == 2 else \
                "(kv_lora_rank, rope_dim, index_head_dim), e.g. (512, 64, 128)"
            raise ValueError(f"{op}: argument 'hidden_sizes': expected {exp} for {name}, got {hidden_sizes!r}")
        vals = list(hidden_sizes)
    out = []
    for v in vals:
        try:
            iv = operator.index(v)
        except TypeError:
            iv = None
        if iv is None or isinstance(v, bool) or iv <= 0:
            raise ValueError(f"{op}: argument 'hidden_sizes': expected positive ints, got {hidden_sizes!r}")
        out.append(iv)
    return out


def _count(op, name, value, minimum):
    try:
        iv = operator.index(value)
    except TypeError:
        iv = None
    if iv is None or isinstance(value, bool) or iv < minimum:
        raise ValueError(f"{op}: argument '{name}': expected an int >= {minimum}, got {value!r}")
    return iv


def _buffer_shape(fmt, num_layers, num_tokens, hidden):
    if fmt in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV):
        return (2, num_layers, num_tokens, hidden[0])
    return (num_layers * num_tokens * sum(hidden),)


def _scale_sizes(op, fmt, scale_sizes):
    """Per-plane scales per token row from ``scale_sizes`` (an int for every plane, or one per plane)."""
    P = ML.planes_of(fmt)
    vals = list(scale_sizes) if isinstance(scale_sizes, (tuple, list)) else [scale_sizes] * P
    if len(vals) == 1:
        vals = vals * P
    out = []
    for v in vals:
        try:
            iv = operator.index(v)
        except TypeError:
            iv = None
        if iv is None or isinstance(v, bool) or iv <= 0:
            iv = None
        out.append(iv)
    if len(out) != P or None in out:
        raise ValueError(f"{op}: argument 'scale_sizes': expected float32 scales per token row of each plane "
                         f"(positive ints: num_kv_heads for MERGED_KV / SEPARATE_KV, 1 for MLA_KV / DSA_KV; an int "
                         f"or {P} of them for {KVCacheFormat(fmt).name}), got {scale_sizes!r}")
    return out


def transfer_buffer_shape(kv_format, num_layers, num_tokens, hidden_sizes, *, scale_sizes=None):
    """Shape of the contiguous buffer of :func:`multi_layer_kv_transfer`.

    Args:
        kv_format (KVCacheFormat | int | str): a ``KVCacheFormat`` member, its int value (1-4) or its name in
            any case, long or short (``"SEPARATE_KV"`` / ``"separate"``, ``"mla"``, ...).
        num_layers (int): L >= 1.
        num_tokens (int): T >= 0 (``len(slot_mapping)``).
        hidden_sizes (int | tuple of int): elements of one token row of one layer, per plane: MERGED_KV /
            SEPARATE_KV ``num_kv_heads * head_size`` (a pair of equal ints is accepted); MLA_KV
            ``(kv_lora_rank, rope_dim)``, e.g. ``(512, 64)``; DSA_KV ``(kv_lora_rank, rope_dim,
            index_head_dim)``.
        scale_sizes (int | tuple of int, keyword): for a transfer with ``scale_caches``: float32 scales per
            token row of each plane, ``num_kv_heads`` (MERGED_KV / SEPARATE_KV) or 1 (MLA_KV / DSA_KV), one
            int for every plane or one per plane. None (default): no scales.

    Returns:
        tuple of int: ``(2, L, T, H * D)`` for MERGED_KV / SEPARATE_KV (plane, layer, token, row); for MLA_KV /
        DSA_KV ``(L * T * sum(hidden_sizes),)``, the planes ``[L, T, hidden_p]`` one after another. With
        ``scale_sizes`` (every format): ``(L * T * (sum(hidden_sizes) + 4 * sum(scale_sizes)),)`` one-byte
        elements: the data planes as above, then the scale planes ``[L, T, scale_p]`` as float32 bytes
        (machine byte order), plane after plane.

    Raises:
        ValueError: an unknown ``kv_format``, non-positive sizes, or ``hidden_sizes`` of the wrong form.
    """
    op = "transfer_buffer_shape"
    fmt = ML.format_code(op, kv_format)
    num_layers = _count(op, "num_layers", num_layers, 1)
    num_tokens = _count(op, "num_tokens", num_tokens, 0)
    hidden = _hidden_sizes(op, fmt, hidden_sizes)
    if scale_sizes is not None:
        from ms_kvcache.ops.multi_layer_kv_transfer_quant import quant_buffer_shape
        return quant_buffer_shape(fmt, num_layers, num_tokens, hidden, _scale_sizes(op, fmt, scale_sizes))
    return _buffer_shape(fmt, num_layers, num_tokens, hidden)


# ---------------------------------------------------------------------------------------------- checks
def _check_shapes(attrs, buffer_shape, slot_shape, cache_shapes):
    """Shape checks (eager and infer); returns the per-plane (num_blocks, block_size, H, D)."""
    fmt, layout, num_layers = attrs["kv_format"], attrs["cache_layout"], attrs["num_layers"]
    planes = ML.cache_planes(_OP, fmt, layout, num_layers, cache_shapes)
    if len(slot_shape) != 1:
        raise ValueError(f"{_OP}: argument 'slot_mapping': expected rank 1, got shape {tuple(slot_shape)}")
    num_tokens = int(slot_shape[0])
    hidden = [h * d for (_, _, h, d) in planes]
    expected = _buffer_shape(fmt, num_layers, num_tokens, hidden)
    if tuple(int(d) for d in buffer_shape) != expected:
        raise ValueError(f"{_OP}: argument 'buffer': expected shape {expected} (transfer_buffer_shape("
                         f"{KVCacheFormat(fmt).name}, num_layers={num_layers}, num_tokens={num_tokens}, "
                         f"hidden_sizes={hidden})), got {tuple(buffer_shape)}")
    return planes


def _infer_shape(attrs, buffer_shape, slot_shape, cache_shapes):
    """Run in MindSpore's infer step: at graph compile time and at every ops.Custom PyNative call."""
    _check_shapes(attrs, buffer_shape, slot_shape, cache_shapes)
    return [1]


def _infer_dtype(attrs, buffer_dtype, slot_dtype, cache_dtypes):
    ML.check_index(_OP, "slot_mapping", (0,), slot_dtype)
    ML.check_kv_dtypes(_OP, attrs["kv_format"], cache_dtypes, {"buffer": buffer_dtype})
    ML.check_nz_dtype(_OP, attrs["cache_layout"], cache_dtypes[0])
    return ms.int32


def _check_static(attr_values, buffer_shape, buffer_dtype, slot_shape, slot_dtype, cache_shapes, cache_dtypes):
    """Eager shape/dtype checks (memoised by the wrapper); returns the per-plane geometry."""
    attrs = SPEC.attr_values(attr_values)
    _infer_dtype(attrs, buffer_dtype, slot_dtype, cache_dtypes)
    ML.check_nz_caches(_OP, attrs["kv_format"], attrs["cache_layout"], cache_shapes, cache_dtypes[0])
    return _check_shapes(attrs, buffer_shape, slot_shape, cache_shapes)


SPEC = attach_checks(MULTI_LAYER_KV_TRANSFER, infer_shape=_infer_shape, infer_dtype=_infer_dtype)

_Prim = prim_class(SPEC)
_STATIC = {}


@constexpr
def _graph_attrs(kv_format, direction, cache_layout, num_tensors, aiv_num, cache_shape, cache_dtype):
    """Compile-time checks of the graph branch; returns (kv_format value, num_layers)."""
    ML.check_aiv_num(_OP, aiv_num)
    fmt = ML.format_code(_OP, kv_format)
    ML.check_direction(_OP, direction)
    ML.check_layout(_OP, fmt, cache_layout)
    ML.check_nz_caches(_OP, fmt, cache_layout, (cache_shape,), cache_dtype)
    tpl = ML.tensors_per_layer(fmt)
    if num_tensors % tpl:
        raise ValueError(f"{_OP}: argument 'kv_caches': expected num_layers * {tpl} tensors for "
                         f"{KVCacheFormat(fmt).name}, got {num_tensors}")
    return fmt, num_tensors // tpl


#: argument names of the graph branch's compile-time type check (check_graph_types)
_TYPES_OP, _GRAPH_ARGS = 'multi_layer_kv_transfer', ('buffer', 'kv_caches[]', 'slot_mapping')

def multi_layer_kv_transfer(buffer, kv_caches, slot_mapping, *, kv_format, direction, cache_layout="BSND", aiv_num=0,
                            scale_caches=None):
    """Move the K/V rows of T tokens of every layer between the paged caches and one buffer, in one call.

    ``direction="d2h"`` gathers cache rows into ``buffer`` (offload), ``"h2d"`` scatters them back (load).
    LMCache's multi-layer transfer ("KV_2LTD" buffer, one launch) with vLLM's slots; details: docs/ops-transfer.md.

    Args:
        buffer (Tensor): ``transfer_buffer_shape(kv_format, L, T, hidden_sizes)``: ``[2, L, T, H * D]`` (MERGED_KV /
            SEPARATE_KV) or 1-D, plane after plane ``[L, T, hidden_p]`` (MLA_KV / DSA_KV); dtype of the caches;
            contiguous; written for ``"d2h"`` (then a whole Parameter in a graph), e.g. an
            :func:`ms_kvcache.alloc_host_buffer`.
        kv_caches (sequence): one entry per layer: MERGED_KV the ``[2, num_blocks, block_size, H, D]`` tensor (BNSD:
            ``[2, num_blocks, H, block_size, D]``), SEPARATE_KV ``(key_cache, value_cache)``, MLA_KV
            ``(kv_c_cache, k_pe_cache)``, DSA_KV plus ``indexer_k_cache``; or the flat layer-major sequence.
            float16, bfloat16, float32 or int8; contiguous; written for ``"h2d"`` (in a graph each a whole
            Parameter).
        slot_mapping (Tensor): ``[T]`` int32 or int64, the cache row of each token; ``slot < 0``: d2h writes
            a zero row, h2d skips the token.
        kv_format (KVCacheFormat | int | str, keyword): the format (a member, 1-4, or a name such as
            ``"separate"``).
        direction (str, keyword): ``"d2h"`` (caches -> buffer) or ``"h2d"`` (buffer -> caches).
        cache_layout (str, keyword): ``"BSND"`` (default), ``"BNSD"`` or ``"NZ"`` (MERGED_KV / SEPARATE_KV only;
            NZ caches ``[num_blocks, H*D // C0, block_size, C0]`` with the same ND buffer; docs/ops-transfer.md).
        aiv_num (int, keyword): cap on the vector cores (sim, ascend) or threads (cpu); 0 (default) = all.
        scale_caches (sequence, keyword): int8 / float8 caches only: their float32 scale caches, one per layer
            and data plane, moved in the same call; the buffer is then ``transfer_buffer_shape(...,
            scale_sizes=...)``, data planes then scale planes. Written for ``"h2d"``.

    Returns:
        None: the buffer (d2h) or the caches (h2d) are written in place; in a graph the transfer is ordered
        against other reads and writes of the same Parameters.

    Raises:
        TypeError: a non-Tensor argument; dtypes differing between layers, planes and the buffer; unsupported
            dtypes; scale caches with caches that are not int8 / float8; in a graph, a written tensor that is
            not a whole Parameter.
        ValueError: unknown ``kv_format`` / ``direction`` / ``cache_layout``; shapes differing between layers;
            a buffer not of ``transfer_buffer_shape``; in PyNative a slot out of range, a repeated slot (h2d),
            memory shared between a written tensor and another argument.
        RuntimeError: in a graph, at launch: written tensors sharing memory (cpu, sim; nothing written), a
            kernel failure. Per mode and backend: docs/ops-transfer.md, "Errors".
    """
    if _run_in_jit():  # @jit.cond: True
        check_graph_types(_TYPES_OP, _GRAPH_ARGS, F.typeof(buffer), F.typeof(kv_caches), F.typeof(slot_mapping))
        flat = ML.flatten_graph(kv_caches)
        fmt, num_layers = _graph_attrs(kv_format, direction, cache_layout, len(flat), aiv_num, flat[0].shape,
                                       flat[0].dtype)
        if scale_caches is None:
            _get_cache_prim(_Prim)(graph_backend(), (len(flat),), fmt, direction, cache_layout, num_layers,
                                   aiv_num)(buffer, slot_mapping, *flat)
        else:
            _QT.transfer_quant_graph(buffer, flat, scale_caches, slot_mapping, fmt, direction, cache_layout,
                                     num_layers, aiv_num)
    else:
        _eager(buffer, kv_caches, slot_mapping, kv_format, direction, cache_layout, aiv_num, scale_caches)
    return None


def _eager(buffer, kv_caches, slot_mapping, kv_format, direction, cache_layout, aiv_num, scale_caches, prepare=False):
    """The PyNative branch: every check, then the launch; with ``prepare`` the checked call instead
    (:class:`ms_kvcache.ops._multi_layer.EagerCall`, what :class:`ms_kvcache.LayerwiseTransfer` runs)."""
    op = _OP
    V.require_tensor(op, "buffer", buffer)
    V.require_tensor(op, "slot_mapping", slot_mapping)
    fmt = ML.format_code(op, kv_format)
    ML.check_direction(op, direction)
    ML.check_layout(op, fmt, cache_layout)
    ML.check_aiv_num(op, aiv_num)
    flat, num_layers = ML.flatten_eager(op, kv_caches, fmt)
    if scale_caches is not None:
        return _QT.transfer_quant(buffer, flat, num_layers, scale_caches, slot_mapping, fmt, direction,
                                  cache_layout, aiv_num, prepare=prepare)
    attr_values = (fmt, direction, cache_layout, num_layers, int(aiv_num))
    planes = V.cached_static(_STATIC, _check_static, (
        attr_values, buffer.shape, buffer.dtype, slot_mapping.shape, slot_mapping.dtype,
        tuple(x.shape for x in flat), tuple(x.dtype for x in flat)))
    caches = tuple((f"kv_caches (tensor {i} in layer-major order)", x) for i, x in enumerate(flat))
    if direction == "d2h":  # whole caches are read in place (a copy would cost more than the op): contiguous
        written, read = (("buffer", buffer),), caches
    else:  # the buffer is read: a strided view is copied first, as for key/value of the copy ops
        buffer = V.contiguous_input(buffer)
        written, read = caches, (("buffer", buffer),)
    for name, x in written + read:
        V.require_contiguous(op, name, x)
    # the index tensor is read too: it may not share memory with a written tensor (a
    # strided one is copied before the launch)
    V.require_disjoint(op, written, list(read) + [("slot_mapping", slot_mapping)])
    if slot_mapping.shape[0] == 0:
        return ML.EagerCall(SPEC, None, attr_values, (len(flat),), (), planes, 0, written, read) if prepare else None
    backend = _backend.get_backend()
    nosync = nosync_checker(backend)
    if nosync is None:  # ops.Custom path: it would write into a copy of a view
        for name, x in written:
            V.require_not_view(op, name, x)
    nb, bs = planes[0][0], planes[0][1]
    V.check_slot_tensor(op, "slot_mapping", slot_mapping, nb * bs, nosync, allow_duplicates=(direction == "d2h"))
    call = ML.EagerCall(SPEC, backend, attr_values, (len(flat),), (buffer, V.contiguous_input(slot_mapping), *flat),
                        planes, int(slot_mapping.shape[0]), written, read)
    return ML.finish(call, prepare)
