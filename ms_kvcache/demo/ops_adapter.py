"""The demo's only contact points with ms_kvcache operators: one small function per op family.

Every function here is written against the final public API of its op family:

- fused RoPE-write: ``ms_kvcache.rope_reshape_and_cache`` / ``rope_reshape_and_cache_merged`` and
  ``ms_kvcache.build_cos_sin_cache``;
- copy: ``ms_kvcache.reshape_and_cache`` (on main) and ``ms_kvcache.reshape_and_cache_merged``;
- multi-layer transfer: ``ms_kvcache.multi_layer_kv_transfer``, ``ms_kvcache.transfer_buffer_shape``
  and ``ms_kvcache.alloc_host_buffer``.

TEMPORARY FALLBACKS. While an op is not yet in ``ms_kvcache`` (detected with ``hasattr`` at import),
or the active backend has no kernel for it yet (:func:`on_backend`, checked at each call / graph
compile; today every op has cpu and sim kernels, so this only happens on a backend without them), the block
marked ``# FALLBACK(<family>)`` next to it stands in for it, so the demo runs end to end.
Each fallback is built from ops that exist today (MindSpore built-ins, numpy, and the real
``ms_kvcache.reshape_and_cache``) and is never used once the real op is importable. Removing the
fallbacks is a change to this file only: delete every ``FALLBACK`` block and the ``if HAVE_...``
lines that select them (see ``docs/demo.md``, "Switching to the real ops").

Functions called from ``nn.Cell.construct`` (``rope_and_cache``, ``rope_and_cache_merged``,
``cache_write``, ``cache_write_merged``) are module-level functions that the MindSpore graph
compiler parses; everything else is called from Python between graph steps.
"""
import weakref

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.ops.primitive import constexpr

import ms_kvcache
from ms_kvcache._formats import KVCacheFormat

__all__ = [
    "HAVE", "on_backend", "status", "cos_sin_cache", "rope_and_cache", "rope_and_cache_merged", "cache_write",
    "cache_write_merged", "transfer_buffer_shape", "alloc_host_buffer", "kv_transfer",
    "FallbackUnsupported",
]

#: Which real ops are present in this ms_kvcache build (True = the real op is used).
HAVE = {
    "rope_reshape_and_cache": hasattr(ms_kvcache, "rope_reshape_and_cache"),
    "rope_reshape_and_cache_merged": hasattr(ms_kvcache, "rope_reshape_and_cache_merged"),
    "build_cos_sin_cache": hasattr(ms_kvcache, "build_cos_sin_cache"),
    "reshape_and_cache_merged": hasattr(ms_kvcache, "reshape_and_cache_merged"),
    "multi_layer_kv_transfer": hasattr(ms_kvcache, "multi_layer_kv_transfer"),
    "transfer_buffer_shape": hasattr(ms_kvcache, "transfer_buffer_shape"),
    "alloc_host_buffer": hasattr(ms_kvcache, "alloc_host_buffer"),
}

#: RoPE convention of the demo model (vLLM's rotary_embedding with is_neox_style=True).
IS_NEOX_STYLE = True
#: Layout of every per-layer cache in the demo ([num_blocks, block_size, num_kv_heads, head_size]).
CACHE_LAYOUT = "BSND"


_ON_BACKEND = {}


def on_backend(op):
    """True if ``ms_kvcache.<op>`` exists and the active backend has a kernel for it (cpu: every op;
    another backend: its ``aot_func`` finds the op's kernel)."""
    backend = ms_kvcache.get_backend()
    key = (op, backend)
    if key not in _ON_BACKEND:
        ok = bool(HAVE.get(op))
        if ok and backend != "cpu":
            from ms_kvcache._backend import backend_module
            from ms_kvcache._spec import get_spec

            try:
                backend_module(backend).aot_func(get_spec(op))
            except Exception:  # noqa: BLE001 - no kernel / package for this op on this backend
                ok = False
        _ON_BACKEND[key] = ok
    return _ON_BACKEND[key]


@constexpr(reuse_result=False)
def _on_backend_graph(op):
    """:func:`on_backend` folded to a constant when a Cell is compiled."""
    return on_backend(op)


class FallbackUnsupported(RuntimeError):
    """A configuration the temporary fallback cannot run; the real op is needed."""


def status(kv_format="separate"):
    """{op family: "ms_kvcache.<op>" or "FALLBACK: <what stands in>"} for the report."""
    merged = kv_format == "merged"
    rope_op = "rope_reshape_and_cache_merged" if merged else "rope_reshape_and_cache"
    out = {}
    if on_backend(rope_op):
        out["rope-write"] = f"ms_kvcache.{rope_op}"
    elif merged and not HAVE["reshape_and_cache_merged"]:
        out["rope-write"] = ("FALLBACK: MindSpore-ops RoPE + tensor_scatter_update/assign into the merged "
                             "cache (stands in for rope_reshape_and_cache_merged)")
    else:
        write = "ms_kvcache.reshape_and_cache_merged" if merged else "ms_kvcache.reshape_and_cache"
        out["rope-write"] = f"FALLBACK: MindSpore-ops RoPE + {write} (stands in for {rope_op})"
    out["cos_sin_cache"] = ("ms_kvcache.build_cos_sin_cache" if HAVE["build_cos_sin_cache"]
                            else "FALLBACK: numpy (stands in for build_cos_sin_cache)")
    out["kv-transfer"] = ("ms_kvcache.multi_layer_kv_transfer" if on_backend("multi_layer_kv_transfer")
                          else "FALLBACK: numpy gather/scatter on the caches' host memory "
                               "(stands in for multi_layer_kv_transfer)")
    out["host-buffer"] = ("ms_kvcache.alloc_host_buffer" if HAVE["alloc_host_buffer"]
                          else "FALLBACK: ordinary (pageable) MindSpore tensor (stands in for alloc_host_buffer)")
    return out


def check_supported(kv_format, dtype):
    """Raise FallbackUnsupported when (kv_format, dtype) needs a real op that is still missing."""
    if (kv_format == "merged" and dtype == "bfloat16" and not HAVE["rope_reshape_and_cache_merged"]
            and not HAVE["reshape_and_cache_merged"]):
        raise FallbackUnsupported(
            "--kv-format merged --dtype bfloat16 needs ms_kvcache.rope_reshape_and_cache_merged or "
            "reshape_and_cache_merged, which this build does not have yet (MindSpore's CPU scatter/assign "
            "kernels have no bfloat16 to stand in for them); use --kv-format separate or --dtype float32")


# ---------------------------------------------------------------------------------------------- RoPE
def cos_sin_cache(rotary_dim, max_position, base):
    """float32 cos_sin_cache ``[max_position, rotary_dim]`` (cos in the first half, sin in the second;
    vLLM convention). float32 whatever the KV dtype: the RoPE-write ops compute in fp32 and accept an
    fp32 table with bf16/fp16 data."""
    if HAVE["build_cos_sin_cache"]:
        return ms_kvcache.build_cos_sin_cache(rotary_dim, max_position, base=base, dtype=ms.float32)
    # FALLBACK(rope): numpy table computed in float64, rounded once to float32 (as the real op does).
    inv_freq = 1.0 / (base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))
    freqs = np.outer(np.arange(max_position, dtype=np.float64), inv_freq)
    return Tensor(np.concatenate([np.cos(freqs), np.sin(freqs)], axis=-1).astype(np.float32))


def _rope_neox_fallback(positions, x, cos_sin):
    """FALLBACK(rope): NeoX RoPE with MindSpore built-ins, fp32 math, result cast back to x's dtype.

    positions int32 [T']; x [T', heads, head_size]; cos_sin [max_position, rotary_dim] (any float dtype).
    """
    table = ops.cast(cos_sin, ms.float32)          # CPU Gather has no bf16: gather in fp32
    rows = ops.gather(table, positions, 0)          # [T', rotary_dim]
    rot = table.shape[1]
    half = rot // 2
    cos = ops.expand_dims(rows[:, :half], 1)
    sin = ops.expand_dims(rows[:, half:], 1)
    xf = ops.cast(x, ms.float32)
    x1 = xf[:, :, :half]
    x2 = xf[:, :, half:rot]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if rot < x.shape[2]:
        out = ops.concat((o1, o2, xf[:, :, rot:]), -1)
    else:
        out = ops.concat((o1, o2), -1)
    return ops.cast(out, x.dtype)


# ------------------------------------------------------------------------------------- copy (write)
def cache_write(key, value, key_cache, value_cache, slot_mapping):
    """Separate K/V caches: ``ms_kvcache.reshape_and_cache`` (real op, on main)."""
    ms_kvcache.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, cache_layout=CACHE_LAYOUT)


if HAVE["reshape_and_cache_merged"]:
    def cache_write_merged(key, value, kv_cache, slot_mapping):
        """Merged cache ``[2, num_blocks, block_size, H, D]``: ``ms_kvcache.reshape_and_cache_merged``."""
        ms_kvcache.reshape_and_cache_merged(key, value, kv_cache, slot_mapping, cache_layout=CACHE_LAYOUT)
else:
    def cache_write_merged(key, value, kv_cache, slot_mapping):
        """FALLBACK(copy): functional scatter into a copy of the merged cache, then ``ops.assign``.

        float32 only (MindSpore CPU has no bf16 scatter/assign); copies the whole cache per call.
        Skipped tokens (slot < 0) are sent to an extra scratch row that is dropped.
        """
        nb, bs, h, d = kv_cache.shape[1], kv_cache.shape[2], kv_cache.shape[3], kv_cache.shape[4]
        ns = nb * bs
        t = slot_mapping.shape[0]
        flat = ops.concat((kv_cache.reshape((2 * ns, h, d)), ops.zeros((1, h, d), kv_cache.dtype)), 0)
        s = ops.cast(slot_mapping, ms.int32)
        dump = ops.full_like(s, 2 * ns)
        ok = ops.logical_and(s >= 0, s < ns)
        idx = ops.concat((ops.where(ok, s, dump), ops.where(ok, s + ns, dump)), 0).reshape((-1, 1))
        upd = ops.concat((key.reshape((-1, h, d))[:t], value.reshape((-1, h, d))[:t]), 0)
        new = ops.tensor_scatter_update(flat, idx, upd)
        ops.assign(kv_cache, new[:2 * ns].reshape(kv_cache.shape))


# ------------------------------------------------------------------------------ fused RoPE + write
def _rope_and_cache_fallback(positions, query, key, value, cos_sin, key_cache, value_cache, slot_mapping):
    """FALLBACK(rope): MindSpore-ops RoPE, then ``ms_kvcache.reshape_and_cache``."""
    q = _rope_neox_fallback(positions, query, cos_sin)
    k = _rope_neox_fallback(positions, key, cos_sin)
    cache_write(k, value, key_cache, value_cache, slot_mapping)
    return q, k


def _rope_and_cache_merged_fallback(positions, query, key, value, cos_sin, kv_cache, slot_mapping):
    """FALLBACK(rope): MindSpore-ops RoPE, then :func:`cache_write_merged`."""
    q = _rope_neox_fallback(positions, query, cos_sin)
    k = _rope_neox_fallback(positions, key, cos_sin)
    cache_write_merged(k, value, kv_cache, slot_mapping)
    return q, k


if HAVE["rope_reshape_and_cache"]:
    def rope_and_cache(positions, query, key, value, cos_sin, key_cache, value_cache, slot_mapping):
        """RoPE on query/key, rotated key and value written into separate caches; returns
        (query_out, key_out). ``ms_kvcache.rope_reshape_and_cache`` (FALLBACK on a backend without it)."""
        if _on_backend_graph("rope_reshape_and_cache"):
            return ms_kvcache.rope_reshape_and_cache(positions, query, key, value, cos_sin, key_cache, value_cache,
                                                     slot_mapping, is_neox_style=IS_NEOX_STYLE,
                                                     cache_layout=CACHE_LAYOUT)
        return _rope_and_cache_fallback(positions, query, key, value, cos_sin, key_cache, value_cache, slot_mapping)
else:
    rope_and_cache = _rope_and_cache_fallback

if HAVE["rope_reshape_and_cache_merged"]:
    def rope_and_cache_merged(positions, query, key, value, cos_sin, kv_cache, slot_mapping):
        """Merged-cache variant; ``ms_kvcache.rope_reshape_and_cache_merged`` (FALLBACK on a backend
        without it)."""
        if _on_backend_graph("rope_reshape_and_cache_merged"):
            return ms_kvcache.rope_reshape_and_cache_merged(positions, query, key, value, cos_sin, kv_cache,
                                                            slot_mapping, is_neox_style=IS_NEOX_STYLE,
                                                            cache_layout=CACHE_LAYOUT)
        return _rope_and_cache_merged_fallback(positions, query, key, value, cos_sin, kv_cache, slot_mapping)
else:
    rope_and_cache_merged = _rope_and_cache_merged_fallback


# ------------------------------------------------------------------------------ multi-layer transfer
def _format(kv_format):
    return KVCacheFormat.MERGED_KV if kv_format == "merged" else KVCacheFormat.SEPARATE_KV


def transfer_buffer_shape(kv_format, num_layers, num_tokens, hidden):
    """Shape of the contiguous host buffer for ``num_tokens`` tokens of every layer:
    ``[2, num_layers, num_tokens, hidden]`` (K plane, V plane; LMCache KV_2LTD)."""
    if HAVE["transfer_buffer_shape"]:
        return tuple(ms_kvcache.transfer_buffer_shape(_format(kv_format), num_layers, num_tokens, hidden))
    # FALLBACK(transfer)
    return (2, num_layers, num_tokens, hidden)


def alloc_host_buffer(shape, dtype):
    """Host buffer for offloads -> (Tensor, pinned: bool). Tries page-locked memory first and falls
    back to pageable memory (``pinned=False``) when the memlock limit forbids pinning."""
    if HAVE["alloc_host_buffer"]:
        try:
            return ms_kvcache.alloc_host_buffer(shape, dtype, pinned=True), True
        except (RuntimeError, OSError):
            return ms_kvcache.alloc_host_buffer(shape, dtype, pinned=False), False
    # FALLBACK(transfer): an ordinary tensor.
    return Tensor(np.zeros(shape, np.float32), dtype=dtype), False


class TransferCell(nn.Cell):
    """GRAPH_MODE step that moves the KV of the tokens at ``slot_mapping`` of every layer between the
    model's paged caches (Parameters of ``model``) and a host buffer in one
    ``ms_kvcache.multi_layer_kv_transfer`` call."""

    def __init__(self, model, direction):
        super().__init__()
        self.merged = model.kv_format == "merged"
        self.num_layers = model.num_layers
        if self.merged:
            self.kv_caches = model.kv_caches
        else:
            self.key_caches = model.key_caches
            self.value_caches = model.value_caches
        self.fmt = _format(model.kv_format)
        self.direction = direction

    def construct(self, buffer, slot_mapping):
        kv = ()  # flat, layer-major: (kv_0, kv_1, ...) or (k_0, v_0, k_1, v_1, ...)
        for i in range(self.num_layers):
            if self.merged:
                kv = kv + (self.kv_caches[i],)
            else:
                kv = kv + (self.key_caches[i], self.value_caches[i])
        ms_kvcache.multi_layer_kv_transfer(buffer, kv, slot_mapping, kv_format=self.fmt,
                                           direction=self.direction, cache_layout=CACHE_LAYOUT)
        return slot_mapping


#: {model: {direction: TransferCell}}; weak keys, so a new model never gets a stale cell whose id()
#: matched a collected one.
_TRANSFER_CELLS = weakref.WeakKeyDictionary()


def kv_transfer(model, buffer, slot_mapping, direction):
    """Move every layer's K/V rows at ``slot_mapping`` (int32 ``[T]``, slot < 0 skipped) between the
    model's caches and ``buffer`` (``transfer_buffer_shape(...)``): ``"d2h"`` gathers cache rows into
    the buffer, ``"h2d"`` scatters buffer rows into the caches. Returns after the data has moved."""
    if direction not in ("d2h", "h2d"):
        raise ValueError(f"kv_transfer: argument 'direction': expected 'd2h' or 'h2d', got {direction!r}")
    if on_backend("multi_layer_kv_transfer"):
        cells = _TRANSFER_CELLS.setdefault(model, {})
        cell = cells.get(direction)
        if cell is None:
            cell = cells[direction] = TransferCell(model, direction)
        cell(buffer, slot_mapping).asnumpy()  # asnumpy: wait for the graph to finish
        return
    # FALLBACK(transfer): numpy gather/scatter on the host memory behind the CPU tensors. MindSpore 2.10
    # CPU tensors' asnumpy() shares memory (checked below), so the writes land in place.
    buf = _bits(buffer)
    slots = np.asarray(slot_mapping.asnumpy(), np.int64).reshape(-1)
    valid = slots >= 0
    for layer, planes in enumerate(_layer_planes(model)):
        for p, plane in enumerate(planes):
            rows = _bits(plane).reshape(-1, buf.shape[-1])
            if np.any(slots[valid] >= rows.shape[0]):
                raise ValueError(f"kv_transfer: argument 'slot_mapping': expected slots < {rows.shape[0]}, "
                                 f"got {int(slots.max())}")
            if direction == "d2h":
                buf[p, layer][valid] = rows[slots[valid]]
                buf[p, layer][~valid] = 0
            else:
                rows[slots[valid]] = buf[p, layer][valid]


def _bits(t):
    """Unsigned-integer view of a CPU tensor's memory (FALLBACK(transfer) helper)."""
    a = t.asnumpy()
    b = a.view(f"u{a.dtype.itemsize}")
    if not np.shares_memory(b, t.asnumpy()):  # pragma: no cover - MindSpore behaviour changed
        raise FallbackUnsupported("kv_transfer fallback: Tensor.asnumpy() no longer shares memory")
    return b


def _layer_planes(model):
    """[(K plane, V plane) per layer] as tensors whose memory is the cache's (FALLBACK(transfer))."""
    if model.kv_format == "merged":
        return [(_Plane(kv, 0), _Plane(kv, 1)) for kv in model.kv_caches]
    return list(zip(model.key_caches, model.value_caches))


class _Plane:
    """Plane ``index`` of a merged cache, exposing ``asnumpy()`` as a view (FALLBACK(transfer))."""

    def __init__(self, kv, index):
        self.kv, self.index = kv, index

    def asnumpy(self):
        return self.kv.asnumpy()[self.index]
