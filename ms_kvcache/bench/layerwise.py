"""Benchmark of :class:`ms_kvcache.LayerwiseTransfer` on the cpu backend: how much of a layer-wise transfer a
per-layer MindSpore compute loop hides (CPU figures of the machine it runs on).

Layers like Llama-3-8B's (32 layers, SEPARATE_KV, 8 KV heads x 128, float16, BSND, block_size 16); one sequence of
T tokens (full: T = 2048, 8 MiB a layer, 256 MiB in all; quick: 8 layers, T = 512). Per layer, the compute is k
float32 MindSpore matmuls ``[256, 256] x [256, 256]`` (PyNative), k calibrated in the run (rounded up) so that the
compute loop takes at least about 1x and 2x the transfer; each row gives the ratio it got. For each direction - h2d:
``start()``, then ``wait_layer(l)`` before layer l's compute; d2h: layer l's compute, then ``save_layer(l)`` -
compute size and copy threads (``aiv_num`` 1, the default, and 2), one warm-up round, then three interleaved rounds
of

- T_compute: the compute loop alone (until MindSpore's pipeline is idle),
- T_transfer: the transfer alone (``start(); wait()``),
- T_overlapped: the loop with the transfer,

medians of the three; hidden fraction = (T_compute + T_transfer - T_overlapped) / T_transfer, at most (L - 1) / L
(h2d: the first layer's copy comes before any compute; d2h: the last layer's after it).

Two placements of the work on the CPUs, each measured in a fresh process (MindSpore binds its threads when it
starts them):

- "compute on one CPU": ``mindspore.runtime.set_cpu_affinity`` binds MindSpore's runtime and PyNative threads (the
  ones that run its CPU kernels) to the first CPU of the process, and the Python thread goes to the other CPUs (the
  copy worker runs on the CPUs of the thread that builds the transfer): compute and copy each have a core, as an
  NPU's compute and its copy engines do. (Needs a process allowed on 2 CPUs or more.)
- "shared": MindSpore's default; its CPU kernels split a matmul over every core, so the copy can only run by taking
  a core from them.

Reference (the note of each matmul row): a plain ``numpy.copyto`` of the same bytes, one layer's bytes at a time, in
a Python thread beside the same compute loop (on the CPUs a LayerwiseTransfer worker gets), hidden fraction computed
the same way: what this machine lets any copy hide behind that compute (memory bandwidth and caches are shared).

Control rows ("host wait", shared placement, 1 copy thread): each layer's compute is a host sleep of 1x / 2x one
layer's transfer time instead (T_compute is then the sleeps as they ran): compute that takes no CPU from the copy.

    ms-kvcache bench --ops layerwise [--quick]
    python -m ms_kvcache.bench.layerwise [--quick] [--layers 32] [--tokens 2048] [--json out.json]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("GLOG_v", "3")

H, D, BS, N = 8, 128, 16, 256
FULL, QUICK = (32, 2048), (8, 512)
PLACEMENTS = ("compute on one CPU", "shared")


def _median3(fns):
    """Medians of each function's seconds over 3 interleaved rounds (one warm-up round first)."""
    for fn in fns:
        fn()
    res = [[] for _ in fns]
    for _ in range(3):
        for i, fn in enumerate(fns):
            res[i].append(fn())
    return [statistics.median(r) for r in res]


def _numpy_reference(compute_loop, num_layers, nbytes):
    """The machine's own limit: the hidden fraction of a plain copy of the same bytes (``numpy.copyto``, one layer's
    bytes at a time, in a Python thread started from this one, so on the same CPUs as a LayerwiseTransfer worker built
    here) beside the same compute loop, computed as for the transfer (medians of 3 interleaved rounds)."""
    import threading

    import numpy as np

    per = nbytes // num_layers
    src = [np.full(per, i, np.uint8) for i in range(num_layers)]
    dst = [np.empty(per, np.uint8) for _ in range(num_layers)]

    def copy():
        t0 = time.perf_counter()
        for a, b in zip(src, dst):
            np.copyto(b, a)
        return time.perf_counter() - t0

    def overlapped():
        t0 = time.perf_counter()
        th = threading.Thread(target=copy)
        th.start()
        compute_loop()
        th.join()
        return time.perf_counter() - t0

    tc, tcp, to = _median3([compute_loop, copy, overlapped])
    return (tc + tcp - to) / tcp


def bind_compute_to_one_cpu():
    """Bind MindSpore's runtime and PyNative threads to the first CPU this process may use (before MindSpore starts
    them) and this (Python) thread to the others: the LayerwiseTransfer workers it builds run there. Returns the
    compute CPU, or None when the process may use a single CPU."""
    import mindspore as ms

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    ms.runtime.set_cpu_affinity(True, [f"{c}-{c}" for c in cpus], {"runtime": [cpus[0]], "pynative": [cpus[0]]})
    os.sched_setaffinity(0, set(cpus[1:]))
    return cpus[0]


def measure(num_layers, num_tokens, placement, threads=(1, 2), ratios=(1, 2), host_wait=True):
    """The measurements of one placement (list of dicts with the three times per configuration); see the module
    docstring. ``placement`` "compute on one CPU" binds MindSpore's threads: call it in a fresh process."""
    compute_cpu = bind_compute_to_one_cpu() if placement == PLACEMENTS[0] else None
    if placement == PLACEMENTS[0] and compute_cpu is None:
        return []
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

    rows, reference = [], {}
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

            for d in lts:
                transfer(d)()  # warm-up
            t_tr = statistics.median([transfer("d2h")() for _ in range(3)])
            # seconds per matmul per layer: the slope between 2 and 6 matmuls a layer (a loop's fixed cost, e.g. the
            # final wait for the pipeline, does not scale with k)
            t6 = statistics.median([loop(6, compute)() for _ in range(3)])
            t2 = statistics.median([loop(2, compute)() for _ in range(3)])
            # (a load spike can make the slope ~0 or negative: never below half the plain mean per matmul, which
            # would otherwise ask for thousands of matmuls a layer)
            c1 = max((t6 - t2) / 4, t6 / 6 / 2)
            kinds = [("matmul", compute)]
            if host_wait and aiv == threads[0] and placement == PLACEMENTS[1]:
                kinds.append(("host wait", None))
            for ratio in ratios:
                k = max(1, math.ceil(ratio * t_tr / c1))  # (at least the ratio: the goal is compute >= transfer)
                if (placement, ratio) not in reference:
                    reference[placement, ratio] = _numpy_reference(loop(k, compute), L, nbytes)
                sleep_s = ratio * t_tr / L  # one layer's transfer (x ratio), as a host wait
                for kind, work in kinds:
                    if work is None:
                        work = lambda kk, s=sleep_s: time.sleep(s)  # noqa: E731
                    for d in ("h2d", "d2h"):
                        lt = lts[d]

                        def overlapped(lt=lt, d=d, work=work, k=k):
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
                                         pinned=pinned, placement=placement, compute_cpu=compute_cpu,
                                         hidden_fraction=(tc + tt - to) / tt,
                                         reference_hidden=reference[placement, ratio] if kind == "matmul" else None))
            for lt in lts.values():
                lt.close()
    finally:
        mk.set_backend(prev)
    return rows


def _row(m, load):
    from ms_kvcache.bench._util import make_row

    L = m["layers"]
    got = m["t_compute"] / m["t_transfer"]
    case = (f"layerwise {m['direction']}, {m['compute']} {m['ratio']}x, {m['placement']}, {m['threads']} copy thread"
            f"{'s' if m['threads'] > 1 else ''}, L{L} llama3-8b-like fp16")
    ref = "" if m.get("reference_hidden") is None else f", numpy copy {m['reference_hidden']:.2f}"
    note = (f"hidden {m['hidden_fraction']:.2f} (bound {(L - 1) / L:.2f}{ref}): compute {m['t_compute'] * 1e3:.1f} + "
            f"transfer {m['t_transfer'] * 1e3:.1f} ms, overlapped {m['t_overlapped'] * 1e3:.1f} ms; compute "
            f"{got:.1f}x the transfer; load {load:.1f}")
    row = make_row("multi_layer_kv_transfer", case, m["tokens"], m["bytes"], m["t_transfer"], memcpy_s=m["memcpy_s"],
                   dtype="float16", note=note)
    row.update({k: m[k] for k in ("hidden_fraction", "t_compute", "t_transfer", "t_overlapped", "threads", "ratio",
                                  "placement", "direction", "compute")})
    row["reference_hidden"] = m.get("reference_hidden")
    return row


def _in_fresh_process(placement, layers, tokens, quick):
    """``measure`` of one placement in a new Python process (MindSpore binds its threads at their start)."""
    import ms_kvcache

    root = os.path.dirname(os.path.dirname(os.path.abspath(ms_kvcache.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    cmd = [sys.executable, "-m", "ms_kvcache.bench.layerwise", "--placement", placement, "--layers", str(layers),
           "--tokens", str(tokens), "--measure-only"] + (["--quick"] if quick else [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"layerwise benchmark ({placement}) failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run(quick=False, layers=None, tokens=None):
    """Rows for ``ms-kvcache bench``: per placement (each in a fresh process), direction, compute size and copy
    threads; CPU figures of this machine."""
    L, T = QUICK if quick else FULL
    L, T = layers or L, tokens or T
    load = os.getloadavg()[0]
    rows = []
    for placement in PLACEMENTS:
        rows += _in_fresh_process(placement, L, T, quick)
    return [_row(m, load) for m in rows]


def _int_in(lo, hi):
    """argparse type: an int in [lo, hi] (0 would fall back to the default, a negative count fails deep in the run)."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int in [{lo}, {hi}], got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"expected an int in [{lo}, {hi}], got {v}")
        return v
    return parse


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--layers", type=_int_in(1, 128), help="layers (1..128; default 32, quick 8)")
    p.add_argument("--tokens", type=_int_in(BS, 65536), help=f"tokens ({BS}..65536; default 2048, quick 512)")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--placement", choices=PLACEMENTS, help=argparse.SUPPRESS)
    p.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.measure_only:  # one placement, in this (fresh) process: the raw measurements as one JSON line
        L, T = QUICK if a.quick else FULL
        ms_rows = measure(a.layers or L, a.tokens or T, a.placement, threads=(1,) if a.quick else (1, 2),
                          ratios=(1,) if a.quick else (1, 2), host_wait=not a.quick)
        print(json.dumps(ms_rows))
        return 0
    load = os.getloadavg()
    rows = run(a.quick, a.layers, a.tokens)
    from ms_kvcache.bench import print_table

    print(f"load average before: {load}, after: {os.getloadavg()}", file=sys.stderr)
    print_table(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
