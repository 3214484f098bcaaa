"""Thin helpers over the Mooncake Python package: import with a clear error, the transfer engine, and
a ``mooncake_master`` child process on the loopback interface.

Mooncake (kvcache-ai/Mooncake) is imported lazily, only when an object that needs it is created, so
``import ms_kvcache.disagg`` works (and documents itself) without it. The API used, as in the
``mooncake-transfer-engine`` 0.3.13 wheels:

- ``mooncake.engine.TransferEngine``: ``initialize(local_hostname, "P2PHANDSHAKE", protocol,
  device_name)`` (no metadata server: peers exchange segment descriptors directly), ``get_rpc_port()``,
  ``register_memory(ptr, n)`` / ``unregister_memory(ptr)``, ``transfer_submit_write(peer, local_ptr,
  peer_ptr, n)`` -> batch id (0 = refused) and ``transfer_check_status(batch_id)`` -> 1 done, 0 pending,
  -1 failed, -2 timed out (non-blocking, so every wait here has our own deadline), and
  ``transfer_sync_write`` / ``transfer_sync_read`` (blocking; the benchmark's raw baseline).
  Since Mooncake 0.3.12 a TCP WRITE completes only once the bytes are applied at the destination
  ("acknowledged framing"); with RDMA a completed write is in the peer's memory as well.
- ``mooncake.store.MooncakeDistributedStore`` (see :mod:`ms_kvcache.disagg.store`).
- the ``mooncake_master`` binary shipped inside the wheel (``mooncake/mooncake_master``).
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from ms_kvcache.disagg import _net
from ms_kvcache.disagg._errors import DisaggError, HandoffTimeout, MooncakeUnavailable, PeerGone

__all__ = ["INSTALL_HINT", "mooncake_available", "import_engine", "import_store", "TransferEngineHandle",
           "MooncakeMaster", "master_binary", "free_port", "wait_for_port", "port_is_free", "LOOPBACK"]

LOOPBACK = "127.0.0.1"

#: What to install (CPU / TCP build of Mooncake; on Ascend use mooncake-transfer-engine-npu instead).
INSTALL_HINT = ("pip install 'ms_kvcache[disagg]' (= mooncake-transfer-engine-non-cuda, pyzmq, xxhash; never "
                "the CUDA variant next to it) and the RDMA verbs runtime it links against: "
                "apt-get install libibverbs1")


def _import(name):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        hint = INSTALL_HINT
        if "libibverbs" in str(exc):
            hint = "apt-get install libibverbs1 (the Mooncake wheel links against libibverbs.so.1); " + hint
        raise MooncakeUnavailable(f"ms_kvcache.disagg needs Mooncake ({name}): {exc}. Install: {hint}") from exc


def mooncake_available():
    """``(True, "")`` if ``mooncake.engine`` and ``mooncake.store`` import, else ``(False, reason)``."""
    try:
        _import("mooncake.engine")
        _import("mooncake.store")
    except MooncakeUnavailable as exc:
        return False, str(exc)
    return True, ""


def import_engine():
    """The ``mooncake.engine`` module (:class:`MooncakeUnavailable` if it cannot be imported)."""
    return _import("mooncake.engine")


def import_store():
    """The ``mooncake.store`` module (:class:`MooncakeUnavailable` if it cannot be imported)."""
    return _import("mooncake.store")


def free_port(host=LOOPBACK):
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child before exec: SIGTERM when the thread that started it ends (Linux ``PR_SET_PDEATHSIG``),
    so a master never outlives a crashed parent."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG = 1


def port_is_free(host, port):
    """Whether nothing listens on ``host:port`` now (a bind with SO_REUSEADDR succeeds: TIME_WAIT
    connections do not count)."""
    fam = socket.AF_INET6 if ":" in str(host) else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
    return True


def _wait_listening(proc, host, port, timeout):
    """Poll until process ``proc`` itself listens on ``port`` (``/proc``; a TCP connect where ``/proc``
    cannot tell); False once ``timeout`` passes or as soon as ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            return False
        socks = _net.listening_sockets(proc.pid)
        if socks is None:
            if wait_for_port(host, port, 0.25, proc):
                return proc.poll() is None
        elif any(p == port for _, p in socks):
            return proc.poll() is None
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def wait_for_port(host, port, timeout, proc=None):
    """Poll until a TCP connection to ``host:port`` succeeds; True, or False after ``timeout`` seconds
    (or as soon as ``proc``, if given, has exited)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.25):
                return True
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


class TransferEngineHandle:
    """One Mooncake ``TransferEngine`` in P2P-handshake mode (no metadata server).

    Its listening sockets (handshake and TCP transport) bind ``hostname`` only (Mooncake itself binds
    every interface: :mod:`ms_kvcache.disagg._net` redirects that); ``"0.0.0.0"`` keeps Mooncake's
    every-interface binds, an explicit choice.

    Args:
        hostname (str): the address peers reach this process at (default ``"127.0.0.1"``).
        protocol (str): Mooncake transport, ``"tcp"`` (default; what works on any machine) or ``"rdma"``
            (needs RDMA NICs; not verified here).
        device_name (str): RDMA device list for ``"rdma"`` (e.g. ``"mlx5_0"``), ``""`` otherwise.

    Attributes:
        address (str): ``"host:rpc_port"``, the name peers pass as ``target_hostname``.

    Raises:
        MooncakeUnavailable: Mooncake cannot be imported.
        DisaggError: ``initialize`` failed (its return code in the message), or a socket it opened listens
            elsewhere than ``hostname``.
    """

    def __init__(self, hostname=LOOPBACK, protocol="tcp", device_name=""):
        mod = import_engine()
        self._registered = {}
        self.engine = mod.TransferEngine()
        before = _net.listening_sockets()
        with _net.confine_binds(hostname):
            rc = self.engine.initialize(hostname, "P2PHANDSHAKE", protocol, device_name)
        if rc != 0:
            raise DisaggError(f"Mooncake TransferEngine.initialize({hostname!r}, 'P2PHANDSHAKE', {protocol!r}, "
                              f"{device_name!r}) failed with code {rc}")
        stray = _net.stray_listeners(hostname, before)
        if stray:
            self.engine = None  # its sockets close with it
            raise DisaggError(f"Mooncake's transfer engine listens on {stray}, not only on {hostname!r} "
                              f"({_net.confinable()[1] or 'its bind() could not be redirected'}); pass "
                              f"hostname='0.0.0.0' to accept every interface explicitly")
        self.hostname = hostname
        self.protocol = protocol
        self.address = f"{hostname}:{self.engine.get_rpc_port()}"

    def register(self, ptr, nbytes):
        """Register ``nbytes`` of host memory at ``ptr`` for transfers (DisaggError on failure)."""
        rc = self.engine.register_memory(int(ptr), int(nbytes))
        if rc != 0:
            raise DisaggError(f"Mooncake TransferEngine.register_memory({nbytes} bytes) failed with code {rc}")
        self._registered[int(ptr)] = int(nbytes)

    def unregister(self, ptr):
        """Undo :meth:`register` (ignored if ``ptr`` was not registered)."""
        if self._registered.pop(int(ptr), None) is not None and self.engine is not None:
            self.engine.unregister_memory(int(ptr))

    def submit_write(self, peer, src_ptr, dst_ptr, nbytes, what="transfer"):
        """Start writing ``nbytes`` from local ``src_ptr`` to ``dst_ptr`` in ``peer``'s registered memory;
        returns the batch id. Raises :class:`PeerGone` if the engine refuses (peer unreachable, or the
        destination range is not registered there)."""
        bid = self.engine.transfer_submit_write(peer, int(src_ptr), int(dst_ptr), int(nbytes))
        if not bid:
            raise PeerGone(f"{what}: Mooncake could not start a write of {nbytes} bytes to {peer} (peer gone or "
                           f"unreachable, or the destination range is not registered there)")
        return bid

    def poll(self, bid, what="transfer", peer=""):
        """True once batch ``bid`` has completed, False while pending; raises :class:`PeerGone` if it failed
        and :class:`HandoffTimeout` if Mooncake timed it out."""
        st = self.engine.transfer_check_status(bid)
        if st == 1:
            return True
        if st == 0:
            return False
        if st == -2:
            raise HandoffTimeout(f"{what}: Mooncake reports the write to {peer} timed out")
        raise PeerGone(f"{what}: Mooncake write to {peer} failed (status {st}: peer gone or refused the transfer)")

    def close(self):
        """Unregister every buffer this handle registered and drop the engine (its threads and sockets go
        with the last reference)."""
        if self.engine is not None:
            for ptr in list(self._registered):
                self.unregister(ptr)
        self.engine = None


def master_binary():
    """Path of the ``mooncake_master`` executable shipped in the Mooncake wheel (or on PATH).

    Raises:
        MooncakeUnavailable: Mooncake is not installed or ships no master binary.
    """
    try:
        import mooncake
    except ImportError as exc:
        raise MooncakeUnavailable(f"Mooncake is not installed ({exc}). Install: {INSTALL_HINT}") from exc
    cand = os.path.join(os.path.dirname(mooncake.__file__), "mooncake_master")
    if os.path.isfile(cand) and os.access(cand, os.X_OK):
        return cand
    found = shutil.which("mooncake_master")
    if found:
        return found
    raise MooncakeUnavailable(f"no mooncake_master binary in {os.path.dirname(mooncake.__file__)} or on PATH")


class MooncakeMaster:
    """A ``mooncake_master`` (Mooncake Store's metadata service) run as a child process on loopback.

    Its RPC and metrics servers bind to ``host`` (default 127.0.0.1) on free ports; :meth:`start` waits,
    at most ``timeout`` seconds, until the child itself listens on the RPC port (a store client's
    ``setup()`` without a reachable master blocks for about 90 s). A ``port`` another process holds is
    refused before the child starts, a child that exits fails :meth:`start`, and the child gets SIGTERM
    when the thread that started it ends (Linux ``PR_SET_PDEATHSIG``: a crashed process leaves no master;
    start it from a thread that lives as long as the master should). Use as a context manager, or call
    :meth:`start` / :meth:`stop`.

    Args:
        host (str): bind address (loopback by default).
        port (int | None): RPC port; None = a free one.
        timeout (float): seconds :meth:`start` waits for the port.
        extra_args (sequence of str): more ``mooncake_master`` flags (e.g. ``"--default_kv_lease_ttl=1000"``).

    Attributes:
        address (str): ``"host:port"``, the ``master_server_addr`` of store clients.

    Raises:
        MooncakeUnavailable: no ``mooncake_master`` binary.
        DisaggError: ``port`` is in use by another process, or the master exited, or (HandoffTimeout) it
            did not listen on its port in time; the message ends with the last lines of its log.
    """

    def __init__(self, host=LOOPBACK, port=None, timeout=15.0, extra_args=()):
        self.host = host
        self.port = port
        self._fixed_port = port
        self.timeout = float(timeout)
        self.extra_args = tuple(extra_args)
        self.proc = None
        self._log = None

    @property
    def address(self):
        """``"host:port"`` of the RPC server: the ``master_server_addr`` of store clients."""
        return f"{self.host}:{self.port}"

    def start(self):
        """Start the master and wait for its RPC port; returns self."""
        if self.proc is not None:
            return self
        binary = master_binary()
        if self._fixed_port and not port_is_free(self.host, self._fixed_port):
            raise DisaggError(f"mooncake_master: port {self._fixed_port} on {self.host} is in use by another "
                              f"process (pass another port, or port=None for a free one)")
        for attempt in range(3):  # a free port can be taken between probing and binding: retry
            port = self._fixed_port or free_port(self.host)
            self._log = tempfile.TemporaryFile(mode="w+")
            args = [binary, f"--rpc_address={self.host}", f"--rpc_port={port}", f"--metrics_host={self.host}",
                    f"--metrics_port={free_port(self.host)}", "--enable_http_metadata_server=false",
                    *self.extra_args]
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
            self.port = port
            if _wait_listening(self.proc, self.host, port, self.timeout):
                return self
            exited = self.proc.poll() is not None
            tail = self._tail()
            self.stop()
            if exited and self._fixed_port is None and attempt < 2 and ("in use" in tail.lower() or not tail):
                continue
            err = DisaggError if exited else HandoffTimeout
            how = "exited" if exited else f"did not open {self.host}:{port} within {self.timeout:g} s"
            raise err(f"mooncake_master {how}; its log ends with: {tail}")
        raise DisaggError("mooncake_master could not bind a free port")  # pragma: no cover

    def _tail(self, n=6):
        if self._log is None:
            return ""
        try:
            self._log.seek(0)
            lines = [ln.strip() for ln in self._log.read().splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-n:])

    def stop(self, timeout=5.0):
        """Terminate the master (SIGTERM, then SIGKILL after ``timeout`` seconds) and reap it.

        Args:
            timeout (float): seconds to wait after each signal.

        Returns:
            None.
        """
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.stop()
        except Exception:  # noqa: BLE001
            pass
