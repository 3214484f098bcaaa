"""Benchmark of :class:`ms_kvcache.LayerwiseTransfer` on the cpu backend: how much of a layer-wise transfer a
per-layer compute loop hides (CPU figures of the machine it runs on).

Layers like Llama-3-8B's (SEPARATE_KV, 8 KV heads x 128, float16, BSND, block_size 16); one sequence of T tokens,
L layers (full: L = 8, T = 8192, 32 MiB per layer; quick: L = 4, T = 1024). Per layer, the compute is k float32
MindSpore matmuls ``[384, 384] x [384, 384]`` (PyNative), k calibrated in the run so that the compute loop takes
about 1x and 2x the transfer. For each direction - h2d: ``start()``, then ``wait_layer(l)`` before layer l's
compute; d2h: layer l's compute, then ``save_layer(l)`` - compute size and copy threads (``aiv_num`` 1, the default,
and 2), three interleaved rounds of

- T_compute: the compute loop alone (until MindSpore's pipeline is idle),
- T_transfer: the transfer alone (``start(); wait()``),
- T_overlapped: the loop with the transfer,

medians of the three; hidden fraction = (T_compute + T_transfer - T_overlapped) / T_transfer, at most (L - 1) / L
(h2d: the first layer's copy comes before any compute; d2h: the last layer's after it).

Control rows ("host wait"): the same loops with each layer's compute replaced by a host sleep of 1x / 2x one
layer's transfer time (T_compute is then the sleeps as they ran): compute that takes no CPU from the copy, as an NPU's takes none from its copy engines. They show
what the mechanism hides once the copy has a core of its own. The row "parallel capacity" times a numpy memcpy and
a numpy matmul alone and in two threads: its hidden fraction near 1 means the machine gave this process two cores,
near 0 that the two ran one after the other (a loaded machine) - the CPU rows cannot hide more than that.

    ms-kvcache bench --ops layerwise [--quick]
    python -m ms_kvcache.bench.layerwise [--quick] [--layers 8] [--tokens 8192] [--json out.json]
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

os.environ.setdefault("GLOG_v", "3")

H, D, BS, N = 8, 128, 16, 384
FULL, QUICK = (8, 8192), (4, 1024)


def _median3(fns):
    """Medians of each function's seconds over 3 interleaved rounds (one warm-up round first)."""
    for fn in fns:
        fn()
    res = [[] for _ in fns]
    for _ in range(3):
        for i, fn in enumerate(fns):
            res[i].append(fn())
    return [statistics.median(r) for r in res]


def parallel_capacity(nbytes=64 << 20):
    """(T_copy, T_matmul, T_both) of a numpy memcpy and a numpy matmul alone and in two threads (both release the
    GIL), medians of 3."""
    import numpy as np

    a = np.ones(nbytes, np.uint8)
    b = np.empty_like(a)
    x = np.random.default_rng(0).random((N, N), dtype=np.float32)

    def cp():
        np.copyto(b, a)

    def mm():
        for _ in range(8):
            x @ x

    def timed(f):
        def run():
            t0 = time.perf_counter()
            f()
            return time.perf_counter() - t0
        return run

    def both():
        th = [threading.Thread(target=cp), threading.Thread(target=mm)]
        t0 = time.perf_counter()
        for t in th:
            t.start()
        for t in th:
            t.join()
        return time.perf_counter() - t0

    return _median3([timed(cp), timed(mm), both])


def measure(num_layers, num_tokens, threads=(1, 2), ratios=(1, 2)):
    """The measurements (list of dicts with the three times per configuration); see the module docstring."""
    import numpy as np
    import mindspore as ms
    from mindspore import Parameter, Tensor, ops

    import ms_kvcache as mk
    from ms_kvcache._backends.cpu import settle_pipeline
    from ms_kvcache.bench._util import memcpy_seconds

    prev = mk.get_backend()
    mk.set_backend("cpu")
    L, T = num_layers, num_tokens
    nb = T // BS + 4
    rng = np.random.default_rng(0)
    caches = [tuple(Parameter(Tensor(rng.standard_normal((nb, BS, H, D)).astype(np.float16)), name=f"lw_{c}{l}")
                    for c in "kv") for l in range(L)]
    slots = Tensor(np.arange(2 * BS, 2 * BS + T, dtype=np.int64))
    try:
        buf = mk.alloc_host_buffer(mk.transfer_buffer_shape("separate", L, T, H * D), ms.float16)
        pinned = True
    except OSError:
        buf = mk.alloc_host_buffer(mk.transfer_buffer_shape("separate", L, T, H * D), ms.float16, pinned=False)
        pinned = False
    nbytes = 2 * L * T * H * D * 2
    a = Tensor(rng.standard_normal((N, N)).astype(np.float32))

    def compute(k):
        for _ in range(k):
            ops.matmul(a, a)

    def loop(k, work):
        def run():
            t0 = time.perf_counter()
            for _ in range(L):
                work(k)
            settle_pipeline()
            return time.perf_counter() - t0
        return run

    rows = []
    try:
        memcpy_s = memcpy_seconds(nbytes, min_time=0.1, repeat=3)
        for aiv in threads:
            lts = {d: mk.LayerwiseTransfer(buf, caches, slots, kv_format="separate", direction=d, aiv_num=aiv)
                   for d in ("h2d", "d2h")}

            def transfer(d):
                def run():
                    t0 = time.perf_counter()
                    lts[d].start()
                    lts[d].wait()
                    return time.perf_counter() - t0
                return run

            t_tr = statistics.median([transfer("d2h")() for _ in range(3)])
            c1 = statistics.median([loop(1, compute)() for _ in range(3)])
            for ratio in ratios:
                k = max(1, round(ratio * t_tr / c1))
                sleep_s = ratio * t_tr / L  # one layer's transfer (x ratio), as a host wait
                for kind, work in (("matmul", compute), ("host wait", lambda kk, s=sleep_s: time.sleep(s))):
                    for d in ("h2d", "d2h"):
                        lt = lts[d]

                        def overlapped(d=d, lt=lt, work=work, k=k):
                            t0 = time.perf_counter()
                            if d == "h2d":
                                lt.start()
                                for layer in range(L):
                                    lt.wait_layer(layer)
                                    work(k)
                                settle_pipeline()
                                lt.wait()
                            else:
                                for layer in range(L):
                                    work(k)
                                    lt.save_layer(layer)
                                lt.wait()
                                settle_pipeline()
                            return time.perf_counter() - t0

                        tc, tt, to = _median3([loop(k, work), transfer(d), overlapped])
                        rows.append(dict(direction=d, compute=kind, ratio=ratio, k=k, threads=aiv, layers=L, tokens=T,
                                         bytes=nbytes, t_compute=tc, t_transfer=tt, t_overlapped=to, memcpy_s=memcpy_s,
                                         pinned=pinned, hidden_fraction=(tc + tt - to) / tt))
            for lt in lts.values():
                lt.close()
    finally:
        mk.set_backend(prev)
    tcp, tmm, tboth = parallel_capacity()
    rows.append(dict(direction="", compute="parallel capacity", ratio=0, k=0, threads=2, layers=0, tokens=T, bytes=0,
                     t_compute=tmm, t_transfer=tcp, t_overlapped=tboth, memcpy_s=None, pinned=pinned,
                     hidden_fraction=(tcp + tmm - tboth) / min(tcp, tmm)))
    return rows


def _row(m, load):
    from ms_kvcache.bench._util import make_row

    if m["compute"] == "parallel capacity":
        note = (f"numpy memcpy {m['t_transfer'] * 1e3:.1f} ms + matmul {m['t_compute'] * 1e3:.1f} ms, in two threads "
                f"{m['t_overlapped'] * 1e3:.1f} ms: {m['hidden_fraction']:.2f} of the shorter hidden; load {load:.1f}")
        return {"op": "multi_layer_kv_transfer", "case": "layerwise: parallel capacity of this machine (numpy)",
                "tokens": m["tokens"], "backend": "cpu", "note": note, "hidden_fraction": m["hidden_fraction"]}
    L = m["layers"]
    case = (f"layerwise {m['direction']}, {m['compute']} {m['ratio']}x, {m['threads']} copy thread"
            f"{'s' if m['threads'] > 1 else ''}, L{L} llama3-8b-like fp16")
    note = (f"hidden {m['hidden_fraction']:.2f} (bound {(L - 1) / L:.2f}): compute {m['t_compute'] * 1e3:.1f} ms + "
            f"transfer {m['t_transfer'] * 1e3:.1f} ms, overlapped {m['t_overlapped'] * 1e3:.1f} ms; load {load:.1f}")
    row = make_row("multi_layer_kv_transfer", case, m["tokens"], m["bytes"], m["t_transfer"], memcpy_s=m["memcpy_s"],
                   dtype="float16", note=note)
    row.update({k: m[k] for k in ("hidden_fraction", "t_compute", "t_transfer", "t_overlapped", "threads", "ratio")})
    return row


def run(quick=False, layers=None, tokens=None):
    """Rows for ``ms-kvcache bench`` (one per direction x compute x size x copy threads, plus the parallel-capacity
    row); CPU figures of this machine."""
    L, T = QUICK if quick else FULL
    ms_rows = measure(layers or L, tokens or T, ratios=(1,) if quick else (1, 2))
    load = os.getloadavg()[0]
    return [_row(m, load) for m in ms_rows]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--layers", type=int)
    p.add_argument("--tokens", type=int)
    p.add_argument("--json", help="also write the rows to this file")
    a = p.parse_args(argv)
    rows = run(a.quick, a.layers, a.tokens)
    from ms_kvcache.bench import print_table

    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    print_table(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
