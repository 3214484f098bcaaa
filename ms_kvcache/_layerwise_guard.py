"""Debug mode of :class:`ms_kvcache.LayerwiseTransfer` (``MS_KVCACHE_CHECK_LAYERWISE=1``): ms_kvcache's own
PyNative launches refuse a tensor a layer transfer still uses.

While a layer is issued and not yet waited for (``wait_layer`` / ``wait`` / ``done()`` returning True / closing),
its tensors are *pending*: the tensors the layer writes (the caches of a load, the buffer or host blocks of a
save, a staging buffer) may be neither read nor written by another op, the tensors it reads (the caches of a
save, the buffer of a load) may not be written. Every launch of an ms_kvcache op in PyNative
(``_custom.eager_launcher``) checks its inputs against the pending tensors and raises RuntimeError naming the op,
the argument, the transfer and the layer, before anything runs. MindSpore's own ops (a matmul reading a cache) do
not pass through ms_kvcache and are not checked: the wait before the read is the caller's part (docs/ops-transfer.md,
"Layer-wise transfer"). Whole tensors are compared (by byte range), not rows.

Layer 3 of the layering (docs/design.md, style notes): no project imports but ``_spec``.
"""
import os
import threading

from ms_kvcache._spec import tensor_nbytes

__all__ = ["ENV", "enabled", "pending", "register", "release", "check_launch", "own_launches"]

#: ``1`` turns the debug mode on, ``0`` or unset leaves it off.
ENV = "MS_KVCACHE_CHECK_LAYERWISE"

# (owner id, layer) -> [(lo, hi, transfer_writes, description)]; only layers issued and not waited for.
_PENDING = {}
_LOCK = threading.Lock()
_OWN = threading.local()  # the transfer whose own per-layer launch is running (sim / ascend engines)


def enabled(env=None):
    """Whether ``$MS_KVCACHE_CHECK_LAYERWISE`` is ``1``.

    Raises:
        ValueError: a value other than ``0``, ``1`` or empty.
    """
    env = os.environ if env is None else env
    v = (env.get(ENV) or "0").strip()
    if v not in ("0", "1"):
        raise ValueError(f"${ENV}: expected 0 or 1, got {v!r}")
    return v == "1"


def pending():
    """Whether the debug mode is on and some layer is pending (a launch must then be checked)."""
    return bool(_PENDING) and enabled()


def _span(t):
    n = tensor_nbytes(t)
    if n == 0:
        return None
    lo = int(t.data_ptr())
    return lo, lo + n


def register(owner, layer, what, tensors):
    """Mark ``tensors`` (``(argument name, tensor, transfer_writes)``) pending for ``layer`` of ``owner``
    (``what``: a description for messages, e.g. "LayerwiseTransfer(multi_layer_kv_transfer, h2d)")."""
    spans = []
    for name, t, writes in tensors:
        s = _span(t)
        if s is not None:
            spans.append((s[0], s[1], bool(writes), f"{name} of layer {layer} of {what}"))
    with _LOCK:
        _PENDING[(id(owner), layer)] = (spans, layer)


def release(owner, layers=None):
    """Layers of ``owner`` waited for (every layer when ``layers`` is None)."""
    with _LOCK:
        for key in [k for k in _PENDING if k[0] == id(owner) and (layers is None or k[1] in layers)]:
            del _PENDING[key]


class own_launches:  # noqa: N801 - used as a context manager
    """``with own_launches(owner):`` the launches of ``owner``'s own per-layer ops are not checked against it."""

    def __init__(self, owner):
        self.owner = id(owner)

    def __enter__(self):
        self.prev = getattr(_OWN, "owner", None)
        _OWN.owner = self.owner
        return self

    def __exit__(self, *exc):
        _OWN.owner = self.prev
        return False


def check_launch(op, names, written, tensors):
    """Refuse a launch of ``op`` whose inputs (``tensors``, flat; ``names`` their argument names; ``written``
    the flat indices the op writes) touch a pending tensor. Raises RuntimeError naming the argument, the pending
    tensor and the wait that ends it; nothing is launched."""
    with _LOCK:
        own = getattr(_OWN, "owner", None)
        entries = [(s, layer) for (oid, _), (spans, layer) in _PENDING.items() if oid != own for s in spans]
    if not entries:
        return
    for j, t in enumerate(tensors):
        s = _span(t) if hasattr(t, "data_ptr") else None
        if s is None:
            continue
        writes = j in written
        for (lo, hi, transfer_writes, desc), layer in entries:
            if s[0] < hi and lo < s[1] and (writes or transfer_writes):
                verb = "writes" if writes else "reads"
                what = "is still writing" if transfer_writes else "is still reading"
                name = names[j] if j < len(names) else f"input {j}"
                raise RuntimeError(f"{op}: argument '{name}' {verb} memory that {desc} {what}: call "
                                   f"wait_layer({layer}) (or wait()) first (${ENV}=1)")
