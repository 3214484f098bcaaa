"""Benchmark of the multi-layer KV transfer ops on the cpu backend (CPU figures of the machine it runs on).

For Llama-3-8B (32 layers, 8 KV heads x 128, bf16, SEPARATE_KV) and DeepSeek-V3 MLA (61 layers, 512 + 64,
bf16, MLA_KV), at 1024 and 8192 tokens, measures in one run:

- GB/s of ``multi_layer_kv_transfer`` (token granularity, BSND caches) and ``multi_layer_block_transfer``
  (block granularity; BNSD caches for Llama, block_size 128; zero-copy and staged), d2h and h2d, moving all
  tokens of the sequence (the bytes of the buffer);
- memcpy of the same number of bytes between two contiguous host buffers, with the kernels' threads and
  with one thread (numpy), and the ratio op / best memcpy;
- the speed-up over a Python loop of per-layer copies with MindSpore built-ins (ops.gather + ops.stack
  for d2h, ops.scatter_update into Parameters for h2d; block granularity adds the BNSD<->token-major
  transposes). MindSpore's CPU built-ins have no bfloat16 kernels (gather, stack, scatter_update), so
  the loop runs on float16 tensors of the same byte size.

Timing: PyNative calls followed by ``ms_kvcache.synchronize()``; best of ``repeats`` after one warm-up,
for the ops, the memcpy and the loop alike. Host buffers come from ``alloc_host_buffer`` (pinned when the
memlock limit allows, else unpinned; the row says which).

    ms-kvcache bench --ops transfer [--quick]   # in the summary table / plot
    python scripts/bench_transfer.py            # full run (~3 GiB of RAM at 8192 tokens)
    python scripts/bench_transfer.py --quick    # small sizes, seconds (the built-in loop at the smallest only)
    python scripts/bench_transfer.py --json out.json
    python scripts/bench_transfer.py --only block:h2d --tokens 8192 --no-baseline   # some rows only

``run(quick=False) -> list[dict]`` is the entry point for ``ms-kvcache bench``; the plot draws the
Llama-3-8B rows (SERIES_MODEL: token and block transfers, zero-copy, both directions) against tokens.
The AscendC kernels' data movement is ``ms_kvcache.bench.transfer_sim``.
"""
import argparse
import gc
import json
import os
import sys
import time

os.environ.setdefault("GLOG_v", "3")

import numpy as np  # noqa: E402

MODELS = {
    # name: (kv_format, num_layers, plane (heads, head_size) list, block_size, cache layout of the block op)
    "llama3-8b": ("SEPARATE_KV", 32, [(8, 128), (8, 128)], 128, "BNSD"),
    "deepseek-v3-mla": ("MLA_KV", 61, [(1, 512), (1, 64)], 128, "BSND"),
}
TOKENS = (1024, 2048, 8192)
QUICK_TOKENS = (128, 256, 512)
SERIES_MODEL = "llama3-8b"  # the model whose rows are the plot's lines


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _best(fn, repeats, slow_s=2.0):
    """Best time of ``repeats`` calls after one warm-up (the warm-up counts when a call takes > slow_s)."""
    import ms_kvcache as mk

    t0 = time.perf_counter()
    fn()
    mk.synchronize()
    best = time.perf_counter() - t0
    if best > slow_s:
        return best
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        mk.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def _best_interleaved(fns, repeats):
    """Best time of each function (each returns its own elapsed seconds), calls interleaved (op, memcpy,
    ...) so that load from other processes hits them alike; one warm-up each."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            best[k] = min(best[k], fn())
    return best


def _timed(fn):
    """Elapsed time of fn() + ms_kvcache.synchronize() (what a PyNative caller who waits sees)."""
    import ms_kvcache as mk

    t0 = time.perf_counter()
    fn()
    mk.synchronize()
    return time.perf_counter() - t0


def _timed_nospin(fn):
    """Elapsed time until the transfer kernel launched by fn() has finished, polled with short sleeps.

    MindSpore's synchronize busy-waits; on a 2-core machine that takes one core from the kernel's two
    threads (measured: the kernel itself runs ~1.6x longer while Python sits in synchronize). The
    kernels count completed calls (``_cpu.transfer_calls``), so the benchmark can wait without spinning.
    """
    import ms_kvcache as mk
    from ms_kvcache import _cpu

    c0 = _cpu.transfer_calls()
    t0 = time.perf_counter()
    fn()
    while _cpu.transfer_calls() == c0 and time.perf_counter() - t0 < 120:  # cpu backend kernels only
        time.sleep(0.0002)
    t = time.perf_counter() - t0
    mk.synchronize()
    return t


def _host(shape, dtype):
    """Pinned host buffer if the memlock limit allows, else unpinned; returns (tensor, pinned)."""
    import ms_kvcache as mk

    try:
        return mk.alloc_host_buffer(shape, dtype), True
    except OSError:
        return mk.alloc_host_buffer(shape, dtype, pinned=False), False


def _alias(t):
    """uint8 numpy array over a host Tensor's memory."""
    import ctypes

    n = int(np.prod(t.shape)) * t.itemsize
    return np.frombuffer((ctypes.c_uint8 * n).from_address(t.data_ptr()), dtype=np.uint8)


class _Case:
    """Caches, buffers and slot mapping of one (model, tokens) point."""

    def __init__(self, model, tokens, seed=0):
        import mindspore as ms
        from mindspore import Tensor

        fmt, L, planes, bs, block_layout = MODELS[model]
        self.model, self.fmt, self.L, self.planes, self.bs, self.block_layout = model, fmt, L, planes, bs, block_layout
        self.T = tokens
        self.nb = tokens // bs
        rng = np.random.default_rng(seed)
        # a sequence's blocks in random order, tokens contiguous inside a block (vLLM-style slot mapping)
        self.block_ids = rng.permutation(self.nb).astype(np.int64)
        self.slots = (self.block_ids[:, None] * bs + np.arange(bs)[None, :]).reshape(-1)[:tokens]
        self.hidden = [h * d for h, d in planes]
        self.nbytes = L * tokens * sum(self.hidden) * 2

        def cache(shape):
            x = rng.integers(-2000, 2000, size=shape, dtype=np.int16).view(_bf16())
            return Tensor(x.astype(np.float32), ms.bfloat16)

        def layer_planes(layout):
            out = []
            for h, d in planes:
                if fmt == "MLA_KV":
                    out.append((self.nb, bs, d))
                elif layout == "BNSD":
                    out.append((self.nb, h, bs, d))
                else:
                    out.append((self.nb, bs, h, d))
            return out

        self.token_caches = [tuple(cache(s) for s in layer_planes("BSND")) for _ in range(L)]
        self.block_caches = self.token_caches if block_layout == "BSND" else \
            [tuple(cache(s) for s in layer_planes(block_layout)) for _ in range(L)]
        import ms_kvcache as mk

        self.buffer, self.pinned = _host(mk.transfer_buffer_shape(fmt, L, tokens, self.hidden if fmt == "MLA_KV"
                                                                  else self.hidden[0]), ms.bfloat16)
        self.host_blocks = []
        for (h, d) in planes:
            shape = (self.nb, bs, L, h, d) if fmt == "SEPARATE_KV" else (self.nb, bs, L, d)
            self.host_blocks.append(_host(shape, ms.bfloat16)[0])
        self.staging = Tensor(np.zeros(8 * bs * L * sum(self.hidden), np.float32), ms.bfloat16)  # 8 blocks
        self.slot_t = Tensor(self.slots)
        self.ids_t = Tensor(self.block_ids)


def _memcpy_fns(case):
    """memcpy of the same bytes: each plane's region of the buffer into that plane's host blocks (equal
    sizes, both contiguous host memory), with the kernels' threads and with one thread (numpy). Each
    function returns its elapsed seconds."""
    from ms_kvcache import _cpu

    src = _alias(case.buffer)
    pairs, off = [], 0
    for h in case.host_blocks:
        dst = _alias(h)
        pairs.append((dst, src[off:off + dst.size]))
        off += dst.size
    assert off == src.size == case.nbytes

    def multi():
        t0 = time.perf_counter()
        for d, s_ in pairs:
            _cpu.copy_buffers(d, s_, 0)
        return time.perf_counter() - t0

    def single():
        t0 = time.perf_counter()
        for d, s_ in pairs:
            np.copyto(d, s_)
        return time.perf_counter() - t0

    return multi, single


def _baseline_token(case, direction, repeats):
    """Python loop over layers and planes with MindSpore built-ins (float16, same bytes)."""
    import mindspore as ms
    from mindspore import Parameter, Tensor, ops

    rows = [[Parameter(Tensor(np.zeros((case.nb * case.bs, hd), np.float16)), name=f"b{l}_{p}")
             for p, hd in enumerate(case.hidden)] for l in range(case.L)]
    idx = Tensor(case.slots)
    if direction == "d2h":
        def loop():
            out = [ops.stack([ops.gather(rows[l][p], idx, 0) for l in range(case.L)]) for p in range(len(case.hidden))]
            return out
    else:
        upd = [[Tensor(np.ones((case.T, hd), np.float16)) for hd in case.hidden] for _ in range(case.L)]

        def loop():
            for l in range(case.L):
                for p in range(len(case.hidden)):
                    ops.scatter_update(rows[l][p], idx, upd[l][p])
    t = _best(loop, max(1, repeats // 2))
    del rows
    return t


def _baseline_block(case, direction, repeats):
    import mindspore as ms
    from mindspore import Parameter, Tensor, ops

    bnsd = case.block_layout == "BNSD" and case.fmt != "MLA_KV"
    shapes = [(case.nb, h, case.bs, d) if bnsd else (case.nb, case.bs, h * d) for h, d in case.planes]
    caches = [[Parameter(Tensor(np.zeros(s, np.float16)), name=f"c{l}_{p}") for p, s in enumerate(shapes)]
              for l in range(case.L)]
    ids = Tensor(case.block_ids)
    n = len(case.block_ids)
    if direction == "d2h":
        def loop():
            out = []
            for p in range(len(shapes)):
                per_layer = []
                for l in range(case.L):
                    blk = ops.gather(caches[l][p], ids, 0)
                    if bnsd:
                        blk = ops.transpose(blk, (0, 2, 1, 3))  # [n, bs, H, D]
                    per_layer.append(blk)
                out.append(ops.stack(per_layer, axis=2))      # [n, bs, L, ...]
            return out
    else:
        host = [Tensor(np.ones((n, case.bs, case.L) + ((h, d) if bnsd else (h * d,)), np.float16))
                for h, d in case.planes]

        def loop():
            for p in range(len(shapes)):
                for l in range(case.L):
                    blk = host[p][:, :, l]
                    if bnsd:
                        blk = ops.transpose(blk, (0, 2, 1, 3))  # [n, H, bs, D]
                    ops.scatter_update(caches[l][p], ids, blk)
    t = _best(loop, max(1, repeats // 2))
    del caches
    return t


def _selected(only, op, direction, mode):
    """True when the row (op, direction, mode) matches one of the ``only`` filters ("block", "token:h2d",
    "block:d2h:staged", "block::zero-copy": colon-separated op, direction, mode; empty parts match all)."""
    if not only:
        return True
    for f in only:
        parts = (f.split(":") + ["", "", ""])[:3]
        if all(not want or want == have for want, have in zip(parts, (op, direction, mode))):
            return True
    return False


def run(quick=False, repeats=None, models=None, tokens=None, baseline=True, only=None):
    """Run the benchmark; returns one dict per (model, tokens, op, direction, mode).

    ``only``: list of row filters ``op[:direction[:mode]]`` (e.g. ``["block:h2d"]``); None runs every row."""
    import mindspore as ms
    import ms_kvcache as mk
    from ms_kvcache import _cpu

    ms.set_context(mode=ms.PYNATIVE_MODE)
    mk.set_backend("cpu")
    repeats = repeats or (2 if quick else 5)
    token_list = tokens or (QUICK_TOKENS if quick else TOKENS)
    results = []
    for model in models or MODELS:
        for T in token_list:
            case = _Case(model, T)
            mem_multi_fn, mem_single_fn = _memcpy_fns(case)
            for op in ("token", "block"):
                for direction in ("d2h", "h2d"):
                    for mode in (("-",) if op == "token" else ("zero-copy", "staged")):
                        if not _selected(only, op, direction, mode):
                            continue
                        if op == "token":
                            def call():
                                mk.multi_layer_kv_transfer(case.buffer, case.token_caches, case.slot_t,
                                                           kv_format=case.fmt, direction=direction)
                        else:
                            staging = case.staging if mode == "staged" else None

                            def call():
                                mk.multi_layer_block_transfer(case.block_caches, case.host_blocks, case.ids_t,
                                                              direction=direction, staging=staging,
                                                              kv_format=case.fmt, cache_layout=case.block_layout)
                        t, t_sync, tm, ts = _best_interleaved(
                            [lambda: _timed_nospin(call), lambda: _timed(call), mem_multi_fn, mem_single_fn], repeats)
                        mem_multi, mem_single = case.nbytes / tm / 1e9, case.nbytes / ts / 1e9
                        mem_best = max(mem_multi, mem_single)
                        base = None
                        if baseline and mode in ("-", "zero-copy") and not (quick and T != token_list[0]):
                            base = (_baseline_token if op == "token" else _baseline_block)(case, direction, repeats)
                        gbs = case.nbytes / t / 1e9
                        results.append({
                            "model": model, "kv_format": case.fmt, "num_layers": case.L, "tokens": T,
                            "op": "multi_layer_kv_transfer" if op == "token" else "multi_layer_block_transfer",
                            "kind": op, "direction": direction, "mode": mode,
                            "case": f"{model} {direction}" + ("" if mode == "-" else f" {mode}"),
                            "seconds": t, "gbps": gbs, "memcpy_gbps": mem_best, "ratio_memcpy": gbs / mem_best,
                            "speedup": None if base is None else {"python loop": base / t_sync},
                            "layout": "BSND" if op == "token" else case.block_layout,
                            "bytes": case.nbytes, "ms": t * 1e3, "GB/s": gbs,
                            "ms_with_sync": t_sync * 1e3, "GB/s_with_sync": case.nbytes / t_sync / 1e9,
                            "memcpy_GB/s": mem_multi, "memcpy_1thread_GB/s": mem_single,
                            "ratio_vs_memcpy": gbs / mem_best,
                            "loop_ms": None if base is None else base * 1e3,
                            "speedup_vs_loop": None if base is None else base / t_sync,
                            "pinned_host": case.pinned, "backend": "cpu", "dtype": "bfloat16",
                            "threads": _cpu.num_threads(),
                        })
                        if model == SERIES_MODEL and mode in ("-", "zero-copy"):
                            results[-1]["series"] = f"{model} {op} {direction}"
            del case
            gc.collect()
    return results


def format_table(results):
    head = (f"{'model':16} {'T':>5} {'op':5} {'dir':3} {'mode':9} {'MiB':>6} {'ms':>8} {'GB/s':>6} "
            f"{'memcpy':>6} {'ratio':>5} {'+sync':>6} {'loop ms':>8} {'speedup':>7}")
    lines = [head, "-" * len(head)]
    for r in results:
        loop = "" if r["loop_ms"] is None else f"{r['loop_ms']:8.1f}"
        sp = "" if r["speedup_vs_loop"] is None else f"{r['speedup_vs_loop']:6.1f}x"
        lines.append(f"{r['model']:16} {r['tokens']:5d} {r['kind']:5} {r['direction']:3} {r['mode']:9} "
                     f"{r['bytes'] / 2**20:6.0f} {r['ms']:8.2f} {r['GB/s']:6.2f} "
                     f"{max(r['memcpy_GB/s'], r['memcpy_1thread_GB/s']):6.2f} {r['ratio_vs_memcpy']:5.2f} "
                     f"{r['GB/s_with_sync']:6.2f} {loop:>8} {sp:>7}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--no-baseline", action="store_true", help="skip the per-layer built-in loop")
    ap.add_argument("--tokens", type=int, nargs="+", help=f"token counts (default {TOKENS})")
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), help="models (default: all)")
    ap.add_argument("--only", nargs="+", metavar="OP[:DIR[:MODE]]",
                    help="run only these rows, e.g. --only block  --only block:h2d token:h2d  "
                         "--only block::staged (op token|block, dir d2h|h2d, mode zero-copy|staged)")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    results = run(quick=args.quick, repeats=args.repeats, baseline=not args.no_baseline, tokens=args.tokens,
                  models=args.models, only=args.only)
    print("cpu backend, CPU figures of this machine. GB/s = bytes of the buffer / time from the call to the "
          "kernel's end (waited for without spinning); +sync = GB/s including ms_kvcache.synchronize() (MindSpore "
          "busy-waits there); memcpy = best of multi-threaded and 1-thread copies of the same bytes; speedup = "
          "per-layer MindSpore built-in loop time / op time with sync")
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
