"""Hand a sequence's KV cache from one process to another: :class:`KVSender` and :class:`KVReceiver`.

The prefill side puts every layer's KV of the sequence, token-major (the buffers of
:func:`ms_kvcache.multi_layer_kv_transfer`), into the receiver's registered host memory with the
Mooncake transfer engine: on the cpu backend Mooncake reads it straight from the cache rows (the
caches' memory registered with the engine, one write per run of consecutive slots of a plane and layer:
:mod:`ms_kvcache.disagg._direct`); elsewhere (sim / ascend backends, BNSD caches, ``direct=False``) it is
gathered first into registered host memory with ``multi_layer_kv_transfer`` (``direction="d2h"``). The
decode side checks it and scatters it into its own free blocks with the same op (``direction="h2d"``).
Protocol (one session per sequence; JSON messages on the ZeroMQ control channel,
:mod:`ms_kvcache.disagg._channel`):

1. sender -> receiver ``offer``: protocol version, the sender's :class:`KVLayout` (format, dtype, cache
   layout, layers, heads and head size per plane), ``num_tokens``, ``nbytes``, ``chunk_tokens`` and the
   token count of every chunk (``chunks``; by default ramped: small chunks first and last), the sender's
   block ids and block size, ``request_id``, ``model_id``, checksum algorithm;
2. receiver: checks all of it against its caches, its buffer and the block ids its caller gave, then
   ``accept`` (its transfer-engine address, buffer address and size) or ``reject`` (every mismatch
   named); both sides raise :class:`MetadataMismatch` on a reject;
3. sender, per token chunk: asynchronous Mooncake writes of the chunk's bytes to their offsets in the
   receiver's buffer (from the cache rows, or from its own buffer after the d2h), the chunk's checksum
   (streamed over the same bytes while Mooncake reads them); once Mooncake reports every write of a
   chunk done, a ``chunk`` message with its checksum (the receiver verifies it while later chunks are
   still moving: at most :data:`~ms_kvcache.disagg._direct.WINDOW_BYTES` are in flight, so the chunks
   complete in order); then ``done``. Whichever path the sender takes, the bytes in the receiver's buffer
   are the same;
4. receiver: every chunk verified, then the h2d into the given blocks, then ``loaded`` (or ``error``).

Every message carries ``seq`` (increasing with every message one end sends); the ``accept`` carries a
fresh ``nonce`` that every later message of the sender repeats. The receiver drops (and answers) a
message of the session it serves whose ``seq`` is not above the last one or whose ``nonce`` is not its
accept's, so a replayed message (also a whole replayed session) loads nothing; with ``token`` all of it is
signed (:mod:`ms_kvcache.disagg._channel`).

The receiver's caches are written only in step 4, after every byte has arrived and matched its checksum
and the block ids have been checked, so a failure at any earlier point (peer gone, layout or size
mismatch, checksum mismatch, timeout) leaves them untouched. Every wait has a deadline (``timeout``
seconds for the whole call). Neither class is thread-safe; call each from one thread, as MindSpore's
PyNative ops want anyway.
"""
import secrets
import time
import uuid
from collections import OrderedDict, deque

import numpy as np

from ms_kvcache.disagg import _net
from ms_kvcache.disagg._channel import MAX_CHUNKS, MAX_TEXT, PROTOCOL, ControlClient, ControlServer, check_token
from ms_kvcache.disagg._direct import DIRECT_MIN_BYTES, MAX_INFLIGHT, SPAN_BYTES, WINDOW_BYTES, direct_rows
from ms_kvcache.disagg._errors import (AuthenticationFailed, ChecksumMismatch, DisaggError, HandoffTimeout,
                                       MetadataMismatch, PeerGone)
from ms_kvcache.disagg._layout import (CHECKSUM_ALGO, ChecksumStream, HostStaging, KVLayout, check_block_ids, checksum,
                                       chunk_plan, plan_from_sizes, ramp_chunk_sizes, slots_from_blocks, wait_ops)
from ms_kvcache.disagg._mooncake import LOOPBACK, TransferEngineHandle

__all__ = ["KVSender", "KVReceiver", "PROTOCOL"]

_POLL_SLEEP = 1e-4  # seconds between polls of an in-flight Mooncake write
#: ... while more than _BUSY writes are in flight (the wire has work queued for longer than this: fewer
#: wake-ups, less CPU taken from the transfer on a small machine)
_WINDOW_SLEEP, _BUSY = 2e-3, 16


def _transfer(layout, kv_caches, buffer, slots, direction, scale_caches=None):
    import ms_kvcache
    from mindspore import Tensor

    kw = {"scale_caches": scale_caches} if scale_caches is not None else {}
    ms_kvcache.multi_layer_kv_transfer(buffer, kv_caches, Tensor(np.ascontiguousarray(slots, np.int64)),
                                       kv_format=layout.kv_format, direction=direction,
                                       cache_layout=layout.cache_layout, **kw)


class _ChunkOps:
    """The receiver's ``multi_layer_kv_transfer`` calls of one :meth:`KVReceiver.receive`: the first call
    of each direction goes through the public op (every argument check: dtypes, shapes, contiguity,
    caches disjoint from each other and from the buffer, slots in range and distinct); the later ones
    (same caches, chunks of the receiver's own staging / undo buffers, slots of the same checked block
    ids) launch the op's kernel directly on the PyNative fast path (the strict kernel still checks every
    slot it reads). That saves ~0.4 ms of Python checks of 64+ tensors per chunk (measured here for
    Llama-3-8B's 64 caches). Without the fast path, and with scale caches, every call is the public op."""

    def __init__(self, layout, kv_caches, scale_caches=None):
        self.layout, self.kv_caches, self.scale_caches = layout, kv_caches, scale_caches
        self._launch = {}  # direction -> (launcher, flat caches), after the first checked call

    def __call__(self, buffer, slots, direction):
        entry = self._launch.get(direction)
        if entry is not None:
            from mindspore import Tensor

            launch, flat = entry
            launch(buffer, Tensor(np.ascontiguousarray(slots, np.int64)), *flat)
            return
        _transfer(self.layout, self.kv_caches, buffer, slots, direction, self.scale_caches)
        if self.scale_caches is None:
            self._launch[direction] = self._launcher(direction)

    def _launcher(self, direction):
        from ms_kvcache import get_backend
        from ms_kvcache._custom import eager_launcher, is_fast_launcher
        from ms_kvcache.ops import _multi_layer as ML
        from ms_kvcache.ops.multi_layer_kv_transfer import SPEC

        op = "multi_layer_kv_transfer"
        lay = self.layout
        fmt = ML.format_code(op, lay.kv_format)
        flat, num_layers = ML.flatten_eager(op, self.kv_caches, fmt)
        f = eager_launcher(SPEC, get_backend(), (fmt, direction, lay.cache_layout, num_layers, 0), (len(flat),))
        return (f, tuple(flat)) if is_fast_launcher(f) else None


_ERRORS = {c.__name__: c for c in (ChecksumMismatch, MetadataMismatch, HandoffTimeout, PeerGone, DisaggError,
                                    AuthenticationFailed)}
#: offers a receiver queues while it serves another (more are rejected: "busy")
MAX_BACKLOG = 64
#: ... and their bytes (as they arrived, JSON); an offer beyond is rejected as busy too
MAX_BACKLOG_BYTES = 16 << 20
#: finished sessions a receiver remembers (stray messages of one are dropped silently; older ones get an error)
MAX_DONE_SESSIONS = 4096


def _receiver_error(op, request_id, msg):
    """The sender's exception for an ``error`` message of the receiver (same class as the receiver's)."""
    cls = _ERRORS.get(msg.get("error"), DisaggError)
    return cls(f"{op}: request {request_id!r}: the receiver failed: {msg.get('reason')}")


class _OfferWithdrawn(Exception):
    """Internal: the sender of the offer being served withdrew it before the accept reached it."""


class _Writes:
    """The sender's Mooncake writes in flight (at most :data:`MAX_INFLIGHT` writes, and at most
    :data:`WINDOW_BYTES` bytes once two are in flight), polled in submission order, and the ``chunk``
    messages they complete: chunk ``c``'s message (with its checksum) goes once all its writes completed
    and every earlier chunk's message went.

    The byte window makes the chunks complete one after the other: with every write of a payload in
    flight, Mooncake's TCP transport shares the wire between all of them and the chunks all complete near
    the end, so the receiver could only verify (and load) them after the last byte; with a window shorter
    than a chunk each chunk completes, and is verified and (``stream=True``) loaded by the receiver,
    while the next ones move."""

    def __init__(self, op, request_id, engine, te_peer, client, session, plan, deadline, timeout, progress):
        self.op, self.request_id, self.engine, self.te_peer = op, request_id, engine, te_peer
        self.client, self.session, self.plan = client, session, plan
        self.deadline, self.timeout, self.progress = deadline, timeout, progress
        self.queue = deque()  # (chunk, batch id, bytes)
        self.left = [0] * len(plan)  # writes of each chunk not yet completed
        self.sums = [None] * len(plan)  # checksum of each chunk, once all its writes are submitted
        self.next = 0  # first chunk whose message has not gone
        self.count = 0  # writes submitted
        self.inflight = 0  # bytes of the writes in flight

    def submit(self, c, src, dst, nbytes):
        self.wait(MAX_INFLIGHT - 1, max_bytes=WINDOW_BYTES - nbytes)
        what = f"{self.op}: request {self.request_id!r}: chunk {c}"
        self.queue.append((c, self.engine.submit_write(self.te_peer, src, dst, nbytes, what=what), nbytes))
        self.left[c] += 1
        self.count += 1
        self.inflight += nbytes

    def close_chunk(self, c, value):
        """Every write of chunk ``c`` is submitted; ``value`` is its checksum."""
        self.sums[c] = value
        self.wait(len(self.queue), block=False)
        self.check_receiver()
        if time.monotonic() >= self.deadline:
            raise HandoffTimeout(f"{self.op}: request {self.request_id!r}: {c + 1} of {len(self.plan)} chunks started "
                                 f"within {self.timeout:g} s")

    def wait(self, max_len, block=True, max_bytes=None):
        """Reap completed writes (in order) until at most ``max_len`` writes are in flight and, when
        ``max_bytes`` is given and more than one write is, at most ``max_bytes`` bytes (``block=False``:
        only those already complete); bounded by the deadline."""
        eng = self.engine
        while self.queue:
            c, bid, n = self.queue[0]
            try:
                done = eng.poll(bid, what=f"{self.op}: request {self.request_id!r}: chunk {c}", peer=self.te_peer)
            except DisaggError:  # failed (Mooncake has freed the batch: never poll it again) or timed out
                self.queue.popleft()
                self.left[c] -= 1
                self.inflight -= n
                raise
            if not done:
                if not block or (len(self.queue) <= max_len and
                                 (max_bytes is None or len(self.queue) < 2 or self.inflight <= max_bytes)):
                    break
                if time.monotonic() >= self.deadline:
                    raise HandoffTimeout(f"{self.op}: request {self.request_id!r}: Mooncake had not finished writing "
                                         f"chunk {c} of {len(self.plan)} to {self.te_peer} after {self.timeout:g} s")
                time.sleep(_WINDOW_SLEEP if len(self.queue) > _BUSY else _POLL_SLEEP)
                continue
            self.queue.popleft()
            self.left[c] -= 1
            self.inflight -= n
        while self.next < len(self.plan) and self.sums[self.next] is not None and not self.left[self.next]:
            c = self.next
            self.client.send({"type": "chunk", "session": self.session, "index": c, "checksum": self.sums[c]})
            self.next += 1
            if self.progress is not None:
                self.progress("chunk", {"index": c, "nbytes": self.plan[c][3]})

    def check_receiver(self):
        """An ``error`` from the receiver ends the send early."""
        msg = self.client.recv(time.monotonic())
        if msg is not None and msg.get("session") in (self.session, None) and msg.get("type") == "error":
            raise _receiver_error(self.op, self.request_id, msg)

    def drain_quietly(self, seconds=2.0):
        """After a failure: wait (at most ``seconds``, and not past the deadline) for the writes still
        reading the sender's memory, ignoring their outcome; returns the batch ids of those still in
        flight then (their buffers must not be released before they complete)."""
        end = min(time.monotonic() + seconds, max(self.deadline, time.monotonic()))
        while self.queue and time.monotonic() < end:
            if not _finished(self.engine, self.queue[0][1]):
                time.sleep(_POLL_SLEEP)
                continue
            self.queue.popleft()
        return [bid for _, bid, _ in self.queue]


def _finished(engine, bid):
    """True once Mooncake is done with batch ``bid`` (completed, failed or timed out: it reads no more)."""
    try:
        return engine.poll(bid)
    except DisaggError:
        return True


#: longest ``timeout`` a call takes, in seconds (~11.6 days; every wait polls ZeroMQ with it in milliseconds)
MAX_TIMEOUT = 1e6


def _check_timeout(op, timeout, name="timeout"):
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(f"{op}: argument '{name}': expected a number of seconds in (0, {MAX_TIMEOUT:g}], "
                         f"got {timeout!r}")
    return float(timeout)


def _check_text(op, name, value):
    """``value`` (str or None) as a message field takes it (at most :data:`MAX_TEXT` characters)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{op}: argument '{name}': expected a str or None, got {type(value).__name__}")
    if value is not None and len(value) > MAX_TEXT:
        raise ValueError(f"{op}: argument '{name}': expected at most {MAX_TEXT} characters, got {len(value)}")
    return value


def _check_model_id(op, model_id):
    return _check_text(op, "model_id", model_id)


def _check_hostname(op, hostname):
    return _net.check_hostname(op, hostname)


class _Endpoint:
    engine = staging = None

    def __init__(self, op, kv_caches, kv_format, cache_layout, hostname, protocol, device_name, model_id,
                 scale_caches=None, static_scales=False, token=None):
        self.layout = KVLayout.from_caches(kv_caches, kv_format, cache_layout, op=op, scale_caches=scale_caches,
                                           static_scales=static_scales)
        self.kv_caches = kv_caches
        self.scale_caches = scale_caches
        self.model_id = _check_model_id(op, model_id)
        self.hostname = _check_hostname(op, hostname)
        self.token = check_token(op, token)
        self.staging = None
        self.engine = None
        self._engine_args = (hostname, protocol, device_name)

    def _start_engine(self):
        self.engine = TransferEngineHandle(*self._engine_args)

    def _close(self):
        if self.staging is not None:
            self.staging.free()
            self.staging = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class KVReceiver(_Endpoint):
    """Decode side of a handoff: accepts a sequence's KV from a :class:`KVSender` into its own blocks.

    Args:
        kv_caches: this process's paged caches, as :func:`ms_kvcache.multi_layer_kv_transfer` takes them
            (one entry per layer: MERGED_KV the ``[2, nb, bs, H, D]`` tensor; SEPARATE_KV ``(key_cache,
            value_cache)``; MLA_KV ``(kv_c_cache, k_pe_cache)``; DSA_KV plus ``indexer_k_cache``; or a
            flat layer-major sequence). Written in place (h2d) by :meth:`receive` only. dtype float16,
            bfloat16, float32 or int8 (int8 needs ``scale_caches`` or ``static_scales``).
        kv_format (KVCacheFormat | int | str): their format.
        cache_layout (str): ``"BSND"`` (default) or ``"BNSD"`` (MERGED / SEPARATE only).
        max_tokens (int): most tokens one handoff may carry (sizes the registered host buffer:
            ``max_tokens * bytes_per_token`` bytes).
        hostname (str): this process's IPv4 address or host name (default ``"127.0.0.1"``); every socket listens
            there only (``"0.0.0.0"``: every interface, see docs/disagg.md). ``port`` (int): control port, 0 = a free one.
        token (str | bytes | None): shared secret: the control channel's CURVE handshake keys derive from it (a
            peer without it is dropped before it can send) and it signs every message (docs/disagg.md).
        protocol (str): Mooncake transport, ``"tcp"`` (default) or ``"rdma"`` (not verified here);
            device_name (str): RDMA devices for ``"rdma"``.
        model_id (str | None): if given, offers from a sender with another (non-None) model_id are
            rejected.
        scale_caches (sequence | None): int8 caches only: their float32 per-token scale caches (the
            dynamic quantizing writes', docs/quantization.md), as ``multi_layer_kv_transfer(...,
            scale_caches=...)`` takes them (per layer ``(k_scale_cache, v_scale_cache)`` ``[nb, bs, H]``;
            MLA / DSA ``[nb, bs, 1]`` per plane). They travel with the data and are written with it; both
            ends must have them.
        static_scales (bool): int8 caches only: True = their scales are static (per tensor / head /
            channel, the model's constants at both ends), so only the int8 bytes move. int8 caches need
            exactly one of ``scale_caches`` and ``static_scales=True``: without either the KV would arrive
            without the scales it was quantized with, so that is refused.

    Attributes:
        address (str): ``"host:port"`` to hand to :meth:`KVSender.send`.
        layout (KVLayout): the caches' layout.

    Raises:
        MooncakeUnavailable: Mooncake or pyzmq cannot be imported (or ``token`` without pyzmq's CURVE).
        TypeError / ValueError: caches or arguments as :func:`multi_layer_kv_transfer` would reject them,
            and caches that are not contiguous; ValueError: int8 caches with neither or both of
            ``scale_caches`` / ``static_scales=True``, or either of them with caches that are not int8.
        DisaggError: ``port`` in use (nothing is left open), or a listener not on ``hostname``.
    """

    server = None

    def __init__(self, kv_caches, kv_format, *, cache_layout="BSND", max_tokens, hostname=LOOPBACK, port=0,
                 protocol="tcp", device_name="", model_id=None, scale_caches=None, static_scales=False, token=None):
        op = "KVReceiver"
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1:
            raise ValueError(f"{op}: argument 'max_tokens': expected an int >= 1, got {max_tokens!r}")
        if isinstance(port, bool) or not isinstance(port, (int, np.integer)) or not 0 <= port < 65536:
            raise ValueError(f"{op}: argument 'port': expected an int in [0, 65535], got {port!r}")
        super().__init__(op, kv_caches, kv_format, cache_layout, hostname, protocol, device_name, model_id,
                         scale_caches, static_scales, token)
        self.max_tokens = int(max_tokens)
        self.server = ControlServer(hostname, int(port), self.token)  # first: a busy port costs nothing else
        try:
            self._start_engine()
            self.staging = HostStaging(self.max_tokens * self.layout.bytes_per_token, self.engine)
        except BaseException:
            self.close()
            raise
        self.address = self.server.address
        self._backlog = []  # [(peer, session, request_id, seq, raw offer)] in arrival order, at most MAX_BACKLOG
        self._backlog_bytes = 0  # of the raw offers, at most MAX_BACKLOG_BYTES
        self._done_sessions = OrderedDict()  # the last MAX_DONE_SESSIONS finished sessions
        self._undo = None  # host copy of overwritten rows (stream mode), allocated on first use

    # ------------------------------------------------------------------ messages
    def _finish(self, session):
        """Remember ``session`` as finished (bounded: the oldest are forgotten)."""
        self._done_sessions[session] = True
        self._done_sessions.move_to_end(session)
        while len(self._done_sessions) > MAX_DONE_SESSIONS:
            self._done_sessions.popitem(last=False)

    def _answer(self, peer, kind, session, reason, error):
        try:
            self.server.send(peer, {"type": kind, "session": session, "error": error, "reason": reason[:MAX_TEXT]})
        except DisaggError:
            pass

    def _file(self, item):
        """Sort an incoming message that is not part of the active session (every message here passed
        the channel's schema check). Queued offers are kept as the bytes that arrived (bounded by
        :data:`MAX_BACKLOG_BYTES`), decoded again when served."""
        peer, msg, raw = item
        kind, session = msg.get("type"), msg.get("session")
        if kind == "offer":
            if session in self._done_sessions or any(e[1] == session for e in self._backlog):
                self._answer(peer, "reject", session, f"receiver {self.address}: session {session!r} was already "
                                                      f"offered", "MetadataMismatch")
            elif len(self._backlog) >= MAX_BACKLOG or self._backlog_bytes + len(raw) > MAX_BACKLOG_BYTES:
                self._answer(peer, "reject", session, f"receiver {self.address} is busy: {len(self._backlog)} offers "
                                                      f"({self._backlog_bytes} bytes) queued, at most {MAX_BACKLOG} "
                                                      f"({MAX_BACKLOG_BYTES} bytes)", "HandoffTimeout")
            else:
                self._backlog.append((peer, session, msg.get("request_id"), msg["seq"], raw))
                self._backlog_bytes += len(raw)
        elif kind == "abort":  # withdraws a queued offer (sent after it, on its connection: a higher seq)
            self._backlog = [e for e in self._backlog if e[1] != session or e[0] != peer or msg["seq"] <= e[3]]
            self._backlog_bytes = sum(len(e[4]) for e in self._backlog)
        else:  # a chunk / done of no active session (unknown, or already finished): answered, then dropped
            self._answer(peer, "error", session, f"receiver {self.address} has no active session {session!r}",
                         "DisaggError")

    def _next_offer(self, request_id, deadline):
        while True:
            while True:  # everything already queued first: an abort may cancel an offer before it
                item = self.server.try_recv()
                if item is None:
                    break
                self._file(item)
            for i, (peer, _, rid, _, raw) in enumerate(self._backlog):
                if request_id is None or rid == request_id:
                    del self._backlog[i]
                    self._backlog_bytes -= len(raw)
                    return peer, self.server.decode(raw)
            item = self.server.recv(deadline)
            if item is None:
                return None
            self._file(item)

    def _offer_problems(self, offer, num_blocks_given):
        lay = self.layout
        bad = []
        if offer.get("protocol") != PROTOCOL:
            return [f"protocol: {PROTOCOL!r} here, {str(offer.get('protocol'))[:200]!r} there"]
        bad += lay.mismatches(offer.get("layout") or {})
        theirs = offer.get("model_id")
        if self.model_id is not None and theirs is not None and theirs != self.model_id:
            bad.append(f"model_id: {self.model_id!r} here, {theirs[:200]!r} there")
        t, nbytes, ct = offer.get("num_tokens"), offer.get("nbytes"), offer.get("chunk_tokens")
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            bad.append(f"num_tokens: expected an int >= 0, got {t!r}")
            return bad
        if not isinstance(ct, int) or isinstance(ct, bool) or ct < 1:
            bad.append(f"chunk_tokens: expected an int >= 1, got {ct!r}")
        sizes = offer.get("chunks")
        if sizes is not None and not (isinstance(sizes, list) and len(sizes) <= max(t, 1)
                                      and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes)
                                      and sum(sizes) == t):
            bad.append(f"chunks: expected a list of token counts >= 1 summing to num_tokens={t}, got "
                       f"{str(sizes)[:200]}")
        if bad:
            return bad
        n_chunks = len(sizes) if sizes is not None else -(-t // ct)
        if n_chunks > MAX_CHUNKS:
            bad.append(f"chunks: {n_chunks} chunks, at most {MAX_CHUNKS}")
        if nbytes != t * lay.bytes_per_token:
            bad.append(f"nbytes: {t} tokens x {lay.bytes_per_token} bytes per token = {t * lay.bytes_per_token} "
                       f"here, {nbytes!r} there")
        if t > self.max_tokens:
            bad.append(f"num_tokens: {t} exceeds this receiver's max_tokens={self.max_tokens} (buffer of "
                       f"{self.staging.nbytes} bytes)")
        if t > num_blocks_given * lay.block_size:
            bad.append(f"num_tokens: {t} tokens do not fit the {num_blocks_given} blocks given to receive() "
                       f"({num_blocks_given} x block_size {lay.block_size} = {num_blocks_given * lay.block_size} "
                       f"tokens)")
        algo = offer.get("checksum_algo")
        try:
            checksum(b"", algo)
        except ValueError:
            bad.append(f"checksum_algo: {algo!r} not available here")
        return bad

    # ------------------------------------------------------------------ the call
    def receive(self, block_ids, *, request_id=None, timeout=60.0, stream=False):
        """Wait for one sequence's KV and load it into ``block_ids`` of this process's caches.

        Args:
            block_ids (sequence of int): free blocks of this process for the sequence, in order (token
                ``t`` goes to slot ``block_ids[t // block_size] * block_size + t % block_size``); distinct,
                in ``[0, num_blocks)``, enough for the offered tokens. May differ from the sender's
                blocks, and the two ends may have different block sizes.
            request_id (str | None): take the offer with this request id (others stay queued); None =
                the oldest offer.
            timeout (float): seconds the whole call may take (waiting for an offer included), at most 1e6.
            stream (bool): False (default): the caches are written only once every chunk has arrived and
                matched its checksum. True: each chunk is scattered into its blocks as soon as it is
                verified, while later chunks are still moving, after the cache rows it overwrites have been
                saved to host memory; on any failure those rows are written back, so the caches end as
                they were. The h2d then overlaps the transfer, at the cost of one more copy per byte: on the
                2-core CPU machine of this project that extra copy competes with Mooncake for the cores and
                stream mode measured slower than the default.

        Returns:
            dict: ``request_id``, ``num_tokens``, ``nbytes``, ``chunks``, ``block_ids`` (the blocks
            written, as many as the tokens need), ``src_block_ids``, ``src_block_size``, ``model_id``,
            ``checksum_algo``, ``seconds`` (from the accept to the caches written), ``verify_seconds``
            and ``h2d_seconds``.

        Raises:
            ValueError: bad ``block_ids`` / ``timeout`` / ``request_id`` (before anything is received);
                TypeError: a ``request_id`` that is not a str.
            HandoffTimeout: no offer, no data or no ``done`` within ``timeout``; the sender may be gone.
            MetadataMismatch: the offer does not fit (layout, model_id, size, buffer, blocks); the sender
                was told why.
            ChecksumMismatch: bytes that arrived do not match the sender's checksum.
            PeerGone: the sender aborted (its reason in the message) or disconnected after the accept.
            DisaggError: a malformed message, or (unexpected) a transfer op failed while writing.
            In every case the caches end as they were before the call.

        An offer its sender withdrew (it timed out before this call's accept reached it, or closed its end
        first) moved no byte: the call drops it and waits for the next offer within the same ``timeout``.
        """
        op = "KVReceiver.receive"
        timeout = _check_timeout(op, timeout)
        _check_text(op, "request_id", request_id)
        deadline = time.monotonic() + timeout
        lay = self.layout
        blocks = check_block_ids(op, block_ids, lay.num_blocks, distinct=True)
        while True:
            got = self._next_offer(request_id, deadline)
            if got is None:
                which = f"for request {request_id!r} " if request_id is not None else ""
                raise HandoffTimeout(f"{op}: no offer {which}arrived at {self.address} within {timeout:g} s")
            try:
                return self._serve(op, got, blocks, deadline, timeout, stream)
            except _OfferWithdrawn:
                continue  # the sender gave up on that offer before it saw the accept: nothing moved, wait on

    def _serve(self, op, got, blocks, deadline, timeout, stream):
        """Accept the offer ``got`` = ``(peer, offer)`` and load its KV (the body of :meth:`receive`).
        Raises :class:`_OfferWithdrawn` when the sender withdrew the offer before any byte moved."""
        lay = self.layout
        peer, offer = got
        session = offer.get("session")
        rid = offer.get("request_id")
        problems = self._offer_problems(offer, blocks.size)
        if problems:
            reason = "; ".join(problems)[:MAX_TEXT]
            self._answer(peer, "reject", session, reason, "MetadataMismatch")
            self._finish(session)
            raise MetadataMismatch(f"{op}: rejected the offer of request {rid!r}: {reason}")
        t0 = time.perf_counter()
        T, ct, algo = offer["num_tokens"], offer["chunk_tokens"], offer["checksum_algo"]
        sizes = offer.get("chunks")
        plan = plan_from_sizes(sizes, lay.bytes_per_token) if sizes is not None else \
            chunk_plan(T, ct, lay.bytes_per_token)
        nonce = secrets.token_hex(16)  # every later message of this session must carry it
        last_seq = offer["seq"]
        try:
            self.server.send(peer, {"type": "accept", "session": session, "nonce": nonce,
                                    "te_peer": self.engine.address, "buffer_ptr": self.staging.ptr,
                                    "buffer_nbytes": self.staging.nbytes})
        except PeerGone:  # the sender closed its end before the accept: it no longer waits for this offer
            self._finish(session)
            raise _OfferWithdrawn() from None
        verified = [False] * len(plan)
        verify_s = h2d_s = 0.0
        slots = slots_from_blocks(blocks, lay.block_size, T)
        committed = []  # (t0, t1, byte offset) of the chunks already scattered into the caches
        ops = _ChunkOps(lay, self.kv_caches, self.scale_caches)
        nxt = 0  # first chunk not yet scattered
        if stream and (self._undo is None or self._undo.nbytes < self.staging.nbytes):
            self._undo = HostStaging(self.staging.nbytes)
        untouched = "caches restored to their previous contents" if stream else "caches not written"

        def commit():
            """Scatter the verified chunks from ``nxt`` on into the caches (stream mode: after saving the
            rows each overwrites). One op call per chunk: each chunk is its own transfer buffer."""
            nonlocal h2d_s, nxt
            while nxt < len(plan) and verified[nxt]:
                ts = time.perf_counter()
                a, b, off, _nb = plan[nxt]
                if stream:
                    ops(self._undo.chunk_tensor(lay, off, b - a), slots[a:b], "d2h")
                committed.append((a, b, off))
                nxt += 1
                ops(self.staging.chunk_tensor(lay, off, b - a), slots[a:b], "h2d")
                h2d_s += time.perf_counter() - ts

        def fail(exc, tell=True):
            self._finish(session)
            if committed and stream:
                for a, b, off in committed:
                    ops(self._undo.chunk_tensor(lay, off, b - a), slots[a:b], "h2d")
                wait_ops()
            if tell:
                try:
                    self.server.send(peer, {"type": "error", "session": session, "reason": str(exc),
                                            "error": type(exc).__name__})
                except PeerGone:
                    pass
            raise exc

        def verify(c, expected):
            nonlocal verify_s
            if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c < len(plan) or verified[c]:
                fail(DisaggError(f"{op}: request {rid!r}: chunk index {c!r} outside [0, {len(plan)}) or repeated; "
                                 f"{untouched}"))
            ts = time.perf_counter()
            _, _, off, nb = plan[c]
            actual = checksum(self.staging.view(off, nb), algo)
            verify_s += time.perf_counter() - ts
            if actual != expected:
                exp = f"{expected:#x}" if isinstance(expected, int) else repr(expected)
                fail(ChecksumMismatch(f"{op}: request {rid!r}: checksum mismatch in chunk {c} ({nb} bytes at offset "
                                      f"{off}): {algo} {actual:#x} here, {exp} computed by the sender; {untouched}"))
            verified[c] = True

        try:
            while True:
                item = self.server.recv(deadline)
                if item is None:
                    fail(HandoffTimeout(f"{op}: request {rid!r}: the sender went silent; {sum(verified)} of "
                                        f"{len(plan)} chunks arrived within {timeout:g} s (sender gone or stalled); "
                                        f"{untouched}"))
                p, msg, _ = item
                if msg.get("session") != session:
                    self._file(item)
                    continue
                kind = msg.get("type")
                # the session's messages come from the connection of its offer, in order, with the accept's
                # nonce (an abort marked withdrawn has none: its sender gave up before it saw the accept)
                unbound = kind == "abort" and msg.get("withdrawn") and msg.get("nonce") is None
                if p != peer or msg["seq"] <= last_seq or (msg.get("nonce") != nonce and not unbound):
                    self.server.refused += 1
                    self._answer(p, "error", session, f"receiver {self.address}: a '{kind}' of session {session!r} "
                                                      f"refused: replayed, or not bound to this session's "
                                                      f"connection and accept (seq {msg['seq']} after {last_seq}, "
                                                      f"or another connection or nonce)", "DisaggError")
                    continue
                last_seq = msg["seq"]
                if kind == "chunk":
                    verify(msg.get("index"), msg.get("checksum"))
                    if stream and not self.server.pending():  # load what verified while no message waits
                        commit()
                elif kind == "abort" and msg.get("withdrawn") and not any(verified):
                    # the sender timed out before our accept reached it: it sent nothing and never will
                    self._finish(session)
                    raise _OfferWithdrawn()
                elif kind == "abort":
                    fail(PeerGone(f"{op}: request {rid!r}: the sender aborted: {msg.get('reason')}; {untouched}"),
                         tell=False)
                elif kind == "done":
                    t_done = time.perf_counter()
                    sums = msg.get("checksums")
                    if not isinstance(sums, list) or len(sums) != len(plan):
                        fail(DisaggError(f"{op}: request {rid!r}: 'done' carries {sums!r}, expected {len(plan)} "
                                         f"checksums; {untouched}"))
                    for c, ok in enumerate(verified):
                        if not ok:
                            verify(c, sums[c])
                    break
            commit()  # default mode: every byte is here and matches, now (and only now) write the caches
            ts = time.perf_counter()
            wait_ops()
            h2d_s += time.perf_counter() - ts
        except (DisaggError, _OfferWithdrawn):
            raise
        except Exception as exc:  # an op failed while writing: put back what was written (stream mode)
            fail(DisaggError(f"{op}: request {rid!r}: writing the caches failed: {type(exc).__name__}: {exc}"))
        except BaseException as exc:  # KeyboardInterrupt...: the same, then let it through
            fail(exc)
        t_end = time.perf_counter()
        used = int(-(-T // lay.block_size)) if T else 0
        self._finish(session)
        try:
            self.server.send(peer, {"type": "loaded", "session": session, "block_ids": blocks[:used].tolist()})
        except PeerGone:
            pass  # loaded all the same; the sender will time out on its side
        return {"request_id": rid, "num_tokens": T, "nbytes": T * lay.bytes_per_token, "chunks": len(plan),
                "block_ids": blocks[:used].tolist(), "src_block_ids": offer.get("src_block_ids"),
                "src_block_size": offer.get("src_block_size"), "model_id": offer.get("model_id"),
                "checksum_algo": algo, "seconds": t_end - t0, "verify_seconds": verify_s, "h2d_seconds": h2d_s,
                "t_until_done": t_done - t0, "t_after_done": t_end - t_done,
                "stream": bool(stream)}

    def close(self):
        """Stop listening and release the registered buffer."""
        if getattr(self, "server", None) is not None:
            self.server.close()
            self.server = None
        self._close()


class KVSender(_Endpoint):
    """Prefill side of a handoff: sends a sequence's KV of every layer to a :class:`KVReceiver`.

    Args:
        kv_caches, kv_format, cache_layout, scale_caches, static_scales: this process's caches (and for
            int8 caches their scales), as for :class:`KVReceiver` (only read). With ``scale_caches`` the
            sender gathers (the direct path does not carry scale rows).
        hostname, protocol, device_name, token: as for :class:`KVReceiver` (the transfer engine of this
            process; the receiver's token).
        chunk_tokens (int | None): tokens per pipelined chunk (gather, checksum and Mooncake write of
            chunk ``c + 1`` overlap the write of chunk ``c``); None = about 32 MiB per chunk, ramped (on
            the direct path counted in whole blocks of this sender, so no chunk border cuts a block).
        ramp (bool | None): cut the payload into chunks of ``chunk_tokens`` with smaller ones at both ends
            (``/8, /4, /2`` first, ``/4, /8`` last: the first write starts after a short gather, little is
            left to check and load after the last byte); None (default) = ramp only when ``chunk_tokens``
            is None. The chunk sizes travel in the offer, so the receiver needs no setting.
        model_id (str | None): sent in the offer (a receiver with another model_id rejects it).
        max_tokens (int): initial size of the registered host buffer in tokens. It grows on demand,
            by at least a quarter each time, and a buffer it outgrew is released as soon as no write of an
            earlier send can still read it: the buffers stay within ~1.25x the largest payload.
        direct (bool | None): let Mooncake read the KV straight from the cache rows, without the gather
            into the registered buffer (:mod:`ms_kvcache.disagg._direct`: the caches' memory is registered
            with the transfer engine, one write per run of consecutive slots of a plane and layer, pieces
            under 256 KiB copied into the buffer and written together). None (default): wherever it works,
            i.e. on the cpu backend with BSND (or MLA / DSA) contiguous caches; the gather otherwise (the
            sim and ascend backends, BNSD caches, int8 caches with ``scale_caches``). True: require it
            (ValueError where it does not work);
            False: always gather. The receiver cannot tell the difference: the bytes and the protocol are
            the same.

    Attributes:
        path (str): ``"direct"`` or ``"gather"``, what :meth:`send` does; ``direct_reason`` (str) says why
            not direct (``""`` when direct).

    Raises:
        MooncakeUnavailable, TypeError, ValueError: as :class:`KVReceiver`.
    """

    def __init__(self, kv_caches, kv_format, *, cache_layout="BSND", hostname=LOOPBACK, protocol="tcp",
                 device_name="", chunk_tokens=None, model_id=None, max_tokens=0, ramp=None, direct=None,
                 scale_caches=None, static_scales=False, token=None):
        op = "KVSender"
        if direct not in (None, True, False):
            raise ValueError(f"{op}: argument 'direct': expected None, True or False, got {direct!r}")
        super().__init__(op, kv_caches, kv_format, cache_layout, hostname, protocol, device_name, model_id,
                         scale_caches, static_scales, token)
        self._retired = []  # [HostStaging] outgrown, released once no write reads them
        self._inflight = []  # batch ids of writes a failed send left in flight (reading caches / buffers)
        self._cache_regions = {}
        self._peers = set()  # transfer-engine addresses of the receivers this engine has written to
        self._start_engine()
        if direct is False:
            self._rows, self.direct_reason = None, "direct=False"
        elif scale_caches is not None:
            self._rows, self.direct_reason = None, "scale caches (the direct path moves the data rows only)"
        else:
            self._rows, self.direct_reason = direct_rows(self.layout, kv_caches)
        if direct and self._rows is None:
            self.close()
            raise ValueError(f"{op}: argument 'direct': expected caches Mooncake can read directly (cpu backend, "
                             f"BSND, contiguous), got {self.direct_reason}")
        self.path = "direct" if self._rows is not None else "gather"
        self.direct_min_bytes = DIRECT_MIN_BYTES  # pieces below it are copied into the buffer (tests: 0)
        self._ramp = chunk_tokens is None if ramp is None else bool(ramp)
        self._default_chunks = chunk_tokens is None and ramp is None
        if chunk_tokens is None:
            chunk_tokens = self.layout.default_chunk_tokens()
        if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, (int, np.integer)) or chunk_tokens < 1:
            raise ValueError(f"{op}: argument 'chunk_tokens': expected an int >= 1 or None, got {chunk_tokens!r}")
        self.chunk_tokens = int(chunk_tokens)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
            raise ValueError(f"{op}: argument 'max_tokens': expected an int >= 0, got {max_tokens!r}")
        if max_tokens:
            self._reserve(int(max_tokens) * self.layout.bytes_per_token)
        self._fault = None  # testing only: "corrupt" / ("corrupt", c) flips a byte of chunk 0 / c after its checksum

    #: growth of the staging buffer: at least this fraction of its size each time it grows
    GROWTH = 0.25

    def _reap(self):
        """Forget the writes of failed sends that have finished; once none is left, release the
        outgrown buffers (nothing can read them any more)."""
        while self._inflight and _finished(self.engine, self._inflight[0]):
            self._inflight.pop(0)
        if not self._inflight:
            for st in self._retired:
                st.free()
            self._retired = []

    def _reserve(self, nbytes):
        """A staging buffer of at least ``nbytes`` (the outgrown one released, or retired while a write of a
        failed send may still read it)."""
        self._reap()
        if self.staging is not None and self.staging.nbytes >= nbytes:
            return
        size = nbytes
        if self.staging is not None:
            size = max(nbytes, int(self.staging.nbytes * (1 + self.GROWTH)))
            old, self.staging = self.staging, None
            if self._inflight:
                self._retired.append(old)
            else:
                old.free()  # before the new one: the two never coexist
        page = 4096
        self.staging = HostStaging(-(-size // page) * page, self.engine)

    #: receivers one transfer engine writes to before it is renewed (Mooncake keeps up to 4 connections
    #: per peer for the engine's life, also to receivers that are gone)
    MAX_PEERS = 8

    def _renew_engine(self):
        """After a receiver vanished mid-transfer: a fresh transfer engine, once no write of the old one
        can still read this process's memory. Mooncake keeps its connections to a peer (up to 4) until
        the engine goes, so a sender whose receivers keep dying would otherwise hold more and more file
        descriptors. Nobody connects to a sender's engine, so its address may change."""
        self._reap()
        if self._inflight:
            return  # a write may still read through the old engine: keep it (its connections too)
        old = self.engine
        try:
            self.engine = TransferEngineHandle(*self._engine_args)
        except DisaggError:
            self.engine = old
            return
        if self.staging is not None:
            self.staging.close()
            self.staging.engine = self.engine
            self.engine.register(self.staging.ptr, self.staging.nbytes)
        self._cache_regions = {}  # registered again with the new engine at the next direct send
        self._peers = set()
        old.close()

    @property
    def staged_capacity(self):
        """Bytes of registered staging memory this sender holds (its buffer and outgrown ones not yet released)."""
        return sum(st.nbytes for st in ([self.staging] if self.staging is not None else []) + self._retired)

    def send(self, peer, block_ids, num_tokens, *, request_id=None, timeout=60.0, progress=None):
        """Send the first ``num_tokens`` tokens of the sequence stored in ``block_ids`` to ``peer``.

        Args:
            peer (str): the receiver's ``address`` (``"host:port"``).
            block_ids (sequence of int): the sequence's blocks in this process, in order.
            num_tokens (int): tokens to send (>= 0; ``len(block_ids) * block_size >= num_tokens``).
            request_id (str | None): names the sequence for the receiver (default: a new uuid); at most 4096
                characters.
            timeout (float): seconds the whole call may take, at most 1e6.
            progress (callable | None): ``progress(event, info)`` with events ``"accepted"`` (info: the
                receiver's accept message), ``"chunk"`` (info: ``{"index", "nbytes"}``, after Mooncake wrote
                it) and ``"done"``; an exception it raises aborts the send.

        Returns:
            dict: ``request_id``, ``num_tokens``, ``nbytes``, ``chunks``, ``peer_block_ids`` (the blocks
            the receiver wrote), ``seconds`` (offer to ``loaded``), ``d2h_seconds`` (the gather; on the
            direct path the copies of small pieces), ``checksum_seconds``, ``path`` (``"direct"`` /
            ``"gather"``), ``requests`` (Mooncake writes), ``staged_bytes`` (bytes copied into the
            registered buffer: all of them when gathering).

        Raises:
            ValueError: bad ``block_ids`` / ``num_tokens`` / ``timeout`` / ``request_id``, or more than 131072
                chunks; TypeError: a ``request_id`` that is not a str.
            PeerGone: no receiver at ``peer``, or it went away / Mooncake failed during the transfer.
            AuthenticationFailed: the control channel's handshake failed (another ``token`` at ``peer``).
            HandoffTimeout: no accept, completion or ``loaded`` within ``timeout``.
            MetadataMismatch: the receiver rejected the offer (its reasons in the message).
            ChecksumMismatch / DisaggError: the receiver found corrupt data or failed otherwise.
            On every failure after the accept the receiver is told to abort; its caches stay untouched.
        """
        op = "KVSender.send"
        timeout = _check_timeout(op, timeout)
        _check_text(op, "request_id", request_id)
        deadline = time.monotonic() + timeout
        lay = self.layout
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, (int, np.integer)) or num_tokens < 0:
            raise ValueError(f"{op}: argument 'num_tokens': expected an int >= 0, got {num_tokens!r}")
        T = int(num_tokens)
        blocks = check_block_ids(op, block_ids, lay.num_blocks, distinct=True)
        if T > blocks.size * lay.block_size:
            raise ValueError(f"{op}: argument 'num_tokens': expected <= len(block_ids) * block_size = "
                             f"{blocks.size * lay.block_size}, got {T}")
        if request_id is None:
            request_id = uuid.uuid4().hex
        nbytes = T * lay.bytes_per_token
        sizes = self.chunk_sizes(T)
        if len(sizes) > MAX_CHUNKS:
            raise ValueError(f"{op}: argument 'num_tokens': {T} tokens make {len(sizes)} chunks of at most "
                             f"chunk_tokens={self.chunk_tokens}, expected at most {MAX_CHUNKS} chunks (a larger "
                             f"chunk_tokens)")
        self._reserve(nbytes)
        session = uuid.uuid4().hex
        t0 = time.perf_counter()
        # a ZeroMQ context per send: closing it flushes the last message (an abort) before send() returns
        client = ControlClient(peer, op=op, probe_timeout=min(2.0, timeout), token=self.token, session=session)
        t_conn = time.perf_counter()
        try:
            client.send({"type": "offer", "protocol": PROTOCOL, "session": session, "request_id": request_id,
                         "layout": lay.describe(), "model_id": self.model_id, "num_tokens": T, "nbytes": nbytes,
                         "chunk_tokens": self.chunk_tokens, "chunks": sizes, "src_block_ids": blocks.tolist(),
                         "src_block_size": lay.block_size, "checksum_algo": CHECKSUM_ALGO})
            try:
                reply = client.recv(deadline)
            except DisaggError:  # a reply this sender refuses (unsigned, malformed): no byte has moved
                self._abort(client, session, "the sender refused the receiver's answer", withdrawn=True)
                raise
            if reply is None:
                self._abort(client, session, "the sender timed out waiting for an accept", withdrawn=True)
                raise HandoffTimeout(f"{op}: request {request_id!r}: the receiver at {client.address} did not answer "
                                     f"the offer within {timeout:g} s (not calling receive(), busy, or gone)")
            if reply.get("type") == "reject":
                cls = _ERRORS.get(reply.get("error"), MetadataMismatch)
                cls = cls if cls in (AuthenticationFailed, HandoffTimeout) else MetadataMismatch
                raise cls(f"{op}: request {request_id!r}: the receiver rejected the offer: {reply.get('reason')}")
            if reply.get("type") != "accept":
                raise DisaggError(f"{op}: request {request_id!r}: unexpected answer to the offer: {reply}")
            t_acc = time.perf_counter()
            try:
                te_peer, dst, cap = reply["te_peer"], int(reply["buffer_ptr"]), int(reply["buffer_nbytes"])
            except (KeyError, TypeError, ValueError):
                self._abort(client, session, "malformed accept")
                raise DisaggError(f"{op}: request {request_id!r}: malformed accept {reply}") from None
            if cap < nbytes:
                self._abort(client, session, f"buffer of {cap} bytes < {nbytes}")
                raise MetadataMismatch(f"{op}: request {request_id!r}: the receiver's buffer holds {cap} bytes, the "
                                       f"payload is {nbytes}")
            if te_peer not in self._peers:
                if len(self._peers) >= self.MAX_PEERS:
                    self._renew_engine()  # drops the connections to the receivers of before (some may be gone)
                self._peers.add(te_peer)
            try:
                if progress is not None:
                    progress("accepted", reply)
                stats = self._pipeline(op, request_id, client, session, te_peer, dst, blocks, T, sizes, deadline,
                                       timeout, progress)
            except BaseException as exc:
                self._abort(client, session, f"{type(exc).__name__}: {exc}")
                if isinstance(exc, (PeerGone, HandoffTimeout)):
                    self._renew_engine()
                raise
            t_pipe = time.perf_counter()
            client.send({"type": "done", "session": session, "checksums": stats["checksums"]})
            if progress is not None:
                progress("done", {})
            while True:
                reply = client.recv(deadline)
                if reply is None:
                    raise HandoffTimeout(f"{op}: request {request_id!r}: the receiver did not confirm the load within "
                                         f"{timeout:g} s (gone or stalled)")
                if reply.get("session") not in (session, None):
                    continue
                if reply.get("type") == "loaded":
                    break
                raise _receiver_error(op, request_id, reply)
            t_loaded = time.perf_counter()
        finally:
            client.close()
        return {"request_id": request_id, "num_tokens": T, "nbytes": nbytes, "chunks": len(stats["checksums"]),
                "peer_block_ids": reply.get("block_ids"), "seconds": time.perf_counter() - t0,
                "d2h_seconds": stats["d2h_seconds"], "checksum_seconds": stats["checksum_seconds"],
                "path": stats["path"], "requests": stats["requests"], "staged_bytes": stats["staged_bytes"],
                "t_connect": t_conn - t0, "t_accept": t_acc - t_conn, "t_pipeline": t_pipe - t_acc,
                "t_drain": stats["drain_seconds"], "t_loaded": t_loaded - t_pipe,
                "t_close": time.perf_counter() - t_loaded}

    @staticmethod
    def _abort(client, session, reason, withdrawn=False):
        """Tell the receiver this session ends. ``withdrawn``: no accept was seen and no byte was sent, so a
        receiver that accepted the offer meanwhile goes back to waiting for another offer."""
        msg = {"type": "abort", "session": session, "reason": reason}
        if withdrawn:
            msg["withdrawn"] = True
        try:
            client.send(msg)
        except DisaggError:
            pass

    def chunk_sizes(self, num_tokens):
        """Token counts of the chunks a send of ``num_tokens`` tokens is cut into.

        ``chunk_tokens`` each when it was given; by default ~32 MiB chunks with a ramp of smaller ones at both
        ends (:func:`ms_kvcache.disagg._layout.ramp_chunk_sizes`), so the first write starts after a short gather
        and little is left to check and load after the last byte. On the direct path the default ramp is counted
        in blocks of ``block_size`` tokens (every chunk but the last a whole number of blocks), so no run of cache
        rows is cut into pieces too small to write directly.

        Args:
            num_tokens (int): tokens of the send.

        Returns:
            list of int: the chunk sizes, summing to ``num_tokens``.
        """
        T = int(num_tokens)
        bs = self.layout.block_size
        if self._default_chunks and self._rows is not None and self.chunk_tokens >= bs and T > bs:
            # direct path: chunk borders on block borders, so no run of cache rows is cut into pieces
            # too small to send directly (the ramp counted in blocks; the last chunk ends at T)
            sizes = [n * bs for n in ramp_chunk_sizes(-(-T // bs), self.chunk_tokens // bs)]
            sizes[-1] -= sum(sizes) - T
            return sizes
        if self._ramp:
            return ramp_chunk_sizes(T, self.chunk_tokens)
        return [b - a for a, b, _, _ in chunk_plan(T, self.chunk_tokens, self.layout.bytes_per_token)]

    def _pipeline(self, op, request_id, client, session, te_peer, dst, blocks, T, sizes, deadline, timeout,
                  progress):
        """Send every chunk (gathered, or straight from the cache rows); returns the checksums and stage
        times."""
        lay = self.layout
        plan = plan_from_sizes(sizes, lay.bytes_per_token)
        slots = slots_from_blocks(blocks, lay.block_size, T)
        writes = _Writes(op, request_id, self.engine, te_peer, client, session, plan, deadline, timeout, progress)
        direct = self._rows is not None and T > 0
        try:
            if direct:
                stats = self._send_direct(writes, plan, slots, dst)
            else:
                stats = self._send_gathered(writes, plan, slots, dst)
            ts = time.perf_counter()
            writes.wait(0)
            writes.check_receiver()
        except BaseException:
            # wait (bounded) for the writes still reading the caches / buffer; any left are remembered, and
            # the buffer they read is not released before they finish
            self._inflight += writes.drain_quietly()
            raise
        stats.update({"checksums": writes.sums, "drain_seconds": time.perf_counter() - ts,
                      "path": "direct" if direct else "gather", "requests": writes.count})
        return stats

    def _send_gathered(self, writes, plan, slots, dst):
        """Per chunk: d2h into the staging buffer, one Mooncake write of it, its checksum meanwhile."""
        lay, st = self.layout, self.staging
        d2h_s = sum_s = 0.0
        for c, (a, b, off, nb) in enumerate(plan):
            ts = time.perf_counter()
            _transfer(lay, self.kv_caches, st.chunk_tensor(lay, off, b - a), slots[a:b], "d2h", self.scale_caches)
            wait_ops()
            tm = time.perf_counter()
            d2h_s += tm - ts
            view = st.view(off, nb)
            if self._fault is None:
                # Mooncake only reads the chunk: start its write first, checksum it while it moves
                writes.submit(c, st.ptr + off, dst + off, nb)
                value = checksum(view)
            else:
                value = checksum(view)
                if self._fault_chunk(c) and nb:
                    view[nb // 2] ^= 0x40  # after the checksum: what arrives no longer matches it
                writes.submit(c, st.ptr + off, dst + off, nb)
            sum_s += time.perf_counter() - tm
            writes.close_chunk(c, value)
        return {"d2h_seconds": d2h_s, "checksum_seconds": sum_s, "staged_bytes": sum(p[3] for p in plan)}

    def _send_direct(self, writes, plan, slots, dst):
        """Per chunk: one Mooncake write per run of cache rows (:mod:`ms_kvcache.disagg._direct`), the
        small pieces copied into the staging buffer and written together (a span of adjacent copies goes
        once it reaches :data:`SPAN_BYTES`, so its write overlaps the next copies), the checksum streamed
        over the pieces in payload order as they go (a copied piece hashed from the staging buffer while
        it is still in cache; a direct piece just before its write is submitted, which brings its rows
        into cache for Mooncake's send copy: 125 vs 140 ms of CPU for 128 MiB here)."""
        st = self.staging
        ts = time.perf_counter()
        wait_ops()  # the caches are read directly, not by an op queued after the ones writing them
        self._register_caches()
        copy_s, sum_s, staged = time.perf_counter() - ts, 0.0, 0
        clock = time.perf_counter
        for c, (a, b, off, nb) in enumerate(plan):
            fault = self._fault is not None and self._fault_chunk(c)
            pieces = self._rows.pieces(slots, a, b, off)
            h = ChecksumStream()
            span = None  # [start, end) of staged bytes not yet written
            for src, view, poff, n in pieces:
                if n >= self.direct_min_bytes and not fault:
                    if span is not None:
                        writes.submit(c, st.ptr + span[0], dst + span[0], span[1] - span[0])
                        span = None
                    tm = clock()
                    h.update(view)  # first: Mooncake's send copy then finds the rows in cache
                    sum_s += clock() - tm
                    writes.submit(c, src, dst + poff, n)
                    continue
                tc = clock()
                piece = st.array[poff:poff + n]
                np.copyto(piece, view)
                tm = clock()
                h.update(piece)
                sum_s += clock() - tm
                copy_s += tm - tc
                staged += n
                if span is not None and span[1] == poff:
                    span[1] += n
                else:
                    if span is not None:
                        writes.submit(c, st.ptr + span[0], dst + span[0], span[1] - span[0])
                    span = [poff, poff + n]
                if not fault and span[1] - span[0] >= SPAN_BYTES:
                    writes.submit(c, st.ptr + span[0], dst + span[0], span[1] - span[0])
                    span = None
            if fault:  # every piece of this chunk was staged: one span, changed after the checksum
                st.array[off + nb // 2] ^= 0x40
            if span is not None:
                writes.submit(c, st.ptr + span[0], dst + span[0], span[1] - span[0])
            writes.close_chunk(c, h.value())
        return {"d2h_seconds": copy_s, "checksum_seconds": sum_s, "staged_bytes": staged}

    def _fault_chunk(self, c):
        kind, at = self._fault if isinstance(self._fault, tuple) else (self._fault, 0)
        return kind == "corrupt" and c == at

    def _register_caches(self):
        """Register the caches' memory with the transfer engine (again where an address changed, e.g.
        after ``Parameter.set_data``); the old ranges are unregistered."""
        regions = dict(self._rows.refresh())
        for ptr in [p for p in self._cache_regions if self._cache_regions[p] != regions.get(p)]:
            self.engine.unregister(ptr)
            del self._cache_regions[ptr]
        for ptr, n in regions.items():
            if ptr not in self._cache_regions and n:
                self.engine.register(ptr, n)
                self._cache_regions[ptr] = n

    def close(self):
        """Release the registered buffers (and unregister the caches' memory)."""
        for st in getattr(self, "_retired", ()):
            st.free()
        self._retired = []
        self._inflight = []
        self._cache_regions = {}
        self._close()
