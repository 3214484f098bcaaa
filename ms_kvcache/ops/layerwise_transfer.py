"""LayerwiseTransfer: a multi-layer transfer issued and waited for layer by layer, so that it overlaps the
forward pass (docs/ops-transfer.md, "Layer-wise transfer").

One object holds one checked call of :func:`ms_kvcache.multi_layer_kv_transfer` (token rows) or
:func:`ms_kvcache.multi_layer_block_transfer` (whole blocks; :meth:`LayerwiseTransfer.blocks`), built by the op's
own PyNative checks (``_eager(..., prepare=True)``: an :class:`ms_kvcache.ops._multi_layer.EagerCall`), and a
backend *engine* that moves one layer at a time:

- cpu (``_backends/cpu.py``): a native worker thread (``cpu_kernel/layerwise.h``) runs the op's cpu kernel for one
  layer per call (attribute ``mskv_layer``), GIL-free; waits block the host without the GIL.
- sim (``_backends/sim.py``): the AscendC kernels through the emulation, layer by layer, synchronously at issue:
  the op with L = 1 on a per-layer staging buffer, plus copies between it and the layer's rows of the host side
  (:class:`StagedPlan`).
- ascend (``_backends/ascend_layerwise.py``): the same staged plan on a MindSpore side stream, one event per layer
  (not run on hardware here).

Layer 6 of the layering (docs/design.md): imports the ops below it and the backends; nothing imports it but the
package's lazy names.
"""
import operator
import warnings

import numpy as np
from mindspore import Tensor

from ms_kvcache import _backend, _custom, _layerwise_guard, _pyboost_loader
from ms_kvcache._formats import KVCacheFormat
from ms_kvcache._spec import DTYPE_BYTES, dtype_name
from ms_kvcache.ops import _multi_layer as ML
from ms_kvcache.ops.multi_layer_block_transfer import _eager as _block_eager
from ms_kvcache.ops.multi_layer_block_transfer import multi_layer_block_transfer
from ms_kvcache.ops.multi_layer_kv_transfer import _eager as _kv_eager
from ms_kvcache.ops.multi_layer_kv_transfer import multi_layer_kv_transfer

__all__ = ["LayerwiseTransfer", "StagedPlan"]


def _snapshot(x):
    """A private host copy of an index tensor (slot_mapping / block_ids): the transfer uses the values checked at
    construction even if the caller changes the tensor later. Anything else is returned unchanged (the op's checks
    report it)."""
    if not isinstance(x, Tensor):
        return x, None
    arr = np.array(x.asnumpy(), copy=True, order="C")
    return Tensor.from_numpy(arr), arr


class _Copy:
    """One strided byte copy between the host side and a staging tensor: ``height`` rows of ``width`` bytes,
    rows ``host_pitch`` / ``staging_pitch`` bytes apart, from byte ``host_offset`` of host tensor ``host`` and byte
    ``staging_offset`` of staging tensor ``staging``."""

    __slots__ = ("host", "host_offset", "host_pitch", "staging", "staging_offset", "staging_pitch", "width", "height")

    def __init__(self, host, host_offset, host_pitch, staging, staging_offset, staging_pitch, width, height):
        self.host, self.host_offset, self.host_pitch = host, host_offset, host_pitch
        self.staging, self.staging_offset, self.staging_pitch = staging, staging_offset, staging_pitch
        self.width, self.height = width, height

    def __repr__(self):
        return (f"_Copy(host={self.host}+{self.host_offset}/{self.host_pitch}, staging={self.staging}+"
                f"{self.staging_offset}/{self.staging_pitch}, {self.height}x{self.width})")


class StagedPlan:
    """One layer of a transfer on a backend whose kernel moves every layer of its arguments (sim, ascend): the
    public op with L = 1 over per-layer *staging* tensors laid out as the op's host side for one layer, and the
    strided copies between those and the layer's rows of the real host side.

    Attributes: ``direction``, ``num_layers``, ``host`` (the host-side tensors: the buffer, or the host planes then
    the scale host planes), ``staging_specs`` (``(shape, mindspore dtype)`` of each staging tensor), ``copies(l)``
    (the :class:`_Copy` list of layer ``l``), ``launch(l, staging)`` (runs the op on layer ``l``)."""

    def __init__(self, kind, call, user_staging=None):
        self.kind, self.call = kind, call
        attrs = call.attrs
        self.direction, self.num_layers = attrs["direction"], attrs["num_layers"]
        self.fmt, self.layout, self.aiv = attrs["kv_format"], attrs["cache_layout"], attrs["aiv_num"]
        self.user_staging = user_staging
        P = ML.planes_of(self.fmt)
        tpl = ML.tensors_per_layer(self.fmt)
        L = self.num_layers
        args = call.args
        self.quant = call.spec.name.endswith("_quant")
        if kind == "token":
            buf = args[0]
            self.flat = args[2:2 + L * tpl]
            self.sflat = args[2 + L * tpl:] if self.quant else ()
            self.index = args[1]
            self.host = (buf,)
            elem = DTYPE_BYTES[dtype_name(buf.dtype)]
            rows = [h * d * elem for (_nb, _bs, h, d) in call.planes]
            if self.quant:
                rows += [ML.SCALE_BYTES * (1 if self.fmt in (KVCacheFormat.MLA_KV, KVCacheFormat.DSA_KV) else h)
                         for (_nb, _bs, h, _d) in call.planes]
            T = call.n
            self.rows = rows
            nbytes = T * sum(rows)
            if self.quant or self.fmt in (KVCacheFormat.MLA_KV, KVCacheFormat.DSA_KV):
                shape = (nbytes // elem,)
            else:
                shape = (2, 1, T, call.planes[0][2] * call.planes[0][3])
            self.staging_specs = [(shape, buf.dtype)]
            self._layer_copies = self._token_copies
        else:
            self.index = args[0]
            host = args[2:2 + P]
            self.flat = args[2 + P:2 + P + L * tpl]
            shost = args[2 + P + L * tpl:2 + 2 * P + L * tpl] if self.quant else ()
            self.sflat = args[2 + 2 * P + L * tpl:] if self.quant else ()
            self.host = tuple(host) + tuple(shost)
            self.staging_specs = []
            self.rows = []
            for t in self.host:
                shape = tuple(int(d) for d in t.shape)
                elem = DTYPE_BYTES[dtype_name(t.dtype)]
                self.rows.append(int(np.prod(shape[3:], dtype=np.int64)) * elem)
                self.staging_specs.append((shape[:2] + (1,) + shape[3:], t.dtype))
            self.nrows = call.n * call.planes[0][1]  # n blocks x block_size token rows
            self._layer_copies = self._block_copies

    def _token_copies(self, layer):
        T, L = self.call.n, self.num_layers
        out, off, soff = [], 0, 0
        for row in self.rows:
            out.append(_Copy(0, off + layer * T * row, 0, 0, soff, 0, T * row, 1))
            off += L * T * row
            soff += T * row
        return out

    def _block_copies(self, layer):
        L = self.num_layers
        return [_Copy(i, layer * row, L * row, i, 0, row, row, self.nrows) for i, row in enumerate(self.rows)]

    def copies(self, layer):
        """The copies of ``layer`` (host side <-> staging), in plane order."""
        return self._layer_copies(layer)

    def launch(self, layer, staging):
        """Run the op on ``layer`` alone between ``staging`` (its host side for one layer) and the layer's caches,
        in PyNative on the current backend and stream."""
        tpl, P = ML.tensors_per_layer(self.fmt), ML.planes_of(self.fmt)
        caches = self.flat[layer * tpl:(layer + 1) * tpl]
        scales = self.sflat[layer * P:(layer + 1) * P] if self.quant else None
        if self.kind == "token":
            multi_layer_kv_transfer(
                staging[0], caches, self.index, kv_format=self.fmt, direction=self.direction,
                cache_layout=self.layout, aiv_num=self.aiv, scale_caches=scales)
        else:
            multi_layer_block_transfer(
                caches, tuple(staging[:P]), self.index, direction=self.direction, staging=self.user_staging,
                kv_format=self.fmt, cache_layout=self.layout, aiv_num=self.aiv, scale_caches=scales,
                scale_host_blocks=tuple(staging[P:]) if self.quant else None)


def _layer_tensors(kind, call, layer):
    """``(argument name, tensor, transfer_writes)`` of what ``layer`` touches (the debug mode's pending set)."""
    attrs = call.attrs
    d2h, fmt, L = attrs["direction"] == "d2h", attrs["kv_format"], attrs["num_layers"]
    tpl, P = ML.tensors_per_layer(fmt), ML.planes_of(fmt)
    quant = call.spec.name.endswith("_quant")
    args = call.args
    out = []
    if kind == "token":
        out.append(("buffer", args[0], d2h))
        caches, scales = args[2:2 + L * tpl], args[2 + L * tpl:]
    else:
        out += [(f"host_blocks[{p}]", x, d2h) for p, x in enumerate(args[2:2 + P])]
        if int(np.prod(args[1].shape)) > 0:
            out.append(("staging", args[1], True))
        caches = args[2 + P:2 + P + L * tpl]
        if quant:
            out += [(f"scale_host_blocks[{p}]", x, d2h) for p, x in enumerate(args[2 + P + L * tpl:2 + 2 * P + L * tpl])]
        scales = args[2 + 2 * P + L * tpl:]
    out += [(f"kv_caches[{layer}][{c}]", x, not d2h) for c, x in enumerate(caches[layer * tpl:(layer + 1) * tpl])]
    if quant:
        out += [(f"scale_caches[{layer}][{p}]", x, not d2h) for p, x in enumerate(scales[layer * P:(layer + 1) * P])]
    return out


def _refuse_in_graph(where):
    """A LayerwiseTransfer call inside a graph being compiled would run once, at compile time, not at each call of
    the graph (or fail to compile with an unrelated message): refused, naming the way that works."""
    if _custom.graph_compiling():
        raise RuntimeError(f"{where}: called inside a graph being compiled (a GRAPH_MODE construct or an @ms.jit "
                           f"function), where it would run once at compile time, not at each call: drive it from "
                           f"Python between the compiled Cells of each layer, or use multi_layer_kv_transfer / "
                           f"multi_layer_block_transfer inside the graph (docs/ops-transfer.md, 'Layer-wise transfer')")


def _address(t):
    """First byte of tensor ``t`` (storage offset included), without a pipeline sync where the PyNative fast path's
    module can tell it (``data_ptr()`` waits for every pending op); 0 for an empty tensor."""
    if int(t.size) == 0:
        return 0
    nosync = getattr(_pyboost_loader.fast_module(), "data_address_nosync", None)
    p = nosync(t) if nosync is not None else None
    return int(p) if p is not None else int(t.data_ptr())


class LayerwiseTransfer:
    """A multi-layer KV transfer moved layer by layer beside the forward pass, driven from one host thread.

    Takes :func:`ms_kvcache.multi_layer_kv_transfer`'s arguments (token rows by slot; whole blocks: :meth:`blocks`)
    and runs its checks at construction. Each layer moves the bytes the synchronous op moves for it. PyNative, or
    between per-layer GRAPH_MODE Cells. ``start()`` issues every layer; ``save_layer(i)`` (d2h) layer ``i`` alone;
    ``wait_layer(i)``: layer ``i`` moved; ``wait()``: every issued layer, ends the round (the object may run again);
    ``done()`` polls; ``close()`` (also on drop) waits for what is in flight. Ordering, backends, debug mode
    (``MS_KVCACHE_CHECK_LAYERWISE=1``): docs/ops-transfer.md, "Layer-wise transfer".

    Args:
        buffer (mindspore.Tensor): host buffer of ``transfer_buffer_shape(...)``, the caches' dtype.
        kv_caches (sequence): per-layer caches (nested or flat, layer-major), as for the synchronous op.
        slot_mapping (mindspore.Tensor): int32 / int64 ``[T]``, ``-1`` skips; its values are copied here.
        kv_format (KVCacheFormat | int | str): keyword-only; MERGED_KV, SEPARATE_KV, MLA_KV or DSA_KV.
        direction (str): keyword-only; ``"d2h"`` (save: caches -> buffer) or ``"h2d"`` (load).
        cache_layout (str): ``"BSND"`` (default) or ``"BNSD"``.
        aiv_num (int, optional): cap on threads (cpu) / vector cores (sim, ascend), 0 = all; None (default):
            1 worker thread on cpu (the forward pass keeps the other cores), all cores elsewhere.
        scale_caches (sequence, optional): float32 per-token scale caches of int8 / float8 caches, per layer.

    Raises:
        TypeError, ValueError: the synchronous op's argument errors (bad slot values included), at construction;
            ``layer`` not an int in ``[0, num_layers)``; ``save_layer`` of an ``"h2d"`` transfer.
        RuntimeError: a layer that failed, at the first wait covering it (its message names the layer; it wrote
            nothing, later layers are not run); waiting for a layer not issued; issuing twice in one round; a
            closed transfer; issuing a layer whose tensor has other memory than at construction (``set_data``);
            a call inside a graph being compiled; with the debug mode, an ms_kvcache op on a pending layer's tensor.
    """

    def __init__(self, buffer, kv_caches, slot_mapping, *, kv_format, direction, cache_layout="BSND", aiv_num=None,
                 scale_caches=None):
        _refuse_in_graph("LayerwiseTransfer")
        _layerwise_guard.enabled()  # a bad $MS_KVCACHE_CHECK_LAYERWISE is an error here, not at the first launch
        slots, keep = _snapshot(slot_mapping)
        call = self._prepare("multi_layer_kv_transfer", lambda aiv: _kv_eager(
            buffer, kv_caches, slots, kv_format, direction, cache_layout, aiv, scale_caches, prepare=True), aiv_num)
        self._setup("token", call, keep, None)

    @classmethod
    def blocks(cls, kv_caches, host_blocks, block_ids, *, direction, staging=None, kv_format=None, cache_layout=None,
               aiv_num=None, scale_caches=None, scale_host_blocks=None):
        """Layer-wise :func:`ms_kvcache.multi_layer_block_transfer` (whole blocks, token-major host blocks).

        Args:
            kv_caches, host_blocks, block_ids: as for :func:`ms_kvcache.multi_layer_block_transfer`.
            direction, staging, kv_format, cache_layout: as for :func:`ms_kvcache.multi_layer_block_transfer`.
            scale_caches, scale_host_blocks: as for :func:`ms_kvcache.multi_layer_block_transfer`.
            aiv_num (int, optional): as for :class:`LayerwiseTransfer`.

        Returns:
            LayerwiseTransfer: not started.

        Raises:
            TypeError, ValueError: the synchronous op's argument errors (bad block ids included).
        """
        _refuse_in_graph("LayerwiseTransfer.blocks")
        self = cls.__new__(cls)
        _layerwise_guard.enabled()
        ids, keep = _snapshot(block_ids)
        call = self._prepare("multi_layer_block_transfer", lambda aiv: _block_eager(
            kv_caches, host_blocks, ids, direction, staging, kv_format, cache_layout, aiv, scale_caches,
            scale_host_blocks, prepare=True), aiv_num)
        self._setup("block", call, keep, staging)
        return self

    # ------------------------------------------------------------------ construction
    @staticmethod
    def _prepare(op, make, aiv_num):
        if aiv_num is None:
            aiv_num = 1 if _backend.get_backend() == "cpu" else 0
        try:
            return make(aiv_num)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"LayerwiseTransfer: {exc}") from None

    def _setup(self, kind, call, keep, staging):
        self._closed = True  # until the engine exists (a failed construction has nothing to close)
        self._kind, self._call, self._keep = kind, call, keep
        attrs = call.attrs
        self.num_layers, self.direction = int(attrs["num_layers"]), attrs["direction"]
        self._what = f"LayerwiseTransfer({call.spec.name.replace('_quant', '')}, {self.direction})"
        self._issued, self._waited = set(), set()
        self._error = None      # (layer, message) of the first failure
        self._raised = False    # whether that failure reached the caller
        self._guard = _layerwise_guard.enabled()
        # what each layer touches and where it was at construction: the engines keep these addresses, so a tensor
        # given other memory later (Parameter.set_data) is refused at the next issue instead of moving stale or
        # released memory
        self._layer_mem = [[(name, t, _address(t)) for name, t, _w in _layer_tensors(kind, call, layer)]
                           for layer in range(self.num_layers)] if call.n > 0 else None
        self._engine = None
        if call.n > 0:
            bmod = _backend.backend_module(call.backend)
            factory = getattr(bmod, "layerwise_engine", None)
            if factory is None:  # pragma: no cover - every backend has one
                raise NotImplementedError(f"{self._what}: backend {call.backend!r} has no layer-wise engine")
            plan = call if call.backend == "cpu" else StagedPlan(kind, call, staging)
            self._engine = factory(plan)
        self._closed = False

    # ------------------------------------------------------------------ issue
    def _check_layer(self, where, layer):
        try:  # an integer (int, numpy integer, 0-d integer tensor), not a bool or a float that happens to be whole
            value = None if isinstance(layer, (bool, np.bool_)) else operator.index(layer)
        except TypeError:
            value = None
        if value is None or not 0 <= value < self.num_layers:
            raise ValueError(f"{self._what}.{where}: argument 'layer': expected an int in [0, {self.num_layers}), "
                             f"got {layer!r}")
        return value

    def _check_open(self):
        if self._closed:
            raise RuntimeError(f"{self._what}: the transfer is closed")
        if self._error is not None:
            raise RuntimeError(f"{self._what}: layer {self._error[0]} failed ({self._error[1]}); create a new "
                               f"transfer")

    def _new_round_if_complete(self):
        if self._issued and len(self._issued) == self.num_layers and self._waited >= self._issued:
            if self._engine is not None:
                if getattr(self._engine, "queue_wait", None) is not None:  # cpu: waits queued in the pipeline
                    err = self._engine.wait_all()  # may leave layers in flight when every layer was waited for
                    if err:
                        self._fail(self._engine.failed_layer(), err)
                self._engine.reset()
            self._issued, self._waited = set(), set()

    def _check_memory(self, where, layers):
        if self._layer_mem is None:
            return
        for layer in layers:
            for name, t, was in self._layer_mem[layer]:
                now = _address(t)
                if now != was:
                    raise RuntimeError(
                        f"{self._what}.{where}: argument '{name}' (layer {layer}) is not the memory it was at "
                        f"construction ({was:#x}, now {now:#x}: e.g. Parameter.set_data); the transfer keeps the "
                        f"addresses it was built with: create a new LayerwiseTransfer")

    def _issue(self, layers, where):
        self._check_memory(where, layers)
        if self._engine is not None:
            self._engine.settle()  # the forward pass's writes of these layers (PyNative launches) have run
        for layer in layers:
            if self._guard:
                _layerwise_guard.register(self, layer, self._what, _layer_tensors(self._kind, self._call, layer))
            self._issued.add(layer)
            if self._engine is not None:
                with _layerwise_guard.own_launches(self):
                    self._engine.issue(layer)

    def start(self):
        """Issue every layer not issued yet in this round, in layer order; returns ``self``.

        Raises:
            RuntimeError: the round has every layer issued and not waited for (call ``wait()``); closed; failed.
        """
        _refuse_in_graph(f"{self._what}.start")
        self._check_open()
        self._new_round_if_complete()
        if len(self._issued) == self.num_layers:
            raise RuntimeError(f"{self._what}.start: every layer is issued in this round; wait() ends the round")
        self._issue([layer for layer in range(self.num_layers) if layer not in self._issued], "start")
        return self

    def save_layer(self, layer):
        """d2h: issue ``layer`` alone, once the forward pass wrote its caches (no ``start()`` needed).

        Args:
            layer (int): the layer to save, in ``[0, num_layers)``.

        Returns:
            None.

        Raises:
            ValueError: an ``"h2d"`` transfer; ``layer`` not in ``[0, num_layers)``.
            RuntimeError: ``layer`` already issued in this round; closed; failed.
        """
        _refuse_in_graph(f"{self._what}.save_layer")
        layer = self._check_layer("save_layer", layer)
        if self.direction != "d2h":
            raise ValueError(f"{self._what}.save_layer: expected a transfer with direction='d2h' (save_layer issues "
                             f"one layer of an offload), got direction={self.direction!r}; use start()")
        self._check_open()
        self._new_round_if_complete()
        if layer in self._issued:
            raise RuntimeError(f"{self._what}.save_layer: layer {layer} is already issued in this round; wait() "
                               f"ends the round")
        self._issue([layer], "save_layer")

    # ------------------------------------------------------------------ waits
    def _fail(self, layer, msg):
        if self._error is None:
            self._error = (layer, msg)
        self._raised = True
        raise RuntimeError(f"{self._what}: {msg} (a failed layer writes nothing outside the rows it targets; the "
                           f"layers issued after it are not run)")

    def wait_layer(self, layer):
        """Return once ``layer`` is moved: h2d, its caches may be read; d2h, its cache rows may be overwritten
        (on ascend, and on cpu while MindSpore's pipeline is busy: the ops launched after this call run after the
        layer moved, the host does not wait).

        Args:
            layer (int): an issued layer, in ``[0, num_layers)``.

        Returns:
            None.

        Raises:
            ValueError: ``layer`` not in ``[0, num_layers)``.
            RuntimeError: ``layer`` not issued in this round; it failed or was not run after a failure (a wait
                queued in the pipeline: raised by MindSpore at the next synchronisation, and by ``wait()``).
        """
        _refuse_in_graph(f"{self._what}.wait_layer")
        layer = self._check_layer("wait_layer", layer)
        if self._closed:
            raise RuntimeError(f"{self._what}: the transfer is closed")
        if layer not in self._issued:
            how = "start()" if self.direction == "h2d" else f"start() or save_layer({layer})"
            raise RuntimeError(f"{self._what}.wait_layer: layer {layer} is not issued in this round: call {how} first")
        queue = getattr(self._engine, "queue_wait", None)
        if self._engine is None or (queue is not None and queue(layer)):
            err = ""  # (cpu, busy pipeline: the pipeline waits, the host goes on; a failure surfaces at the next sync)
        else:
            err = self._engine.wait_layer(layer)
        self._waited.add(layer)
        if self._guard:
            _layerwise_guard.release(self, {layer})
        if err:
            self._fail(layer, err)

    def wait(self):
        """Return once every issued layer is moved (d2h: the host side is complete); ends the round.

        Raises:
            RuntimeError: a layer failed (named).
        """
        _refuse_in_graph(f"{self._what}.wait")
        if self._closed:
            raise RuntimeError(f"{self._what}: the transfer is closed")
        err = self._engine.wait_all() if (self._engine is not None and self._issued) else ""
        self._waited |= self._issued
        if self._guard:
            _layerwise_guard.release(self)
        if err:
            self._fail(self._engine.failed_layer(), err)
        if self._issued:  # the round ends, whether every layer was issued in it or some (a model saving a subset)
            if self._engine is not None:
                self._engine.reset()
            self._issued, self._waited = set(), set()

    def done(self):
        """Whether no issued layer is still in flight (non-blocking; never raises a layer's failure)."""
        _refuse_in_graph(f"{self._what}.done")
        if self._engine is None or not self._issued:
            return True
        ok = self._engine.all_done()
        if ok and self._guard:
            _layerwise_guard.release(self)
        return ok

    # ------------------------------------------------------------------ lifetime
    def close(self):
        """Wait for the layers in flight and release the transfer (idempotent).

        Raises:
            RuntimeError: a layer failed and no wait reported it.
        """
        if getattr(self, "_engine", None) is None:
            self._close()
            return
        self._close()
        if self._error is None and self._engine_error() is not None:
            self._error = self._engine_error()
        if self._error is not None and not self._raised:
            self._raised = True
            raise RuntimeError(f"{self._what}: {self._error[1]} (reported at close)")

    def _engine_error(self):
        if self._engine is None:
            return None
        layer = self._engine.failed_layer()
        return None if layer < 0 else (layer, self._engine.wait_layer(layer))

    def _close(self):
        if getattr(self, "_closed", True):
            return
        if self._engine is not None:
            self._engine.close()  # waits for every queued / running layer
        if self._guard:
            _layerwise_guard.release(self)
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._close()
        return False

    def __del__(self):
        try:
            self._close()
            err = self._engine_error() if self._error is None else self._error
            if err is not None and not getattr(self, "_raised", True):
                warnings.warn(f"{self._what}: layer {err[0]} failed and no wait reported it: {err[1]}",
                              RuntimeWarning, stacklevel=2)
        except Exception:  # noqa: BLE001 - never raise from a destructor  # pragma: no cover
            pass

    def __repr__(self):
        state = "closed" if self._closed else f"{len(self._issued)}/{self.num_layers} issued"
        return f"<{self._what} {self._kind} x {self.num_layers} layers, {state}>"
