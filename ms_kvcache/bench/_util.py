"""Helpers for benchmark authors (optional; any ``run()`` returning rows in the convention works)."""
import time

import numpy as np

__all__ = ["best_time", "memcpy_seconds", "make_row"]


def best_time(fn, min_time=0.2, repeat=5, sync=None):
    """Best wall time of one ``fn()`` call in seconds.

    Each of ``repeat`` rounds calls ``fn`` enough times to last ``min_time`` seconds (at least once)
    and keeps the per-call mean; the best round is returned. ``sync`` (optional) is called after each
    round before the clock stops (e.g. ``lambda: out.asnumpy()``).
    """
    fn()
    if sync:
        sync()
    best = float("inf")
    for _ in range(repeat):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if time.perf_counter() - t0 >= min_time:
                break
        if sync:
            sync()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def memcpy_seconds(nbytes, min_time=0.2, repeat=5):
    """Best time of a plain host memcpy (``numpy.copyto``) of ``nbytes`` bytes: the bandwidth
    reference of memory-bound ops, measured in the same run."""
    nbytes = max(int(nbytes), 1)
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    return best_time(lambda: np.copyto(dst, src), min_time=min_time, repeat=repeat)


def make_row(op, case, tokens, nbytes, seconds, *, memcpy_s=None, baselines=None, backend="cpu", dtype="",
             note=""):
    """One result row in the ``ms-kvcache bench`` convention.

    op: public op name; case: what is fixed besides ``tokens`` (model shape, dtype, layout);
    nbytes: bytes the op must move per call (read + written payload); seconds: time per call;
    memcpy_s: time of a memcpy of ``nbytes`` in the same run; baselines: {name: seconds per call of an
    alternative doing the same work}, turned into speed-ups (baseline time / op time).
    """
    row = {"op": op, "case": case, "tokens": int(tokens), "backend": backend, "dtype": dtype, "bytes": int(nbytes),
           "seconds": float(seconds), "gbps": nbytes / seconds / 1e9 if seconds > 0 else None}
    if memcpy_s:
        row["memcpy_gbps"] = nbytes / memcpy_s / 1e9
        row["ratio_memcpy"] = memcpy_s / seconds if seconds > 0 else None
    if baselines:
        row["speedup"] = {k: v / seconds for k, v in baselines.items() if seconds > 0}
    if note:
        row["note"] = note
    return row
