"""Benchmark of the fused RoPE-write op on the "cpu" backend (CPU figures, not NPU figures).

Llama-3-8B prefill shapes: T tokens, 32 query heads, 8 KV heads, head_size 128, bfloat16, NeoX,
fp32 cos_sin_cache, paged cache block_size 128 (BSND). In one run, interleaved round by round:

- fused:       ms_kvcache.rope_reshape_and_cache (RoPE on q and k + K/V cache write, one pass)
- two-step:    ms_kvcache.rope_reshape_and_cache with an empty slot_mapping (RoPE only: the same
               kernel, no cache write) then ms_kvcache.reshape_and_cache(key_out, value, ...)
- builtin:     RoPE from MindSpore built-in ops (cast to fp32, gather cos/sin rows, mul/sub/add/concat,
               cast back; what a MindSpore CPU user has today: ApplyRotaryPosEmb has no CPU kernel)
               then ms_kvcache.reshape_and_cache. Informational; skipped with --quick.
- kernel_only / kernel_two_step: the fused kernel, and the rope-only kernel followed by the
               reshape_and_cache kernel, called directly through ctypes on numpy buffers (no
               MindSpore): the kernels' own times, without the framework; diagnostic.
- memcpy:      numpy copies of the bytes the fused op writes from the bytes it reads (query -> out,
               key -> out, key -> cache rows, value -> cache rows), on 2 threads (and 1 thread); the
               faster is the bandwidth reference.

Every op is called through the public API, so the figures include MindSpore's per-call cost (and,
in PyNative, the wrappers' index checks). Modes: "pynative" (MindSpore default: asynchronous
pipeline), "graph" (GRAPH_MODE
Cells holding the caches as Parameters, one op per Cell call: includes MindSpore's fixed Python cost of
a Cell call, ~0.5 ms here; fused and two-step only), "graph_layers" (one Cell call runs the op for
GRAPH_LAYERS = 4 layers, each with its own inputs and caches, as a model step does; time per layer),
"pynative_custom" (PyNative through ops.Custom: the path without ms_kvcache._cpu_pyboost, i.e. before
the RoPE-write ops had the fast path). GRAPH_MODE is set around each timed round, not per call.
Time = best of the rounds of (n calls + one sync); all paths and modes are interleaved round by round.
The sync first sleep-polls MindSpore's pipeline until idle (``_cpu_pyboost.wait_idle``), then reads a
value: ``Tensor.asnumpy()`` alone busy-waits, taking one of this machine's 2 cores from the kernel;
"pynative_spin" is the fused op in default PyNative closed by that plain ``asnumpy()``. (MindSpore's
synchronous PyNative mode, ``mindspore.runtime.launch_blocking()``, is process-wide and cannot be turned
off again, so it is not one of the interleaved modes.)

Then the fused op, the two-step path (PyNative) and memcpy at more token counts (the plot's lines:
SWEEP_TOKENS, QUICK_SWEEP_TOKENS; in a full run also the 4-layer GRAPH_MODE Cell), and, per op, the
PyNative per-call time of one decode step (T = 1) of every RoPE-write op next to ``ops.add`` in the
same run, with the fast path (ms_kvcache._cpu_pyboost) and through ops.Custom (``--tokens 0``: only
this table).

    ms-kvcache bench --ops rope [--quick]
    python scripts/bench_rope.py [--quick] [--tokens 4096 | --tokens 0] [--no-overhead] [--no-sweep]

``run(quick=False) -> list[dict]`` returns the rows (``ms-kvcache bench`` convention).
Ratios follow the table's convention: reference time / op time, above 1 the op is faster.
Targets (issue #6): fused >= 1.5x faster than two-step; fused within 2x of memcpy's time
(x memcpy >= 0.5).
"""
import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("GLOG_v", "3")

import numpy as np  # noqa: E402

SHAPES = {"num_heads": 32, "num_kv_heads": 8, "head_size": 128, "block_size": 128}
TARGET_SPEEDUP = 1.5
TARGET_MEMCPY_RATIO = 2.0
GRAPH_LAYERS = 4  # layers per graph Cell call in the "graph_layers" mode
SWEEP_TOKENS = (256, 1024, 16384)  # besides the main T: the plot's other points (full run)
QUICK_SWEEP_TOKENS = (256, 1024)
#: (path, mode) -> legend label of the plot's lines
SERIES = {("fused", "pynative"): "fused, PyNative", ("two_step", "pynative"): "two-step, PyNative",
          ("fused", "graph_layers"): "fused, GRAPH_MODE 4-layer Cell (per layer)",
          ("two_step", "graph_layers"): "two-step, GRAPH_MODE 4-layer Cell (per layer)"}


def _setup(tokens, seed=0):
    import mindspore as ms
    from mindspore import Tensor

    import ms_kvcache

    ms_kvcache.set_backend("cpu")
    hq, hk, d, bs = (SHAPES[k] for k in ("num_heads", "num_kv_heads", "head_size", "block_size"))
    rng = np.random.default_rng(seed)

    def bf16(shape):
        return Tensor(rng.standard_normal(shape, dtype=np.float32), dtype=ms.bfloat16)

    num_blocks = tokens // bs + 2
    env = {
        "q": bf16((tokens, hq, d)), "k": bf16((tokens, hk, d)), "v": bf16((tokens, hk, d)),
        "key_cache": bf16((num_blocks, bs, hk, d)), "value_cache": bf16((num_blocks, bs, hk, d)),
        "cos_sin_cache": ms_kvcache.build_cos_sin_cache(d, max(8192, 2 * tokens), base=500000.0),
        "positions": Tensor(np.arange(tokens, dtype=np.int64) + 7),
        # prefill of one sequence into blocks 1.. (block 0 belongs to someone else)
        "slot_mapping": Tensor(np.arange(tokens, dtype=np.int32) + bs),
        "no_slots": Tensor(np.zeros((0,), np.int32)),
    }
    # the graph_layers paths: GRAPH_LAYERS layers' own q, k, v (layer 0's are the tensors above)
    env["layers_qkv"] = [env["q"], env["k"], env["v"]]
    for _ in range(GRAPH_LAYERS - 1):
        env["layers_qkv"] += [bf16((tokens, hq, d)), bf16((tokens, hk, d)), bf16((tokens, hk, d))]
    return env


def _paths(env, with_builtin):
    import mindspore as ms
    from mindspore import Parameter, nn, ops

    import ms_kvcache
    from ms_kvcache import _custom

    e = env
    rd = SHAPES["head_size"]

    def fused():
        return ms_kvcache.rope_reshape_and_cache(e["positions"], e["q"], e["k"], e["v"], e["cos_sin_cache"],
                                                 e["key_cache"], e["value_cache"], e["slot_mapping"])

    def two_step():
        qo, ko = ms_kvcache.rope_reshape_and_cache(e["positions"], e["q"], e["k"], e["v"], e["cos_sin_cache"],
                                                   e["key_cache"], e["value_cache"], e["no_slots"])
        ms_kvcache.reshape_and_cache(ko, e["v"], e["key_cache"], e["value_cache"], e["slot_mapping"])
        return qo, ko

    def builtin_rope(x, cos, sin):
        xf = ops.cast(x, ms.float32)
        x1, x2 = xf[..., : rd // 2], xf[..., rd // 2:]
        return ops.cast(ops.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1), ms.bfloat16)

    def builtin():
        cs = ops.gather(e["cos_sin_cache"], e["positions"], 0)
        cos, sin = cs[:, None, : rd // 2], cs[:, None, rd // 2:]
        qo, ko = builtin_rope(e["q"], cos, sin), builtin_rope(e["k"], cos, sin)
        ms_kvcache.reshape_and_cache(ko, e["v"], e["key_cache"], e["value_cache"], e["slot_mapping"])
        return qo, ko

    class FusedCell(nn.Cell):
        def __init__(self):
            super().__init__()
            self.key_cache = Parameter(e["key_cache"].copy(), name="key_cache")
            self.value_cache = Parameter(e["value_cache"].copy(), name="value_cache")

        def construct(self, positions, q, k, v, cos_sin_cache, slot_mapping):
            return ms_kvcache.rope_reshape_and_cache(positions, q, k, v, cos_sin_cache, self.key_cache,
                                                     self.value_cache, slot_mapping)

    class TwoStepCell(FusedCell):
        def construct(self, positions, q, k, v, cos_sin_cache, slot_mapping):
            qo, ko = ms_kvcache.rope_reshape_and_cache(positions, q, k, v, cos_sin_cache, self.key_cache,
                                                       self.value_cache, slot_mapping[:0])
            ms_kvcache.reshape_and_cache(ko, v, self.key_cache, self.value_cache, slot_mapping)
            return qo, ko

    class LayersCell(nn.Cell):
        """GRAPH_LAYERS layers in one graph, each with its own q/k/v and K/V cache (a model step): the
        Cell call's fixed cost (~0.5 ms of MindSpore Python per call on this machine) is shared."""

        def __init__(self, two_step):
            super().__init__()
            self.two_step = two_step
            self.key_caches = ms.ParameterTuple([Parameter(e["key_cache"].copy(), name=f"key_cache_{i}")
                                                 for i in range(GRAPH_LAYERS)])
            self.value_caches = ms.ParameterTuple([Parameter(e["value_cache"].copy(), name=f"value_cache_{i}")
                                                   for i in range(GRAPH_LAYERS)])

        def construct(self, positions, cos_sin_cache, slot_mapping, qkv):
            outs = ()
            for i in range(GRAPH_LAYERS):
                q, k, v = qkv[3 * i], qkv[3 * i + 1], qkv[3 * i + 2]
                if self.two_step:
                    qo, ko = ms_kvcache.rope_reshape_and_cache(positions, q, k, v, cos_sin_cache, self.key_caches[i],
                                                               self.value_caches[i], slot_mapping[:0])
                    ms_kvcache.reshape_and_cache(ko, v, self.key_caches[i], self.value_caches[i], slot_mapping)
                else:
                    qo, ko = ms_kvcache.rope_reshape_and_cache(positions, q, k, v, cos_sin_cache, self.key_caches[i],
                                                               self.value_caches[i], slot_mapping)
                outs = outs + (qo, ko)
            return outs

    graph_args = (e["positions"], e["q"], e["k"], e["v"], e["cos_sin_cache"], e["slot_mapping"])
    cells = {"fused": FusedCell(), "two_step": TwoStepCell()}
    layer_cells = {"fused": LayersCell(False), "two_step": LayersCell(True)}
    layer_args = (e["positions"], e["cos_sin_cache"], e["slot_mapping"], tuple(e["layers_qkv"]))

    def in_graph_layers(cell):
        def call():
            return cell(*layer_args)
        call.graph_mode = True
        call.ops_per_call = GRAPH_LAYERS
        return call

    def in_graph(cell):
        # GRAPH_MODE is set around a whole timed round (see _GraphMode), not per call: a graph-mode
        # user sets it once, and switching the mode waits for the queued graph runs (measured here:
        # +0.4..2 ms per call at T = 4096)
        def call():
            return cell(*graph_args)
        call.graph_mode = True
        return call

    def in_pynative(fn, fast=True):
        if fast:
            return fn

        def call():
            old = _custom.set_fast_path(False)
            try:
                return fn()
            finally:
                _custom.set_fast_path(old)
        return call

    paths = {}
    for name, fn in (("fused", fused), ("two_step", two_step)) + ((("builtin", builtin),) if with_builtin else ()):
        paths[(name, "pynative")] = in_pynative(fn)
    for name, fn in (("fused", fused), ("two_step", two_step)):
        paths[(name, "pynative_custom")] = in_pynative(fn, fast=False)
    paths[("fused", "pynative_spin")] = in_pynative(fused)
    for name, cell in cells.items():
        paths[(name, "graph")] = in_graph(cell)
    for name, cell in layer_cells.items():
        paths[(name, "graph_layers")] = in_graph_layers(cell)
    return paths


class _GraphMode:
    """``with _GraphMode(on):`` GRAPH_MODE inside the block (when ``on``), PYNATIVE_MODE after it."""

    def __init__(self, on):
        self.on = on

    def __enter__(self):
        if self.on:
            import mindspore as ms
            ms.set_context(mode=ms.GRAPH_MODE)

    def __exit__(self, *exc):
        if self.on:
            import mindspore as ms
            ms.set_context(mode=ms.PYNATIVE_MODE)


def _memcpy_paths(env):
    """numpy copies of the fused op's output bytes from its input bytes, 1 and 2 threads."""
    hk, d, bs = SHAPES["num_kv_heads"], SHAPES["head_size"], SHAPES["block_size"]

    def u16(t):
        return np.ascontiguousarray(t.asnumpy()).view(np.uint16)

    q, k, v = u16(env["q"]), u16(env["k"]), u16(env["v"])
    tokens = k.shape[0]
    kc = np.zeros((tokens // bs + 2) * bs * hk * d, np.uint16)
    vc = np.zeros_like(kc)
    lo, hi = bs * hk * d, (bs + tokens) * hk * d
    pairs = [(np.empty_like(q).reshape(-1), q.reshape(-1)), (np.empty_like(k).reshape(-1), k.reshape(-1)),
             (kc[lo:hi], k.reshape(-1)), (vc[lo:hi], v.reshape(-1))]
    for dst, src in pairs:  # touch the destinations once (no first-touch page faults in the timing)
        np.copyto(dst, src)
    halves = [[], []]
    for dst, src in pairs:
        h = dst.size // 2
        halves[0].append((dst[:h], src[:h]))
        halves[1].append((dst[h:], src[h:]))
    pool = ThreadPoolExecutor(2)

    def copy_part(part):
        for dst, src in part:
            np.copyto(dst, src)

    def memcpy_1t():
        copy_part(halves[0] + halves[1])

    def memcpy_2t():
        list(pool.map(copy_part, halves))

    nbytes = sum(dst.nbytes for dst, _ in pairs)
    return {"memcpy_1thread": memcpy_1t, "memcpy_2threads": memcpy_2t}, nbytes, pool


def _kernel_paths(env):
    """The AOT entries called through ctypes on host copies of the inputs (default attrs: NeoX, BSND;
    same shapes and dtypes), without MindSpore: fused, and rope-only + ReshapeAndCache."""
    import ctypes

    from ms_kvcache import _cpu

    lib = ctypes.CDLL(_cpu.__file__)
    keep = []

    def host(t):
        a = np.ascontiguousarray(t.asnumpy())
        return a.view(np.uint16) if a.dtype.itemsize == 2 and a.dtype.kind not in "iu" else a

    def entry(fn, arrs, dts):
        n = len(arrs)
        params = (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrs])
        ndims = (ctypes.c_int * n)(*[a.ndim for a in arrs])
        dims = [(ctypes.c_int64 * a.ndim)(*a.shape) for a in arrs]
        shapes = (ctypes.POINTER(ctypes.c_int64) * n)(*[ctypes.cast(d, ctypes.POINTER(ctypes.c_int64)) for d in dims])
        dtypes = (ctypes.c_char_p * n)(*dts)
        keep.append((arrs, params, ndims, dims, shapes, dtypes))

        def call():
            if fn(n, params, ndims, shapes, dtypes, None, None) != 0:
                raise RuntimeError(_cpu.last_error())
        return call

    names = ("positions", "q", "k", "v", "cos_sin_cache", "key_cache", "value_cache", "slot_mapping")
    p, q, k, v, cs, kc, vc, s = [host(env[n]) for n in names]
    qo, ko, status, no_slots = np.empty_like(q), np.empty_like(k), np.zeros(1, np.int32), np.zeros(0, np.int32)
    b16, rope_dt = b"bfloat16", [b"int64", b"bfloat16", b"bfloat16", b"bfloat16", b"float32", b"bfloat16",
                                 b"bfloat16", b"int32", b"bfloat16", b"bfloat16"]
    fused = entry(lib.MskvRopeReshapeAndCache, [p, q, k, v, cs, kc, vc, s, qo, ko], rope_dt)
    rope = entry(lib.MskvRopeReshapeAndCache, [p, q, k, v, cs, kc, vc, no_slots, qo, ko], rope_dt)
    rac = entry(lib.MskvReshapeAndCache, [ko, v, kc, vc, s, status], [b16, b16, b16, b16, b"int32", b"int32"])

    def two_step():
        rope()
        rac()
    return {"kernel_only": fused, "kernel_two_step": two_step}, keep


def _bytes_touched(tokens):
    hq, hk, d = SHAPES["num_heads"], SHAPES["num_kv_heads"], SHAPES["head_size"]
    q, kv = tokens * hq * d * 2, tokens * hk * d * 2
    read = q + 2 * kv + tokens * (8 + 4 + d * 4)        # q, k, v, positions, slots, cos/sin rows
    written = q + kv + 2 * kv                           # query_out, key_out, key and value cache rows
    return read, written


def _overhead_cases():
    """One decode step (T = 1) of each RoPE-write op, Llama-3-8B / DeepSeek-like shapes, bf16; plus
    ``ops.add`` on a [1] float32 tensor, the PyNative per-call reference."""
    import mindspore as ms
    from mindspore import Parameter, Tensor, ops

    import ms_kvcache

    ms_kvcache.set_backend("cpu")
    hq, hk, d, bs = (SHAPES[k] for k in ("num_heads", "num_kv_heads", "head_size", "block_size"))
    rng = np.random.default_rng(1)

    def bf16(shape):
        return Tensor(rng.standard_normal(shape, dtype=np.float32), dtype=ms.bfloat16)

    nb = 64
    q, k, v = bf16((1, hq, d)), bf16((1, hk, d)), bf16((1, hk, d))
    kc, vc = Parameter(bf16((nb, bs, hk, d)), name="ovh_kc"), Parameter(bf16((nb, bs, hk, d)), name="ovh_vc")
    kv = Parameter(bf16((2, nb, bs, hk, d)), name="ovh_kv")
    cs = ms_kvcache.build_cos_sin_cache(d, 8192, base=500000.0)
    pos, slot = Tensor(np.array([4100], np.int64)), Tensor(np.array([777], np.int32))
    q_pe, k_pe, kv_c = bf16((1, 16, 64)), bf16((1, 64)), bf16((1, 512))
    ccache, pcache = Parameter(bf16((nb, bs, 512)), name="ovh_cc"), Parameter(bf16((nb, bs, 64)), name="ovh_pc")
    cs_mla = ms_kvcache.build_cos_sin_cache(64, 8192)
    w = Tensor(rng.uniform(0.5, 1.5, 512).astype(np.float32))
    new_pos = Tensor(np.array([12], np.int64))
    a = Tensor(np.ones((1,), np.float32))
    cases = {
        "ops.add": lambda: ops.add(a, a),
        "rope_reshape_and_cache": lambda: ms_kvcache.rope_reshape_and_cache(pos, q, k, v, cs, kc, vc, slot),
        "rope_reshape_and_cache_merged": lambda: ms_kvcache.rope_reshape_and_cache_merged(pos, q, k, v, cs, kv, slot),
        "rope_concat_and_cache_mla": lambda: ms_kvcache.rope_concat_and_cache_mla(
            pos, q_pe, k_pe, kv_c, cs_mla, ccache, pcache, slot, kv_c_norm_weight=w),
        "rerope_cached_keys": lambda: ms_kvcache.rerope_cached_keys(kc, slot, pos, new_pos, cs),
        "reshape_and_cache": lambda: ms_kvcache.reshape_and_cache(k, v, kc, vc, slot),
    }
    return cases, kc


def overhead(quick=False, calls=None, rounds=None):
    """PyNative per-call time at T = 1 of every RoPE-write op (and reshape_and_cache) next to ``ops.add``,
    with the fast path and through ops.Custom (``set_fast_path(False)``, the path before the fast path
    served these ops). Rows ``{"name": "overhead", "op", "us", "ops_add_us", "add_speedup", "us_ops_custom",
    "add_speedup_ops_custom", "fast_path"}`` (``add_speedup`` = ops.add time / op time: above 1 the op is
    cheaper than an ops.add). Time = best over rounds of (calls + one sync), rounds interleaved
    over the ops so all see the same machine load; the sync first sleep-polls MindSpore's pipeline
    (its own wait busy-spins a core)."""
    from ms_kvcache import _custom

    calls = calls or (200 if quick else 1000)
    rounds = rounds or (3 if quick else 7)
    cases, anchor = _overhead_cases()
    mod = _custom._fast_module()

    def sync():
        if mod is not None:
            mod.wait_idle()
        anchor[0, 0, 0, 0].asnumpy()

    def best_of(fns, n, reps):
        for fn in fns.values():
            fn()
        sync()
        best = {key: float("inf") for key in fns}
        for _ in range(reps):
            for key, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                sync()
                best[key] = min(best[key], (time.perf_counter() - t0) / n)
        return best

    fast = best_of(cases, calls, rounds)
    old = _custom.set_fast_path(False)
    try:
        slow = best_of({key: fn for key, fn in cases.items()}, max(calls // 10, 20), max(rounds // 2, 2))
    finally:
        _custom.set_fast_path(old)
    ok = _custom.fast_path_available("cpu")[0]
    rows = []
    for op in cases:
        if op == "ops.add":
            continue
        rows.append({"name": "overhead", "op": op, "tokens": 1, "us": fast[op] * 1e6, "ops_add_us": fast["ops.add"] * 1e6,
                     "add_speedup": fast["ops.add"] / fast[op], "us_ops_custom": slow[op] * 1e6,
                     "add_speedup_ops_custom": fast["ops.add"] / slow[op], "fast_path": ok, "load_average": os.getloadavg()})
    return rows


def run(quick=False, tokens=4096, rounds=None, calls=None, with_overhead=True, sweep=True):
    """Run the benchmark; return a list of dicts: one per (path, mode) ``{"name", "mode", "tokens", "ms",
    "gb_per_s", "vs_fused"}`` (vs_fused: time relative to the fused op in the same mode), one per memcpy
    variant, one ``{"name": "targets", "mode", ...}`` per mode with the two ratios of issue #6 and
    whether each target is met, and (``with_overhead``) the T = 1 rows of :func:`overhead`. Modes:
    pynative (fast path), pynative_custom (PyNative through ops.Custom), graph, graph_layers, ctypes;
    plus (``sweep``) the plot's rows at the other token counts of SWEEP_TOKENS (QUICK_SWEEP_TOKENS) for
    the paths of SERIES.
    quick: 3 rounds, no built-in-ops path. tokens = 0: only the T = 1 overhead rows."""
    rows = _run(quick, tokens, rounds, calls, with_overhead)
    if sweep and tokens:
        for T in (QUICK_SWEEP_TOKENS if quick else SWEEP_TOKENS):
            if T != tokens:
                rows += _sweep_point(T, quick, rounds, calls)
    return [_standard_keys(r) for r in rows]


def _standard_keys(r):
    """Add the ``ms-kvcache bench`` row keys (``ms_kvcache.bench.ROW_KEYS``: op, case, seconds, gbps, ...)
    to a row of this script (its own keys stay, for _print). Every row is about rope_reshape_and_cache
    (the paths, memcpy references and targets) except the overhead rows, which name their op."""
    out = {"backend": "cpu", "dtype": "bfloat16"}
    if r["name"] == "overhead":
        out.update(case="per-call overhead T=1, PyNative", seconds=r["us"] / 1e6,
                   speedup={"ops.add": r["ops_add_us"] / r["us"]},
                   note=f"ops.add {r['ops_add_us']:.1f} us; through ops.Custom {r['us_ops_custom']:.1f} us")
    elif r["name"] == "targets":
        # one convention in the row, as the table's columns: x memcpy = memcpy time / fused time, speed-up =
        # two-step time / fused time (the "fused <= 2x memcpy" is x memcpy >= 1/2)
        out.update(op="rope_reshape_and_cache", case=f"targets, {r['mode']}",
                   ratio_memcpy=1.0 / r["fused_over_memcpy"] if r["fused_over_memcpy"] > 0 else None,
                   speedup={"two-step": r["fused_speedup_vs_two_step"]},
                   note=f"targets: speed-up >= {r['speedup_target']}x {'met' if r['speedup_met'] else 'NOT met'}, "
                        f"x memcpy >= {1 / r['memcpy_target']:.2f} {'met' if r['memcpy_met'] else 'NOT met'}")
    else:
        out.update(op="rope_reshape_and_cache", case=f"{r['name']}, {r['mode']}", seconds=r["ms"] / 1e3,
                   gbps=r["gb_per_s"], bytes=r.get("bytes"))
        if r.get("memcpy_s") and not r["name"].startswith("memcpy"):
            out.update(memcpy_gbps=r["bytes"] / r["memcpy_s"] / 1e9, ratio_memcpy=r["memcpy_s"] * 1e3 / r["ms"])
        if (r["name"], r["mode"]) in SERIES:
            out["series"] = SERIES[(r["name"], r["mode"])]
    return {**r, **out}


def _sweep_point(tokens, quick, rounds=None, calls=None):
    """The plot's paths (SERIES; the GRAPH_MODE one only in a full run) and memcpy at one more token
    count, timed interleaved like :func:`_run`; rows as _run's."""
    rounds = rounds or (3 if quick else 5)
    calls = calls or (2 if quick else 5)
    env = _setup(tokens)
    paths = _paths(env, with_builtin=False)
    keep = [k for k in SERIES if quick is False or k[1] != "graph_layers"]
    mem, mem_bytes, pool = _memcpy_paths(env)
    from ms_kvcache import _custom
    fast_mod = _custom._fast_module()

    def sync(out):
        if fast_mod is not None:
            fast_mod.wait_idle()
        out[-1][0, 0, 0].asnumpy()
        env["value_cache"][0, 0, 0, 0].asnumpy()

    timed = {**{k: paths[k] for k in keep}, **{(name, "numpy"): fn for name, fn in mem.items()}}
    best = {key: float("inf") for key in timed}
    for fn in timed.values():
        with _GraphMode(getattr(fn, "graph_mode", False)):
            out = fn()
            if isinstance(out, tuple):
                sync(out)
    for _ in range(rounds):
        for key, fn in timed.items():
            with _GraphMode(getattr(fn, "graph_mode", False)):
                t0 = time.perf_counter()
                for _ in range(calls):
                    out = fn()
                if isinstance(out, tuple):
                    sync(out)
                best[key] = min(best[key], (time.perf_counter() - t0) / (calls * getattr(fn, "ops_per_call", 1)))
    pool.shutdown()
    read, written = _bytes_touched(tokens)
    memcpy_best = min(best[("memcpy_1thread", "numpy")], best[("memcpy_2threads", "numpy")])
    rows = []
    for (name, mode), sec in best.items():
        if name.startswith("memcpy"):
            continue
        rows.append({"name": name, "mode": mode, "tokens": tokens, "ms": sec * 1e3, "bytes": read + written,
                     "gb_per_s": (read + written) / sec / 1e9, "vs_fused": sec / best[("fused", mode)],
                     "memcpy_s": memcpy_best * (read + written) / (2 * mem_bytes), "load_average": os.getloadavg()})
    return rows


def _run(quick, tokens, rounds, calls, with_overhead):
    if tokens == 0:
        return overhead(quick)
    rounds = rounds or (3 if quick else 7)
    calls = calls or (2 if quick else 5)
    env = _setup(tokens)
    paths = _paths(env, with_builtin=not quick)
    mem, mem_bytes, pool = _memcpy_paths(env)

    from ms_kvcache import _custom
    fast_mod = _custom._fast_module()

    def sync(out, spin=False):
        if isinstance(out, tuple):
            if fast_mod is not None and not spin:
                fast_mod.wait_idle()  # sleep-poll the pipeline: asnumpy() alone busy-waits a core
            out[-1][0, 0, 0].asnumpy()  # the last output written (last layer's key_out)
            env["value_cache"][0, 0, 0, 0].asnumpy()

    kernels, _keep = _kernel_paths(env)
    load_before = os.getloadavg()[0]
    timed = {**paths, **{(name, "ctypes"): fn for name, fn in kernels.items()},
             **{(name, "numpy"): fn for name, fn in mem.items()}}
    best = {key: float("inf") for key in timed}
    for fn in timed.values():  # warm up (graph compilation, memory pools, page faults)
        with _GraphMode(getattr(fn, "graph_mode", False)):
            sync(fn())
    for rnd in range(rounds):
        for key, fn in timed.items():
            if key[0] == "builtin" and rnd >= 3:
                continue  # ~3 s per call: three rounds are enough
            n = 1 if key[0] == "builtin" else calls
            with _GraphMode(getattr(fn, "graph_mode", False)):
                t0 = time.perf_counter()
                for _ in range(n):
                    out = fn()
                sync(out, spin=key[1] == "pynative_spin")
                best[key] = min(best[key], (time.perf_counter() - t0) / (n * getattr(fn, "ops_per_call", 1)))
    pool.shutdown()

    read, written = _bytes_touched(tokens)
    memcpy_best = min(best[("memcpy_1thread", "numpy")], best[("memcpy_2threads", "numpy")])
    rows = []
    for (name, mode), sec in best.items():
        moved = (2 * mem_bytes) if name.startswith("memcpy") else (read + written)
        ref = best.get(("fused", mode), best[("kernel_only", "ctypes")] if mode == "ctypes" else best[("fused", "graph")])
        rows.append({"name": name, "mode": mode, "tokens": tokens, "ms": sec * 1e3, "gb_per_s": moved / sec / 1e9,
                     "vs_fused": sec / ref, "bytes": moved,
                     # memcpy time scaled to the op's bytes: the reference line of the plot
                     "memcpy_s": memcpy_best * moved / (2 * mem_bytes)})
    load = (load_before, os.getloadavg()[0])
    for r in rows:
        r["load_average"] = load
    for mode in ("pynative", "pynative_custom", "graph", "graph_layers", "ctypes"):  # (no two-step spin row)
        f = best[("kernel_only" if mode == "ctypes" else "fused", mode)]
        two = best[("kernel_two_step" if mode == "ctypes" else "two_step", mode)]
        speedup, mem_ratio = two / f, f / memcpy_best
        t = {"name": "targets", "mode": mode, "tokens": tokens,
             "fused_speedup_vs_two_step": speedup, "speedup_target": TARGET_SPEEDUP,
             "speedup_met": speedup >= TARGET_SPEEDUP,
             "fused_over_memcpy": mem_ratio, "memcpy_target": TARGET_MEMCPY_RATIO,
             "memcpy_met": mem_ratio <= TARGET_MEMCPY_RATIO}
        if ("builtin", mode) in best:
            t["fused_speedup_vs_builtin"] = best[("builtin", mode)] / f
        t["load_average"] = load
        rows.append(t)
    if with_overhead:
        rows.extend(overhead(quick))
    return rows


def _print(rows):
    ovh = [r for r in rows if r["name"] == "overhead"]
    rows = [r for r in rows if r["name"] != "overhead"]
    if rows:
        _print_bandwidth(rows)
    if ovh:
        print(f"\nPyNative per-call time at T = 1 (bf16 decode step; CPU figures; fast path "
              f"{'on' if ovh[0]['fast_path'] else 'UNAVAILABLE'}), next to ops.add = {ovh[0]['ops_add_us']:.1f} us "
              f"in the same run; x ops.add = ops.add time / op time (target >= 0.5, i.e. at most 2x ops.add's time):")
        print(f"{'op':32s} {'us':>8s} {'x ops.add':>9s}  {'ops.Custom us':>13s} {'x ops.add':>9s}")
        for r in ovh:
            print(f"{r['op']:32s} {r['us']:8.1f} {r['add_speedup']:9.2f}  {r['us_ops_custom']:13.1f} "
                  f"{r['add_speedup_ops_custom']:9.2f}  {'met' if r['add_speedup'] >= 0.5 else 'NOT met'}")
        print(f"(1-min load average after: {ovh[-1]['load_average'][0]:.1f} on {os.cpu_count()} CPUs)")


def _print_bandwidth(rows):
    print("rope_reshape_and_cache, cpu backend (CPU figures, not NPU), Llama-3-8B shapes: "
          f"{SHAPES['num_heads']} q heads, {SHAPES['num_kv_heads']} kv heads, head_size {SHAPES['head_size']}, "
          f"bf16, T = {rows[0]['tokens']}")
    main_t = rows[0]["tokens"]
    print(f"{'path':16s} {'mode':14s} {'ms':>9s} {'GB/s':>7s} {'fused speed-up':>15s}")
    for r in rows:
        if r["name"] != "targets" and r["tokens"] == main_t:
            print(f"{r['name']:16s} {r['mode']:14s} {r['ms']:9.2f} {r['gb_per_s']:7.2f} {r['vs_fused']:15.2f}")
    print("(fused speed-up = this path's time / the fused op's time in the same mode)")
    for r in rows:
        if r["name"] != "targets" and r["tokens"] != main_t:
            print(f"  T = {r['tokens']:6d}: {r['name']:9s} {r['mode']:13s} {r['ms']:9.2f} ms {r['gb_per_s']:7.2f} GB/s")
    print("(GB/s: bytes the fused op reads + writes, or bytes memcpy reads + writes, per second; "
          f"1-min load average before/after: {rows[0]['load_average'][0]:.1f} / {rows[0]['load_average'][1]:.1f} "
          f"on {os.cpu_count()} CPUs)")
    for t in rows:
        if t["name"] != "targets":
            continue
        line = (f"{t['mode']:14s} fused speed-up over two-step: {t['fused_speedup_vs_two_step']:.2f}x "
                f"(target >= {t['speedup_target']}: {'met' if t['speedup_met'] else 'NOT met'});  "
                f"x memcpy: {1 / t['fused_over_memcpy']:.2f} (target >= {1 / t['memcpy_target']:.2f}: "
                f"{'met' if t['memcpy_met'] else 'NOT met'})")
        if "fused_speedup_vs_builtin" in t:
            line += f";  vs built-in rope: {t['fused_speedup_vs_builtin']:.1f}x"
        print(line)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds, skip the built-in-ops path")
    ap.add_argument("--tokens", type=int, default=4096, help="0: only the T = 1 per-call overhead table")
    ap.add_argument("--no-overhead", action="store_true", help="skip the T = 1 per-call overhead table")
    ap.add_argument("--no-sweep", action="store_true", help="only the main T (no other token counts)")
    args = ap.parse_args(argv)
    _print(run(quick=args.quick, tokens=args.tokens, with_overhead=not args.no_overhead, sweep=not args.no_sweep))


if __name__ == "__main__":
    sys.exit(main())
