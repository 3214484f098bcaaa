"""The ascend backend's layer-wise engine (:class:`ms_kvcache.LayerwiseTransfer` on an NPU): a MindSpore side stream,
one event per layer. Written against the documented APIs, not run on hardware (no NPU here): tested with stand-in
ACL libraries and a stand-in stream runtime (tests/test_layerwise_transfer_ascend.py).

Per layer (``plan``: an ``ops.layerwise_transfer.StagedPlan``): the public op with L = 1 between a device staging
tensor (the layer's host side, laid out as the op wants it for one layer) and the layer's caches, queued on the
side stream inside ``mindspore.runtime.StreamCtx``, and the copies between the staging tensor and the layer's rows
of the host buffer / host blocks with ``aclrtMemcpyAsync`` (one per plane: a layer's token rows are contiguous) or
``aclrtMemcpy2dAsync`` (block rows, ``L * row`` bytes apart on the host) on the same stream:

- h2d ``issue(l)``: copies host -> staging, the kernel, then ``record_event`` on the side stream (event ``l``);
- d2h ``issue(l)``: an event recorded on the current (compute) stream, which the side stream waits for (the
  forward pass's writes of layer ``l`` come first), the kernel, copies staging -> host, event ``l``;
- ``wait_layer(l)``: the current stream waits for event ``l`` (the host does not block); ``wait()``: the current
  stream waits for every event, and the host waits for the last one (d2h: the host side is then complete; h2d: no
  copy still reads it, so it may be rewritten);
  ``done()``: every event's ``query()``; ``close()``: the host waits for the side stream.

The copies are issued by the host at once while MindSpore launches the kernels from its PyNative pipeline later, so
before each group of copies and before each event the host waits until the pipeline has launched what it queued
(``_cpu_pyboost.wait_idle``; without that module a full ``synchronize``): stream order is then the issue order and
one staging tensor per staging plane serves every layer. Async copies need page-locked host memory
(:func:`ms_kvcache.alloc_host_buffer`, registered on Ascend). A copy the runtime refuses (``AclError``) fails its
layer and is reported at the next wait; a kernel failing on the device is raised by MindSpore at the next
synchronisation, without the layer.
"""
import ctypes

from ms_kvcache._backends import _acl

__all__ = ["LayerwiseEngine", "MEMCPY2D_MAX_HEIGHT"]

#: aclrtMemcpy2dAsync's documented limit on ``height`` (CANN AscendCL reference: 5 * 1024 * 1024).
MEMCPY2D_MAX_HEIGHT = 5 * 1024 * 1024


def _wait_launched():
    """Block until MindSpore's PyNative pipeline has launched every op queued so far."""
    from ms_kvcache import _custom

    mod = _custom._fast_module()  # noqa: WPS437 - optional compiled module
    fn = getattr(mod, "wait_idle", None) if mod is not None else None
    if fn is not None and fn():
        return
    from ms_kvcache import _host_memory

    _host_memory.synchronize()


def _device_zeros(shape, dtype):
    from mindspore import ops

    t = ops.zeros(shape, dtype)
    t.data_ptr()  # allocated now
    return t


def _stream_ptr(stream):
    p = getattr(stream, "stream_ptr", None)
    p = p() if callable(p) else p
    if not p:
        raise RuntimeError("LayerwiseTransfer (ascend): MindSpore does not expose the side stream's aclrtStream "
                           "(Stream.stream_ptr); this MindSpore cannot run layer-wise transfers on Ascend")
    return int(p)


def _span_end(offset, pitch, width, height):
    return offset + (height - 1) * pitch + width


class LayerwiseEngine:
    """See the module docstring. ``runtime`` (``mindspore.runtime``), ``acl`` (``_acl.load()``), ``wait_launched``
    and ``alloc`` (device zeros) are injectable for tests."""

    def __init__(self, plan, runtime=None, acl=None, wait_launched=None, alloc=None):
        from ms_kvcache._spec import tensor_nbytes

        if runtime is None:
            import mindspore as ms

            runtime = ms.runtime
        self._rt = runtime
        self._acl = acl if acl is not None else _acl.load()
        self._wait_launched = wait_launched or _wait_launched
        self._plan = plan
        self._d2h = plan.direction == "d2h"
        self._side = runtime.Stream()
        self._side_ptr = _stream_ptr(self._side)
        alloc = alloc or _device_zeros
        self._staging = [alloc(shape, dtype) for shape, dtype in plan.staging_specs]
        self._host = [(int(t.data_ptr()), tensor_nbytes(t)) for t in plan.host]
        self._stg = [(int(t.data_ptr()), tensor_nbytes(t)) for t in self._staging]
        self._memcpy2d = _acl._bind(self._acl.lib, "aclrtMemcpy2dAsync", ctypes.c_int,  # noqa: WPS437
                                    [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                     ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p], required=False)
        self._events, self._err, self._failed, self._last = {}, {}, -1, None

    def settle(self):
        """Nothing: ordering against the forward pass goes through events (d2h) and stream waits."""

    # ---------------------------------------------------------------- copies
    def _copy(self, c, to_staging):
        (haddr, hbytes), (saddr, sbytes) = self._host[c.host], self._stg[c.staging]
        if _span_end(c.host_offset, c.host_pitch, c.width, c.height) > hbytes or \
                _span_end(c.staging_offset, c.staging_pitch, c.width, c.height) > sbytes:
            raise ValueError(f"layer-wise copy {c!r} reaches outside its tensors ({hbytes} / {sbytes} bytes)")
        h, s = haddr + c.host_offset, saddr + c.staging_offset
        kind = _acl.MEMCPY_HOST_TO_DEVICE if to_staging else _acl.MEMCPY_DEVICE_TO_HOST
        dst, dpitch, src, spitch = (s, c.staging_pitch, h, c.host_pitch) if to_staging else \
            (h, c.host_pitch, s, c.staging_pitch)
        dmax = (sbytes - c.staging_offset) if to_staging else (hbytes - c.host_offset)
        if c.height == 1:
            self._acl.memcpy_async(dst, dmax, src, c.width, kind, self._side_ptr)
        elif self._memcpy2d is not None and c.height <= MEMCPY2D_MAX_HEIGHT:
            self._acl._check("aclrtMemcpy2dAsync", self._memcpy2d(  # noqa: WPS437
                dst, dpitch, src, spitch, c.width, c.height, kind, self._side_ptr))
        else:  # no 2-D copy in this runtime (or on this SoC): one copy per row
            for r in range(c.height):
                self._acl.memcpy_async(dst + r * dpitch, dmax - r * dpitch, src + r * spitch, c.width, kind,
                                       self._side_ptr)

    # ---------------------------------------------------------------- engine interface
    def issue(self, layer):
        if self._failed >= 0:
            self._err[layer] = f"layer {layer}: not run: layer {self._failed} failed first"
            return
        rt, plan = self._rt, self._plan
        try:
            if self._d2h:
                self._wait_launched()  # the forward pass's ops of this layer are on the current stream
                self._side.wait_event(rt.current_stream().record_event())
                with rt.StreamCtx(self._side):
                    plan.launch(layer, self._staging)
                self._wait_launched()
                for c in plan.copies(layer):
                    self._copy(c, False)
            else:
                self._wait_launched()  # the previous layer's kernel is on the side stream before these copies
                for c in plan.copies(layer):
                    self._copy(c, True)
                with rt.StreamCtx(self._side):
                    plan.launch(layer, self._staging)
                self._wait_launched()
            self._events[layer] = self._side.record_event()
            self._last = layer
        except Exception as exc:  # noqa: BLE001 - reported at the next wait, naming the layer
            self._failed = layer
            self._err[layer] = f"layer {layer}: {exc}"

    def wait_layer(self, layer):
        ev = self._events.get(layer)
        if ev is not None:
            self._rt.current_stream().wait_event(ev)
        return self._err.get(layer, "")

    def wait_all(self):
        cur = self._rt.current_stream()
        for ev in self._events.values():
            cur.wait_event(ev)
        if self._last is not None:
            # the host side is complete (d2h) / no longer read (h2d: the next round, or the caller, may rewrite it);
            # the side stream runs in order
            self._events[self._last].synchronize()
        return self._err.get(self._failed, "") if self._failed >= 0 else ""

    def all_done(self):
        return all(ev.query() for ev in self._events.values())

    def failed_layer(self):
        return self._failed

    def reset(self):
        if self._failed >= 0:
            raise RuntimeError(f"layer {self._failed} failed: start a new transfer")
        self._events, self._err, self._last = {}, {}, None

    def close(self):
        self._side.synchronize()  # every queued copy and kernel finished: the memory may go
