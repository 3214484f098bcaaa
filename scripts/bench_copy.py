#!/usr/bin/env python
"""Benchmark of the copy operators on the cpu backend (CPU figures of the machine it runs on).

Llama-3-8B-like shapes: 8 KV heads, head_size 128, bfloat16, block_size 128, T new tokens scattered over
the cache by a random slot permutation. For each T it measures, in one run:

- reshape_and_cache through the MindSpore op (PyNative; GB/s of K+V rows written),
- a plain memcpy of the same bytes (numpy copy of one contiguous buffer; single thread),
- numpy fancy-index assignment into numpy caches (``kc[slots] = key``; uint16 view of the bf16 data),
- MindSpore's in-place ``ops.scatter_update`` on Parameters (no bf16 kernel on CPU: float16, same bytes),
- MindSpore's ``param[idx] = value`` (Tensor setitem on the Parameter; float16 like scatter_update),

and the per-call overhead at T = 1 in PyNative and in a GRAPH_MODE Cell, next to ``ops.add``, and the
per-call time against the cache size (256 KiB vs 256 MiB; ``--ops no_copy``).
A few more rows give the other copy ops' bandwidth against memcpy.

    python scripts/bench_copy.py               # full table
    python scripts/bench_copy.py --quick       # fewer sizes and repetitions
    python scripts/bench_copy.py --json out.json --csv out.csv

``run(ops=None, quick=False) -> list[dict]`` is the programmatic entry (used by ``ms-kvcache bench``).
"""
import argparse
import csv
import json
import os
import sys
import time

os.environ.setdefault("GLOG_v", "3")

import numpy as np  # noqa: E402

HEADS, HEAD_SIZE, BLOCK_SIZE = 8, 128, 128
TOKENS = (1, 16, 256, 4096, 16384)
QUICK_TOKENS = (1, 256, 4096)
ALL_OPS = ("reshape_and_cache", "overhead", "no_copy", "reshape_and_cache_merged", "concat_and_cache_mla",
           "copy_blocks", "swap_blocks")


def _ms():
    import mindspore as ms

    return ms


def _timeit(fn, sync, reps, inner=1, warmup=1):
    """Best seconds per call of fn over `reps` rounds of `inner` calls, each round closed by sync()."""
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def _timeit_interleaved(cases, reps, warmup=1):
    """Like _timeit for several {name: (fn, sync, inner)} at once, alternating their rounds so that all
    of them see the same machine load (this 2-core machine is shared); best seconds per call each."""
    for fn, sync, _ in cases.values():
        for _ in range(warmup):
            fn()
        sync()
    best = {k: float("inf") for k in cases}
    for _ in range(reps):
        for name, (fn, sync, inner) in cases.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            best[name] = min(best[name], (time.perf_counter() - t0) / inner)
    return best


def _polite_sync(anchor):
    """Wait for MindSpore's PyNative pipeline without busy-waiting, then sync on `anchor`.

    ``Tensor.asnumpy()`` spins the calling thread until the pipeline drains; on a 2-core machine that
    takes a core from the kernels being measured (reshape_and_cache at T = 4096 measured 2-3x slower).
    ``_cpu_pyboost.wait_idle`` sleep-polls the pipeline queues first, so asnumpy() then returns at once.
    """
    from ms_kvcache import _custom

    mod = _custom._fast_module()
    if mod is not None:
        mod.wait_idle()
    anchor.asnumpy()


def _inner_for(nbytes):
    """Calls per timed round: ~20 ms of work and at least 8 calls, so that the one pipeline sync closing
    a PyNative round (~1-4 ms on this 2-core machine, MindSpore's worker threads spin) is amortised."""
    return int(max(8, min(2000, 20e6 / max(nbytes, 1))))


def _bf16(shape, rng):
    import ml_dtypes

    return rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)


def _tensor(a, ms_dtype=None):
    ms = _ms()
    if ms_dtype is not None:
        return ms.Tensor(a.astype(np.float32), dtype=ms_dtype)
    return ms.Tensor(a)


def bench_reshape_and_cache(tokens, reps, rng):
    """One row per T: op vs memcpy vs numpy fancy index vs scatter_update vs setitem."""
    ms = _ms()
    from mindspore import Parameter, ops

    import ms_kvcache

    rows = []
    max_t = max(tokens)
    nb = (max_t + BLOCK_SIZE - 1) // BLOCK_SIZE + 32
    num_slots = nb * BLOCK_SIZE
    shape = (nb, BLOCK_SIZE, HEADS, HEAD_SIZE)
    kc = Parameter(ms.Tensor(np.zeros(shape, np.float32), dtype=ms.bfloat16), name="bench_kc")
    vc = Parameter(ms.Tensor(np.zeros(shape, np.float32), dtype=ms.bfloat16), name="bench_vc")
    kc16 = Parameter(ms.Tensor(np.zeros((num_slots, HEADS, HEAD_SIZE), np.float16)), name="bench_kc16")
    vc16 = Parameter(ms.Tensor(np.zeros((num_slots, HEADS, HEAD_SIZE), np.float16)), name="bench_vc16")
    np_kc = np.zeros((num_slots, HEADS, HEAD_SIZE), np.uint16)
    np_vc = np.zeros_like(np_kc)

    def sync():
        _polite_sync(kc)

    def spin_sync():
        kc.asnumpy()

    for t in tokens:
        key_np, value_np = _bf16((t, HEADS, HEAD_SIZE), rng), _bf16((t, HEADS, HEAD_SIZE), rng)
        key, value = _tensor(key_np, ms.bfloat16), _tensor(value_np, ms.bfloat16)
        slots_np = rng.permutation(num_slots)[:t].astype(np.int64)
        slots = ms.Tensor(slots_np)
        nbytes = 2 * t * HEADS * HEAD_SIZE * 2  # K and V rows written
        inner = _inner_for(nbytes)
        src = np.frombuffer(rng.bytes(nbytes), np.uint8)
        dst = np.empty_like(src)
        k16, v16 = key_np.view(np.uint16), value_np.view(np.uint16)

        def fancy():
            np_kc[slots_np] = k16
            np_vc[slots_np] = v16

        def op():
            ms_kvcache.reshape_and_cache(key, value, kc, vc, slots)

        best = _timeit_interleaved({
            "op": (op, sync, inner),
            "memcpy": (lambda: np.copyto(dst, src), lambda: None, inner),
            "numpy": (fancy, lambda: None, inner),
        }, reps + 2)
        t_op, t_memcpy, t_numpy = best["op"], best["memcpy"], best["numpy"]
        t_op_spin = _timeit(op, spin_sync, max(1, reps // 2), inner)

        key16, value16 = ms.Tensor(key_np.astype(np.float16)), ms.Tensor(value_np.astype(np.float16))
        idx32 = ms.Tensor(slots_np.astype(np.int32))

        def scatter():
            ops.scatter_update(kc16, idx32, key16)
            ops.scatter_update(vc16, idx32, value16)

        t_scatter = _timeit(scatter, lambda: _polite_sync(kc16), reps, _inner_for(nbytes) if t >= 256 else 20)

        def setitem():
            kc16[idx32] = key16
            vc16[idx32] = value16

        setitem_reps = reps if t <= 256 else max(1, reps // 2)
        t_setitem = _timeit(setitem, lambda: _polite_sync(kc16), setitem_reps, 1 if t > 16 else 10)

        # correctness spot check of the op itself (last token)
        b, o = divmod(int(slots_np[-1]), BLOCK_SIZE)
        got = np.asarray(kc.asnumpy()[b, o]).view(np.uint16)
        ok = np.array_equal(got.reshape(-1), k16[-1].reshape(-1))
        rows.append({
            "bench": "reshape_and_cache", "T": t, "dtype": "bfloat16", "bytes": nbytes,
            "op_us": t_op * 1e6, "op_gbps": nbytes / t_op / 1e9, "op_gbps_spin_sync": nbytes / t_op_spin / 1e9,
            "memcpy_us": t_memcpy * 1e6, "memcpy_gbps": nbytes / t_memcpy / 1e9,
            "ratio_to_memcpy": t_memcpy / t_op,
            "numpy_fancy_us": t_numpy * 1e6, "speedup_vs_numpy": t_numpy / t_op,
            "scatter_update_fp16_us": t_scatter * 1e6, "speedup_vs_scatter_update": t_scatter / t_op,
            "setitem_fp16_us": t_setitem * 1e6, "speedup_vs_setitem": t_setitem / t_op,
            "cache_mib": 2 * kc.size * 2 / 2**20, "correct": bool(ok),
        })
    return rows


def bench_overhead(reps, rng):
    """Per-call overhead at T = 1: PyNative and a GRAPH_MODE Cell, next to ops.add in the same modes."""
    ms = _ms()
    from mindspore import Parameter, nn, ops

    import ms_kvcache
    from ms_kvcache import _custom

    shape = (64, BLOCK_SIZE, HEADS, HEAD_SIZE)
    kc = Parameter(ms.Tensor(np.zeros(shape, np.float32), dtype=ms.bfloat16), name="ovh_kc")
    vc = Parameter(ms.Tensor(np.zeros(shape, np.float32), dtype=ms.bfloat16), name="ovh_vc")
    key = ms.Tensor(_bf16((1, HEADS, HEAD_SIZE), rng).astype(np.float32), dtype=ms.bfloat16)
    slot = ms.Tensor(np.array([5], np.int32))
    a = ms.Tensor(np.ones((1,), np.float32))
    n = 2000

    def sync():
        kc.asnumpy()

    rows = []
    best = _timeit_interleaved({"add": (lambda: ops.add(a, a), sync, n),
                                "op": (lambda: ms_kvcache.reshape_and_cache(key, key, kc, vc, slot), sync, n)},
                               reps + 2)
    t_add, t_op = best["add"], best["op"]
    old = _custom.set_fast_path(False)
    try:
        t_custom = _timeit(lambda: ms_kvcache.reshape_and_cache(key, key, kc, vc, slot), sync, reps, n // 4)
    finally:
        _custom.set_fast_path(old)
    fast_ok = _custom.fast_path_available()[0]
    rows.append({"bench": "overhead", "mode": "pynative", "T": 1, "op_us": t_op * 1e6, "ops_add_us": t_add * 1e6,
                 "ratio_to_add": t_op / t_add, "fast_path": fast_ok, "ops_custom_us": t_custom * 1e6})

    class OpCell(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc, self.vc = kc, vc

        def construct(self, k, s):
            ms_kvcache.reshape_and_cache(k, k, self.kc, self.vc, s)
            return s

    class AddCell(nn.Cell):
        def construct(self, x, s):
            return ops.add(x, x)

    old_mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        op_cell, add_cell = OpCell(), AddCell()
        best = _timeit_interleaved({"add": (lambda: add_cell(a, slot), sync, n // 4),
                                    "op": (lambda: op_cell(key, slot), sync, n // 4)}, reps + 2, warmup=2)
        t_gadd, t_gop = best["add"], best["op"]
    finally:
        ms.set_context(mode=old_mode)
    rows.append({"bench": "overhead", "mode": "graph", "T": 1, "op_us": t_gop * 1e6, "ops_add_us": t_gadd * 1e6,
                 "ratio_to_add": t_gop / t_gadd})
    return rows


def bench_no_copy(reps, rng):
    """Per-call time of reshape_and_cache at T = 1 (int8, 8 heads x 128) into a 256 KiB and a 256 MiB cache
    per plane, PyNative: an op that copied its cache would cost ~100 ms more at 256 MiB. (This was a timed
    test; tests/test_reshape_and_cache.py now checks the no-copy property structurally.)"""
    ms = _ms()
    from mindspore import Parameter

    import ms_kvcache

    h, d, bs = HEADS, HEAD_SIZE, 16
    key = ms.Tensor(rng.integers(-128, 128, size=(1, h, d), dtype=np.int8))
    slot = ms.Tensor(np.array([3], np.int32))
    rows, per_call = [], {}
    for nb in (8, 8192):
        kc = Parameter(ms.Tensor(np.zeros((nb, bs, h, d), np.int8)), name=f"nocopy_k{nb}")
        vc = Parameter(ms.Tensor(np.zeros((nb, bs, h, d), np.int8)), name=f"nocopy_v{nb}")
        per_call[nb] = _timeit(lambda: ms_kvcache.reshape_and_cache(key, key, kc, vc, slot), lambda: _polite_sync(kc),
                               reps, inner=50)
        rows.append({"bench": "no_copy", "cache_mib": nb * bs * h * d / 2**20, "T": 1, "op_us": per_call[nb] * 1e6})
        del kc, vc
    for r in rows:
        r["ratio_to_smallest"] = r["op_us"] / rows[0]["op_us"]
    return rows


def bench_other_ops(selected, reps, rng, t=4096):
    """Bandwidth of the other copy ops against a memcpy of the same bytes (bf16, Llama-like shapes)."""
    ms = _ms()
    from mindspore import Parameter

    import ms_kvcache

    rows = []
    nb = t // BLOCK_SIZE + 16
    slots = ms.Tensor(rng.permutation(nb * BLOCK_SIZE)[:t].astype(np.int64))

    def bf(shape):
        return ms.Tensor(_bf16(shape, rng).astype(np.float32), dtype=ms.bfloat16)

    cases = {}
    if "reshape_and_cache_merged" in selected:
        kv = Parameter(bf((2, nb, BLOCK_SIZE, HEADS, HEAD_SIZE)), name="o_kv")
        k, v = bf((t, HEADS, HEAD_SIZE)), bf((t, HEADS, HEAD_SIZE))
        cases["reshape_and_cache_merged"] = (lambda k=k, v=v, kv=kv: ms_kvcache.reshape_and_cache_merged(k, v, kv, slots),
                                             2 * t * HEADS * HEAD_SIZE * 2, kv, f"T={t}")
    if "concat_and_cache_mla" in selected:
        cc, pc = Parameter(bf((nb, BLOCK_SIZE, 512)), name="o_cc"), Parameter(bf((nb, BLOCK_SIZE, 64)), name="o_pc")
        kv_c, k_pe = bf((t, 512)), bf((t, 64))
        cases["concat_and_cache_mla"] = (lambda a=kv_c, b=k_pe, c=cc, d=pc: ms_kvcache.concat_and_cache_mla(a, b, c, d, slots),
                                         t * 576 * 2, cc, f"T={t}, rank 512 + rope 64")
    if "copy_blocks" in selected:
        layers, n = 8, 8
        keys = [Parameter(bf((64, BLOCK_SIZE, HEADS, HEAD_SIZE)), name=f"o_k{i}") for i in range(layers)]
        vals = [Parameter(bf((64, BLOCK_SIZE, HEADS, HEAD_SIZE)), name=f"o_v{i}") for i in range(layers)]
        bm = ms.Tensor(np.stack([np.arange(n), np.arange(n) + 32], 1).astype(np.int64))
        block = BLOCK_SIZE * HEADS * HEAD_SIZE * 2
        cases["copy_blocks"] = (lambda k=keys, v=vals, m=bm: ms_kvcache.copy_blocks(k, v, m), 2 * layers * n * block, keys[0],
                                f"L={layers}, {n} pairs")
    if "swap_blocks" in selected:
        n = 32
        src = Parameter(bf((64, BLOCK_SIZE, HEADS, HEAD_SIZE)), name="o_src")
        dst = Parameter(bf((48, BLOCK_SIZE, HEADS, HEAD_SIZE)), name="o_dst")
        bm = ms.Tensor(np.stack([rng.permutation(64)[:n], rng.permutation(48)[:n]], 1).astype(np.int64))
        cases["swap_blocks"] = (lambda a=src, b=dst, m=bm: ms_kvcache.swap_blocks(a, b, m), n * BLOCK_SIZE * HEADS * HEAD_SIZE * 2,
                                dst, f"{n} blocks")
    # (every lambda binds its tensors as defaults: the cases reuse variable names)
    for name, (fn, nbytes, anchor, what) in cases.items():
        inner = _inner_for(nbytes)
        src_b = np.frombuffer(rng.bytes(nbytes), np.uint8)
        dst_b = np.empty_like(src_b)
        best = _timeit_interleaved({"op": (fn, lambda a=anchor: _polite_sync(a), inner),
                                    "memcpy": (lambda: np.copyto(dst_b, src_b), lambda: None, inner)}, reps + 2)
        t_op, t_mem = best["op"], best["memcpy"]
        rows.append({"bench": name, "shape": what, "dtype": "bfloat16", "bytes": nbytes, "op_us": t_op * 1e6,
                     "op_gbps": nbytes / t_op / 1e9, "memcpy_gbps": nbytes / t_mem / 1e9,
                     "ratio_to_memcpy": t_mem / t_op})
    return rows


def run(ops=None, quick=False):
    """Run the benchmark; returns one dict per table row.

    Args:
        ops (iterable of str | None): subset of ``ALL_OPS`` ("reshape_and_cache", "overhead",
            "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks"); None = all.
        quick (bool): fewer token counts and repetitions (~20 s instead of ~1-2 min).

    Runs in PyNative on the cpu backend (the MindSpore mode and ms_kvcache backend are restored after).
    Rows: ``bench`` = "reshape_and_cache" (per T: op/memcpy/numpy/scatter_update/setitem times, GB/s,
    ratios), "overhead" (per mode: op vs ops.add us per call at T = 1), or another op's name (GB/s vs
    memcpy).
    """
    ms = _ms()
    import ms_kvcache

    selected = tuple(ALL_OPS if ops is None else ops)
    unknown = set(selected) - set(ALL_OPS)
    if unknown:
        raise ValueError(f"run: argument 'ops': expected names from {ALL_OPS}, got {sorted(unknown)}")
    old_mode, old_backend = ms.get_context("mode"), ms_kvcache.get_backend()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms_kvcache.set_backend("cpu")
    try:
        rng = np.random.default_rng(0)
        reps = 3 if quick else 5
        rows = []
        if "reshape_and_cache" in selected:
            rows += bench_reshape_and_cache(QUICK_TOKENS if quick else TOKENS, reps, rng)
        if "overhead" in selected:
            rows += bench_overhead(reps, rng)
        if "no_copy" in selected:
            rows += bench_no_copy(reps, rng)
        rows += bench_other_ops(selected, reps, rng)
    finally:
        ms.set_context(mode=old_mode)
        ms_kvcache.set_backend(old_backend)
    return [_standard_keys(r) for r in rows]


def _standard_keys(r):
    """Add the ``ms-kvcache bench`` row keys (``ms_kvcache.bench.ROW_KEYS``: op, case, tokens, seconds,
    gbps, memcpy_gbps, ratio_memcpy, speedup, ...) to a row of this script (its own keys stay, for
    format_table)."""
    kind = r["bench"]
    out = {"backend": "cpu", "dtype": r.get("dtype", "bfloat16")}
    if kind == "reshape_and_cache":
        out.update(op="reshape_and_cache", case=f"bf16 H{HEADS} D{HEAD_SIZE} bs{BLOCK_SIZE}", tokens=r["T"],
                   bytes=r["bytes"], seconds=r["op_us"] / 1e6, gbps=r["op_gbps"], memcpy_gbps=r["memcpy_gbps"],
                   ratio_memcpy=r["ratio_to_memcpy"],
                   speedup={"numpy fancy index": r["speedup_vs_numpy"],
                            "scatter_update": r["speedup_vs_scatter_update"], "setitem": r["speedup_vs_setitem"]})
    elif kind == "overhead":
        out.update(op="reshape_and_cache", case=f"per-call overhead T=1, {r['mode']}", tokens=1,
                   seconds=r["op_us"] / 1e6, speedup={"ops.add": r["ops_add_us"] / r["op_us"]},
                   note=f"{r['op_us']:.1f} us per call, ops.add {r['ops_add_us']:.1f} us")
    elif kind == "no_copy":
        out.update(op="reshape_and_cache", case=f"no copy: T=1 into a {r['cache_mib']:.2f} MiB cache", tokens=1,
                   dtype="int8", seconds=r["op_us"] / 1e6,
                   note=f"{r['op_us']:.1f} us per call, {r['ratio_to_smallest']:.2f}x the smallest cache")
    else:
        out.update(op=kind, case=r["shape"], bytes=r["bytes"], seconds=r["op_us"] / 1e6, gbps=r["op_gbps"],
                   memcpy_gbps=r["memcpy_gbps"], ratio_memcpy=r["ratio_to_memcpy"])
    return {**r, **out}


def format_table(rows):
    out = []
    main = [r for r in rows if r["bench"] == "reshape_and_cache"]
    if main:
        out.append(f"reshape_and_cache, bf16, {HEADS} KV heads x {HEAD_SIZE}, block_size {BLOCK_SIZE} "
                   f"(cache {main[0]['cache_mib']:.0f} MiB for K+V), PyNative, cpu backend")
        out.append(f"{'T':>6} {'bytes':>10} {'op us':>9} {'op GB/s':>8} {'(spin)':>7} {'memcpy GB/s':>11} "
                   f"{'op/memcpy':>9} {'x numpy':>8} {'x scatter_upd':>13} {'x setitem':>10}")
        for r in main:
            out.append(f"{r['T']:>6} {r['bytes']:>10} {r['op_us']:>9.1f} {r['op_gbps']:>8.2f} {r['op_gbps_spin_sync']:>7.2f} "
                       f"{r['memcpy_gbps']:>11.2f} {r['ratio_to_memcpy']:>9.2f} {r['speedup_vs_numpy']:>8.1f} "
                       f"{r['speedup_vs_scatter_update']:>13.1f} {r['speedup_vs_setitem']:>10.1f}")
        out.append("  bytes = K+V rows written; op = PyNative call, rounds closed by a sleep-polling wait for the pipeline "
                   "((spin) = closed by Tensor.asnumpy(), whose busy-wait takes a core); memcpy = numpy copy of one "
                   "contiguous buffer of the same bytes (1 thread); x numpy = numpy fancy-index assignment; "
                   "scatter_update / setitem in float16 (no bf16 CPU kernel); speed-ups = their time / op time.")
    ovh = [r for r in rows if r["bench"] == "overhead"]
    if ovh:
        out.append("")
        out.append("per-call overhead at T = 1")
        for r in ovh:
            extra = ""
            if r["mode"] == "pynative":
                extra = (f"  (fast path {'on' if r['fast_path'] else 'OFF'}; through ops.Custom: "
                         f"{r['ops_custom_us']:.1f} us)")
            out.append(f"  {r['mode']:>8}: reshape_and_cache {r['op_us']:7.1f} us, ops.add {r['ops_add_us']:7.1f} us, "
                       f"ratio {r['ratio_to_add']:.2f}{extra}")
    nocopy = [r for r in rows if r["bench"] == "no_copy"]
    if nocopy:
        out.append("")
        out.append("no copy: reshape_and_cache at T = 1, PyNative, per call against the cache size (int8, K and V)")
        for r in nocopy:
            out.append(f"  cache {r['cache_mib']:8.2f} MiB per plane: {r['op_us']:8.1f} us  "
                       f"({r['ratio_to_smallest']:.2f}x the smallest)")
    other = [r for r in rows if r["bench"] not in ("reshape_and_cache", "overhead", "no_copy")]
    if other:
        out.append("")
        out.append("other copy ops (bf16, PyNative)")
        for r in other:
            out.append(f"  {r['bench']:>25} {r['shape']:>26}: {r['op_gbps']:6.2f} GB/s, memcpy {r['memcpy_gbps']:6.2f} GB/s, "
                       f"ratio {r['ratio_to_memcpy']:.2f}")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    p.add_argument("--ops", default=None, help=f"comma-separated subset of {','.join(ALL_OPS)}")
    p.add_argument("--json", default=None, help="write rows as JSON to this file ('-' = stdout)")
    p.add_argument("--csv", default=None, help="write rows as CSV to this file")
    args = p.parse_args(argv)
    rows = run(ops=args.ops.split(",") if args.ops else None, quick=args.quick)
    print(format_table(rows))
    if args.json:
        text = json.dumps(rows, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text)
    if args.csv:
        keys = sorted({k for r in rows for k in r})
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
