"""The control channel of a handoff: small JSON messages over ZeroMQ on TCP, every wait bounded.

As in vLLM's and SGLang's Mooncake connectors, the transfer engine moves the bytes and a ZeroMQ side
channel carries the metadata. The receiver binds a ROUTER socket (``ROUTER_MANDATORY``: a reply to a
sender that has gone raises instead of vanishing); each sender connects a DEALER socket. Messages are
one UTF-8 JSON object in one ZeroMQ frame (never pickle), at most :data:`MAX_MESSAGE` bytes.

What a peer can make the receiver hold is bounded where ZeroMQ allows it: a frame above
:data:`MAX_MESSAGE` drops the connection (``MAXMSGSIZE``), at most :data:`RCV_QUEUE` messages wait per
connection (``RCVHWM``), a message of more than one frame is read and dropped frame by frame, never
assembled. ZeroMQ bounds the size of a frame, not the number of frames of a message: until the receiver
reads it, a multipart message is held whole. With a shared ``token`` a peer must hold the token before
it can send anything: the receiver's socket is a CURVE server whose key pair is derived from the token
(:func:`curve_server_keys`); a sender derives the public key and connects with a fresh key pair of its
own, so a peer without the token fails the handshake and ZeroMQ closes the connection before any
message of it is queued (CurveZMQ also encrypts the channel). A sender sees a failed handshake on its
socket monitor and raises :class:`AuthenticationFailed`.

Every message is checked before use against :data:`SCHEMAS` (its type, every field's type and range,
string and list sizes): the receiver answers a malformed one (``reject`` for an offer, ``error``
otherwise, naming the problem) and drops it. Every message carries ``seq``, a counter that increases
with every message one end sends, and the sender's messages after the ``accept`` carry the ``nonce``
that accept gave (fresh per session). With a token every message also carries
``mac = HMAC-SHA256(token, PROTOCOL + NUL + the message as canonical JSON)``: a message without it or with
a wrong one is refused the same way (``AuthenticationFailed``) before anything else looks at it. The
session id, the counter and the nonce are signed with the rest, so a captured message cannot be replayed
into another session (its session or nonce differs) or into its own (its ``seq`` is not above the last
one): :class:`ControlClient` drops such replies, the receiver (:mod:`ms_kvcache.disagg.handoff`) such
requests. Mooncake's data path has no authentication of its own (bind to a trusted interface).
"""
import hashlib
import hmac
import json
import socket
import time

from ms_kvcache.disagg._errors import AuthenticationFailed, DisaggError, HandoffTimeout, MooncakeUnavailable, PeerGone

__all__ = ["ControlServer", "ControlClient", "MAX_MESSAGE", "RCV_QUEUE", "SCHEMAS", "PROTOCOL", "parse_address",
           "message_problem", "check_token", "require_curve", "curve_server_keys", "MAX_TEXT", "MAX_CHUNKS"]

#: Version tag of the handoff protocol (sent in every offer, and the domain of every signature).
PROTOCOL = "ms_kvcache.disagg/4"
#: Largest control message, in bytes (a frame above it drops the connection). An offer with ~500k block
#: ids, a ``done`` with :data:`MAX_CHUNKS` checksums fit.
MAX_MESSAGE = 4 << 20
#: Messages ZeroMQ queues per connection before it stops reading that connection (``RCVHWM``).
RCV_QUEUE = 4
#: Most chunks of one handoff (their checksums travel in one ``done`` message).
MAX_CHUNKS = 1 << 17
#: Seconds a connection may take to finish its ZeroMQ handshake (``HANDSHAKE_IVL``).
HANDSHAKE_SECONDS = 5.0
#: Most ``{`` and ``[`` in a message, and most ``,`` (checked before parsing: what they separate becomes
#: Python objects, up to ~40 bytes each).
MAX_CONTAINERS, MAX_ITEMS = 8192, 1 << 19
#: Longest string field of a message (session, request_id, model_id, reason, ...), in characters.
MAX_TEXT = 4096
_MAX_LIST = MAX_ITEMS
_U64 = (1 << 64) - 1
_I63 = (1 << 63) - 1

# field -> (kind, required). kinds: "str", "str?" (str or None), "int" (0 .. 2**63-1), "u64", "bool",
# "dict", "ints" (list of int), "ints?" (list of int or None), "u64s" (list of u64)
SCHEMAS = {
    "offer": {"session": ("str", True), "seq": ("int", True), "protocol": ("str", True),
              "request_id": ("str?", False), "layout": ("dict", True), "model_id": ("str?", False),
              "num_tokens": ("int", True), "nbytes": ("int", True), "chunk_tokens": ("int", True),
              "chunks": ("ints?", False), "src_block_ids": ("ints", False), "src_block_size": ("int", False),
              "checksum_algo": ("str", True)},
    "chunk": {"session": ("str", True), "seq": ("int", True), "nonce": ("str", True), "index": ("int", True),
              "checksum": ("u64", True)},
    "done": {"session": ("str", True), "seq": ("int", True), "nonce": ("str", True), "checksums": ("u64s", True)},
    "abort": {"session": ("str", True), "seq": ("int", True), "nonce": ("str?", False), "reason": ("str?", False),
              "withdrawn": ("bool", False)},
    "accept": {"session": ("str", True), "seq": ("int", True), "nonce": ("str", True), "te_peer": ("str", True),
               "buffer_ptr": ("int", True), "buffer_nbytes": ("int", True)},
    "reject": {"session": ("str?", False), "seq": ("int", True), "reason": ("str?", False), "error": ("str?", False)},
    "error": {"session": ("str?", False), "seq": ("int", True), "reason": ("str?", False), "error": ("str?", False)},
    "loaded": {"session": ("str", True), "seq": ("int", True), "block_ids": ("ints", True)},
}
#: what each end takes
TO_RECEIVER = ("offer", "chunk", "done", "abort")
TO_SENDER = ("accept", "reject", "error", "loaded")


def _is_int(v, hi=_I63):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= hi


def _field_problem(name, kind, v):
    if kind in ("str", "str?"):
        if v is None and kind == "str?":
            return None
        if not isinstance(v, str):
            return f"'{name}': expected a string, got {type(v).__name__}"
        if len(v) > MAX_TEXT:
            return f"'{name}': {len(v)} characters, at most {MAX_TEXT}"
        return None
    if kind == "int":
        return None if _is_int(v) else f"'{name}': expected an int in [0, 2**63), got {_short(v)}"
    if kind == "u64":
        return None if _is_int(v, _U64) else f"'{name}': expected an int in [0, 2**64), got {_short(v)}"
    if kind == "bool":
        return None if isinstance(v, bool) else f"'{name}': expected true or false, got {_short(v)}"
    if kind == "dict":
        return None if isinstance(v, dict) else f"'{name}': expected an object, got {type(v).__name__}"
    if kind in ("ints", "ints?", "u64s"):
        if v is None and kind == "ints?":
            return None
        hi = _U64 if kind == "u64s" else _I63
        if not isinstance(v, list) or len(v) > _MAX_LIST or not all(_is_int(x, hi) for x in v):
            return f"'{name}': expected a list of at most {_MAX_LIST} ints in [0, {hi + 1}), got {_short(v)}"
        return None
    raise AssertionError(kind)  # pragma: no cover


def _short(v, n=120):
    text = repr(v)
    return text if len(text) <= n else text[:n] + "..."


def message_problem(msg, allowed):
    """What is wrong with a decoded control message (a str), or None. ``allowed``: the types this end takes."""
    if not isinstance(msg, dict):
        return f"expected a JSON object, got {type(msg).__name__}"
    kind = msg.get("type")
    if not isinstance(kind, str) or kind not in allowed:
        return f"'type': expected one of {list(allowed)}, got {_short(kind)}"
    schema = SCHEMAS[kind]
    for name, (k, required) in schema.items():
        if name not in msg:
            if required:
                return f"{kind}: '{name}' missing"
            continue
        bad = _field_problem(name, k, msg[name])
        if bad:
            return f"{kind}: {bad}"
    return None


def check_token(op, token):
    """``token`` (str / bytes / None) -> bytes or None; ValueError naming ``op`` otherwise. A token needs
    pyzmq with CURVE (:func:`require_curve`)."""
    if token is None:
        return None
    if isinstance(token, str):
        token = token.encode()
    if not isinstance(token, (bytes, bytearray)) or not 1 <= len(token) <= 4096:
        raise ValueError(f"{op}: argument 'token': expected None or a non-empty str / bytes of at most 4096 bytes, "
                         f"got {type(token).__name__}")
    require_curve(op)
    return bytes(token)


def _zmq():
    try:
        import zmq
    except ImportError as exc:
        raise MooncakeUnavailable(f"ms_kvcache.disagg needs pyzmq for its control channel ({exc}); "
                                  f"pip install 'ms_kvcache[disagg]'") from exc
    return zmq


def require_curve(op):
    """The ``zmq`` module if it has CURVE security (what ``token=`` uses), else :class:`MooncakeUnavailable`."""
    zmq = _zmq()
    if not zmq.has("curve"):
        raise MooncakeUnavailable(f"{op}: argument 'token' needs pyzmq with CURVE security (libzmq built with "
                                  f"libsodium or its bundled TweetNaCl, as in the pyzmq wheels); pyzmq "
                                  f"{zmq.__version__} with libzmq {zmq.zmq_version()} has none")
    return zmq


_CURVE_LABEL = b"ms_kvcache.disagg control channel: CURVE server key\0"


def curve_server_keys(token):
    """The receiver's CURVE key pair for ``token`` (bytes): ``(public, secret)``, Z85 (40 characters each).

    The secret key is ``HMAC-SHA256(token, label)``, so both ends derive the pair from the token alone;
    the public key never travels (a client must know it to complete the handshake).
    """
    zmq = _zmq()
    from zmq.utils import z85

    secret = z85.encode(hmac.new(token, _CURVE_LABEL, hashlib.sha256).digest())
    return zmq.curve_public(secret), secret


def parse_address(op, address):
    """``"host:port"`` -> ``(host, port)``; ValueError naming ``op`` otherwise."""
    if isinstance(address, (tuple, list)) and len(address) == 2:
        host, port = address
    elif isinstance(address, str) and address.rpartition(":")[0]:
        host, _, port = address.rpartition(":")
    else:
        raise ValueError(f"{op}: argument 'peer': expected 'host:port' (the receiver's .address), got {address!r}")
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: argument 'peer': expected 'host:port' with an int port, got {address!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"{op}: argument 'peer': expected a port in [1, 65535], got {address!r}")
    return host, port


def _canonical(msg):
    return json.dumps(msg, sort_keys=True, separators=(",", ":")).encode()


_MAC_DOMAIN = PROTOCOL.encode() + b"\0"


def _mac(token, msg):
    return hmac.new(token, _MAC_DOMAIN + _canonical(msg), hashlib.sha256).hexdigest()


def _counts(data):
    """Objects and lists, and commas, in JSON ``data`` (bytes); brackets inside strings count too."""
    return data.count(b"{") + data.count(b"["), data.count(b",")


def _encode(msg, token=None):
    if token is not None:
        msg = dict(msg)
        msg.pop("mac", None)
        msg["mac"] = _mac(token, msg)
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise DisaggError(f"control message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    containers, items = _counts(data)
    if containers > MAX_CONTAINERS or items > MAX_ITEMS:  # the receiver would refuse it unread
        raise DisaggError(f"control message of {containers} objects and lists and {items} commas exceeds "
                          f"{MAX_CONTAINERS} and {MAX_ITEMS}")
    return data


class _Bad(Exception):
    """Internal: a frame that is not a usable message; ``error`` names the exception class to report."""

    def __init__(self, reason, error="DisaggError", msg=None):
        super().__init__(reason)
        self.reason, self.error, self.msg = reason, error, msg


def _decode(data, allowed, token=None):
    """The message in ``data``; :class:`_Bad` if it is malformed or (with a ``token``) not authenticated."""
    containers, items = _counts(data)
    if containers > MAX_CONTAINERS or items > MAX_ITEMS:
        raise _Bad(f"malformed control message ({containers} objects and lists, {items} commas; at most "
                   f"{MAX_CONTAINERS} and {MAX_ITEMS})")
    try:
        msg = json.loads(data.decode(), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _Bad(f"malformed control message (not UTF-8 JSON: {str(exc)[:120]})") from None
    if token is not None:
        mac = msg.pop("mac", None) if isinstance(msg, dict) else None
        if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(token, msg)):
            raise _Bad("control message not authenticated (no or a wrong signature with the shared token)",
                       "AuthenticationFailed", msg if isinstance(msg, dict) else None)
    elif isinstance(msg, dict):
        msg.pop("mac", None)
    bad = message_problem(msg, allowed)
    if bad:
        raise _Bad(f"malformed control message: {bad}", "MetadataMismatch" if _kind(msg) == "offer" else "DisaggError",
                   msg if isinstance(msg, dict) else None)
    return msg


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _kind(msg):
    return msg.get("type") if isinstance(msg, dict) else None


def _session_of(msg):
    s = msg.get("session") if isinstance(msg, dict) else None
    return s if isinstance(s, str) and len(s) <= MAX_TEXT else None


def _remaining(deadline):
    return max(0.0, deadline - time.monotonic())


#: replies the receiver queues per sender before a send to it fails (``SNDHWM``)
_SND_QUEUE = 64


class ControlServer:
    """The receiver's end: a ROUTER socket bound to ``host`` on ``port`` (0 = a free one).

    Malformed or (with ``token``) unauthenticated messages are answered here (``reject`` / ``error``
    naming the problem) and never returned. A port that cannot be bound raises :class:`DisaggError`
    after releasing the socket and its context. With ``token`` the socket is a CURVE server with the key
    pair :func:`curve_server_keys` derives: a peer without the token fails the handshake.

    Attributes:
        address (str): ``"host:port"`` that senders connect to.
    """

    def __init__(self, host="127.0.0.1", port=0, token=None):
        zmq = require_curve("KVReceiver") if token is not None else _zmq()
        self._zmq = zmq
        self.token = token
        self.ctx = zmq.Context()
        self.sock = None
        try:
            self.sock = self.ctx.socket(zmq.ROUTER)
            self.sock.setsockopt(zmq.LINGER, 0)
            self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
            self.sock.setsockopt(zmq.RCVHWM, RCV_QUEUE)
            self.sock.setsockopt(zmq.SNDHWM, _SND_QUEUE)
            self.sock.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_SECONDS * 1000))
            if token is not None:
                public, secret = curve_server_keys(token)
                self.sock.curve_secretkey = secret
                self.sock.curve_publickey = public
                self.sock.curve_server = True
            where = "*" if str(host) in ("", "*") else host
            if port:
                self.sock.bind(f"tcp://{where}:{int(port)}")
                self.port = int(port)
            else:
                self.port = self.sock.bind_to_random_port(f"tcp://{where}")
        except zmq.ZMQError as exc:
            self.close()
            what = f"port {port}" if port else "a free port"
            raise DisaggError(f"KVReceiver: cannot listen on {what} of {host!r} ({exc}); another process may hold "
                              f"it: pass another port, or 0 for a free one") from None
        self.host = host
        self.address = f"{host}:{self.port}"
        self.refused = 0  # malformed / unauthenticated messages answered and dropped
        self._seq = 0  # seq of the next message sent (one counter for all sessions: increasing in each)

    def recv(self, deadline):
        """Next valid ``(peer_identity, message, raw bytes)``, or None once ``deadline``
        (``time.monotonic()``) passes. A message of more than one frame is read and dropped frame by frame."""
        zmq = self._zmq
        sock = self.sock
        while True:
            left = _remaining(deadline)
            if not sock.poll(int(left * 1000) if left > 0 else 0, zmq.POLLIN):
                if left <= 0:
                    return None
                continue
            peer = sock.recv()
            data = sock.recv() if sock.getsockopt(zmq.RCVMORE) else b""
            extra = 0
            while sock.getsockopt(zmq.RCVMORE):
                sock.recv(copy=False)  # dropped as it is read: a multipart message is never assembled
                extra += 1
            if extra:
                self._refuse(peer, _Bad(f"malformed control message ({extra + 1} frames, expected 1)"))
                continue
            try:
                return peer, _decode(data, TO_RECEIVER, self.token), data
            except _Bad as bad:
                self._refuse(peer, bad)

    def decode(self, data):
        """The message in ``data`` (raw bytes :meth:`recv` returned)."""
        return _decode(data, TO_RECEIVER, self.token)

    def _refuse(self, peer, bad):
        self.refused += 1
        kind = "reject" if _kind(bad.msg) == "offer" else "error"
        try:
            self.send(peer, {"type": kind, "session": _session_of(bad.msg), "error": bad.error,
                             "reason": f"receiver {self.address}: {bad.reason}"[:MAX_TEXT]})
        except DisaggError:
            pass

    def pending(self):
        """True if a message is queued (without taking it)."""
        return bool(self.sock.poll(0, self._zmq.POLLIN))

    def try_recv(self):
        """A message already queued, without waiting (None if there is none)."""
        return self.recv(time.monotonic())

    def send(self, peer, msg):
        """Send ``msg`` (its ``seq`` added) to ``peer``; :class:`PeerGone` if that sender has disconnected
        (or has :data:`_SND_QUEUE` replies unread)."""
        zmq = self._zmq
        msg = dict(msg, seq=self._seq)
        self._seq += 1
        try:
            self.sock.send_multipart([peer, _encode(msg, self.token)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            raise PeerGone(f"the sender has disconnected from {self.address} ({exc})") from None

    def close(self):
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
        if self.ctx is not None:
            self.ctx.term()
            self.ctx = None


class ControlClient:
    """The sender's end: a DEALER socket connected to a receiver's ``address``, for one ``session``.

    Before connecting, a plain TCP connect to the address checks that something listens there, so a
    receiver that is not running gives :class:`PeerGone` at once instead of a timeout. :meth:`send` adds
    ``seq`` (0, 1, 2, ...) and, once an ``accept`` arrived, its ``nonce``. :meth:`recv` raises
    :class:`AuthenticationFailed` for a failed handshake (the receiver has another token, or only one end
    has one) or a reply without the ``token``'s signature, :class:`DisaggError` for a malformed one, and
    drops (counting them in ``dropped``) replies of another session or whose ``seq`` is not above the last.
    """

    def __init__(self, address, op="KVSender.send", probe_timeout=2.0, token=None, session=None):
        zmq = require_curve(op) if token is not None else _zmq()
        self._zmq = zmq
        self.op = op
        self.token = token
        self.session = session
        self.nonce = None  # the accept's, sent with every later message
        self.dropped = 0
        self._seq = 0
        self._last = -1
        host, port = parse_address(op, address)
        try:
            with socket.create_connection((host, port), timeout=probe_timeout):
                pass
        except ConnectionRefusedError:
            raise PeerGone(f"{op}: no receiver listens at {host}:{port} (connection refused: not running or gone)") \
                from None
        except socket.timeout:
            raise HandoffTimeout(f"{op}: no answer from {host}:{port} within {probe_timeout:g} s") from None
        except OSError as exc:
            raise PeerGone(f"{op}: cannot reach {host}:{port} ({exc})") from None
        self.address = f"{host}:{port}"
        self.ctx = zmq.Context()
        self.sock = self.monitor = None
        try:
            self.sock = self.ctx.socket(zmq.DEALER)
            self.sock.setsockopt(zmq.LINGER, 0)
            self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
            self.sock.setsockopt(zmq.RCVHWM, RCV_QUEUE)
            self.sock.setsockopt(zmq.SNDHWM, 0)  # this sender's own messages: at most a session's chunks + 3
            if token is not None:
                self.sock.curve_serverkey = curve_server_keys(token)[0]
                self.sock.curve_publickey, self.sock.curve_secretkey = zmq.curve_keypair()
            # a failed handshake (another token, or only one end with one) is seen here, not as a timeout
            self.monitor = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                                        zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                                        zmq.EVENT_HANDSHAKE_FAILED_AUTH)
            self.poller = zmq.Poller()
            self.poller.register(self.sock, zmq.POLLIN)
            self.poller.register(self.monitor, zmq.POLLIN)
            self.sock.connect(f"tcp://{host}:{port}")
        except BaseException:
            self.close(0)
            raise

    def send(self, msg):
        zmq = self._zmq
        msg = dict(msg, seq=self._seq)
        if self.nonce is not None and msg.get("type") != "offer":
            msg["nonce"] = self.nonce
        self._seq += 1
        try:
            self.sock.send(_encode(msg, self.token), flags=zmq.NOBLOCK)
        except zmq.Again:
            raise PeerGone(f"cannot queue a message to {self.address} (receiver not connected)") from None

    def _handshake_failed(self):
        from zmq.utils.monitor import recv_monitor_message

        event = recv_monitor_message(self.monitor)
        zmq = self._zmq
        what = {zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "protocol", zmq.EVENT_HANDSHAKE_FAILED_AUTH: "authentication"}
        mine = "with a token" if self.token is not None else "without a token"
        raise AuthenticationFailed(f"{self.op}: the control channel's handshake with {self.address} failed "
                                   f"({what.get(event['event'], 'refused')}): this sender is {mine}, the receiver "
                                   f"has another token or {'none' if self.token is not None else 'one'} (or is "
                                   f"not a KVReceiver of {PROTOCOL}); nothing was sent")

    def recv(self, deadline):
        """Next message of this session, or None once ``deadline`` passes."""
        while True:
            left = _remaining(deadline)
            ready = dict(self.poller.poll(int(left * 1000) if left > 0 else 0))
            if self.monitor in ready:
                self._handshake_failed()
            if self.sock not in ready:
                if left <= 0:
                    return None
                continue
            try:
                msg = _decode(self.sock.recv(), TO_SENDER, self.token)
            except _Bad as bad:
                cls = AuthenticationFailed if bad.error == "AuthenticationFailed" else DisaggError
                raise cls(f"{self.op}: the receiver at {self.address} answered with a refused message: "
                          f"{bad.reason}") from None
            if (self.session is not None and msg.get("session") != self.session) or msg["seq"] <= self._last:
                self.dropped += 1  # another session's, or replayed
                continue
            self._last = msg["seq"]
            if msg["type"] == "accept" and self.nonce is None:
                self.nonce = msg["nonce"]
            return msg

    def close(self, linger_ms=200):
        """Close; messages still queued get up to ``linger_ms`` to leave."""
        if self.monitor is not None:
            self.sock.disable_monitor()
            self.monitor.close(0)
            self.monitor = None
        if self.sock is not None:
            self.sock.close(linger_ms)
            self.sock = None
        if self.ctx is not None:
            self.ctx.term()
            self.ctx = None
