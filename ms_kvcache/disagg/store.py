"""Prefix sharing through Mooncake Store: :class:`KVPrefixStore`.

LMCache-style: a sequence's KV is cut into chunks of ``chunk_tokens`` tokens; chunk ``i`` (full
chunks only) is stored under a key derived from a hash chain over the tokens,

    h_0 = sha256(salt || tokens[0:C]),   h_i = sha256(h_{i-1} || tokens[i*C:(i+1)*C]),
    key_i = "ms_kvcache/" + hex(h_i),

where ``salt = sha256(model_id, the KV layout identity, C, the object format)``, so equal keys mean the same model, the
same cache format / dtype / layers / heads / head size and the same token prefix; a second process with
the same model and the same prompt prefix computes the same keys and reloads those chunks instead of
recomputing them. Tokens are hashed as little-endian int64.

Each stored object is a 4 KiB header (magic ``MSKVCHNK`` + JSON: key, layout identity, model_id, token
count, byte count, checksum, content fingerprint) followed by the chunk's ``multi_layer_kv_transfer``
buffer (``[2, L, C, H*D]`` for MERGED / SEPARATE, the planes one after another for MLA / DSA). It is
written with ``put_from`` and read with ``batch_get_into`` from / into host memory registered with the
store (``register_buffer``), so Mooncake moves the bytes the transfer ops gather into / scatter from.

The content fingerprint chains the chunks of one writer: ``f_{-1} = salt``, ``f_i = sha256(f_{i-1} ||
checksum_i)`` over the writer's own bytes. Two writers whose KV of the same tokens differs write different
fingerprints, so a chunk of one never continues a prefix of the other: :meth:`KVPrefixStore.load` stops
there, and :meth:`KVPrefixStore.put` (which reads back the fingerprints of the chunks it finds or puts)
stops where the stored prefix is not its own. Mooncake's put of an existing key returns success without
storing anything, so that read-back is the only way a writer learns it.
"""
import hashlib
import json
import time

import numpy as np

from ms_kvcache.disagg import _net
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
_FORMAT = "chunk/2"  # part of the key salt: objects of another header format are never looked up
#: what some of Mooncake's ErrorCodes mean here (mooncake-store/include/types.h)
_CODES = {-200: "no space left in the store (NO_AVAILABLE_HANDLE)", -704: "not in the store (OBJECT_NOT_FOUND)",
          -800: "the transfer failed (TRANSFER_FAIL: the process holding it may be gone)",
          -705: "already stored (OBJECT_ALREADY_EXISTS)", -900: "the master did not answer (RPC_FAIL)",
          -901: "the master timed out (RPC_TIMEOUT)", -600: "invalid parameters (INVALID_PARAMS)",
          -1: "internal error"}


def _code(rc):
    return f"code {rc}: {_CODES.get(rc, 'see Mooncake ErrorCode')}"


def _fingerprint(prev, c_sum):
    return hashlib.sha256(prev + int(c_sum).to_bytes(8, "little")).digest()


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
        hostname (str): this client's IPv4 address or host name (default 127.0.0.1); protocol / device_name: Mooncake
            transport (``"tcp"``; ``"rdma"`` not verified here).
        global_segment_size (int): bytes of this process's memory it contributes to the store's pool
            (0: none, a client that only reads; Mooncake requires at least 16 MiB otherwise).
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
        self.salt = hashlib.sha256("\0".join((model_id, self.layout.identity(), str(self.chunk_tokens), _FORMAT)
                                             ).encode()).digest()
        self.chunk_nbytes = self.chunk_tokens * self.layout.bytes_per_token
        self.object_nbytes = HEADER_BYTES + self.chunk_nbytes
        host, _, port = str(master_address).rpartition(":")
        try:
            port = int(port)
        except ValueError:
            raise ValueError(f"{op}: argument 'master_address': expected 'host:port', got {master_address!r}") from None
        setup_timeout = _check_timeout(op, setup_timeout, "setup_timeout")
        _net.check_hostname(op, hostname)
        mod = import_store()
        if not wait_for_port(host, port, setup_timeout):
            raise PeerGone(f"{op}: no mooncake_master answers at {master_address} within {setup_timeout:g} s (start "
                           f"one, e.g. ms_kvcache.disagg.MooncakeMaster)")
        store = mod.MooncakeDistributedStore()
        before = _net.listening_sockets()
        with _net.confine_binds(hostname):
            rc = store.setup(hostname, "P2PHANDSHAKE", int(global_segment_size), int(local_buffer_size), protocol,
                             device_name, str(master_address))
        if rc != 0:
            raise StoreError(f"{op}: MooncakeDistributedStore.setup(master {master_address}) failed with {_code(rc)}")
        stray = _net.stray_listeners(hostname, before)
        if stray:
            store.close()
            raise StoreError(f"{op}: the Mooncake Store client listens on {stray}, not only on {hostname!r}; pass "
                             f"hostname='0.0.0.0' to accept every interface explicitly")
        self.store = store
        self.master_address = str(master_address)
        # max_chunks objects, then max_chunks headers read back from the store (put's fingerprint check)
        self.staging = HostStaging(self.max_chunks * (self.object_nbytes + HEADER_BYTES))
        self._heads = self.max_chunks * self.object_nbytes
        rc = self.store.register_buffer(self.staging.ptr, self.staging.nbytes)
        if rc != 0:
            self.store.close()
            self.store = None
            raise StoreError(f"{op}: register_buffer({self.staging.nbytes} bytes) failed with {_code(rc)}")

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

    def _header(self, key, c_sum, fingerprint):
        meta = {"key": key, "identity": self.layout.identity(), "model_id": self.model_id,
                "num_tokens": self.chunk_tokens, "nbytes": self.chunk_nbytes, "checksum_algo": CHECKSUM_ALGO,
                "checksum": c_sum, "fingerprint": fingerprint.hex()}
        raw = _MAGIC + json.dumps(meta, sort_keys=True).encode()
        if len(raw) > HEADER_BYTES:  # pragma: no cover - keys are short
            raise StoreError(f"chunk header of {len(raw)} bytes exceeds {HEADER_BYTES}")
        return raw

    def _parse_header(self, off, key):
        """``(meta, None)`` of the header at staging byte ``off`` (expected under ``key``), or ``(None, why)``."""
        head = bytes(self.staging.view(off, HEADER_BYTES))
        if not head.startswith(_MAGIC):
            return None, "no ms_kvcache chunk header"
        try:
            meta = json.loads(head[len(_MAGIC):].rstrip(b"\0").decode())
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            return None, f"unreadable header ({str(exc)[:100]})"
        if not isinstance(meta, dict):
            return None, "unreadable header (not an object)"
        want = {"key": key, "identity": self.layout.identity(), "model_id": self.model_id,
                "num_tokens": self.chunk_tokens, "nbytes": self.chunk_nbytes}
        bad = [f"{k}: {str(meta.get(k))[:100]!r} stored, {v!r} expected" for k, v in want.items() if meta.get(k) != v]
        if bad:
            return None, "; ".join(bad)
        return meta, None

    def _check_chunk(self, j, key, prev):
        """The fingerprint of the chunk staged in slot ``j`` if its header, checksum and fingerprint (which
        must continue ``prev``) are right: ``(fingerprint, None)``, else ``(None, why)``."""
        meta, why = self._parse_header(self._offset(j), key)
        if why:
            return None, why
        data = self.staging.view(self._offset(j) + HEADER_BYTES, self.chunk_nbytes)
        try:
            actual = checksum(data, meta.get("checksum_algo"))
        except ValueError as exc:
            return None, str(exc)
        if actual != meta.get("checksum"):
            return None, f"checksum {actual:#x} != {str(meta.get('checksum'))[:40]} in the header (corrupt data)"
        fp = _fingerprint(prev, actual)
        if meta.get("fingerprint") != fp.hex():
            return None, ("its content fingerprint does not continue the prefix loaded so far: another writer "
                          "stored different KV under the same keys")
        return fp, None

    def _chunk_tensor(self, j):
        return self.staging.chunk_tensor(self.layout, self._offset(j) + HEADER_BYTES, self.chunk_tokens)

    def _exist(self, keys):
        """``batch_is_exist`` codes of ``keys`` (1 present, 0 absent, < 0 error)."""
        return list(self.store.batch_is_exist(keys)) if keys else []

    def _stored_fingerprints(self, keys):
        """The fingerprint each of ``keys`` is stored with (bytes), or a reason string per key, reading only
        the headers (``get_into_ranges``: HEADER_BYTES each, into the header area of the staging buffer)."""
        out = []
        for g in range(0, len(keys), self.max_chunks):
            part = keys[g:g + self.max_chunks]
            offs = [self._heads + j * HEADER_BYTES for j in range(len(part))]
            self.staging.view(self._heads, len(part) * HEADER_BYTES)[:] = 0
            try:
                got = self.store.get_into_ranges([self.staging.ptr], [part], [[[o] for o in offs]],
                                                 [[[0] for _ in part]], [[[HEADER_BYTES] for _ in part]])
                codes = [r[0] for r in got[0]]
            except Exception as exc:  # noqa: BLE001 - an older Mooncake without ranges: whole objects
                raise StoreError(f"KVPrefixStore.put: reading the stored headers failed ({exc})") from None
            for k, o, rc in zip(part, offs, codes):
                if rc != HEADER_BYTES:
                    out.append(f"its header could not be read ({_code(rc)})")
                    continue
                meta, why = self._parse_header(o, k)
                fp = meta.get("fingerprint") if meta else None
                out.append(why or (bytes.fromhex(fp) if isinstance(fp, str) and len(fp) == 64 else
                                   "no content fingerprint in its header"))
        return out

    # ------------------------------------------------------------------ put / load
    def put(self, token_ids, block_ids):
        """Store the full chunks of a sequence's KV, in order, as far as they fit and are this writer's.

        Chunks already stored with this content are kept; the first chunk that cannot be put (store full,
        master gone) or that is stored with other content (another writer's KV under the same keys) ends
        the call: nothing after it is put, so the stored part is always a prefix. Chunks this call put
        beyond that point (a concurrent writer won a key meanwhile) are removed again.

        Args:
            token_ids (sequence of int): the sequence's tokens whose KV is in the caches (its prompt, or
                prompt + generated tokens); only whole chunks are stored.
            block_ids (sequence of int): the sequence's blocks in this process, in order (enough for
                ``len(token_ids)`` tokens).

        Returns:
            dict: ``tokens`` (leading tokens now in the store with this writer's content: a multiple of
            ``chunk_tokens``), ``chunks`` (full chunks of ``token_ids``), ``stored`` (put by this call),
            ``present`` (already stored with the same content), ``nbytes`` (bytes put), ``stopped`` (None
            when every chunk is in, else why not), ``seconds``.

        Raises:
            ValueError: bad ``token_ids`` / ``block_ids``.
            StoreError: the store client itself failed (the call could not even ask).
        """
        op = "KVPrefixStore.put"
        t0 = time.perf_counter()
        toks = _tokens(op, token_ids)
        lay = self.layout
        blocks = check_block_ids(op, block_ids, lay.num_blocks, distinct=True)
        if toks.size > blocks.size * lay.block_size:
            raise ValueError(f"{op}: argument 'block_ids': {blocks.size} blocks of {lay.block_size} hold fewer than "
                             f"the {toks.size} tokens given")
        self._need_open(op)
        keys = self.keys(toks)
        n, ct = len(keys), self.chunk_tokens
        found = self._exist(keys)
        slots = slots_from_blocks(blocks, lay.block_size, n * ct)
        prev, stored, present, ours, stop, stopped = self.salt, 0, 0, set(), n, None
        for g in range(0, n, self.max_chunks):
            group = list(range(g, min(n, g + self.max_chunks)))
            for j, i in enumerate(group):
                _transfer(lay, self.kv_caches, self._chunk_tensor(j), slots[i * ct:(i + 1) * ct], "d2h",
                          self.scale_caches)
            wait_ops()
            fps = []
            for j, i in enumerate(group):  # this writer's checksums, fingerprints and headers
                off = self._offset(j)
                c_sum = checksum(self.staging.view(off + HEADER_BYTES, self.chunk_nbytes))
                prev = _fingerprint(prev, c_sum)
                fps.append(prev)
                head = self._header(keys[i], c_sum, prev)
                hv = self.staging.view(off, HEADER_BYTES)
                hv[:] = 0
                hv[:len(head)] = np.frombuffer(head, np.uint8)
            # chunks already stored must hold this content: the first that does not ends the prefix
            have = [i for i in group if found[i] == 1]
            for i, got in zip(have, self._stored_fingerprints([keys[i] for i in have])):
                if got != fps[i - g]:
                    stop, stopped = i, f"chunk {i}: " + (got if isinstance(got, str) else
                                                          "it is stored with other content (another writer's KV "
                                                          "under the same keys)")
                    break
            mine = []
            for j, i in enumerate(group):
                if i >= stop:
                    break
                if found[i] == 1:
                    continue
                if found[i] < 0:
                    stop, stopped = i, f"chunk {i}: the store could not tell whether it holds it ({_code(found[i])})"
                    break
                rc = self.store.put_from(keys[i], self.staging.ptr + self._offset(j), self.object_nbytes)
                if rc != 0:
                    stop, stopped = i, f"chunk {i} could not be put ({_code(rc)})"
                    break
                mine.append(i)
            # a put of a key another writer stored meanwhile returns 0 without storing: read them back
            for i, got in zip(mine, self._stored_fingerprints([keys[i] for i in mine])):
                if got == fps[i - g]:
                    ours.add(i)  # stored with this writer's content: the only chunks this call may remove
                elif i < stop:
                    stop, stopped = i, f"chunk {i}: " + (got if isinstance(got, str) else
                                                          "another writer stored other content under its key "
                                                          "meanwhile")
            stored += sum(1 for i in mine if i < stop)
            present += sum(1 for i in have if i < stop)
            if stop < n:
                break
        # this writer's chunks put beyond the stop are unreachable: take them out again. Only those read back
        # with this writer's fingerprint (a key another writer won holds that writer's chunk), and with force:
        # the header read-back above holds a lease on them, which makes a plain remove fail (OBJECT_HAS_LEASE)
        extra = [keys[i] for i in sorted(ours) if i >= stop]
        if extra:
            try:
                self.store.batch_remove(extra, True)
            except Exception:  # noqa: BLE001 - best effort; they are never loaded (fingerprints)
                pass
        return {"tokens": stop * ct, "chunks": n, "stored": stored, "present": present,
                "nbytes": stored * self.object_nbytes, "stopped": stopped, "seconds": time.perf_counter() - t0}

    def load(self, token_ids, block_ids, *, max_tokens=None):
        """Reload the longest stored and verified prefix of ``token_ids`` into ``block_ids``.

        A chunk that is gone, unreadable (its writer's process died: Mooncake's TRANSFER_FAIL), corrupt
        (header or checksum) or written by another writer (its content fingerprint does not continue the
        chunks before it) ends the prefix; ``stopped`` says which and why. Only the verified prefix is
        written into the caches, after all of it verified.

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
            prefix"``, ``"max_tokens"``, ``"max_chunks"``, or ``"chunk j ..."`` with the reason).

        Raises:
            ValueError: bad ``token_ids`` / ``block_ids`` (too few blocks for the prefix found).
            StoreError: the store client itself failed (closed).
        """
        op = "KVPrefixStore.load"
        t0 = time.perf_counter()
        toks = _tokens(op, token_ids)
        lay = self.layout
        blocks = check_block_ids(op, block_ids, lay.num_blocks, distinct=True)
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
                raise ValueError(f"{op}: argument 'max_tokens': expected an int >= 0 or None, got {max_tokens!r}")
        self._need_open(op)
        ct = self.chunk_tokens
        keys = self.keys(toks)
        n, stopped = 0, "end of stored prefix"
        for k, f in zip(keys, self._exist(keys)):
            if f != 1:
                if f < 0:
                    stopped = f"chunk {n}: the store could not tell whether it holds it ({_code(f)})"
                break
            n += 1
        if max_tokens is not None and n > max_tokens // ct:
            n, stopped = max_tokens // ct, "max_tokens"
        if n > self.max_chunks:
            n, stopped = self.max_chunks, "max_chunks"
        if n * ct > blocks.size * lay.block_size:
            raise ValueError(f"{op}: argument 'block_ids': {blocks.size} blocks of {lay.block_size} cannot hold the "
                             f"{n * ct}-token prefix found")
        keys = keys[:n]
        got = self.store.batch_get_into(keys, [self.staging.ptr + self._offset(j) for j in range(n)],
                                        [self.object_nbytes] * n) if n else []
        nbytes = 0
        for j, rc in enumerate(got):  # the prefix ends at the first chunk that did not arrive whole
            if rc != self.object_nbytes:
                n, stopped = j, f"chunk {j} could not be read ({_code(rc) if rc < 0 else f'{rc} bytes'})"
                break
            nbytes += rc
        prev = self.salt
        for j in range(n):  # every header, checksum and fingerprint first: nothing unverified is written
            prev, why = self._check_chunk(j, keys[j], prev)
            if why:
                n, stopped = j, f"chunk {j} does not match: {why}"
                break
        slots = slots_from_blocks(blocks, lay.block_size, n * ct)
        for j in range(n):
            _transfer(lay, self.kv_caches, self._chunk_tensor(j), slots[j * ct:(j + 1) * ct], "h2d",
                      self.scale_caches)
        if n:
            wait_ops()
        return {"tokens": n * ct, "chunks": n, "keys": keys[:n], "nbytes": nbytes,
                "seconds": time.perf_counter() - t0, "stopped": stopped}

    def _need_open(self, op):
        if getattr(self, "store", None) is None:
            raise StoreError(f"{op}: this KVPrefixStore is closed")

    def close(self):
        """Unregister the buffer and close the store client (its segment leaves the pool)."""
        store, self.store = getattr(self, "store", None), None
        if store is not None:
            try:
                store.unregister_buffer(self.staging.ptr)
            finally:
                store.close()
                self.staging.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
