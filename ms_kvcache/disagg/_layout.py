"""What a KV payload is: the layout of a process's paged caches, the bytes of a sequence's KV in the
transfer buffers of :func:`ms_kvcache.multi_layer_kv_transfer`, checksums, slot mappings, and the
registered host memory the payload is staged in.

A payload of ``T`` tokens is cut into token chunks of ``chunk_tokens`` tokens (the last one may be
shorter). Chunk ``c`` is one ``multi_layer_kv_transfer`` buffer of its ``t_c`` tokens,
``transfer_buffer_shape(kv_format, L, t_c, hidden_sizes)`` (``[2, L, t_c, H*D]`` for MERGED_KV /
SEPARATE_KV, the planes ``[L, t_c, hidden_p]`` one after another for MLA_KV / DSA_KV), stored at byte
offset ``c * chunk_tokens * bytes_per_token``. Every token costs ``bytes_per_token = L * sum(hidden) *
itemsize`` bytes, so the payload is ``T * bytes_per_token`` bytes whatever the chunking. int8 caches with
per-token scale caches: each chunk is the 1-D buffer of ``multi_layer_kv_transfer(..., scale_caches=...)``
(the data planes, then the float32 scale planes ``[L, t_c, scales_p]``), and ``bytes_per_token`` adds
``L * 4 * sum(scales)``.
"""
import json
import zlib

import numpy as np

from ms_kvcache._formats import KVCacheFormat
from ms_kvcache.disagg._errors import MetadataMismatch

__all__ = ["KVLayout", "checksum", "ChecksumStream", "CHECKSUM_ALGO", "slots_from_blocks", "check_block_ids", "HostStaging",
           "chunk_plan", "ramp_chunk_sizes", "plan_from_sizes", "wait_ops"]

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "int8": 1}

try:  # xxHash (XXH3, 64 bit) runs at memory speed; zlib's CRC-32 is the fallback without it
    import xxhash as _xxhash

    CHECKSUM_ALGO = "xxh3_64"
except ImportError:  # pragma: no cover - the disagg extra installs xxhash
    _xxhash = None
    CHECKSUM_ALGO = "crc32"


def checksum(data, algo=None):
    """Checksum of a bytes-like object (e.g. a numpy array or memoryview of raw bytes).

    Args:
        data: a C-contiguous buffer.
        algo (str | None): ``"xxh3_64"`` (XXH3 64-bit, the default when the ``xxhash`` package is
            installed) or ``"crc32"`` (zlib); None = :data:`CHECKSUM_ALGO`.

    Returns:
        int: the checksum (unsigned).

    Raises:
        ValueError: unknown ``algo``, or ``"xxh3_64"`` without the ``xxhash`` package.
    """
    algo = algo or CHECKSUM_ALGO
    if algo == "xxh3_64":
        if _xxhash is None:
            raise ValueError("checksum: algorithm 'xxh3_64' needs the xxhash package (pip install xxhash)")
        return _xxhash.xxh3_64_intdigest(data)
    if algo == "crc32":
        return zlib.crc32(data) & 0xFFFFFFFF
    raise ValueError(f"checksum: argument 'algo': expected 'xxh3_64' or 'crc32', got {algo!r}")


class ChecksumStream:
    """:func:`checksum` of the concatenation of the buffers given to :meth:`update`, in that order,
    without concatenating them (``ChecksumStream(algo)`` fed a chunk's pieces in payload order gives
    the checksum of the gathered chunk). ``algo`` as for :func:`checksum`."""

    def __init__(self, algo=None):
        self.algo = algo or CHECKSUM_ALGO
        checksum(b"", self.algo)  # ValueError for an unknown / unavailable algorithm
        self._h = _xxhash.xxh3_64() if self.algo == "xxh3_64" else None
        self._crc = 0

    def update(self, data):
        if self._h is not None:
            self._h.update(data)
        else:
            self._crc = zlib.crc32(data, self._crc)

    def value(self):
        """The checksum of everything so far (int, unsigned)."""
        return self._h.intdigest() if self._h is not None else self._crc & 0xFFFFFFFF


def wait_ops():
    """Wait until every PyNative op launched so far has run (:func:`ms_kvcache.synchronize`), first
    sleep-polling MindSpore's pipeline when the fast path's module offers it: a plain sync spins the
    calling thread, which on a small machine takes a core from the transfer engine's threads."""
    import ms_kvcache
    from ms_kvcache import _custom

    mod = _custom._fast_module()
    if mod is not None:
        mod.wait_idle()
    ms_kvcache.synchronize()


def check_block_ids(op, block_ids, num_blocks, distinct):
    """``block_ids`` (sequence / numpy array of ints) -> int64 numpy array, checked to lie in
    ``[0, num_blocks)`` (and to be distinct when ``distinct``); ValueError naming ``op`` otherwise."""
    try:
        arr = np.asarray(block_ids)
    except Exception:  # noqa: BLE001
        arr = None
    if arr is None or arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{op}: argument 'block_ids': expected a 1-D sequence of ints, got {block_ids!r}")
    arr = arr.astype(np.int64, copy=False)
    bad = np.flatnonzero((arr < 0) | (arr >= num_blocks))
    if bad.size:
        raise ValueError(f"{op}: argument 'block_ids': expected block ids in [0, {num_blocks}), got "
                         f"{int(arr[bad[0]])} at index {int(bad[0])}")
    if distinct and np.unique(arr).size != arr.size:
        vals, counts = np.unique(arr, return_counts=True)
        raise ValueError(f"{op}: argument 'block_ids': expected distinct block ids, got {int(vals[counts > 1][0])} "
                         f"more than once")
    return arr


def slots_from_blocks(block_ids, block_size, num_tokens):
    """vLLM slot mapping of the first ``num_tokens`` tokens of a sequence stored in ``block_ids``.

    Args:
        block_ids (sequence of int): the sequence's blocks, in order.
        block_size (int): tokens per block.
        num_tokens (int): tokens to map (``len(block_ids) * block_size >= num_tokens``).

    Returns:
        numpy.ndarray: int64 ``[num_tokens]``, ``slot[t] = block_ids[t // block_size] * block_size +
        t % block_size``.
    """
    t = np.arange(num_tokens, dtype=np.int64)
    blocks = np.asarray(block_ids, dtype=np.int64)
    return blocks[t // block_size] * block_size + t % block_size


def chunk_plan(num_tokens, chunk_tokens, bytes_per_token):
    """``[(t0, t1, byte_offset, nbytes)]`` of the token chunks of a payload (empty for 0 tokens)."""
    out = []
    for t0 in range(0, num_tokens, chunk_tokens):
        t1 = min(num_tokens, t0 + chunk_tokens)
        out.append((t0, t1, t0 * bytes_per_token, (t1 - t0) * bytes_per_token))
    return out


def ramp_chunk_sizes(num_tokens, chunk_tokens):
    """Token counts of a pipelined payload's chunks: ``chunk_tokens`` each in the middle, but ramping up
    at the start (``chunk_tokens / 8, / 4, / 2``) so the first bytes go on the wire after a short gather,
    and down at the end (``/ 4, / 8``) so little is left to check and load after the last byte arrives.
    Payloads too small for both ramps just double from ``chunk_tokens / 8``. Sums to ``num_tokens``
    (empty for 0 tokens); every entry >= 1."""
    T, ct = int(num_tokens), max(1, int(chunk_tokens))
    front, s = [], max(1, ct // 8)
    while s < ct:
        front.append(s)
        s *= 2
    back = [x for x in (ct // 4, ct // 8) if x >= 1]
    out = []
    if T <= sum(front) + ct + sum(back):  # small: geometric from the first ramp size
        s, left = max(1, ct // 8), T
        while left > 0:
            out.append(min(s, left))
            left -= out[-1]
            s = min(ct, s * 2)
        return out
    middle = T - sum(front) - sum(back)
    out = list(front) + [ct] * (middle // ct) + ([middle % ct] if middle % ct else []) + back
    return out


def plan_from_sizes(sizes, bytes_per_token):
    """``[(t0, t1, byte_offset, nbytes)]`` of consecutive chunks of ``sizes`` tokens (as :func:`chunk_plan`)."""
    out, t0 = [], 0
    for n in sizes:
        t1 = t0 + int(n)
        out.append((t0, t1, t0 * bytes_per_token, (t1 - t0) * bytes_per_token))
        t0 = t1
    return out


class KVLayout:
    """The layout of one process's paged KV caches, as far as moving a sequence's KV needs it.

    Build it with :meth:`from_caches`. Two processes can exchange KV when their layouts agree on
    everything but the pool (``num_blocks``) and ``block_size`` (the payload is per token, so the
    receiver may page it differently): :meth:`mismatches` lists the fields that differ.

    Attributes:
        kv_format (KVCacheFormat): the caches' format.
        dtype (str): ``"float16"``, ``"bfloat16"``, ``"float32"`` or ``"int8"``.
        cache_layout (str): ``"BSND"`` or ``"BNSD"``.
        num_layers (int): layers.
        planes (tuple): ``(num_kv_heads, head_size)`` per plane; MLA planes are ``(1, kv_lora_rank)`` and
            ``(1, rope_dim)``.
        num_blocks, block_size (int): the pool (may differ between the two ends).
        hidden_sizes (tuple of int): elements of one token row per plane.
        scales (tuple of int): float32 scales per token row of each plane when the int8 caches' per-token
            scale caches travel with them (num_kv_heads, or 1 for MLA / DSA); ``()`` without.
        itemsize, bytes_per_token (int): bytes of an element; data and scale bytes of one token, all layers.
    """

    #: fields that must agree between the two ends of a handoff
    MATCHED = ("kv_format", "dtype", "cache_layout", "num_layers", "planes", "scales")

    def __init__(self, kv_format, dtype, cache_layout, num_layers, planes, num_blocks, block_size, scales=()):
        self.kv_format = KVCacheFormat(kv_format)
        self.dtype = str(dtype)
        self.cache_layout = cache_layout
        self.num_layers = int(num_layers)
        self.planes = tuple((int(h), int(d)) for h, d in planes)
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.hidden_sizes = tuple(h * d for h, d in self.planes)
        self.itemsize = _ITEMSIZE[self.dtype]
        self.scales = tuple(int(n) for n in scales)
        self.bytes_per_token = self.num_layers * (sum(self.hidden_sizes) * self.itemsize + 4 * sum(self.scales))

    @classmethod
    def from_caches(cls, kv_caches, kv_format, cache_layout="BSND", op="KVLayout.from_caches", scale_caches=None,
                    static_scales=False):
        """Layout of ``kv_caches`` as :func:`ms_kvcache.multi_layer_kv_transfer` takes them, checked the way
        that op checks them.

        int8 caches need their scales accounted for, or the KV that arrives is decoded with the wrong ones:
        ``scale_caches`` (they then travel with the data) or ``static_scales=True`` (the model's constants, the
        same at both ends: nothing per token to move).

        Args:
            kv_caches (sequence): one entry per layer, or flat layer-major (as the transfer op).
            kv_format (KVCacheFormat | int | str): their format.
            cache_layout (str): ``"BSND"`` (default) or ``"BNSD"``.
            op (str): the name the error messages start with.
            scale_caches (sequence | None): int8 caches: their float32 per-token scale caches, as
                ``multi_layer_kv_transfer(..., scale_caches=...)`` takes them.
            static_scales (bool): int8 caches: True = static scales (nothing per token to move).

        Returns:
            KVLayout: the layout.

        Raises:
            TypeError: what ``multi_layer_kv_transfer`` would raise for these caches (dtypes, non-Tensors).
            ValueError: what that op would raise (arity, shapes, unknown ``kv_format`` / ``cache_layout``, scale
                caches of the wrong shape, caches that are not contiguous); int8 caches with neither or both of
                ``scale_caches`` / ``static_scales=True``, or either of them with caches that are not int8.
        """
        from ms_kvcache.ops import _multi_layer as ML

        fmt = ML.format_code(op, kv_format)
        ML.check_layout(op, fmt, cache_layout)
        flat, num_layers = ML.flatten_eager(op, kv_caches, fmt)
        planes = ML.cache_planes(op, fmt, cache_layout, num_layers, [tuple(x.shape) for x in flat])
        dtypes = {ML.dtype_name(x.dtype) for x in flat}
        if len(dtypes) != 1:
            raise TypeError(f"{op}: argument 'kv_caches': expected one dtype for every cache, got {sorted(dtypes)}")
        dtype = dtypes.pop()
        if dtype not in _ITEMSIZE:
            raise TypeError(f"{op}: argument 'kv_caches': expected dtype float16, bfloat16, float32 or int8, got {dtype}")
        if static_scales not in (True, False):
            raise ValueError(f"{op}: argument 'static_scales': expected True or False, got {static_scales!r}")
        scales = ()
        if dtype == "int8":
            if scale_caches is None and not static_scales:
                raise ValueError(
                    f"{op}: argument 'scale_caches': int8 'kv_caches' need their scales: pass scale_caches (the "
                    f"float32 per-token scale caches of the dynamic quantizing writes, moved with the data) or "
                    f"static_scales=True (per-tensor / per-head / per-channel scales, the same at both ends); "
                    f"got neither, and the KV would arrive without the scales it was quantized with")
            if scale_caches is not None and static_scales:
                raise ValueError(f"{op}: argument 'static_scales': expected False with scale_caches given (the scales "
                                 f"are either per token, in scale caches, or static), got True")
            if scale_caches is not None:
                sflat = ML.flatten_scales_eager(op, scale_caches, fmt, num_layers)
                ML.check_scale_dtypes(op, fmt, flat[0].dtype, [x.dtype for x in sflat])
                scales = tuple(ML.scale_planes(op, fmt, cache_layout, num_layers, planes,
                                               [tuple(x.shape) for x in sflat]))
        elif scale_caches is not None or static_scales:
            which = "scale_caches" if scale_caches is not None else "static_scales"
            raise ValueError(f"{op}: argument '{which}': expected only with int8 'kv_caches' (quantized), got "
                             f"{dtype} caches")
        for what, tensors in (("kv_caches", flat), ("scale_caches", sflat if scale_caches is not None else ())):
            for i, x in enumerate(tensors):
                if hasattr(x, "is_contiguous") and not x.is_contiguous():
                    raise ValueError(f"{op}: argument '{what}': expected contiguous tensors (the transfer reads and "
                                     f"writes them in place), got a non-contiguous view of shape {tuple(x.shape)} at "
                                     f"flat index {i}")
        nb, bs = planes[0][0], planes[0][1]
        return cls(fmt, dtype, cache_layout, num_layers, [(h, d) for (_, _, h, d) in planes], nb, bs, scales)

    # ------------------------------------------------------------------ description and comparison
    def describe(self):
        """JSON-serialisable dict of the layout (what goes into a handoff offer / a store header)."""
        return {"kv_format": self.kv_format.name, "dtype": self.dtype, "cache_layout": self.cache_layout,
                "num_layers": self.num_layers, "planes": [list(p) for p in self.planes],
                "scales": list(self.scales), "num_blocks": self.num_blocks, "block_size": self.block_size,
                "bytes_per_token": self.bytes_per_token}

    def identity(self):
        """The fields that must match, as a canonical JSON string (hashed into store keys)."""
        d = self.describe()
        keys = [k for k in self.MATCHED if k != "scales" or self.scales]  # unscaled: the keys of before
        return json.dumps({k: d[k] for k in keys}, sort_keys=True, separators=(",", ":"))

    def mismatches(self, other):
        """The fields of :attr:`MATCHED` that differ from ``other``.

        Args:
            other (KVLayout | dict): another layout, or its :meth:`describe` dict.

        Returns:
            list of str: ``["field: ours X, theirs Y", ...]``, empty when the layouts match.
        """
        theirs = other.describe() if isinstance(other, KVLayout) else dict(other)
        ours = self.describe()
        out = []
        for k in self.MATCHED:
            a, b = ours[k], theirs.get(k, [] if k == "scales" else None)
            if k == "planes" and b is not None:
                try:
                    b = [list(map(int, p)) for p in b]
                except (TypeError, ValueError, OverflowError):
                    pass
            if a != b:
                out.append(f"{k}: {a!r} here, {b!r} there")
        return out

    def require_match(self, other, what):
        """Raise :class:`MetadataMismatch` listing :meth:`mismatches` if any.

        Args:
            other (KVLayout | dict): another layout, or its :meth:`describe` dict.
            what (str): prefix of the message (who compares).

        Returns:
            None.

        Raises:
            MetadataMismatch: the layouts differ.
        """
        bad = self.mismatches(other)
        if bad:
            raise MetadataMismatch(f"{what}: KV layouts differ: " + "; ".join(bad))

    # ------------------------------------------------------------------ buffers
    def buffer_shape(self, num_tokens):
        """``transfer_buffer_shape`` of ``num_tokens`` tokens of this layout.

        Args:
            num_tokens (int): tokens, >= 0.

        Returns:
            tuple of int: the buffer shape (with the scale planes when the layout has scales).
        """
        from ms_kvcache import transfer_buffer_shape

        hidden = self.hidden_sizes[0] if self.kv_format in (KVCacheFormat.MERGED_KV, KVCacheFormat.SEPARATE_KV) \
            else self.hidden_sizes
        return tuple(transfer_buffer_shape(self.kv_format, self.num_layers, num_tokens, hidden,
                                           scale_sizes=list(self.scales) or None))

    def np_dtype(self):
        """numpy dtype of the caches (ml_dtypes.bfloat16 for bfloat16)."""
        if self.dtype == "bfloat16":
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.dtype)

    def default_chunk_tokens(self, chunk_bytes=32 << 20):
        """Tokens per chunk so that a chunk is about ``chunk_bytes``.

        Args:
            chunk_bytes (int): target bytes per chunk (default 32 MiB).

        Returns:
            int: tokens per chunk, at least 1.
        """
        return max(1, int(chunk_bytes) // max(1, self.bytes_per_token))

    def __repr__(self):
        sc = f", scales={list(self.scales)}" if self.scales else ""
        return (f"KVLayout({self.kv_format.name}, {self.dtype}, {self.cache_layout}, L={self.num_layers}, "
                f"planes={list(self.planes)}{sc}, num_blocks={self.num_blocks}, block_size={self.block_size})")


class HostStaging:
    """Page-aligned host memory (:func:`ms_kvcache.alloc_host_buffer`, pinned when the memlock limit
    allows) that holds payload chunks, optionally registered with a Mooncake transfer engine.

    :meth:`chunk_tensor` gives a MindSpore Tensor over a byte range of it, shaped as a
    ``multi_layer_kv_transfer`` buffer, without a copy (``Tensor.from_numpy`` of a numpy view), so the
    transfer ops gather into / scatter from the very bytes Mooncake moves.

    Args:
        nbytes (int): capacity (>= 1).
        engine (TransferEngineHandle | None): register the memory with it (and unregister in
            :meth:`close`).
    """

    def __init__(self, nbytes, engine=None):
        import ms_kvcache

        nbytes = max(1, int(nbytes))
        try:
            t = ms_kvcache.alloc_host_buffer((nbytes,), "uint8", pinned=True)
            self.pinned = True
        except (OSError, RuntimeError):
            t = ms_kvcache.alloc_host_buffer((nbytes,), "uint8", pinned=False)
            self.pinned = False
        self._tensor = t  # owns the mapping
        self.array = t.asnumpy()  # same memory (CPU tensor)
        self.nbytes = nbytes
        self.ptr = int(self.array.ctypes.data)
        self.engine = engine
        if engine is not None:
            engine.register(self.ptr, nbytes)

    def view(self, offset, nbytes):
        """uint8 numpy view of ``nbytes`` bytes at ``offset``."""
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"HostStaging.view: bytes [{offset}, {offset + nbytes}) outside the {self.nbytes}-byte "
                             f"buffer")
        return self.array[offset:offset + nbytes]

    def chunk_tensor(self, layout, offset, num_tokens):
        """Tensor of shape ``layout.buffer_shape(num_tokens)`` over the bytes at ``offset``."""
        from mindspore import Tensor

        shape = layout.buffer_shape(num_tokens)
        arr = self.view(offset, num_tokens * layout.bytes_per_token).view(layout.np_dtype()).reshape(shape)
        return Tensor.from_numpy(arr)

    def close(self):
        """Unregister from the engine (the memory is freed when the last Tensor over it goes)."""
        if self.engine is not None:
            self.engine.unregister(self.ptr)
            self.engine = None

    def free(self):
        """:meth:`close`, and drop this object's references to the memory (it is unmapped as soon as no
        Tensor made by :meth:`chunk_tensor` is left either)."""
        self.close()
        self._tensor = self.array = None
