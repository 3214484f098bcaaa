"""Prefix sharing through Mooncake Store: :class:`KVPrefixStore`.

LMCache-style: a sequence's KV is cut into chunks of ``chunk_tokens`` tokens; chunk ``i`` (full
chunks only) is stored under a key derived from a hash chain over the tokens,

    h_0 = sha256(salt || tokens[0:C]),   h_i = sha256(h_{i-1} || tokens[i*C:(i+1)*C]),
    key_i = "ms_kvcache/" + hex(h_i),

where ``salt = sha256(model_id, the KV layout identity, C)``, so equal keys mean the same model, the
same cache format / dtype / layers / heads / head size and the same token prefix; a second process with
the same model and the same prompt prefix computes the same keys and reloads those chunks instead of
recomputing them. Tokens are hashed as little-endian int64.

Each stored object is a 4 KiB header (magic ``MSKVCHNK`` + JSON: key, layout identity, model_id, token
count, byte count, checksum) followed by the chunk's ``multi_layer_kv_transfer`` buffer
(``[2, L, C, H*D]`` for MERGED / SEPARATE, the planes one after another for MLA / DSA). It is written with
``put_from`` and read with ``batch_get_into`` from / into host memory registered with the store
(``register_buffer``), so Mooncake moves the bytes the transfer ops gather into / scatter from.
:meth:`load` checks every header and checksum before it writes any cache row.
"""
import hashlib
import json
import time

import numpy as np

from ms_kvcache.disagg._errors import PeerGone, StoreError
from ms_kvcache.disagg._layout import CHECKSUM_ALGO, HostStaging, KVLayout, check_block_ids, checksum, \
    slots_from_blocks, wait_ops
from ms_kvcache.disagg._mooncake import LOOPBACK, import_store, wait_for_port
from ms_kvcache.disagg.handoff import _check_timeout, _transfer

__all__ = ["KVPrefixStore", "prefix_chunk_hashes", "HEADER_BYTES", "KEY_PREFIX"]

#: Bytes of the header in front of every stored chunk.
HEADER_BYTES = 4096
#: Every key starts with this.
KEY_PREFIX = "ms_kvcache/"
_MAGIC = b"MSKVCHNK"
_OBJECT_NOT_FOUND = -704  # Mooncake ErrorCode::OBJECT_NOT_FOUND


def _tokens(op, token_ids):
    try:
        arr = np.asarray(token_ids)
    except Exception:  # noqa: BLE001
        arr = None
    if arr is None or arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{op}: argument 'token_ids': expected a 1-D sequence of ints, got {token_ids!r}")
    return arr.astype("<i8", copy=False)


def prefix_chunk_hashes(token_ids, chunk_tokens, salt=b""):
    """Hex sha256 hash chain of the full ``chunk_tokens``-token chunks of ``token_ids``.

    Args:
        token_ids (sequence of int): the tokens.
        chunk_tokens (int): tokens per chunk, >= 1; a trailing partial chunk gets no hash.
        salt (bytes): starts the chain (:class:`KVPrefixStore` uses the model / layout identity).

    Returns:
        list of str: one hex digest per full chunk, each covering every token before it.

    Raises:
        ValueError: bad ``token_ids`` or ``chunk_tokens``.
    """
    toks = _tokens("prefix_chunk_hashes", token_ids)
    if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, (int, np.integer)) or chunk_tokens < 1:
        raise ValueError(f"prefix_chunk_hashes: argument 'chunk_tokens': expected an int >= 1, got {chunk_tokens!r}")
    out, prev = [], bytes(salt)
    for i in range(toks.size // chunk_tokens):
        h = hashlib.sha256(prev + toks[i * chunk_tokens:(i + 1) * chunk_tokens].tobytes()).digest()
        out.append(h.hex())
        prev = h
    return out


class KVPrefixStore:
    """A process's client of Mooncake Store for KV prefixes.

    Args:
        kv_caches, kv_format, cache_layout: this process's paged caches, as
            :func:`ms_kvcache.multi_layer_kv_transfer` takes them (read by :meth:`put`, written by
            :meth:`load`). int8 caches need ``scale_caches`` or ``static_scales=True``, as for
            :class:`~ms_kvcache.disagg.KVReceiver`: ``scale_caches`` (their float32 per-token scale caches)
            are stored with the data of every chunk and written with it; the scales are part of the key's
            layout identity, so a client without them never finds chunks stored with them.
        master_address (str): ``"host:port"`` of a running ``mooncake_master`` (see :class:`MooncakeMaster`).
        model_id (str): names the model (weights); part of every key, so two models never share chunks.
        chunk_tokens (int): tokens per chunk (LMCache's default is 256; a multiple of the block size is
            natural but not required).
        max_chunks (int): chunks one :meth:`put` / :meth:`load` call stages at a time (sizes the
            registered host buffer); :meth:`load` reloads at most this many.
        hostname (str): this client's address (default 127.0.0.1); protocol / device_name: Mooncake
            transport (``"tcp"``; ``"rdma"`` not verified here).
        global_segment_size (int): bytes of this process's memory it contributes to the store's pool.
        local_buffer_size (int): bytes of the client's own transfer buffer.
        setup_timeout (float): seconds to wait for the master's port before ``setup()``.

    Raises:
        MooncakeUnavailable: Mooncake cannot be imported.
        PeerGone: nothing listens at ``master_address`` within ``setup_timeout``.
        StoreError: ``setup`` / ``register_buffer`` failed.
        TypeError / ValueError: caches or arguments (as :func:`multi_layer_kv_transfer` would say); int8
            caches without ``scale_caches`` / ``static_scales=True`` (ValueError, as KVReceiver).
    """

    def __init__(self, kv_caches, kv_format, *, master_address, model_id, cache_layout="BSND", chunk_tokens=256,
                 max_chunks=64, hostname=LOOPBACK, protocol="tcp", device_name="", global_segment_size=256 << 20,
                 local_buffer_size=64 << 20, setup_timeout=10.0, scale_caches=None, static_scales=False):
        op = "KVPrefixStore"
        self.layout = KVLayout.from_caches(kv_caches, kv_format, cache_layout, op=op, scale_caches=scale_caches,
                                           static_scales=static_scales)
        self.kv_caches = kv_caches
        self.scale_caches = scale_caches
        if not isinstance(model_id, str) or not model_id:
            raise ValueError(f"{op}: argument 'model_id': expected a non-empty str, got {model_id!r}")
        for name, v in (("chunk_tokens", chunk_tokens), ("max_chunks", max_chunks)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{op}: argument '{name}': expected an int >= 1, got {v!r}")
        self.model_id = model_id
        self.chunk_tokens = int(chunk_tokens)
        self.max_chunks = int(max_chunks)
        self.salt = hashlib.sha256("\0".join((model_id, self.layout.identity(), str(self.chunk_tokens))).encode()
                                   ).digest()
        self.chunk_nbytes = self.chunk_tokens * self.layout.bytes_per_token
        self.object_nbytes = HEADER_BYTES + self.chunk_nbytes
        host, _, port = str(master_address).rpartition(":")
        try:
            port = int(port)
        except ValueError:
            raise ValueError(f"{op}: argument 'master_address': expected 'host:port', got {master_address!r}") from None
        setup_timeout = _check_timeout(op, setup_timeout)
        mod = import_store()
        if not wait_for_port(host, port, setup_timeout):
            raise PeerGone(f"{op}: no mooncake_master answers at {master_address} within {setup_timeout:g} s (start "
                           f"one, e.g. ms_kvcache.disagg.MooncakeMaster)")
        self.store = mod.MooncakeDistributedStore()
        rc = self.store.setup(hostname, "P2PHANDSHAKE", int(global_segment_size), int(local_buffer_size), protocol,
                              device_name, str(master_address))
        if rc != 0:
            raise StoreError(f"{op}: MooncakeDistributedStore.setup(master {master_address}) failed with code {rc}")
        self.master_address = str(master_address)
        self.staging = HostStaging(self.max_chunks * self.object_nbytes)
        rc = self.store.register_buffer(self.staging.ptr, self.staging.nbytes)
        if rc != 0:
            self.store.close()
            raise StoreError(f"{op}: register_buffer({self.staging.nbytes} bytes) failed with code {rc}")

    # ------------------------------------------------------------------ keys
    def keys(self, token_ids):
        """Store keys of the full chunks of ``token_ids`` (see the module docstring).

        Args:
            token_ids (sequence of int): the tokens.

        Returns:
            list of str: one key per full chunk.
        """
        return [KEY_PREFIX + h for h in prefix_chunk_hashes(token_ids, self.chunk_tokens, self.salt)]

    def lookup(self, token_ids):
        """Number of leading tokens of ``token_ids`` whose chunks are in the store (the longest stored
        prefix, as LMCache's lookup).

        Args:
            token_ids (sequence of int): the tokens.

        Returns:
            int: a multiple of ``chunk_tokens``.

        Raises:
            StoreError: Mooncake reports an error for a key.
        """
        keys = self.keys(token_ids)
        if not keys:
            return 0
        found = self.store.batch_is_exist(keys)
        n = 0
        for k, f in zip(keys, found):
            if f == 1:
                n += 1
                continue
            if f < 0:
                raise StoreError(f"KVPrefixStore.lookup: batch_is_exist failed for key {k} (code {f})")
            break
        return n * self.chunk_tokens

    # ------------------------------------------------------------------ objects
    def _offset(self, j):
        return j * self.object_nbytes

    def _header(self, key, c_sum):
        meta = {"key": key, "identity": self.layout.identity(), "model_id": self.model_id,
                "num_tokens": self.chunk_tokens, "nbytes": self.chunk_nbytes, "checksum_algo": CHECKSUM_ALGO,
                "checksum": c_sum}
        raw = _MAGIC + json.dumps(meta, sort_keys=True).encode()
        if len(raw) > HEADER_BYTES:  # pragma: no cover - keys are short
            raise StoreError(f"chunk header of {len(raw)} bytes exceeds {HEADER_BYTES}")
        return raw

    def _check_header(self, j, key):
        """Problems with the object staged in slot ``j`` (expected under ``key``), or None."""
        head = bytes(self.staging.view(self._offset(j), HEADER_BYTES))
        if not head.startswith(_MAGIC):
            return "no ms_kvcache chunk header"
        try:
            meta = json.loads(head[len(_MAGIC):].rstrip(b"\0").decode())
        except (UnicodeDecodeError, ValueError) as exc:
            return f"unreadable header ({exc})"
        want = {"key": key, "identity": self.layout.identity(), "model_id": self.model_id,
                "num_tokens": self.chunk_tokens, "nbytes": self.chunk_nbytes}
        bad = [f"{k}: {meta.get(k)!r} stored, {v!r} expected" for k, v in want.items() if meta.get(k) != v]
        if bad:
            return "; ".join(bad)
        data = self.staging.view(self._offset(j) + HEADER_BYTES, self.chunk_nbytes)
        try:
            actual = checksum(data, meta.get("checksum_algo"))
        except ValueError as exc:
            return str(exc)
        if actual != meta.get("checksum"):
            return f"checksum {actual:#x} != {meta.get('checksum')!r} in the header (corrupt data)"
        return None

    def _chunk_tensor(self, j):
        return self.staging.chunk_tensor(self.layout, self._offset(j) + HEADER_BYTES, self.chunk_tokens)

    # ------------------------------------------------------------------ put / load
    def put(self, token_ids, block_ids):
        """Store the full chunks of a sequence's KV that the store does not hold yet.

        Args:
            token_ids (sequence of int): the sequence's tokens whose KV is in the caches (its prompt, or
                prompt + generated tokens); only whole chunks are stored.
            block_ids (sequence of int): the sequence's blocks in this process, in order (enough for
                ``len(token_ids)`` tokens).

        Returns:
            dict: ``chunks`` (full chunks of ``token_ids``), ``stored`` (newly put), ``present`` (already
            in the store, skipped), ``tokens`` (tokens covered by stored chunks), ``nbytes`` (bytes put),
            ``seconds``.

        Raises:
            ValueError: bad ``token_ids`` / ``block_ids``.
            StoreError: ``put_from`` failed (code in the message).
        """
        op = "KVPrefixStore.put"
        t0 = time.perf_counter()
        toks = _tokens(op, token_ids)
        lay = self.layout
        blocks = check_block_ids(op, block_ids, lay.num_blocks, distinct=True)
        if toks.size > blocks.size * lay.block_size:
            raise ValueError(f"{op}: argument 'block_ids': {blocks.size} blocks of {lay.block_size} hold fewer than "
                             f"the {toks.size} tokens given")
        keys = self.keys(toks)
        found = self.store.batch_is_exist(keys) if keys else []
        todo = [i for i, f in enumerate(found) if f != 1]
        slots = slots_from_blocks(blocks, lay.block_size, len(keys) * self.chunk_tokens)
        ct = self.chunk_tokens
        for g in range(0, len(todo), self.max_chunks):
            group = todo[g:g + self.max_chunks]
            for j, i in enumerate(group):
                _transfer(lay, self.kv_caches, self._chunk_tensor(j), slots[i * ct:(i + 1) * ct], "d2h",
                          self.scale_caches)
            wait_ops()
            for j, i in enumerate(group):
                off = self._offset(j)
                c_sum = checksum(self.staging.view(off + HEADER_BYTES, self.chunk_nbytes))
                head = self._header(keys[i], c_sum)
                hv = self.staging.view(off, HEADER_BYTES)
                hv[:] = 0
                hv[:len(head)] = np.frombuffer(head, np.uint8)
                rc = self.store.put_from(keys[i], self.staging.ptr + off, self.object_nbytes)
                if rc != 0:
                    raise StoreError(f"{op}: put_from({keys[i]}, {self.object_nbytes} bytes) failed with code {rc}")
        return {"chunks": len(keys), "stored": len(todo), "present": len(keys) - len(todo),
                "tokens": len(keys) * ct, "nbytes": len(todo) * self.object_nbytes,
                "seconds": time.perf_counter() - t0}

    def load(self, token_ids, block_ids, *, max_tokens=None):
        """Reload the longest stored prefix of ``token_ids`` into ``block_ids`` of this process's caches.

        Args:
            token_ids (sequence of int): the new sequence's tokens (its prompt).
            block_ids (sequence of int): blocks of this process for the new sequence, in order (distinct;
                token ``t`` goes to ``block_ids[t // block_size] * block_size + t % block_size``).
            max_tokens (int | None): load at most this many tokens (rounded down to whole chunks), e.g.
                ``len(prompt) - 1`` so that the last prompt token is still computed; None = no limit
                besides ``max_chunks``.

        Returns:
            dict: ``tokens`` (prefix tokens loaded: not to be recomputed), ``chunks``, ``keys``,
            ``nbytes`` (bytes read), ``seconds``, ``stopped`` (why the prefix ends: ``"end of stored
            prefix"``, ``"max_tokens"``, ``"max_chunks"``, or a chunk that vanished after the lookup).

        Raises:
            ValueError: bad ``token_ids`` / ``block_ids`` (too few blocks for the prefix found).
            StoreError: a stored chunk's header or checksum does not match its key / this layout, or
                ``batch_get_into`` failed; nothing was written into the caches then.
        """
        op = "KVPrefixStore.load"
        t0 = time.perf_counter()
        toks = _tokens(op, token_ids)
        lay = self.layout
        blocks = check_block_ids(op, block_ids, lay.num_blocks, distinct=True)
        ct = self.chunk_tokens
        keys = self.keys(toks)
        n = self.lookup(toks) // ct
        stopped = "end of stored prefix"
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
                raise ValueError(f"{op}: argument 'max_tokens': expected an int >= 0 or None, got {max_tokens!r}")
            if n > max_tokens // ct:
                n, stopped = max_tokens // ct, "max_tokens"
        if n > self.max_chunks:
            n, stopped = self.max_chunks, "max_chunks"
        if n * ct > blocks.size * lay.block_size:
            raise ValueError(f"{op}: argument 'block_ids': {blocks.size} blocks of {lay.block_size} cannot hold the "
                             f"{n * ct}-token prefix found")
        keys = keys[:n]
        got = self.store.batch_get_into(keys, [self.staging.ptr + self._offset(j) for j in range(n)],
                                        [self.object_nbytes] * n) if n else []
        for j, rc in enumerate(got):
            if rc == _OBJECT_NOT_FOUND:  # evicted / removed since the lookup: the prefix ends here
                n, stopped = j, f"chunk {j} no longer in the store"
                break
            if rc != self.object_nbytes:
                raise StoreError(f"{op}: batch_get_into({keys[j]}) returned {rc}, expected {self.object_nbytes} "
                                 f"bytes; caches not written")
        for j in range(n):  # every header and checksum first: nothing is written unless all are right
            why = self._check_header(j, keys[j])
            if why:
                raise StoreError(f"{op}: stored chunk {j} ({keys[j]}) does not match: {why}; caches not written")
        slots = slots_from_blocks(blocks, lay.block_size, n * ct)
        for j in range(n):
            _transfer(lay, self.kv_caches, self._chunk_tensor(j), slots[j * ct:(j + 1) * ct], "h2d",
                      self.scale_caches)
        if n:
            wait_ops()
        return {"tokens": n * ct, "chunks": n, "keys": keys[:n], "nbytes": n * self.object_nbytes,
                "seconds": time.perf_counter() - t0, "stopped": stopped}

    def close(self):
        """Unregister the buffer and close the store client (its segment leaves the pool)."""
        store, self.store = getattr(self, "store", None), None
        if store is not None:
            try:
                store.unregister_buffer(self.staging.ptr)
            finally:
                store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
