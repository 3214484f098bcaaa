"""The control channel of a handoff: small JSON messages over ZeroMQ on TCP, every wait bounded.

As in vLLM's and SGLang's Mooncake connectors, the transfer engine moves the bytes and a ZeroMQ side
channel carries the metadata. The receiver binds a ROUTER socket (``ROUTER_MANDATORY``: a reply to a
sender that has gone raises instead of vanishing); each sender connects a DEALER socket. Messages are
one UTF-8 JSON object per ZeroMQ frame (never pickle), at most :data:`MAX_MESSAGE` bytes.
"""
import json
import socket
import time

from ms_kvcache.disagg._errors import DisaggError, HandoffTimeout, MooncakeUnavailable, PeerGone

__all__ = ["ControlServer", "ControlClient", "MAX_MESSAGE", "parse_address"]

#: Largest control message accepted (a block-id list of ~1M blocks fits).
MAX_MESSAGE = 16 << 20


def _zmq():
    try:
        import zmq
    except ImportError as exc:
        raise MooncakeUnavailable(f"ms_kvcache.disagg needs pyzmq for its control channel ({exc}); "
                                  f"pip install 'ms_kvcache[disagg]'") from exc
    return zmq


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
    return host, port


def _encode(msg):
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise DisaggError(f"control message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def _decode(data):
    try:
        msg = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise DisaggError(f"malformed control message ({exc})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise DisaggError(f"malformed control message (not an object with a 'type'): {str(msg)[:200]}")
    return msg


def _remaining(deadline):
    return max(0.0, deadline - time.monotonic())


class ControlServer:
    """The receiver's end: a ROUTER socket bound to ``host`` on ``port`` (0 = a free port).

    Attributes:
        address (str): ``"host:port"`` that senders connect to.
    """

    def __init__(self, host="127.0.0.1", port=0):
        zmq = _zmq()
        self._zmq = zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE + 1024)
        if port:
            self.sock.bind(f"tcp://{host}:{int(port)}")
            self.port = int(port)
        else:
            self.port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.host = host
        self.address = f"{host}:{self.port}"

    def recv(self, deadline):
        """Next ``(peer_identity, message)``, or None once ``deadline`` (``time.monotonic()``) passes."""
        zmq = self._zmq
        while True:
            left = _remaining(deadline)
            if not self.sock.poll(int(left * 1000) if left > 0 else 0, zmq.POLLIN):
                if left <= 0:
                    return None
                continue
            frames = self.sock.recv_multipart()
            if len(frames) != 2:
                continue  # not ours
            try:
                return frames[0], _decode(frames[1])
            except DisaggError:
                continue

    def pending(self):
        """True if a message is queued (without taking it)."""
        return bool(self.sock.poll(0, self._zmq.POLLIN))

    def try_recv(self):
        """A message already queued, without waiting (None if there is none)."""
        return self.recv(time.monotonic())

    def send(self, peer, msg):
        """Send ``msg`` to ``peer``; :class:`PeerGone` if that sender has disconnected."""
        zmq = self._zmq
        try:
            self.sock.send_multipart([peer, _encode(msg)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            raise PeerGone(f"the sender has disconnected from {self.address} ({exc})") from None

    def close(self):
        self.sock.close(0)
        self.ctx.term()


class ControlClient:
    """The sender's end: a DEALER socket connected to a receiver's ``address``.

    Before connecting, a plain TCP connect to the address checks that something listens there, so a
    receiver that is not running gives :class:`PeerGone` at once instead of a timeout.
    """

    def __init__(self, address, op="KVSender.send", probe_timeout=2.0):
        zmq = _zmq()
        self._zmq = zmq
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
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE + 1024)
        self.sock.connect(f"tcp://{host}:{port}")

    def send(self, msg):
        zmq = self._zmq
        try:
            self.sock.send(_encode(msg), flags=zmq.NOBLOCK)
        except zmq.Again:
            raise PeerGone(f"cannot queue a message to {self.address} (receiver not connected)") from None

    def recv(self, deadline):
        """Next message, or None once ``deadline`` passes."""
        zmq = self._zmq
        while True:
            left = _remaining(deadline)
            if not self.sock.poll(int(left * 1000) if left > 0 else 0, zmq.POLLIN):
                if left <= 0:
                    return None
                continue
            try:
                return _decode(self.sock.recv())
            except DisaggError:
                continue

    def close(self, linger_ms=200):
        """Close; messages still queued get up to ``linger_ms`` to leave."""
        self.sock.close(linger_ms)
        self.ctx.term()
