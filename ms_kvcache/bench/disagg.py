"""Benchmark of the KV handoff between two processes (:mod:`ms_kvcache.disagg`, Mooncake transfer
engine over loopback TCP): CPU figures of the machine it runs on, not NPU or RDMA figures.

For each case and token count, in one run, interleaved round by round (the order rotates every round,
so no path always runs first):

- **handoff** (end to end), once per sender path (``direct``: Mooncake reads the cache rows, the
  default on the cpu backend; ``gather``: ``direct=False``, d2h into the registered buffer first; one
  sender switched between the two) and receiver mode: :meth:`KVSender.send` in this process to a
  :class:`KVReceiver` in a second process, from the call until the receiver has confirmed the KV is in
  its caches: offer / accept, per chunk d2h gather (``multi_layer_kv_transfer``) + Mooncake write +
  checksum, the receiver's checksum verification, the h2d scatter into other block ids, the ``loaded``
  reply. ``verify-all`` = ``receive()``'s default (the caches are written once every chunk verified);
  ``stream`` = ``receive(stream=True)`` (each chunk loaded as it verifies, after an undo copy);
- **raw Mooncake sync**: one ``transfer_sync_write`` of the same number of bytes between the same two
  registered buffers of the same two processes, same engine, same TCP transport; and **raw chunked**:
  the same bytes with the handoff's chunks, ``transfer_submit_write`` per chunk, all in flight, polled;
- **memcpy**: a host copy of the same bytes (``numpy.copyto``, one thread).

Time = best of the rounds; GB/s = payload bytes / time. The handoff's target is >= 0.8 of the raw
Mooncake transfer; the ratio is taken against the *faster* of the two raw ways (``speedup["raw
Mooncake"]`` = that raw time / handoff time; ``"raw Mooncake sync"`` alone is reported too), and the
"paired median" is the median over rounds of (raw of that round / handoff of that round), less
sensitive to a load change between rounds. Every row carries the load average (``os.getloadavg``)
before and after and the handoff's stage times (sender: connect, accept, d2h, checksum, wait for the
last write, done -> loaded; receiver: verify, h2d, the part after ``done``) and the CPU time both
processes used per path (median over rounds; user + system of all threads, so the kernel's TCP copies
made in the processes' system calls count). Both processes share this machine's cores with the
kernel's loopback TCP copies.

    python scripts/bench_disagg.py [--quick] [--path both|direct|gather] [--mode both|verify-all|stream]
                                   [--repeats N] [--case NAME] [--tokens T] [--chunk-mib M] [--ablate] [--out DIR]   # or: ms-kvcache bench --ops disagg

It prints each row's note on stderr and a summary table on stdout.

``--ablate`` adds diagnostic rows (:data:`ABLATIONS`), timed in the same rounds: the handoff with its own
work switched off in both processes (no checksums: the sender sends 0 and the receiver compares 0; no
load: the receiver's h2d into its caches is skipped as well). They are **not** valid handoffs (nothing is
checked, or nothing reaches the caches) and exist only to show how much of the gap to the raw transfer is
that work rather than the protocol (offer / accept, chunk messages, the window of writes, ``loaded``).
They run with the first path timed and the ``verify-all`` mode, and never count as the handoff's figure.
On the direct path one more row, :data:`RAW_PAGED`: Mooncake alone writing the sequence's cache rows as
the direct path cuts them (one write per run of rows, every piece sent directly, the same window of
bytes in flight) into their places in the receiver's buffer: the raw transfer of paged rows rather
than of one contiguous buffer.

Needs ``ms_kvcache[disagg]`` (Mooncake, pyzmq, xxhash); without Mooncake :func:`available` says why and
``ms-kvcache bench`` skips the family with that reason (:func:`run` alone returns no rows and says why on
stderr).
"""
import contextlib
import os
import sys
import time

import numpy as np

__all__ = ["run", "available", "CASES"]

#: name: (kv_format, num_layers, planes [(num_kv_heads, head_size)], dtype, block_size, token counts)
CASES = {
    "llama3-8b": ("separate", 32, [(8, 128), (8, 128)], "bfloat16", 128, (256, 1024, 4096)),
    "deepseek-v3-mla": ("mla", 61, [(1, 512), (1, 64)], "bfloat16", 128, (1024,)),
}
QUICK_CASES = {
    "tiny": ("separate", 4, [(2, 64), (2, 64)], "float16", 16, (64, 512)),
}
REPEATS, QUICK_REPEATS = 5, 2
PATHS = ("direct", "gather")
CHUNK_BYTES = None  # None: KVSender's default chunking

#: Diagnostic variants of ``--ablate`` (see the module docstring): not valid handoffs.
ABLATIONS = ("no checksums", "no checksums, no load")
#: The ``--ablate`` row of Mooncake alone writing the paged cache rows (direct path only).
RAW_PAGED = "raw Mooncake of the paged rows"


class _NoChecksum:
    """Stands in for ``ChecksumStream`` in an ablation: hashes nothing, its value is 0."""

    def __init__(self, *args, **kwargs):
        pass

    def update(self, data):
        pass

    def value(self):
        return 0


def _no_checksum(data, algo=None):
    return 0


def _no_load(self, buffer, slots, direction):
    return None


@contextlib.contextmanager
def _ablated(what):
    """Within the block, this process's handoff code skips the work named by ``what`` (one of
    :data:`ABLATIONS`; None = nothing skipped); everything is put back on exit, also on an error."""
    from ms_kvcache.disagg import handoff as H

    if what is not None and what not in ABLATIONS:
        raise ValueError(f"bench disagg: ablation: expected one of {ABLATIONS}, got {what!r}")
    saved = (H.checksum, H.ChecksumStream, H._ChunkOps.__call__)  # noqa: SLF001
    try:
        if what is not None:
            H.checksum, H.ChecksumStream = _no_checksum, _NoChecksum
        if what == "no checksums, no load":
            H._ChunkOps.__call__ = _no_load  # noqa: SLF001
        yield
    finally:
        H.checksum, H.ChecksumStream, H._ChunkOps.__call__ = saved  # noqa: SLF001


def _np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def make_caches(kv_format, num_layers, planes, dtype, num_blocks, block_size, seed=None):
    """Per-layer caches (BSND) as MindSpore Tensors: random bits when ``seed`` is given, else zeros."""
    from mindspore import Tensor

    npdt = _np_dtype(dtype)
    rng = np.random.default_rng(seed) if seed is not None else None

    def one(shape):
        if rng is None:
            return Tensor.from_numpy(np.zeros(shape, npdt))
        bits = rng.integers(0, 1 << (8 * npdt.itemsize), size=shape, dtype=f"u{npdt.itemsize}")
        return Tensor.from_numpy(bits.view(npdt))

    if kv_format == "separate":
        return [tuple(one((num_blocks, block_size, h, d)) for (h, d) in planes) for _ in range(num_layers)]
    if kv_format == "merged":
        h, d = planes[0]
        return [one((2, num_blocks, block_size, h, d)) for _ in range(num_layers)]
    return [tuple(one((num_blocks, block_size, h * d)) for (h, d) in planes) for _ in range(num_layers)]


def _receiver_main(conn, spec):
    """The second process: a KVReceiver that serves ``receive`` commands from the pipe."""
    os.environ.setdefault("MC_LOG_LEVEL", "WARNING")  # Mooncake's own log level (it ignores GLOG_*)
    from ms_kvcache.disagg import KVReceiver

    caches = make_caches(spec["kv_format"], spec["num_layers"], spec["planes"], spec["dtype"], spec["num_blocks"],
                         spec["block_size"])
    rx = KVReceiver(caches, spec["kv_format"], max_tokens=spec["max_tokens"])
    conn.send({"address": rx.address, "te": rx.engine.address, "ptr": rx.staging.ptr, "nbytes": rx.staging.nbytes})
    while True:
        if not conn.poll(600):
            break
        cmd = conn.recv()
        if cmd[0] == "stop":
            break
        try:
            with _ablated(cmd[4]):
                conn.send(("ok", rx.receive(cmd[1], timeout=cmd[2], stream=cmd[3])))
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    rx.close()


class _Peer:
    """The receiver process (spawned: a fork of a process running MindSpore is not safe)."""

    def __init__(self, spec, timeout=120.0):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_receiver_main, args=(child, spec), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(timeout):
            self.stop()
            raise TimeoutError(f"bench disagg: the receiver process did not start within {timeout:g} s")
        self.info = self.conn.recv()

    def receive_async(self, block_ids, timeout, stream=False, ablate=None):
        self.conn.send(("receive", list(map(int, block_ids)), timeout, bool(stream), ablate))

    def result(self, timeout):
        if not self.conn.poll(timeout):
            raise TimeoutError(f"bench disagg: no answer from the receiver process within {timeout:g} s")
        status, res = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"bench disagg: the receiver failed: {res}")
        return res

    def stop(self):
        try:
            self.conn.send(("stop",))
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def _raw_chunked(sender, te_peer, dst, nbytes, deadline=60.0):
    """The handoff's chunk pattern without its work: every chunk submitted, then all polled."""
    from ms_kvcache.disagg._layout import chunk_plan

    eng, st = sender.engine, sender.staging
    plan = chunk_plan(nbytes // sender.layout.bytes_per_token, sender.chunk_tokens, sender.layout.bytes_per_token)
    bids = [eng.submit_write(te_peer, st.ptr + off, dst + off, nb) for (_, _, off, nb) in plan]
    end = time.monotonic() + deadline
    for b in bids:
        while not eng.poll(b, peer=te_peer):
            if time.monotonic() > end:
                raise TimeoutError("bench disagg: raw chunked write did not finish")
            time.sleep(1e-4)


def _raw_paged(sender, te_peer, dst, src_blocks, num_tokens, deadline=60.0):
    """Mooncake alone moving a sequence's paged cache rows (``--ablate``): one write per run of rows
    (the pieces of the direct path, every piece sent directly) into its place in the peer's buffer,
    with the handoff's window of bytes in flight, no protocol, no checksum, no load."""
    from ms_kvcache.disagg._direct import WINDOW_BYTES
    from ms_kvcache.disagg._layout import plan_from_sizes, slots_from_blocks, wait_ops

    lay, eng, rows = sender.layout, sender.engine, sender._rows  # noqa: SLF001
    wait_ops()
    sender._register_caches()  # noqa: SLF001
    slots = slots_from_blocks(src_blocks, lay.block_size, num_tokens)
    plan = plan_from_sizes(sender.chunk_sizes(num_tokens), lay.bytes_per_token)
    end = time.monotonic() + deadline
    queue, inflight = [], 0

    def reap(keep_bytes):
        nonlocal inflight
        while queue and (len(queue) > 1 and inflight > keep_bytes or keep_bytes < 0):
            bid, n = queue[0]
            if eng.poll(bid, peer=te_peer):
                queue.pop(0)
                inflight -= n
                continue
            if time.monotonic() > end:
                raise TimeoutError("bench disagg: raw paged writes did not finish")
            time.sleep(1e-4)

    for a, b, off, _nb in plan:
        for src, _view, poff, n in rows.pieces(slots, a, b, off):
            reap(WINDOW_BYTES - n)
            queue.append((eng.submit_write(te_peer, src, dst + poff, n), n))
            inflight += n
    reap(-1)


def _cpu_seconds(pid):
    """CPU seconds (user + system, all threads) used so far by this process and by process ``pid``
    (from /proc; NaN where that is not available)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    mine = r.ru_utime + r.ru_stime
    if pid < 0:
        return mine
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        theirs = (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        theirs = float("nan")
    return mine + theirs


def _load():
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - no getloadavg
        return float("nan")


def _cpu_split(pid):
    """(CPU seconds of this process, of process ``pid``) so far (see :func:`_cpu_seconds`)."""
    mine = _cpu_seconds(-1)
    return mine, _cpu_seconds(pid) - mine


def _case_rows(name, case, repeats, log, modes=("verify-all", "stream"), tokens=None, paths=PATHS, ablate=False):
    from ms_kvcache.bench._util import make_row, memcpy_seconds
    from ms_kvcache.disagg import KVSender

    fmt, L, planes, dtype, bs, case_tokens = case
    tokens = tuple(tokens or case_tokens)
    max_t = max(tokens)
    nblk = -(-max_t // bs)
    num_blocks = 2 * nblk  # room for a permutation of distinct blocks on both sides
    spec = {"kv_format": fmt, "num_layers": L, "planes": planes, "dtype": dtype, "num_blocks": num_blocks,
            "block_size": bs, "max_tokens": max_t}
    log(f"disagg: {name}: building caches and the receiver process")
    caches = make_caches(fmt, L, planes, dtype, num_blocks, bs, seed=0)
    sender = KVSender(caches, fmt, max_tokens=max_t)
    rows_direct = sender._rows  # noqa: SLF001 - the gather rows below switch the same sender to its gather path
    if "direct" in paths and rows_direct is None:
        log(f"disagg: {name}: no direct path here ({sender.direct_reason}): gather only")
        paths = tuple(p for p in paths if p != "direct") or ("gather",)
    if CHUNK_BYTES is not None:  # the default ramped chunking, around chunks of CHUNK_BYTES
        sender.chunk_tokens = sender.layout.default_chunk_tokens(CHUNK_BYTES)
    peer = _Peer(spec)
    rows = []
    rng = np.random.default_rng(1)
    te, dst_ptr = peer.info["te"], peer.info["ptr"]
    try:
        for T in tokens:
            n = -(-T // bs)
            src = rng.permutation(num_blocks)[:n]
            dst = rng.permutation(num_blocks)[:n]
            nbytes = T * sender.layout.bytes_per_token

            def handoff(stream, path, ablation=None):
                sender._rows = rows_direct if path == "direct" else None  # noqa: SLF001
                peer.receive_async(dst, 120.0, stream, ablation)
                t0 = time.perf_counter()
                try:
                    with _ablated(ablation):
                        res = sender.send(peer.info["address"], src, T, timeout=120.0)
                finally:
                    sender._rows = rows_direct  # noqa: SLF001
                t = time.perf_counter() - t0
                return t, {"send": res, "recv": peer.result(120.0)}

            def raw():
                t0 = time.perf_counter()
                rc = sender.engine.engine.transfer_sync_write(te, sender.staging.ptr, dst_ptr, nbytes)
                t = time.perf_counter() - t0
                if rc != 0:
                    raise RuntimeError(f"bench disagg: raw transfer_sync_write failed with code {rc}")
                return t, None

            def raw_chunked():
                t0 = time.perf_counter()
                _raw_chunked(sender, te, dst_ptr, nbytes)
                return time.perf_counter() - t0, None

            variants = [(pa, m) for pa in paths for m in modes]
            runs = {f"handoff {pa} {m}": (lambda pa=pa, m=m: handoff(m == "stream", pa)) for pa, m in variants}
            ablations = [(paths[0], a) for a in ABLATIONS] if ablate else []
            runs.update({f"ablation {pa} {a}": (lambda pa=pa, a=a: handoff(False, pa, a)) for pa, a in ablations})
            if ablate and rows_direct is not None:
                ablations.append(("direct", RAW_PAGED))

                def raw_paged():
                    sender._rows = rows_direct  # noqa: SLF001
                    t0 = time.perf_counter()
                    _raw_paged(sender, te, dst_ptr, src, T)
                    return time.perf_counter() - t0, None

                runs[f"ablation direct {RAW_PAGED}"] = raw_paged
            runs.update({"raw": raw, "raw_chunked": raw_chunked})
            names = list(runs)
            times = {k: [] for k in names}
            cpus = {k: [] for k in names}  # CPU seconds of both processes per run
            cpu_parts = {k: [] for k in names}  # (sender, receiver) CPU seconds per run
            info = {k: None for k in names}
            load0 = _load()
            for r in range(repeats + 1):  # round 0 warms every path up (not timed)
                order = names[r % len(names):] + names[:r % len(names)]  # rotate: no path always goes first
                for k in order:
                    c0 = _cpu_split(peer.proc.pid)
                    t, extra = runs[k]()
                    c1 = _cpu_split(peer.proc.pid)
                    cpus[k].append(c1[0] + c1[1] - c0[0] - c0[1])
                    cpu_parts[k].append((c1[0] - c0[0], c1[1] - c0[1]))
                    if r:
                        if extra is not None and (not times[k] or t < min(times[k])):
                            info[k] = extra
                        times[k].append(t)
            load1 = _load()
            mc = memcpy_seconds(nbytes)
            best = {k: min(v) for k, v in times.items()}
            cpu = {k: float(np.median(v[1:])) for k, v in cpus.items()}  # median over the timed rounds
            cpu_tx = {k: float(np.median([c[0] for c in v[1:]])) for k, v in cpu_parts.items()}
            cpu_rx = {k: float(np.median([c[1] for c in v[1:]])) for k, v in cpu_parts.items()}
            raw_best = min(best["raw"], best["raw_chunked"])  # the faster way Mooncake alone moves the bytes
            # per repeat: the handoff against the raw transfers of the same round (same load), median over rounds
            raw_round = [min(a, b) for a, b in zip(times["raw"], times["raw_chunked"])]
            for pa, m in variants:
                k = f"handoff {pa} {m}"
                s, rv = info[k]["send"], info[k]["recv"]
                ratio = raw_best / best[k]
                paired = float(np.median([rr / h for rr, h in zip(raw_round, times[k])]))
                gb = lambda t: nbytes / t / 1e9  # noqa: E731
                sent = (f"{s['requests']} Mooncake writes, {s['staged_bytes'] / 2**20:.0f} MiB staged"
                        if pa == "direct" else f"{s['requests']} Mooncake writes")
                note = (f"{pa} {m}: handoff {gb(best[k]):.2f} GB/s = {ratio:.2f}x raw Mooncake (fastest of sync "
                        f"{gb(best['raw']):.2f} and chunked {gb(best['raw_chunked']):.2f} GB/s; target >= 0.8; "
                        f"{best['raw'] / best[k]:.2f}x the sync write alone), paired median {paired:.2f}x; "
                        f"best of {repeats}, load {load0:.1f}-{load1:.1f}; {s['chunks']} chunks, {sent}; sender connect "
                        f"{s['t_connect'] * 1e3:.1f} + accept {s['t_accept'] * 1e3:.1f} ms, "
                        f"{'gather' if pa == 'gather' else 'copies of small pieces'} "
                        f"{s['d2h_seconds'] * 1e3:.1f} + checksum {s['checksum_seconds'] * 1e3:.1f} ms, wait for "
                        f"the last write {s['t_drain'] * 1e3:.1f} ms, done->loaded {s['t_loaded'] * 1e3:.1f} ms; "
                        f"receiver verify {rv['verify_seconds'] * 1e3:.1f} + h2d"
                        f"{' (with undo copy)' if rv['stream'] else ''} "
                        f"{rv['h2d_seconds'] * 1e3:.1f} ms, of which after 'done' {rv['t_after_done'] * 1e3:.1f} ms; "
                        f"CPU of both processes (median): handoff {cpu[k] * 1e3:.0f} ms (sender "
                        f"{cpu_tx[k] * 1e3:.0f} + receiver {cpu_rx[k] * 1e3:.0f}), raw sync "
                        f"{cpu['raw'] * 1e3:.0f} ms, raw chunked {cpu['raw_chunked'] * 1e3:.0f} ms (sender "
                        f"{cpu_tx['raw_chunked'] * 1e3:.0f} + receiver {cpu_rx['raw_chunked'] * 1e3:.0f}); "
                        f"Mooncake tcp over loopback, 2 processes")
                row = make_row("multi_layer_kv_transfer", f"disagg handoff {name} {dtype} ({fmt}, L{L}, {pa}, {m})", T,
                               nbytes, best[k], memcpy_s=mc,
                               baselines={"raw Mooncake": raw_best, "raw Mooncake sync": best["raw"],
                                          "raw Mooncake chunked": best["raw_chunked"]},
                               dtype=dtype, note=note)
                row.update({"mode": m, "path": pa, "requests": s["requests"], "staged_bytes": s["staged_bytes"],
                            "cpu_seconds_sender": cpu_tx[k], "cpu_seconds_receiver": cpu_rx[k],
                            "raw_mooncake_gbps": gb(raw_best), "raw_sync_gbps": gb(best["raw"]),
                            "raw_chunked_gbps": gb(best["raw_chunked"]), "ratio_raw_mooncake": ratio,
                            "ratio_raw_paired_median": paired, "chunks": s["chunks"], "repeats": repeats,
                            "load_before": load0, "load_after": load1, "cpu_seconds": cpu[k],
                            "cpu_seconds_raw_sync": cpu["raw"], "cpu_seconds_raw_chunked": cpu["raw_chunked"]})
                rows.append(row)
                log(f"disagg: {name} T={T} ({nbytes / 2**20:.0f} MiB): {note}")
            for pa, a in ablations:
                k = f"ablation {pa} {a}"
                ratio = raw_best / best[k]
                paired = float(np.median([rr / h for rr, h in zip(raw_round, times[k])]))
                sent = info[k]["send"] if info[k] is not None else {"requests": None, "staged_bytes": 0,
                                                                    "chunks": None}
                m = "raw" if a == RAW_PAGED else "verify-all"
                note = (f"ABLATION ({a}; not a valid handoff, a diagnostic): {pa} {m}: "
                        f"{nbytes / best[k] / 1e9:.2f} GB/s = {ratio:.2f}x raw Mooncake (fastest), paired median "
                        f"{paired:.2f}x; CPU of both processes (median) {cpu[k] * 1e3:.0f} ms (sender "
                        f"{cpu_tx[k] * 1e3:.0f} + receiver {cpu_rx[k] * 1e3:.0f}); same rounds as the rows above")
                row = make_row("multi_layer_kv_transfer", f"disagg ablation, {a} (not a handoff) {name} {dtype} "
                               f"({fmt}, L{L}, {pa}, {m})", T, nbytes, best[k], memcpy_s=mc,
                               baselines={"raw Mooncake": raw_best, "raw Mooncake sync": best["raw"],
                                          "raw Mooncake chunked": best["raw_chunked"]}, dtype=dtype, note=note)
                row.update({"mode": m, "path": pa, "ablation": a, "diagnostic": True,
                            "requests": sent["requests"], "staged_bytes": sent["staged_bytes"],
                            "cpu_seconds_sender": cpu_tx[k], "cpu_seconds_receiver": cpu_rx[k],
                            "raw_mooncake_gbps": nbytes / raw_best / 1e9, "raw_sync_gbps": nbytes / best["raw"] / 1e9,
                            "raw_chunked_gbps": nbytes / best["raw_chunked"] / 1e9, "ratio_raw_mooncake": ratio,
                            "ratio_raw_paired_median": paired, "chunks": sent["chunks"],
                            "repeats": repeats, "load_before": load0, "load_after": load1, "cpu_seconds": cpu[k],
                            "cpu_seconds_raw_sync": cpu["raw"], "cpu_seconds_raw_chunked": cpu["raw_chunked"]})
                rows.append(row)
                log(f"disagg: {name} T={T} ({nbytes / 2**20:.0f} MiB): {note}")
    finally:
        peer.stop()
        sender.close()
    return rows


def available():
    """``(True, "")`` when Mooncake imports, else ``(False, reason)``: ``ms-kvcache bench`` then skips this
    family with that reason (the ``disagg`` extra, or the libibverbs1 it links against, is missing)."""
    from ms_kvcache.disagg import mooncake_available

    return mooncake_available()


def run(quick=False, log=None, repeats=None, modes=("verify-all", "stream"), cases=None, tokens=None, paths=PATHS,
        ablate=False):
    """Rows of the handoff benchmark (see the module docstring); ``[]`` when Mooncake is unavailable.

    ``paths``: the sender's paths timed (interleaved in the same rounds, one sender switched between
    them): ``"direct"`` (:class:`KVSender`'s default on the cpu backend: Mooncake reads the cache rows)
    and / or ``"gather"`` (``direct=False``: d2h into the registered buffer first).
    ``modes``: receiver modes timed (interleaved in the same rounds): ``"verify-all"`` (the default of
    :meth:`KVReceiver.receive`: load once every chunk verified) and / or ``"stream"`` (``stream=True``).
    ``cases``: names of :data:`CASES` (None = all). ``repeats``: timed rounds (default 5, 2 with
    ``quick``). ``tokens``: token counts instead of each case's own. ``ablate``: also the diagnostic rows
    of :data:`ABLATIONS` (not valid handoffs; see the module docstring)."""
    from ms_kvcache.disagg import mooncake_available

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    os.environ.setdefault("MC_LOG_LEVEL", "WARNING")  # before Mooncake loads: no INFO lines in a benchmark
    ok, why = mooncake_available()
    if not ok:
        log(f"disagg: skipped: {why}")
        return []
    rows = []
    table = QUICK_CASES if quick else CASES
    names = list(table) if cases is None else list(cases)
    reps = repeats or (QUICK_REPEATS if quick else REPEATS)
    for name in names:
        rows += _case_rows(name, table[name], reps, log, modes=tuple(modes), tokens=tokens, paths=tuple(paths),
                           ablate=ablate)
    return rows


def format_summary(rows):
    """The summary table's lines: case, tokens, MiB, handoff / raw GB/s, ratios, load."""
    out = ["| case | path | mode | tokens | MiB | handoff GB/s | raw sync GB/s | raw chunked GB/s | x fastest raw | "
           "x sync | paired median | CPU ms handoff / raw sync / raw chunked | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['path']} | {r['mode']} | {r['tokens']} | {r['bytes'] / 2**20:.0f} | {r['gbps']:.2f} | "
                   f"{r['raw_sync_gbps']:.2f} | {r['raw_chunked_gbps']:.2f} | {r['ratio_raw_mooncake']:.2f} | "
                   f"{r['gbps'] / r['raw_sync_gbps']:.2f} | {r['ratio_raw_paired_median']:.2f} | "
                   f"{r['cpu_seconds'] * 1e3:.0f} / {r['cpu_seconds_raw_sync'] * 1e3:.0f} / "
                   f"{r['cpu_seconds_raw_chunked'] * 1e3:.0f} | {r['load_before']:.1f}-{r['load_after']:.1f} |")
    return "\n".join(out)


def main(argv=None):
    """``python scripts/bench_disagg.py [--quick] [--repeats N] [--mode stream|verify-all|both]
    [--case NAME ...] [--ablate] [--out DIR]``: prints the rows' notes on stderr and the summary table on stdout."""
    import argparse

    from ms_kvcache.bench._runner import write_outputs

    p = argparse.ArgumentParser(description="KV handoff between two processes vs raw Mooncake (CPU, loopback TCP)")
    p.add_argument("--quick", action="store_true", help="a tiny case, a few seconds")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds per size (default 5; 2 with --quick)")
    p.add_argument("--mode", choices=("stream", "verify-all", "both"), default="both",
                   help="receiver mode(s) timed, interleaved in the same rounds (default both; verify-all is "
                        "receive()'s default)")
    p.add_argument("--path", choices=("direct", "gather", "both"), default="both",
                   help="sender path(s) timed, interleaved in the same rounds (default both; direct is KVSender's "
                        "default on the cpu backend)")
    p.add_argument("--case", action="append", default=None, help=f"one of {sorted(CASES)} (repeatable; default all)")
    p.add_argument("--tokens", type=int, action="append", default=None,
                   help="token count instead of the cases' own (repeatable)")
    p.add_argument("--chunk-mib", type=float, default=None, help="sender's chunk size in MiB (default: KVSender's)")
    p.add_argument("--ablate", action="store_true",
                   help="also time diagnostic variants with the handoff's checksums (and its load into the "
                        "caches) switched off: not valid handoffs, they show where the gap to raw Mooncake is")
    p.add_argument("--out", help="also write bench.csv / bench.md / bench.png to this folder")
    a = p.parse_args(argv)
    global CHUNK_BYTES
    if a.chunk_mib:
        CHUNK_BYTES = int(a.chunk_mib * (1 << 20))
    modes = ("verify-all", "stream") if a.mode == "both" else (a.mode,)
    paths = PATHS if a.path == "both" else (a.path,)
    rows = run(quick=a.quick, repeats=a.repeats, modes=modes, cases=a.case, tokens=a.tokens, paths=paths,
               ablate=a.ablate)
    print(format_summary(rows))
    if a.out:
        print(write_outputs(rows, a.out))
    return 0
