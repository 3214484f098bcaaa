"""Overheads of the ops that take lists of per-layer tensors (cpu backend; CPU figures of this machine).

Not bandwidth (see bench_copy.py / bench_transfer.py): what the list-of-tensors plumbing costs.

- graph compile time: the first call of a new GRAPH_MODE Cell (minus a later call) whose caches are
  ParameterTuple attributes, for copy_blocks (L key + L value caches), multi_layer_kv_transfer (flat
  SEPARATE_KV tuple and nested DSA_KV tuples) and multi_layer_block_transfer (MLA), L = 40 and 61;
- PyNative time per call (tiny payload, so it is the launch path): copy_blocks, multi_layer_kv_transfer
  and multi_layer_block_transfer, with the fast path (ms_kvcache._cpu_pyboost) and with ops.Custom.

    python scripts/bench_list_ops.py [--quick] [--layers 40 61] [--reps 3]

``run(quick=False) -> list[dict]`` is the programmatic entry (used by ``ms-kvcache bench``).
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("GLOG_v", "3")

import numpy as np  # noqa: E402
import mindspore as ms  # noqa: E402
from mindspore import Parameter, ParameterTuple, Tensor, nn  # noqa: E402

import ms_kvcache as mk  # noqa: E402
from ms_kvcache import _custom  # noqa: E402

_ids = iter(range(10 ** 9))


def _params(n, shape, dtype=np.float16):
    return [Parameter(Tensor(np.zeros(shape, dtype)), name=f"p{next(_ids)}") for _ in range(n)]


class CopyBlocksCell(nn.Cell):
    def __init__(self, layers):
        super().__init__()
        self.k = ParameterTuple(_params(layers, (4, 2, 8)))
        self.v = ParameterTuple(_params(layers, (4, 2, 8)))

    def construct(self, bm):
        mk.copy_blocks(self.k, self.v, bm)
        return bm


class KvTransferCell(nn.Cell):
    def __init__(self, layers, nested):
        super().__init__()
        self.nested = nested
        if nested:  # DSA_KV: (kv_c, k_pe, indexer) per layer
            self.kv = tuple(ParameterTuple(_params(1, (2, 2, 8)) + _params(1, (2, 2, 4)) + _params(1, (2, 2, 4)))
                            for _ in range(layers))
            self.fmt = mk.KVCacheFormat.DSA_KV
        else:  # SEPARATE_KV flat, layer-major
            self.kv = ParameterTuple(_params(2 * layers, (2, 2, 1, 8)))
            self.fmt = mk.KVCacheFormat.SEPARATE_KV

    def construct(self, buf, slots):
        mk.multi_layer_kv_transfer(buf, self.kv, slots, kv_format=self.fmt, direction="h2d")
        return slots


class BlockTransferCell(nn.Cell):
    def __init__(self, layers):
        super().__init__()
        self.kv = ParameterTuple(_params(layers, (2, 2, 8)) + _params(layers, (2, 2, 4)))
        self.kv = ParameterTuple([p for pair in zip(self.kv[:layers], self.kv[layers:]) for p in pair])

    def construct(self, host_c, host_pe, ids):
        mk.multi_layer_block_transfer(self.kv, (host_c, host_pe), ids, direction="h2d")
        return ids


def _compile_time(make, args, reps):
    out = []
    for _ in range(reps):
        cell = make()
        t0 = time.perf_counter()
        cell(*args)[0].asnumpy()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        cell(*args)[0].asnumpy()
        out.append(first - (time.perf_counter() - t0))
    return statistics.median(out)


def graph_rows(layers_list, reps):
    ms.set_context(mode=ms.GRAPH_MODE)
    rows = []
    try:
        for L in layers_list:
            bm = Tensor(np.array([[0, 1]], np.int64))
            rows.append((f"copy_blocks L={L} (2L caches)", _compile_time(lambda: CopyBlocksCell(L), (bm,), reps)))
            slots = Tensor(np.array([1, 2], np.int64))
            buf = Tensor(np.zeros(mk.transfer_buffer_shape("SEPARATE_KV", L, 2, 8), np.float16))
            rows.append((f"multi_layer_kv_transfer SEPARATE flat L={L}",
                         _compile_time(lambda: KvTransferCell(L, False), (buf, slots), reps)))
            buf = Tensor(np.zeros(mk.transfer_buffer_shape("DSA_KV", L, 2, (8, 4, 4)), np.float16))
            rows.append((f"multi_layer_kv_transfer DSA nested L={L}",
                         _compile_time(lambda: KvTransferCell(L, True), (buf, slots), reps)))
            ids = Tensor(np.array([1], np.int64))
            hc = Tensor(np.zeros((1, 2, L, 8), np.float16))
            hp = Tensor(np.zeros((1, 2, L, 4), np.float16))
            rows.append((f"multi_layer_block_transfer MLA L={L}",
                         _compile_time(lambda: BlockTransferCell(L), (hc, hp, ids), reps)))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    return rows


def _per_call(fn, n):
    fn()
    fn()
    mk.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        mk.synchronize()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def pynative_rows(layers_list, n):
    rows = []
    for L in layers_list:
        k = [Tensor(np.zeros((4, 2, 8), np.float16)) for _ in range(L)]
        v = [Tensor(np.zeros((4, 2, 8), np.float16)) for _ in range(L)]
        bm = Tensor(np.array([[0, 1]], np.int64))
        sep = [(Tensor(np.zeros((2, 2, 1, 8), np.float16)), Tensor(np.zeros((2, 2, 1, 8), np.float16)))
               for _ in range(L)]
        slots = Tensor(np.array([1, 2], np.int64))
        buf = Tensor(np.zeros(mk.transfer_buffer_shape("SEPARATE_KV", L, 2, 8), np.float16))
        mla = [(Tensor(np.zeros((2, 2, 8), np.float16)), Tensor(np.zeros((2, 2, 4), np.float16))) for _ in range(L)]
        ids = Tensor(np.array([1], np.int64))
        host = (Tensor(np.zeros((1, 2, L, 8), np.float16)), Tensor(np.zeros((1, 2, L, 4), np.float16)))
        cases = (
            (f"copy_blocks L={L}", lambda: mk.copy_blocks(k, v, bm)),
            (f"multi_layer_kv_transfer SEPARATE L={L} d2h",
             lambda: mk.multi_layer_kv_transfer(buf, sep, slots, kv_format="SEPARATE_KV", direction="d2h")),
            (f"multi_layer_kv_transfer SEPARATE L={L} h2d",
             lambda: mk.multi_layer_kv_transfer(buf, sep, slots, kv_format="SEPARATE_KV", direction="h2d")),
            (f"multi_layer_block_transfer MLA L={L} h2d",
             lambda: mk.multi_layer_block_transfer(mla, host, ids, direction="h2d")),
        )
        for name, fn in cases:
            got = {}
            for fast in (True, False):
                old = _custom.set_fast_path(fast)
                try:
                    if fast and not _custom.fast_path_available()[0]:
                        got[fast] = None
                        continue
                    got[fast] = _per_call(fn, n)
                finally:
                    _custom.set_fast_path(old)
            rows.append((name, got[True], got[False]))
    return rows


def run(quick=False, layers=None, reps=None, calls=None):
    """Rows in the ``ms-kvcache bench`` convention (``ms_kvcache.bench.ROW_KEYS``): one per graph compile
    case (``seconds`` = compile time) and per PyNative case (``seconds`` = per call on the fast path,
    ``speedup["ops.Custom"]`` = its per-call time over the fast path's). quick: L = 40, one compile per
    case, 50 calls."""
    layers = layers or ([40] if quick else [40, 61])
    reps = reps or (1 if quick else 3)
    calls = calls or (50 if quick else 200)
    old = mk.get_backend()
    mk.set_backend("cpu")
    rows = []
    try:
        for name, t in graph_rows(layers, reps):
            rows.append({"op": name.split()[0], "case": f"graph compile time, {name.split(' ', 1)[1]}",
                         "backend": "cpu", "seconds": t, "note": f"compile {t * 1e3:.1f} ms"})
        for name, fast, slow in pynative_rows(layers, calls):
            row = {"op": name.split()[0], "case": f"PyNative per call (tiny payload), {name.split(' ', 1)[1]}",
                   "backend": "cpu", "seconds": fast if fast is not None else slow,
                   "note": ("fast path n/a" if fast is None else f"fast path {fast * 1e6:.1f} us")
                           + f", ops.Custom {slow * 1e6:.1f} us"}
            if fast:
                row["speedup"] = {"ops.Custom": slow / fast}
            rows.append(row)
    finally:
        mk.set_backend(old)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", default=[40, 61])
    p.add_argument("--reps", type=int, default=3, help="new Cells compiled per graph case (median)")
    p.add_argument("--calls", type=int, default=200, help="PyNative calls per timing")
    p.add_argument("--quick", action="store_true", help="L = 40 only, 1 compile per case, 50 calls")
    p.add_argument("--skip-graph", action="store_true")
    a = p.parse_args(argv)
    if a.quick:
        a.layers, a.reps, a.calls = [40], 1, 50
    mk.set_backend("cpu")
    print(f"cpu backend, MindSpore {ms.__version__}; CPU figures of this machine (shared, noisy)")
    print(f"fast path: {_custom.fast_path_available()}")
    if not a.skip_graph:
        print("\nGRAPH_MODE compile time (first call minus a later call), median of", a.reps)
        for name, t in graph_rows(a.layers, a.reps):
            print(f"  {name:48s} {t * 1e3:9.1f} ms")
    print("\nPyNative time per call (tiny payload; best of 5 x", a.calls, "calls)")
    print(f"  {'case':48s} {'fast path':>10s} {'ops.Custom':>11s}")
    for name, fast, slow in pynative_rows(a.layers, a.calls):
        f = "n/a" if fast is None else f"{fast * 1e6:7.1f} us"
        print(f"  {name:48s} {f:>10s} {slow * 1e6:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
