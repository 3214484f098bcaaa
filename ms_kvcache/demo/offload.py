"""Preemption's data path: a sequence's K/V of every layer to host memory and back.

This is the only place the demo moves a preempted sequence's KV; the pipeline calls :meth:`offload` when
the scheduler swaps a sequence out and :meth:`reload` when it swaps it back in, and checks the bytes.
Each direction is ONE ``ms_kvcache.multi_layer_kv_transfer`` call over all layers (the int8 model's
float32 scale caches travel in the same call): ``d2h`` gathers the sequence's cache rows into a host
buffer from ``alloc_host_buffer`` (shape ``transfer_buffer_shape``), ``h2d`` scatters them into the
newly allocated blocks. Another transfer API replaces this module by providing the same two methods.
"""
from dataclasses import dataclass
import time

import numpy as np
from mindspore import Tensor

from ms_kvcache.demo import ops_adapter as A

__all__ = ["HostKV", "KVOffloader"]


@dataclass
class HostKV:
    """One offloaded sequence: the host buffer and what is in it.

    buffer: ``transfer_buffer_shape(kv_format, L, T, H*D)`` (int8 model: the 1-D byte buffer with the
    scale planes after the data planes); pinned: page-locked memory or not; num_tokens: T;
    seconds: time of the d2h call (the second of two identical calls: the first compiles its graph).
    """

    buffer: object
    pinned: bool
    num_tokens: int
    nbytes: int
    shape: tuple
    seconds: float
    first_seconds: float

    def host_bits(self):
        """The buffer's bytes as unsigned ints of the cache element size (a copy)."""
        a = self.buffer.asnumpy()
        return a.view(f"u{a.dtype.itemsize}").copy()


class KVOffloader:
    """Offload / reload a sequence's K/V rows (all layers) between ``model``'s paged caches and host.

    Args:
        model (PagedLlama): the caches (and, for an int8 model, the scale caches).
    """

    def __init__(self, model):
        self.model = model
        self.quant = model.quant

    def buffer_shape(self, num_tokens):
        m = self.model
        return A.transfer_buffer_shape(m.kv_format, m.num_layers, num_tokens, m.kv_heads * m.head_size,
                                       scale_sizes=m.kv_heads if self.quant else None)

    def offload(self, slots):
        """d2h of the rows at ``slots`` (int32 ``[T]``, position order) -> :class:`HostKV`."""
        shape = self.buffer_shape(int(slots.size))
        buffer, pinned = A.alloc_host_buffer(shape, self.model.kv_dtype)
        st = Tensor(np.asarray(slots, np.int32))
        times = []
        for _ in range(2):  # the same rows twice: the first call includes compiling the transfer graph
            t = time.perf_counter()
            A.kv_transfer(self.model, buffer, st, "d2h", scales=self.quant)
            times.append(time.perf_counter() - t)
        return HostKV(buffer, pinned, int(slots.size), int(buffer.nbytes), tuple(shape), times[-1], times[0])

    def reload(self, host, slots, repeat=2):
        """h2d of ``host`` into the rows at ``slots`` (int32 ``[T]``, position order); returns
        (steady seconds, first-call seconds). ``repeat=0`` skips the copy (fault injection)."""
        st = Tensor(np.asarray(slots, np.int32))
        times = []
        for _ in range(repeat):  # idempotent: same rows twice; the second call is the steady-state time
            t = time.perf_counter()
            A.kv_transfer(self.model, host.buffer, st, "h2d", scales=self.quant)
            times.append(time.perf_counter() - t)
        return (times[-1], times[0]) if times else (0.0, 0.0)
