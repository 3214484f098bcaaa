"""The sender's direct path on the cpu backend: Mooncake reads a sequence's KV straight from the cache
rows, without the gather into the staging buffer.

On the cpu backend the paged caches are host memory. In a BSND cache (MLA_KV / DSA_KV caches are
BSND) a token's row of one plane of one layer is contiguous, and so are the rows of consecutive slots,
so a run of tokens whose slots are consecutive (the tokens of one block, or of several blocks with
consecutive ids) is one contiguous byte range of the cache, and the same tokens of that plane and
layer are one contiguous byte range of the payload (:mod:`ms_kvcache.disagg._layout`: chunk ``c`` is
the ``multi_layer_kv_transfer`` buffer of its tokens, planes then layers then tokens). The sender
registers the cache memory with its transfer engine and writes each such run with one Mooncake
request from the cache row to its offset in the receiver's staging buffer. The bytes that land there
are exactly what the gather would have written, so the receiver (and the protocol) do not change.

Pieces smaller than :data:`DIRECT_MIN_BYTES` (small blocks, a small plane such as MLA's rope part,
runs cut by a chunk border) cost Mooncake more per byte than a copy: they are copied into the sender's
staging buffer at their payload offset instead (numpy), and adjacent copied pieces go as one request.
The checksum of a chunk is streamed over the same pieces in payload order (XXH3 / CRC-32 of the
concatenation = the checksum of the gathered chunk), while Mooncake reads them.

Not used (the gather path stays): on the sim and ascend backends (on an NPU the caches are device
memory: the gather is the device-to-host copy), for BNSD caches (a token's row is split across heads),
and for caches that are not contiguous tensors.
"""
import ctypes

import numpy as np

from ms_kvcache._formats import KVCacheFormat
from ms_kvcache._spec import tensor_nbytes

__all__ = ["CacheRows", "DIRECT_MIN_BYTES", "MAX_INFLIGHT", "SPAN_BYTES", "WINDOW_BYTES", "direct_rows"]

#: Smallest piece Mooncake reads straight from a cache; smaller ones are copied into the staging buffer
#: and sent together (measured here: 64 KiB requests cost Mooncake's TCP transport ~1.5x the CPU per byte
#: of 256 KiB ones; 256 KiB ones as little as 32 MiB ones; DeepSeek-V3's 128 KiB MLA block runs staged
#: made the whole handoff 1.3x faster than sent directly, 2026-12-03).
DIRECT_MIN_BYTES = 256 << 10

#: A run of adjacent staged pieces is written once it reaches this size (its write then overlaps the
#: next copies), and at the end of its chunk.
SPAN_BYTES = 1 << 20

#: Bytes of writes in flight at once (beyond two writes): the chunks then complete in order, so the
#: receiver verifies (and in stream mode loads) each one while the next ones move (see handoff._Writes).
WINDOW_BYTES = 16 << 20

#: Most Mooncake requests in flight at once (8192 requests of 64 KiB submitted at once stalled the TCP
#: transport of Mooncake 0.3.13 here; 2048 of 256 KiB did not).
MAX_INFLIGHT = 256


def direct_rows(layout, kv_caches):
    """``(CacheRows, "")`` when Mooncake can read these caches' rows directly, else ``(None, reason)``."""
    from ms_kvcache import get_backend
    from ms_kvcache.ops import _multi_layer as ML

    backend = get_backend()
    if backend != "cpu":
        return None, f"the {backend} backend (the caches are not host memory of this process)"
    if layout.cache_layout != "BSND":
        return None, f"{layout.cache_layout} caches (a token's row is not contiguous)"
    flat, _ = ML.flatten_eager("KVSender", kv_caches, layout.kv_format)
    for i, x in enumerate(flat):
        if not x.is_contiguous():
            return None, f"cache {i} is not contiguous"
    return CacheRows(layout, flat), ""


class CacheRows:
    """Addresses of every plane of every layer of host-resident BSND caches, and the payload pieces
    of a chunk (see the module docstring). Build it with :func:`direct_rows`."""

    def __init__(self, layout, flat):
        self.layout = layout
        self.flat = tuple(flat)
        self.row_bytes = tuple(h * layout.itemsize for h in layout.hidden_sizes)
        self._ptrs = None

    def refresh(self):
        """Read the caches' addresses (call after :func:`ms_kvcache.synchronize`: an op still pending
        could otherwise be writing them); returns ``[(ptr, nbytes)]`` of every cache tensor."""
        lay = self.layout
        regions = [(int(x.data_ptr()), tensor_nbytes(x)) for x in self.flat]
        planes = len(lay.planes)
        ptrs = []  # [plane][layer] -> (base address, uint8 view of the plane's rows)
        for p in range(planes):
            per = []
            for l in range(lay.num_layers):
                if lay.kv_format == KVCacheFormat.MERGED_KV:  # [2, nb, bs, H, D]: plane p is the p-th half
                    base, n = regions[l]
                    n //= 2
                    base += p * n
                else:
                    base, n = regions[l * planes + p]
                per.append((base, np.ctypeslib.as_array((ctypes.c_ubyte * n).from_address(base))))
            ptrs.append(per)
        self._ptrs = ptrs
        return regions

    def pieces(self, slots, t0, t1, offset):
        """The pieces of the chunk of tokens ``[t0, t1)`` (payload byte ``offset``) in payload order:
        ``[(src_ptr, view, payload_offset, nbytes)]``, one per plane, layer and run of consecutive slots
        (``view``: the cache bytes, a uint8 numpy view)."""
        lay = self.layout
        s = np.asarray(slots[t0:t1], dtype=np.int64)
        n = s.size
        if n == 0:
            return []
        cut = np.flatnonzero(np.diff(s) != 1) + 1
        starts = np.concatenate(([0], cut)).tolist()
        ends = np.concatenate((cut, [n])).tolist()
        first = s[starts].tolist()
        out = []
        region = offset
        for p, rb in enumerate(self.row_bytes):
            runs = [(a * rb, (e - a) * rb, f * rb) for a, e, f in zip(starts, ends, first)]
            for base, view in self._ptrs[p]:
                for pay, nb, src in runs:
                    out.append((base + src, view[src:src + nb], region + pay, nb))
                region += n * rb
        return out
