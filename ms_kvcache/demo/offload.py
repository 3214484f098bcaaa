"""Preemption's data path: a sequence's K/V of every layer to host memory and back, layer by layer.

This is the only place the demo moves a preempted sequence's KV. Each direction is one
``ms_kvcache.LayerwiseTransfer`` over all layers (the int8 model's float32 scale caches travel in the same
object), driven from the layer loop of a step (:class:`ms_kvcache.demo.cells.LayerLoop`):

- offload (:class:`LayerwiseSave`, ``direction="d2h"``): ``save_layer(i)`` as soon as the step's layer ``i``
  is launched (the loop's ``after_layer`` hook), so layer ``i``'s copy runs while layers ``i+1..`` compute;
  ``wait()`` (vLLM's ``wait_for_save``) before anything may overwrite the freed blocks;
- reload (:class:`LayerwiseLoad`, ``direction="h2d"``): ``start()`` before the step, ``wait_layer(i)`` before
  layer ``i`` first touches its caches (the loop's ``before_cache`` hook; vLLM's ``wait_for_layer_load``).

The host buffer comes from ``alloc_host_buffer`` (shape ``transfer_buffer_shape``). Both classes measure the
host time the step's thread spent in the transfer's calls (issuing layers, waiting for them) and, separately,
the transfer alone (``start(); wait()`` of the same object on the same rows: the bytes are the same, so it
changes nothing); the hidden fraction is ``1 - (issue + wait time in the step) / (time alone)``.
"""
from dataclasses import dataclass
import statistics
import time

import numpy as np
from mindspore import Tensor

from ms_kvcache.demo import ops_adapter as A

__all__ = ["HostKV", "LayerwiseSave", "LayerwiseLoad", "buffer_shape"]


@dataclass
class HostKV:
    """One offloaded sequence: the host buffer and what is in it.

    buffer: ``transfer_buffer_shape(kv_format, L, T, H*D)`` (int8 model: the 1-D byte buffer with the scale planes
    after the data planes); pinned: page-locked memory or not; num_tokens: T; nbytes, shape: of the buffer.
    """

    buffer: object
    pinned: bool
    num_tokens: int
    nbytes: int
    shape: tuple

    def host_bits(self):
        """The buffer's bytes as unsigned ints of the cache element size (a copy)."""
        a = self.buffer.asnumpy()
        return a.view(f"u{a.dtype.itemsize}").copy()


def buffer_shape(model, num_tokens):
    """The host buffer of ``num_tokens`` tokens of every layer of ``model`` (scale planes included for int8)."""
    return A.transfer_buffer_shape(model.kv_format, model.num_layers, num_tokens, model.kv_heads * model.head_size,
                                   scale_sizes=model.kv_heads if model.quant else None)


class _Layerwise:
    """What both directions share: the transfer, the host time spent waiting for it, its time alone."""

    def __init__(self, model, host, slots, direction):
        self.host = host
        self.num_layers = model.num_layers
        self.lt = A.layerwise_transfer(model, host.buffer, Tensor(np.asarray(slots, np.int32)), direction)
        self.issue_s = 0.0       # host time in start() / save_layer during the step
        self.waited_s = 0.0      # host time in wait_layer / wait during the step
        self.layer_waits = []    # seconds of each wait_layer
        self.overlapped = False  # whether the transfer ran beside a step's layer loop
        self.alone_s = None
        self.finished = False

    def _issue(self, fn, *args):
        t = time.perf_counter()
        fn(*args)
        self.issue_s += time.perf_counter() - t

    def _wait(self, fn, *args):
        t = time.perf_counter()
        fn(*args)
        dt = time.perf_counter() - t
        self.waited_s += dt
        return dt

    def finish(self):
        """Wait for every layer (counted as waiting); once."""
        if not self.finished:
            self._wait(self.lt.wait)
            self.finished = True

    def time_alone(self, rounds=3):
        """Median seconds of the whole transfer alone (``start(); wait()``), ``rounds`` times on the same rows."""
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            self.lt.start()
            self.lt.wait()
            times.append(time.perf_counter() - t)
        self.alone_s = statistics.median(times)
        return self.alone_s

    def close(self):
        self.lt.close()

    def summary(self):
        """Timing fields for the report: ``alone_s``, ``issue_s``, ``waited_s`` (the step's host time in the calls),
        ``hidden`` (``1 - (issue_s + waited_s) / alone_s``), ``max_layer_wait_s``, ``overlapped``."""
        hidden = None
        if self.overlapped and self.alone_s:
            hidden = 1.0 - (self.issue_s + self.waited_s) / self.alone_s
        return {"alone_s": self.alone_s, "issue_s": self.issue_s, "waited_s": self.waited_s,
                "overlapped": self.overlapped, "hidden": hidden, "layers": self.num_layers,
                "max_layer_wait_s": max(self.layer_waits) if self.layer_waits else None}


class LayerwiseSave(_Layerwise):
    """Offload of the rows at ``slots`` (int32 ``[T]``, position order) of every layer into a new host buffer."""

    def __init__(self, model, slots):
        buffer, pinned = A.alloc_host_buffer(buffer_shape(model, int(len(slots))), model.kv_dtype)
        super().__init__(model, HostKV(buffer, pinned, int(len(slots)), int(buffer.nbytes), tuple(buffer.shape)),
                         slots, "d2h")

    def after_layer(self, layer):
        """The layer loop's hook: layer ``layer`` is launched; save its rows (queued behind its ops)."""
        self.overlapped = True
        self._issue(self.lt.save_layer, layer)

    def issue_all(self):
        """Issue every layer at once (a step with no layer loop to hide the copy behind)."""
        for layer in range(self.num_layers):
            self._issue(self.lt.save_layer, layer)


class LayerwiseLoad(_Layerwise):
    """Reload of ``host`` (:class:`HostKV`) into the rows at ``slots`` (int32 ``[T]``, position order)."""

    def __init__(self, model, host, slots):
        super().__init__(model, host, slots, "h2d")

    def start(self):
        self._issue(self.lt.start)

    def before_cache(self, layer):
        """The layer loop's hook: layer ``layer`` is about to read / write its caches; wait for its reload."""
        self.overlapped = True
        self.layer_waits.append(self._wait(self.lt.wait_layer, layer))
