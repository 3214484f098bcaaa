"""The demo's only contact points with ms_kvcache operators: one small function per op family.

- fused RoPE-write: ``ms_kvcache.rope_reshape_and_cache`` / ``rope_reshape_and_cache_merged`` and
  ``ms_kvcache.build_cos_sin_cache``;
- multi-layer transfer: ``ms_kvcache.LayerwiseTransfer`` (a preempted sequence's offload and reload, layer by
  layer), ``ms_kvcache.multi_layer_kv_transfer`` (the merged caches' copy-on-write),
  ``ms_kvcache.transfer_buffer_shape`` and ``ms_kvcache.alloc_host_buffer``;
- block copy (copy-on-write of a shared block): ``ms_kvcache.copy_blocks`` (SEPARATE_KV; a MERGED_KV
  cache ``[2, num_blocks, ...]`` has no block axis first, so there the copy is a d2h + h2d of the block's
  rows with ``multi_layer_kv_transfer``).

Every op has cpu and sim kernels, so the demo always runs the real ops (the temporary fallbacks it
once had while ops were on other branches are gone). A backend that lacks a kernel for one of the ops
(e.g. ``ascend`` with an installed CANN package that predates an op) is refused before the pipeline
starts: :func:`check_backend` raises :class:`BackendUnsupported` naming the op and the backend's reason.

Functions called from ``nn.Cell.construct`` (``rope_and_cache``, ``rope_and_cache_merged``) are
module-level functions that the MindSpore graph compiler parses; everything else is called from
Python between graph steps.
"""
import weakref

import numpy as np
import mindspore as ms
from mindspore import nn

import ms_kvcache
from ms_kvcache._formats import KVCacheFormat

__all__ = [
    "OPS", "check_backend", "status", "cos_sin_cache", "rope_and_cache", "rope_and_cache_merged",
    "transfer_buffer_shape", "alloc_host_buffer", "kv_transfer", "layerwise_transfer", "copy_blocks",
    "BackendUnsupported",
]

#: Layout of every per-layer cache in the demo ([num_blocks, block_size, num_kv_heads, head_size]).
CACHE_LAYOUT = "BSND"

#: Kernel-backed ops the demo launches, per ``--kv-format`` (build_cos_sin_cache, transfer_buffer_shape
#: and alloc_host_buffer are host-side helpers with no kernel).
OPS = {
    "separate": ("rope_reshape_and_cache", "multi_layer_kv_transfer", "copy_blocks"),
    "merged": ("rope_reshape_and_cache_merged", "multi_layer_kv_transfer"),
}


class BackendUnsupported(RuntimeError):
    """The active backend has no kernel for an op the demo needs."""


def check_backend(kv_format="separate"):
    """Raise :class:`BackendUnsupported` if the active backend has no kernel for one of ``OPS[kv_format]``.

    cpu and sim have every kernel; for another backend (``ascend``) the backend's ``aot_func`` is asked
    for each op, and its error (e.g. the CANN package lacks the op) is passed on with the op's name.
    """
    backend = ms_kvcache.get_backend()
    if backend in ("cpu", "sim"):
        return
    from ms_kvcache._backend import backend_module
    from ms_kvcache._spec import get_spec

    for op in OPS[kv_format]:
        try:
            backend_module(backend).aot_func(get_spec(op))
        except Exception as exc:  # noqa: BLE001 - any reason the backend cannot launch the op
            raise BackendUnsupported(f"backend {backend!r} has no kernel for ms_kvcache.{op}: {exc}") from None


def status(kv_format="separate"):
    """{op family: "ms_kvcache.<op>"} for the report."""
    rope_op = "rope_reshape_and_cache_merged" if kv_format == "merged" else "rope_reshape_and_cache"
    return {
        "rope-write": f"ms_kvcache.{rope_op}",
        "cos_sin_cache": "ms_kvcache.build_cos_sin_cache",
        "kv-transfer": "ms_kvcache.LayerwiseTransfer (preemption: offload save_layer(i) after each layer, reload "
                       "wait_layer(i) before each layer reads its cache; the multi_layer_kv_transfer kernel per layer)",
        "copy-on-write": ("ms_kvcache.copy_blocks" if kv_format != "merged" else
                          "ms_kvcache.multi_layer_kv_transfer d2h + h2d (copy_blocks takes [num_blocks, ...] caches, "
                          "MERGED_KV's are [2, num_blocks, ...])"),
        "host-buffer": "ms_kvcache.alloc_host_buffer",
    }


# ---------------------------------------------------------------------------------------------- RoPE
def cos_sin_cache(rotary_dim, max_position, base):
    """float32 cos_sin_cache ``[max_position, rotary_dim]`` (cos in the first half, sin in the second;
    vLLM convention). float32 whatever the KV dtype: the RoPE-write ops compute in fp32 and accept an
    fp32 table with bf16/fp16 data."""
    return ms_kvcache.build_cos_sin_cache(rotary_dim, max_position, base=base, dtype=ms.float32)


# ------------------------------------------------------------------------------ fused RoPE + write
def rope_and_cache(positions, query, key, value, cos_sin, key_cache, value_cache, slot_mapping, is_neox_style,
                   k_scale_cache=None, v_scale_cache=None):
    """RoPE on query/key (NeoX pairs ``(i, i + d/2)`` or GPT-J pairs ``(2i, 2i+1)``), rotated key and value
    written into separate caches; returns (query_out, key_out). ``ms_kvcache.rope_reshape_and_cache``; with
    ``k_scale_cache`` / ``v_scale_cache`` (int8 caches) the rows are quantized with dynamic per-token scales."""
    if k_scale_cache is None:
        return ms_kvcache.rope_reshape_and_cache(positions, query, key, value, cos_sin, key_cache, value_cache,
                                                 slot_mapping, is_neox_style=is_neox_style, cache_layout=CACHE_LAYOUT)
    return ms_kvcache.rope_reshape_and_cache(positions, query, key, value, cos_sin, key_cache, value_cache,
                                             slot_mapping, is_neox_style=is_neox_style, cache_layout=CACHE_LAYOUT,
                                             k_scale_cache=k_scale_cache, v_scale_cache=v_scale_cache)


def rope_and_cache_merged(positions, query, key, value, cos_sin, kv_cache, slot_mapping, is_neox_style):
    """Merged-cache variant: ``ms_kvcache.rope_reshape_and_cache_merged``."""
    return ms_kvcache.rope_reshape_and_cache_merged(positions, query, key, value, cos_sin, kv_cache, slot_mapping,
                                                    is_neox_style=is_neox_style, cache_layout=CACHE_LAYOUT)


# ------------------------------------------------------------------------------ multi-layer transfer
def _format(kv_format):
    return KVCacheFormat.MERGED_KV if kv_format == "merged" else KVCacheFormat.SEPARATE_KV


def transfer_buffer_shape(kv_format, num_layers, num_tokens, hidden, scale_sizes=None):
    """Shape of the contiguous host buffer for ``num_tokens`` tokens of every layer:
    ``[2, num_layers, num_tokens, hidden]`` (K plane, V plane; LMCache KV_2LTD). With ``scale_sizes``
    (num_heads: an int8 model whose scale caches travel in the same call) the 1-D byte buffer of the data
    planes followed by the float32 scale planes ``[2, num_layers, num_tokens, num_heads]``."""
    if scale_sizes is None:
        return tuple(ms_kvcache.transfer_buffer_shape(_format(kv_format), num_layers, num_tokens, hidden))
    return tuple(ms_kvcache.transfer_buffer_shape(_format(kv_format), num_layers, num_tokens, hidden,
                                                  scale_sizes=scale_sizes))


def alloc_host_buffer(shape, dtype):
    """Host buffer for offloads -> (Tensor, pinned: bool). Tries page-locked memory first and falls
    back to pageable memory (``pinned=False``) when the memlock limit forbids pinning."""
    try:
        return ms_kvcache.alloc_host_buffer(shape, dtype, pinned=True), True
    except (RuntimeError, OSError):
        return ms_kvcache.alloc_host_buffer(shape, dtype, pinned=False), False


class TransferCell(nn.Cell):
    """GRAPH_MODE step that moves the KV of the tokens at ``slot_mapping`` of every layer between the
    model's paged caches (Parameters of ``model``) and a host buffer in one
    ``ms_kvcache.multi_layer_kv_transfer`` call; with ``scales`` (an int8 model) its float32 scale caches
    travel in the same call (``scale_caches=``)."""

    def __init__(self, model, direction, scales=False):
        super().__init__()
        self.merged = model.kv_format == "merged"
        self.num_layers = model.num_layers
        self.scales = scales
        if self.merged:
            self.kv_caches = model.kv_caches
        else:
            self.key_caches = model.key_caches
            self.value_caches = model.value_caches
        if scales:  # an int8 model's scale caches [nb, bs, H, 1], one per layer and plane
            self.k_scale_caches = model.k_scale_caches
            self.v_scale_caches = model.v_scale_caches
        self.fmt = _format(model.kv_format)
        self.direction = direction

    def construct(self, buffer, slot_mapping):
        kv = ()  # flat, layer-major: (kv_0, kv_1, ...) or (k_0, v_0, k_1, v_1, ...)
        sc = ()  # (k_scale_0, v_scale_0, k_scale_1, ...)
        for i in range(self.num_layers):
            if self.merged:
                kv = kv + (self.kv_caches[i],)
            else:
                kv = kv + (self.key_caches[i], self.value_caches[i])
            if self.scales:
                sc = sc + (self.k_scale_caches[i], self.v_scale_caches[i])
        if self.scales:
            ms_kvcache.multi_layer_kv_transfer(buffer, kv, slot_mapping, kv_format=self.fmt,
                                               direction=self.direction, cache_layout=CACHE_LAYOUT, scale_caches=sc)
        else:
            ms_kvcache.multi_layer_kv_transfer(buffer, kv, slot_mapping, kv_format=self.fmt,
                                               direction=self.direction, cache_layout=CACHE_LAYOUT)
        return slot_mapping


#: {model: {direction: TransferCell}}; weak keys, so a new model never gets a stale cell whose id()
#: matched a collected one.
_TRANSFER_CELLS = weakref.WeakKeyDictionary()


def kv_transfer(model, buffer, slot_mapping, direction, scales=False):
    """Move every layer's K/V rows at ``slot_mapping`` (int32 ``[T]``, slot < 0 skipped) between the
    model's caches and ``buffer`` (``transfer_buffer_shape(...)``): ``"d2h"`` gathers cache rows into
    the buffer, ``"h2d"`` scatters buffer rows into the caches. Returns after the data has moved.
    ``scales=True`` (an int8 model): the scale caches in the same call, ``buffer`` then
    ``transfer_buffer_shape(..., scale_sizes=num_heads)`` (int8 bytes: data planes, then scale planes)."""
    if direction not in ("d2h", "h2d"):
        raise ValueError(f"kv_transfer: argument 'direction': expected 'd2h' or 'h2d', got {direction!r}")
    cells = _TRANSFER_CELLS.setdefault(model, {})
    cell = cells.get((direction, scales))
    if cell is None:
        cell = cells[(direction, scales)] = TransferCell(model, direction, scales)
    cell(_as_parameter(buffer), slot_mapping).asnumpy()  # asnumpy: wait for the graph to finish


def layerwise_transfer(model, buffer, slot_mapping, direction):
    """``ms_kvcache.LayerwiseTransfer`` of every layer's K/V rows at ``slot_mapping`` (int32 ``[T]``) between the
    model's caches and ``buffer`` (``transfer_buffer_shape(...)``; an int8 model's scale caches in the same object,
    the buffer then with ``scale_sizes``), not started: the caller issues and waits for it layer by layer (PyNative,
    between the layer loop's graphs; :mod:`ms_kvcache.demo.offload`)."""
    if direction not in ("d2h", "h2d"):
        raise ValueError(f"layerwise_transfer: argument 'direction': expected 'd2h' or 'h2d', got {direction!r}")
    if model.merged:
        caches = list(model.kv_caches)
    else:
        caches = list(zip(model.key_caches, model.value_caches))
    scales = None
    if model.quant:
        scales = [c for pair in zip(model.k_scale_caches, model.v_scale_caches) for c in pair]
    return ms_kvcache.LayerwiseTransfer(buffer, caches, slot_mapping, kv_format=_format(model.kv_format),
                                        direction=direction, cache_layout=CACHE_LAYOUT, scale_caches=scales)


#: [(buffer, Parameter over its memory)] of the last buffers moved (at most two: an int8 model's data and
#: scale buffers): the d2h and the h2d of one offload reuse one Parameter (and so one compiled graph per
#: direction).
_BUFFER_PARAMS = []


def _as_parameter(buffer):
    """``buffer`` as a Parameter over the same memory (no copy): a tensor an op writes in a graph must be a
    Parameter (ms_kvcache refuses a Tensor argument at compile time), and ``set_data`` keeps the address
    where ``Parameter(buffer)`` would copy."""
    for b, param in _BUFFER_PARAMS:
        if b is buffer:
            return param
    param = ms.Parameter(ms.Tensor(np.zeros((1,), np.float32), dtype=buffer.dtype),
                         name=f"host_buffer{len(_BUFFER_PARAMS) % 2}", requires_grad=False)
    param.set_data(buffer)
    _BUFFER_PARAMS[:] = _BUFFER_PARAMS[-1:] + [(buffer, param)]
    return param


# ------------------------------------------------------------------------------ block copy
class CopyBlocksCell(nn.Cell):
    """GRAPH_MODE step: ``ms_kvcache.copy_blocks`` over every layer's key and value caches of ``model``
    (one launch), and over its scale caches (a second launch) for an int8 model."""

    def __init__(self, model):
        super().__init__()
        self.key_caches = model.key_caches
        self.value_caches = model.value_caches
        self.quant = model.quant
        if self.quant:
            self.k_scale_caches = model.k_scale_caches
            self.v_scale_caches = model.v_scale_caches

    def construct(self, block_mapping):
        ms_kvcache.copy_blocks(self.key_caches, self.value_caches, block_mapping)
        if self.quant:
            ms_kvcache.copy_blocks(self.k_scale_caches, self.v_scale_caches, block_mapping)
        return block_mapping


_COPY_CELLS = weakref.WeakKeyDictionary()


def copy_blocks(model, pairs):
    """Copy block ``src`` to block ``dst`` in every layer's caches of ``model`` for each ``(src, dst)`` of
    ``pairs`` (copy-on-write). SEPARATE_KV: ``ms_kvcache.copy_blocks`` (data caches, then the scale caches
    of an int8 model); MERGED_KV: the source blocks' rows go to a host buffer and back into the destination
    blocks with ``multi_layer_kv_transfer`` (d2h, h2d). Returns after the copy."""
    pairs = np.asarray(pairs, np.int32).reshape(-1, 2)
    if pairs.shape[0] == 0:
        return
    if not model.merged:
        cell = _COPY_CELLS.get(model)
        if cell is None:
            cell = _COPY_CELLS[model] = CopyBlocksCell(model)
        cell(ms.Tensor(pairs)).asnumpy()  # asnumpy: wait for the graph to finish
        return
    bs = model.block_size
    rows = np.arange(bs, dtype=np.int32)
    src = ms.Tensor((pairs[:, :1] * bs + rows).reshape(-1).astype(np.int32))
    dst = ms.Tensor((pairs[:, 1:] * bs + rows).reshape(-1).astype(np.int32))
    shape = transfer_buffer_shape("merged", model.num_layers, int(src.shape[0]), model.kv_heads * model.head_size)
    buf = ms_kvcache.alloc_host_buffer(shape, model.kv_dtype, pinned=False)
    kv_transfer(model, buf, src, "d2h")
    kv_transfer(model, buf, dst, "h2d")
