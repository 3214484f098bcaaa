"""Benchmark of the KV handoff between two processes (:mod:`ms_kvcache.disagg`, Mooncake transfer
engine over loopback TCP): CPU figures of the machine it runs on, not NPU or RDMA figures.

For each case and token count, in one run, interleaved repeat by repeat:

- **handoff** (end to end): :meth:`KVSender.send` in this process to a :class:`KVReceiver` in a second
  process, from the call until the receiver has confirmed the KV is in its caches: offer / accept,
  per chunk d2h gather (``multi_layer_kv_transfer``) + checksum + Mooncake write, the receiver's checksum
  verification, the h2d scatter into other block ids, the ``loaded`` reply;
- **raw Mooncake**: one ``transfer_sync_write`` of the same number of bytes between the same two
  registered buffers (what Mooncake alone costs for the payload); and **raw chunked**: the same bytes
  written with the handoff's chunking (``transfer_submit_write`` per chunk, all in flight);
- **memcpy**: a host copy of the same bytes (``numpy.copyto``, one thread).

Time = best of the repeats; GB/s = payload bytes / time. The handoff's target is >= 0.8 of the raw
Mooncake transfer (``speedup["raw Mooncake"]`` = raw time / handoff time). Both processes share this
machine's cores with the kernel's loopback TCP copies.

    python scripts/bench_disagg.py [--quick] [--out DIR]        # or: ms-kvcache bench --ops disagg

Needs ``ms_kvcache[disagg]`` (Mooncake, pyzmq, xxhash); without Mooncake :func:`run` returns no rows and
says why on stderr.
"""
import os
import sys
import time

import numpy as np

__all__ = ["run", "CASES"]

#: name: (kv_format, num_layers, planes [(num_kv_heads, head_size)], dtype, block_size, token counts)
CASES = {
    "llama3-8b": ("separate", 32, [(8, 128), (8, 128)], "bfloat16", 128, (256, 1024, 4096)),
    "deepseek-v3-mla": ("mla", 61, [(1, 512), (1, 64)], "bfloat16", 128, (1024,)),
}
QUICK_CASES = {
    "tiny": ("separate", 4, [(2, 64), (2, 64)], "float16", 16, (64, 512)),
}
REPEATS, QUICK_REPEATS = 5, 2
CHUNK_BYTES = None  # None: KVSender's default chunking


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

    def receive_async(self, block_ids, timeout, stream=False):
        self.conn.send(("receive", list(map(int, block_ids)), timeout, bool(stream)))

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


def _case_rows(name, case, repeats, log):
    from ms_kvcache.bench._util import make_row, memcpy_seconds
    from ms_kvcache.disagg import KVSender

    fmt, L, planes, dtype, bs, tokens = case
    max_t = max(tokens)
    nblk = -(-max_t // bs)
    num_blocks = 2 * nblk  # room for a permutation of distinct blocks on both sides
    spec = {"kv_format": fmt, "num_layers": L, "planes": planes, "dtype": dtype, "num_blocks": num_blocks,
            "block_size": bs, "max_tokens": max_t}
    log(f"disagg: {name}: building caches and the receiver process")
    caches = make_caches(fmt, L, planes, dtype, num_blocks, bs, seed=0)
    chunk = None if CHUNK_BYTES is None else max(1, CHUNK_BYTES // (L * sum(h * d for h, d in planes)
                                                                     * _np_dtype(dtype).itemsize))
    sender = KVSender(caches, fmt, max_tokens=max_t, chunk_tokens=chunk)
    peer = _Peer(spec)
    rows = []
    rng = np.random.default_rng(1)
    try:
        for T in tokens:
            n = -(-T // bs)
            src = rng.permutation(num_blocks)[:n]
            dst = rng.permutation(num_blocks)[:n]
            nbytes = T * sender.layout.bytes_per_token
            best = {"handoff": float("inf"), "raw": float("inf"), "raw_chunked": float("inf")}
            last = {}
            for r in range(repeats + 1):  # the first round warms every path up (not timed)
                peer.receive_async(dst, 120.0)
                t0 = time.perf_counter()
                res = sender.send(peer.info["address"], src, T, timeout=120.0)
                t_h = time.perf_counter() - t0
                rres = peer.result(120.0)
                t0 = time.perf_counter()
                rc = sender.engine.engine.transfer_sync_write(peer.info["te"], sender.staging.ptr, peer.info["ptr"],
                                                              nbytes)
                t_r = time.perf_counter() - t0
                if rc != 0:
                    raise RuntimeError(f"bench disagg: raw transfer_sync_write failed with code {rc}")
                t0 = time.perf_counter()
                _raw_chunked(sender, peer.info["te"], peer.info["ptr"], nbytes)
                t_c = time.perf_counter() - t0
                if r:
                    if t_h < best["handoff"]:
                        last = {"send": res, "recv": rres}
                    best["handoff"] = min(best["handoff"], t_h)
                    best["raw"] = min(best["raw"], t_r)
                    best["raw_chunked"] = min(best["raw_chunked"], t_c)
            mc = memcpy_seconds(nbytes)
            s, rv = last["send"], last["recv"]
            ratio = best["raw"] / best["handoff"]
            note = (f"handoff {nbytes / best['handoff'] / 1e9:.2f} GB/s = {ratio:.2f}x raw Mooncake "
                    f"({nbytes / best['raw'] / 1e9:.2f} GB/s; target >= 0.8), raw chunked "
                    f"{nbytes / best['raw_chunked'] / 1e9:.2f} GB/s; {s['chunks']} chunks; sender d2h "
                    f"{s['d2h_seconds'] * 1e3:.1f} ms + checksum {s['checksum_seconds'] * 1e3:.1f} ms, receiver "
                    f"verify {rv['verify_seconds'] * 1e3:.1f} ms + h2d {rv['h2d_seconds'] * 1e3:.1f} ms; "
                    f"Mooncake tcp over loopback, 2 processes")
            row = make_row("multi_layer_kv_transfer", f"disagg handoff {name} {dtype} ({fmt}, L{L})", T, nbytes,
                           best["handoff"], memcpy_s=mc,
                           baselines={"raw Mooncake": best["raw"], "raw Mooncake chunked": best["raw_chunked"]},
                           dtype=dtype, note=note)
            row.update({"raw_mooncake_gbps": nbytes / best["raw"] / 1e9, "ratio_raw_mooncake": ratio,
                        "raw_chunked_gbps": nbytes / best["raw_chunked"] / 1e9, "chunks": s["chunks"]})
            rows.append(row)
            log(f"disagg: {name} T={T}: {row['note']}")
    finally:
        peer.stop()
        sender.close()
    return rows


def run(quick=False, log=None):
    """Rows of the handoff benchmark (see the module docstring); ``[]`` when Mooncake is unavailable."""
    from ms_kvcache.disagg import mooncake_available

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    os.environ.setdefault("MC_LOG_LEVEL", "WARNING")  # before Mooncake loads: no INFO lines in a benchmark
    ok, why = mooncake_available()
    if not ok:
        log(f"disagg: skipped: {why}")
        return []
    rows = []
    cases = QUICK_CASES if quick else CASES
    for name, case in cases.items():
        rows += _case_rows(name, case, QUICK_REPEATS if quick else REPEATS, log)
    return rows
