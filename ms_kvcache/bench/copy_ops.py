"""Benchmark of the copy operators on the cpu backend (CPU figures of the machine it runs on).

Every copy op is timed, interleaved in one run, against baselines doing the same memory work:

- memcpy: a numpy copy of the op's payload bytes (one thread) between buffers as large as the op's
  source and destination footprint, rotated over the same K regions as the op's slots / blocks;
- numpy: numpy fancy-index assignment of the same rows / blocks (``cache[slots] = rows``), same rotation;
- and, as a stage of the op's own time (not a baseline), the op's cpu kernel called directly through its
  AOT entry point (ctypes: no MindSpore launch or pipeline) on the op's caches, same rotation.

Rotation = each timed call (op and baseline alike) uses the next of K disjoint sets of slots (blocks),
which together cover the caches: a call writes memory no call touched for >= ``COLD_BYTES`` (64 MiB),
as a KV cache is written in inference (never-read-back rows of a cache far larger than the CPU
caches), so the op and its baselines see the same (cold) cache state. Every ratio is *reference time /
op time* (above 1 the op is faster): ``x memcpy`` = memcpy time / op time, ``x numpy`` = numpy time / op
time. Shapes: Llama-3-8B (8 KV heads x 128, bf16, block_size 128) for
reshape_and_cache(_merged), copy_blocks and swap_blocks; DeepSeek-V3 MLA (kv_lora_rank 512, rope 64,
block_size 64) for concat_and_cache_mla.

reshape_and_cache's table also has MindSpore's ``ops.scatter_update`` and ``param[idx] = value`` (float16:
no bf16 CPU kernel), the per-call overhead at T = 1 in PyNative and in a GRAPH_MODE Cell next to
``ops.add`` (``x ops.add`` = ops.add time / op time), and the per-call time against the cache size
(``--ops no_copy``). ``--ops overhead_quant``: the per-call time at T = 1 of the quantizing writes
(reshape_and_cache / concat_and_cache_mla into int8 caches, static and dynamic scales) and their bf16 forms
next to ``ops.add`` in the same rounds (issue 17: at most 2x ops.add).

The fast path launches a cache writer at once on the calling thread when MindSpore's pipeline is idle
(ms_kvcache/csrc/pyboost_module.cpp, "direct launch"); every op row is also timed with that off in the same
rounds (``queued``: every call through MindSpore's pipeline), the paired before / after of that change.

    ms-kvcache bench --ops copy_ops [--quick]  # in the summary table / plot
    python scripts/bench_copy.py               # full table (this module's main)
    python scripts/bench_copy.py --quick       # fewer sizes and repetitions
    python scripts/bench_copy.py --ops concat_and_cache_mla,swap_blocks --json out.json --csv out.csv
    python scripts/bench_copy.py --ops ... --runs 3  # three runs, then the median table

``run(ops=None, quick=False) -> list[dict]`` is the programmatic entry (used by ``ms-kvcache bench``).
The AscendC kernels' data movement is ``ms_kvcache.bench.copy_ops_sim``.
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
MLA_RANK, MLA_ROPE, MLA_BLOCK_SIZE = 512, 64, 64
TOKENS = (1, 16, 256, 1024, 4096, 16384)
QUICK_TOKENS = (1, 256, 4096)
OTHER_TOKENS = (1024, 4096, 16384)
QUICK_OTHER_TOKENS = (4096,)
SWAP_BLOCKS = (16, 64)
QUICK_SWAP_BLOCKS = (32,)
COPY_LAYERS, COPY_PAIRS = 4, (16,)
ALL_OPS = ("reshape_and_cache", "overhead", "no_copy", "reshape_and_cache_merged", "concat_and_cache_mla",
           "copy_blocks", "swap_blocks", "reshape_and_cache_quant", "overhead_quant")
#: Quantizing writes (reshape_and_cache into int8 caches, docs/quantization.md): T and the scale modes timed.
QUANT_TOKENS = (256, 4096)
QUICK_QUANT_TOKENS = (4096,)
QUANT_MODES = ("static per-channel", "dynamic per-token")

#: Each timed call writes memory that no call touched for at least this many bytes (see the docstring).
COLD_BYTES = 64 << 20
#: At most this many slot / block sets per case (T = 1 would need 16384 for 64 MiB).
MAX_ROTATIONS = 64

#: The baseline of every ratio, in one line (printed under each table).
BASELINE_LINE = (f"baseline: memcpy of the op's bytes (numpy, 1 thread) into a buffer as large as the op's caches, "
                 "and numpy fancy-index assignment of the same rows, both rotated like the op over "
                 f">= {COLD_BYTES >> 20} MiB (every call writes cold memory) and timed interleaved with it; "
                 "x memcpy / x numpy = baseline time / op time (above 1 the op is faster)")


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


def _no_sync():
    pass


def _inner_for(nbytes):
    """Calls per timed round: ~20 ms of work at 10 GB/s (200 MB moved) and at least 8 calls, so that the
    one pipeline sync closing a PyNative round (~1-4 ms on this 2-core machine, more under load) is
    amortised (at 20 MB per round it was up to half of a concat_and_cache_mla T = 1024 round)."""
    return int(max(8, min(2000, 200e6 / max(nbytes, 1))))


def _rotations(payload):
    """K: the number of disjoint slot / block sets a case cycles through (K * payload >= COLD_BYTES)."""
    return int(min(MAX_ROTATIONS, max(2, -(-COLD_BYTES // max(1, payload)))))


class _Cycle:
    """A call of ``fn(k)`` with k = 0, 1, ..., K-1, 0, ...: one rotation variant per call."""

    def __init__(self, k, fn):
        self.k, self.fn, self.i = k, fn, 0

    def __call__(self):
        self.fn(self.i)
        self.i = self.i + 1 if self.i + 1 < self.k else 0


def _bf16(shape, rng):
    import ml_dtypes

    return rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)


def _tensor(a, ms_dtype=None):
    ms = _ms()
    if ms_dtype is not None:
        return ms.Tensor(a.astype(np.float32), dtype=ms_dtype)
    return ms.Tensor(a)


def _param(shape, name, rng=None):
    """A bfloat16 Parameter in MindSpore-owned host memory (zeros, or random bits with ``rng``). The op's
    caches and the baselines' buffers are all made here, so they get the same kind of memory."""
    ms = _ms()
    from mindspore import Parameter

    p = Parameter(ms.Tensor(np.zeros(shape, np.float32), dtype=ms.bfloat16), name=name)
    if rng is not None:
        v = _u8(p)
        v[:] = np.frombuffer(rng.bytes(v.size), np.uint8)
    return p


def _u8(t):
    """The bytes of a CPU tensor as a writable flat uint8 numpy view (``asnumpy()`` of a host tensor is a
    view of its memory in MindSpore 2.10: no copy, writes are seen by the tensor)."""
    v = t.asnumpy()
    return v.view(np.uint8).reshape(-1)


def _slot_sets(rng, num_slots, k, t):
    """K disjoint random sets of T slots out of [0, num_slots), as an int64 [K, T] array."""
    return rng.permutation(num_slots)[:k * t].reshape(k, t).astype(np.int64)


def _kv_memcpy(key, value, k, num_slots, row_bytes, name):
    """The memcpy baseline of a K/V row write (reshape_and_cache and its quantizing form): ``memcpy(i)``
    copies the bytes of ``key`` and of ``value`` (host tensors of T rows of ``row_bytes`` each) back to back
    into region i of K of a bf16 Parameter ``name`` as large as two caches of ``num_slots`` rows (module
    docstring: same footprint, rotated, cold). The returned function keeps that buffer alive."""
    src_k, src_v = _u8(key), _u8(value)
    half = src_k.size
    if src_v.size != half:
        raise ValueError(f"_kv_memcpy: argument 'value': expected {half} bytes (as key), got {src_v.size}")
    nbytes = 2 * half
    mem_dst = _u8(_param((num_slots * row_bytes,), name))  # bf16 elements: 2 caches x num_slots x row_bytes bytes
    if k * nbytes > mem_dst.size:
        raise ValueError(f"_kv_memcpy: {k} rotations of {nbytes} bytes exceed the {mem_dst.size}-byte buffer")
    regions = [(mem_dst[i * nbytes:i * nbytes + half], mem_dst[i * nbytes + half:(i + 1) * nbytes]) for i in range(k)]

    def memcpy(i):
        np.copyto(regions[i][0], src_k)
        np.copyto(regions[i][1], src_v)

    return memcpy


def bench_reshape_and_cache(tokens, reps, rng):
    """One row per T: op vs memcpy vs numpy fancy index vs scatter_update vs setitem, all rotated over the
    same K slot sets (see the module docstring)."""
    ms = _ms()
    from mindspore import Parameter, ops

    import ms_kvcache

    rows = []
    row_bytes = HEADS * HEAD_SIZE * 2
    for t in tokens:
        nbytes = 2 * t * row_bytes  # K and V rows written
        k = _rotations(nbytes)
        nb = -(-k * t // BLOCK_SIZE)
        num_slots = nb * BLOCK_SIZE
        shape = (nb, BLOCK_SIZE, HEADS, HEAD_SIZE)
        kc, vc = _param(shape, f"rac_kc{t}"), _param(shape, f"rac_vc{t}")
        key_np, value_np = _bf16((t, HEADS, HEAD_SIZE), rng), _bf16((t, HEADS, HEAD_SIZE), rng)
        key, value = _tensor(key_np, ms.bfloat16), _tensor(value_np, ms.bfloat16)
        sets = _slot_sets(rng, num_slots, k, t)
        slots = [ms.Tensor(s) for s in sets]
        inner = _inner_for(nbytes)
        memcpy = _kv_memcpy(key, value, k, num_slots, row_bytes, f"rac_md{t}")

        # numpy: fancy-index assignment into caches of the same shape (uint16 views of bf16 Parameters)
        np_kc = _u8(_param(shape, f"rac_nk{t}")).view(np.uint16).reshape(num_slots, HEADS, HEAD_SIZE)
        np_vc = _u8(_param(shape, f"rac_nv{t}")).view(np.uint16).reshape(num_slots, HEADS, HEAD_SIZE)
        k16, v16 = key_np.view(np.uint16), value_np.view(np.uint16)

        def fancy(i, sets=sets, np_kc=np_kc, np_vc=np_vc, k16=k16, v16=v16):
            np_kc[sets[i]] = k16
            np_vc[sets[i]] = v16

        def op(i, key=key, value=value, kc=kc, vc=vc, slots=slots):
            ms_kvcache.reshape_and_cache(key, value, kc, vc, slots[i])

        best = _time_rotated(k, nbytes, op, kc, memcpy, fancy, reps)
        t_op, t_memcpy, t_numpy = best["op"], best["memcpy"], best["numpy"]
        t_op_spin = _timeit(_Cycle(k, op), lambda kc=kc: kc.asnumpy(), max(1, reps // 2), inner, warmup=k)

        kc16 = Parameter(ms.Tensor(np.zeros((num_slots, HEADS, HEAD_SIZE), np.float16)), name=f"rac_k16_{t}")
        vc16 = Parameter(ms.Tensor(np.zeros((num_slots, HEADS, HEAD_SIZE), np.float16)), name=f"rac_v16_{t}")
        key16, value16 = ms.Tensor(key_np.astype(np.float16)), ms.Tensor(value_np.astype(np.float16))
        idx32 = [ms.Tensor(s.astype(np.int32)) for s in sets]

        def scatter(i, kc16=kc16, vc16=vc16, key16=key16, value16=value16, idx32=idx32):
            ops.scatter_update(kc16, idx32[i], key16)
            ops.scatter_update(vc16, idx32[i], value16)

        t_scatter = _timeit(_Cycle(k, scatter), lambda kc16=kc16: _polite_sync(kc16), reps,
                            inner if t >= 256 else 20, warmup=k)

        def setitem(i, kc16=kc16, vc16=vc16, key16=key16, value16=value16, idx32=idx32):
            kc16[idx32[i]] = key16
            vc16[idx32[i]] = value16

        setitem_reps = reps if t <= 256 else max(1, reps // 2)
        t_setitem = _timeit(_Cycle(k, setitem), lambda kc16=kc16: _polite_sync(kc16), setitem_reps,
                            1 if t > 16 else 10, warmup=1)

        # correctness of the op itself: the rows of slot set 0 (no later set overwrites them)
        got = _u8(kc).view(np.uint16).reshape(num_slots, HEADS, HEAD_SIZE)[sets[0]]
        ok = bool(np.array_equal(got, k16))
        rows.append({
            "bench": "reshape_and_cache", "T": t, "dtype": "bfloat16", "bytes": nbytes, "rotations": k,
            "op_us": t_op * 1e6, "op_gbps": nbytes / t_op / 1e9, "op_gbps_spin_sync": nbytes / t_op_spin / 1e9,
            "memcpy_us": t_memcpy * 1e6, "memcpy_gbps": nbytes / t_memcpy / 1e9,
            "ratio_to_memcpy": t_memcpy / t_op,
            "numpy_fancy_us": t_numpy * 1e6, "speedup_vs_numpy": t_numpy / t_op,
            "scatter_update_fp16_us": t_scatter * 1e6, "speedup_vs_scatter_update": t_scatter / t_op,
            "setitem_fp16_us": t_setitem * 1e6, "speedup_vs_setitem": t_setitem / t_op,
            "cache_mib": 2 * kc.size * 2 / 2**20, "correct": ok,
            "cache_line_offsets": f"{_u8(kc).ctypes.data % 64}/{_u8(vc).ctypes.data % 64}",
        })
        del kc, vc, kc16, vc16, np_kc, np_vc, memcpy
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
                 "add_speedup": t_add / t_op, "fast_path": fast_ok, "ops_custom_us": t_custom * 1e6})

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
                 "add_speedup": t_gadd / t_gop})
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


def _direct_switch():
    """``set_direct_launch`` of ms_kvcache._cpu_pyboost (the fast path's direct launch of the cache writers
    when MindSpore's pipeline is idle, ms_kvcache/csrc/pyboost_module.cpp), or None when not built."""
    from ms_kvcache import _custom

    return getattr(_custom._fast_module(), "set_direct_launch", None)


def _queued(fn, switch):
    """``fn`` with the direct launch turned off for the call (every call queued through MindSpore's
    pipeline, the fast path before the direct launch): the same-run "before" of a paired comparison."""
    def call(*args):
        old = switch(False)
        try:
            fn(*args)
        finally:
            switch(old)

    return call


#: The T = 1 cases of ``--ops overhead_quant``: (label, builder key); see bench_overhead_quant.
OVERHEAD_QUANT_CASES = (
    ("reshape_and_cache bf16", "rac"),
    ("reshape_and_cache int8 k_scale (per channel)", "rac_static"),
    ("reshape_and_cache int8 k_scale_cache (dynamic)", "rac_dynamic"),
    ("concat_and_cache_mla bf16", "mla"),
    ("concat_and_cache_mla int8 kv_c_scale (per channel)", "mla_static"),
    ("concat_and_cache_mla int8 kv_c_scale_cache (dynamic)", "mla_dynamic"),
)


def bench_overhead_quant(reps, rng, calls=1000):
    """PyNative per-call time at T = 1 of the quantizing writes (reshape_and_cache and concat_and_cache_mla
    into int8 caches with static ``k_scale`` / ``kv_c_scale`` or dynamic ``k_scale_cache`` /
    ``kv_c_scale_cache``) and of their bf16 forms, next to ``ops.add`` in the same rounds (issue 17's target:
    at most 2x ops.add, i.e. x ops.add = ops.add time / op time >= 0.5). Shapes: Llama-3-8B (8 x 128,
    block_size 128) and DeepSeek-V3 MLA (512 + 64, block_size 64), 64 blocks. Each op is also timed with
    the direct launch off (``queued``: every call through MindSpore's pipeline), interleaved in the same
    rounds, when the fast path has the switch."""
    ms = _ms()
    from mindspore import Parameter, ops

    import ms_kvcache
    from ms_kvcache import _custom

    nb = 64
    h, d, bs = HEADS, HEAD_SIZE, BLOCK_SIZE
    key = ms.Tensor(_bf16((1, h, d), rng).astype(np.float32), dtype=ms.bfloat16)
    value = ms.Tensor(_bf16((1, h, d), rng).astype(np.float32), dtype=ms.bfloat16)
    kv_c = ms.Tensor(_bf16((1, MLA_RANK), rng).astype(np.float32), dtype=ms.bfloat16)
    k_pe = ms.Tensor(_bf16((1, MLA_ROPE), rng).astype(np.float32), dtype=ms.bfloat16)
    slot = ms.Tensor(np.array([5], np.int32))

    def param(shape, dtype, name):
        return Parameter(ms.Tensor(np.zeros(shape, np.float32), dtype=dtype), name=f"ovq_{name}")

    kc, vc = param((nb, bs, h, d), ms.bfloat16, "kc"), param((nb, bs, h, d), ms.bfloat16, "vc")
    qkc, qvc = param((nb, bs, h, d), ms.int8, "qkc"), param((nb, bs, h, d), ms.int8, "qvc")
    ksc, vsc = param((nb, bs, h, 1), ms.float32, "ksc"), param((nb, bs, h, 1), ms.float32, "vsc")
    sc = ms.Tensor(np.full((h, d), 0.02, np.float32))
    cc, pc = param((nb, MLA_BLOCK_SIZE, MLA_RANK), ms.bfloat16, "cc"), param((nb, MLA_BLOCK_SIZE, MLA_ROPE), ms.bfloat16, "pc")
    qcc, qpc = param((nb, MLA_BLOCK_SIZE, MLA_RANK), ms.int8, "qcc"), param((nb, MLA_BLOCK_SIZE, MLA_ROPE), ms.int8, "qpc")
    csc, psc = param((nb, MLA_BLOCK_SIZE, 1), ms.float32, "csc"), param((nb, MLA_BLOCK_SIZE, 1), ms.float32, "psc")
    c_sc, p_sc = ms.Tensor(np.full((MLA_RANK,), 0.02, np.float32)), ms.Tensor(np.full((MLA_ROPE,), 0.02, np.float32))
    a = ms.Tensor(np.ones((1,), np.float32))
    build = {
        "rac": lambda: ms_kvcache.reshape_and_cache(key, value, kc, vc, slot),
        "rac_static": lambda: ms_kvcache.reshape_and_cache(key, value, qkc, qvc, slot, k_scale=sc, v_scale=sc),
        "rac_dynamic": lambda: ms_kvcache.reshape_and_cache(key, value, qkc, qvc, slot, k_scale_cache=ksc,
                                                            v_scale_cache=vsc),
        "mla": lambda: ms_kvcache.concat_and_cache_mla(kv_c, k_pe, cc, pc, slot),
        "mla_static": lambda: ms_kvcache.concat_and_cache_mla(kv_c, k_pe, qcc, qpc, slot, kv_c_scale=c_sc,
                                                              k_pe_scale=p_sc),
        "mla_dynamic": lambda: ms_kvcache.concat_and_cache_mla(kv_c, k_pe, qcc, qpc, slot, kv_c_scale_cache=csc,
                                                               k_pe_scale_cache=psc),
    }

    def sync():
        _polite_sync(kc)

    switch = _direct_switch()
    cases = {"ops.add": (lambda: ops.add(a, a), sync, calls)}
    for label, b in OVERHEAD_QUANT_CASES:
        cases[label] = (build[b], sync, calls)
        if switch is not None:
            cases[label + " queued"] = (_queued(build[b], switch), sync, calls)
    best = _timeit_interleaved(cases, reps + 2, warmup=2)
    fast_ok = _custom.fast_path_available()[0]
    rows = []
    for label, _ in OVERHEAD_QUANT_CASES:
        t, t_add = best[label], best["ops.add"]
        row = {"bench": "overhead_quant", "mode": "pynative", "T": 1, "case_label": label, "op_us": t * 1e6,
               "ops_add_us": t_add * 1e6, "add_speedup": t_add / t, "fast_path": fast_ok}
        if label + " queued" in best:
            row.update(queued_us=best[label + " queued"] * 1e6, add_speedup_queued=t_add / best[label + " queued"])
        rows.append(row)
    # the writes landed (a decode step's row of each cache)
    for r, ok in zip(rows, (kc, qkc, qkc, cc, qcc, qcc)):
        r["correct"] = bool(np.any(ok.asnumpy().reshape(ok.shape[0] * ok.shape[1], -1)[5] != 0))
    return rows


def _aot_kernel(symbol, tensors, index_sets, after=()):
    """The cpu backend's kernel ``symbol`` called directly through its AOT entry point (ctypes, no MindSpore:
    no launch, no pipeline), on the tensors' own memory, with ``index_sets[i]`` (an int64 numpy array) as
    the last input (then the tensors ``after``, for a kernel with inputs behind slot_mapping): returns
    ``fn(i)``, or None when the native module is not built. The per-stage view of
    an op's time: op time - kernel time = what the PyNative call adds. Without MindSpore's attributes the
    kernel also scans the slots for repeats (PyNative rejects them before the launch)."""
    import ctypes

    try:
        from ms_kvcache import _cpu
    except ImportError:
        return None
    fn = getattr(ctypes.CDLL(_cpu.__file__), symbol)
    fn.restype = ctypes.c_int
    arrays = [t.asnumpy() for t in tensors]  # views of the tensors' memory (host tensors, MindSpore 2.10)
    tail = [t.asnumpy() for t in after]
    out = np.zeros(1, np.int32)
    packs = []
    for idx in index_sets:
        arg = arrays + [np.ascontiguousarray(idx, np.int64)] + tail + [out]
        n = len(arg)
        shapes = [(ctypes.c_int64 * max(1, a.ndim))(*a.shape) for a in arg]
        packs.append((n, (ctypes.c_void_p * n)(*[a.ctypes.data for a in arg]), (ctypes.c_int * n)(*[a.ndim for a in arg]),
                      (ctypes.POINTER(ctypes.c_int64) * n)(*[ctypes.cast(x, ctypes.POINTER(ctypes.c_int64)) for x in shapes]),
                      (ctypes.c_char_p * n)(*[a.dtype.name.encode() for a in arg]), shapes, arg))

    def run(i):
        n, params, ndims, shp, dtypes, _, _ = packs[i]
        if fn(n, params, ndims, shp, dtypes, None, None) != 0:
            raise RuntimeError(f"{symbol} failed: {_cpu.last_error()}")

    return run


def _time_rotated(k, nbytes, op, anchor, memcpy, fancy, reps, kernel=None):
    """The timing of every copy row: op, memcpy and numpy (and ``kernel``, the op's cpu kernel alone, when
    given), each a function of the rotation index cycled over K, interleaved in ``reps + 2`` rounds of
    ``_inner_for(nbytes)`` calls after one warm-up pass over the K sets; op rounds are closed by a
    sleep-polling pipeline sync on ``anchor`` (_polite_sync). Returns best seconds per call by name."""
    inner = _inner_for(nbytes)
    cases = {"op": (_Cycle(k, op), lambda: _polite_sync(anchor), inner),
             "memcpy": (_Cycle(k, memcpy), _no_sync, inner),
             "numpy": (_Cycle(k, fancy), _no_sync, inner)}
    if kernel is not None:
        cases["kernel"] = (_Cycle(k, kernel), _no_sync, inner)
    switch = _direct_switch()
    if switch is not None:  # the op with every call queued through MindSpore's pipeline (no direct launch)
        cases["queued"] = (_Cycle(k, _queued(op, switch)), lambda: _polite_sync(anchor), inner)
    return _timeit_interleaved(cases, reps + 2, warmup=k)


def _measure(rows, name, shape, tokens, nbytes, k, op, anchor, memcpy, fancy, reps, check, footprint, kernel=None):
    """Time op / memcpy / numpy (each a function of the rotation index), interleaved; append one row.
    ``kernel`` (optional, see _aot_kernel): the op's kernel alone, timed in the same rounds."""
    best = _time_rotated(k, nbytes, op, anchor, memcpy, fancy, reps, kernel)
    t_op, t_mem, t_np = best["op"], best["memcpy"], best["numpy"]
    row = {"bench": name, "shape": shape, "T": tokens, "dtype": "bfloat16", "bytes": nbytes, "rotations": k,
           "footprint_mib": footprint / 2**20, "op_us": t_op * 1e6, "op_gbps": nbytes / t_op / 1e9,
           "memcpy_us": t_mem * 1e6, "memcpy_gbps": nbytes / t_mem / 1e9, "ratio_to_memcpy": t_mem / t_op,
           "numpy_fancy_us": t_np * 1e6, "speedup_vs_numpy": t_np / t_op, "correct": bool(check())}
    if kernel is not None:
        row.update(kernel_us=best["kernel"] * 1e6, kernel_x_memcpy=t_mem / best["kernel"])
    if "queued" in best:
        row.update(queued_us=best["queued"] * 1e6, queued_x_memcpy=t_mem / best["queued"])
    rows.append(row)


def _slot_case(rows, name, label, t, planes, k, num_slots, op, anchor, reps, rng, tag, kernel=None):
    """A slot-scatter op: ``planes`` = [(source tensor, cache Parameter, row bytes, byte offset of the plane in
    that cache)], ``op(slot tensor)`` runs the op; ``kernel`` = (AOT symbol, its tensor inputs before
    slot_mapping): the kernel alone is timed too (_aot_kernel)."""
    ms = _ms()
    nbytes = t * sum(p[2] for p in planes)
    sets = _slot_sets(rng, num_slots, k, t)
    slots = [ms.Tensor(s) for s in sets]
    srcs = [_u8(p[0]) for p in planes]
    cache_bytes = sum(num_slots * p[2] for p in planes)
    mem_dst = _u8(_param((cache_bytes // 2,), f"{tag}_md"))
    regions = []
    for i in range(k):
        off, reg = i * nbytes, []
        for src in srcs:
            reg.append(mem_dst[off:off + src.size])
            off += src.size
        regions.append(reg)
    np_caches = [_u8(_param((num_slots * rb // 2,), f"{tag}_np{j}")).reshape(num_slots, rb)
                 for j, (_, _, rb, _) in enumerate(planes)]
    np_srcs = [src.reshape(t, p[2]) for src, p in zip(srcs, planes)]

    def memcpy(i):
        for dst, src in zip(regions[i], srcs):
            np.copyto(dst, src)

    def fancy(i):
        for c, s in zip(np_caches, np_srcs):
            c[sets[i]] = s

    def check():
        return all(np.array_equal(_u8(c)[off:off + num_slots * rb].reshape(num_slots, rb)[sets[0]], s)
                   for (_, c, rb, off), s in zip(planes, np_srcs))

    _measure(rows, name, label, t, nbytes, k, lambda i: op(slots[i]), anchor, memcpy, fancy, reps, check,
             cache_bytes + nbytes, kernel=_aot_kernel(kernel[0], kernel[1], sets) if kernel else None)
    # where each plane starts relative to a 64-byte cache line (MindSpore's host tensors are 16-byte aligned):
    # rows of a cache not on a line boundary write partial lines, which costs streamed scatters of small
    # rows; it varies between runs and processes
    rows[-1]["cache_line_offsets"] = "/".join(str((_u8(c).ctypes.data + off) % 64) for (_, c, _, off) in planes)


def _block_sets(rng, k, n, extra=0):
    """K disjoint sets of n block ids (a random order of K*n blocks, plus `extra` more ids for a second
    disjoint family): int64 [K, n] (and [K, n] of the next K*n ids when extra)."""
    perm = rng.permutation(k * n * (2 if extra else 1))
    if extra:
        return perm[:k * n].reshape(k, n), perm[k * n:].reshape(k, n)
    return perm.reshape(k, n)


def bench_other_ops(selected, reps, rng, tokens=OTHER_TOKENS, swap_blocks=SWAP_BLOCKS, copy_pairs=None):
    """The other copy ops against the same-footprint memcpy and numpy baselines (module docstring);
    copy_pairs None = COPY_PAIRS (read at call time, as COPY_LAYERS and COLD_BYTES)."""
    copy_pairs = COPY_PAIRS if copy_pairs is None else copy_pairs
    ms = _ms()

    import ms_kvcache

    rows = []
    row_bytes = HEADS * HEAD_SIZE * 2
    block = BLOCK_SIZE * HEADS * HEAD_SIZE
    if "reshape_and_cache_merged" in selected:
        for t in tokens:
            k = _rotations(2 * t * row_bytes)
            nb = -(-k * t // BLOCK_SIZE)
            kv = _param((2, nb, BLOCK_SIZE, HEADS, HEAD_SIZE), f"m_kv{t}")
            key, value = _tensor(_bf16((t, HEADS, HEAD_SIZE), rng), ms.bfloat16), _tensor(_bf16((t, HEADS, HEAD_SIZE), rng), ms.bfloat16)
            plane = nb * BLOCK_SIZE * row_bytes  # V plane offset in kv_cache
            _slot_case(rows, "reshape_and_cache_merged", f"Llama-3-8B T={t}", t,
                       [(key, kv, row_bytes, 0), (value, kv, row_bytes, plane)], k, nb * BLOCK_SIZE,
                       lambda s, key=key, value=value, kv=kv: ms_kvcache.reshape_and_cache_merged(key, value, kv, s),
                       kv, reps, rng, f"m{t}", kernel=("MskvReshapeAndCacheMerged", [key, value, kv]))
    if "concat_and_cache_mla" in selected:
        for t in tokens:
            rb_c, rb_p = MLA_RANK * 2, MLA_ROPE * 2
            k = _rotations(t * (rb_c + rb_p))
            nb = -(-k * t // MLA_BLOCK_SIZE)
            cc = _param((nb, MLA_BLOCK_SIZE, MLA_RANK), f"mla_cc{t}")
            pc = _param((nb, MLA_BLOCK_SIZE, MLA_ROPE), f"mla_pc{t}")
            kv_c, k_pe = _tensor(_bf16((t, MLA_RANK), rng), ms.bfloat16), _tensor(_bf16((t, MLA_ROPE), rng), ms.bfloat16)
            _slot_case(rows, "concat_and_cache_mla", f"DeepSeek-V3 R=512 P=64 bs=64 T={t}", t,
                       [(kv_c, cc, rb_c, 0), (k_pe, pc, rb_p, 0)], k, nb * MLA_BLOCK_SIZE,
                       lambda s, a=kv_c, b=k_pe, c=cc, d=pc: ms_kvcache.concat_and_cache_mla(a, b, c, d, s),
                       cc, reps, rng, f"mla{t}", kernel=("MskvConcatAndCacheMla", [kv_c, k_pe, cc, pc]))
    if "copy_blocks" in selected:
        for n in copy_pairs:
            layers = COPY_LAYERS
            nbytes = 2 * layers * n * block * 2
            k = _rotations(nbytes)
            nb = 2 * k * n
            src_ids, dst_ids = _block_sets(rng, k, n, extra=1)
            maps = [ms.Tensor(np.stack([src_ids[i], dst_ids[i]], 1).astype(np.int64)) for i in range(k)]
            caches = [_param((nb, BLOCK_SIZE, HEADS, HEAD_SIZE), f"cb_c{n}_{j}", rng) for j in range(2 * layers)]
            keys, vals = caches[:layers], caches[layers:]
            # reference contents of the source blocks of set 0 (never written: sources and destinations are disjoint)
            views = [_u8(c).reshape(nb, block * 2) for c in caches]
            want = [v[src_ids[0]].copy() for v in views]
            mem_src = _u8(_param((k * nbytes // 2,), f"cb_ms{n}", rng))
            mem_dst = _u8(_param((k * nbytes // 2,), f"cb_md{n}"))
            np_views = [_u8(_param((nb, BLOCK_SIZE, HEADS, HEAD_SIZE), f"cb_np{n}_{j}", rng)).reshape(nb, block * 2)
                        for j in range(2 * layers)]

            def memcpy(i, mem_src=mem_src, mem_dst=mem_dst, nbytes=nbytes):
                np.copyto(mem_dst[i * nbytes:(i + 1) * nbytes], mem_src[i * nbytes:(i + 1) * nbytes])

            def fancy(i, np_views=np_views, src_ids=src_ids, dst_ids=dst_ids):
                for v in np_views:
                    v[dst_ids[i]] = v[src_ids[i]]

            def check(views=views, want=want, dst_ids=dst_ids):
                return all(np.array_equal(v[dst_ids[0]], w) for v, w in zip(views, want))

            _measure(rows, "copy_blocks", f"Llama-3-8B L={layers}, {n} pairs", n, nbytes, k,
                     lambda i, keys=keys, vals=vals, maps=maps: ms_kvcache.copy_blocks(keys, vals, maps[i]),
                     keys[0], memcpy, fancy, reps, check, 2 * layers * nb * block * 2)
    if "swap_blocks" in selected:
        for n in swap_blocks:
            nbytes = n * block * 2
            k = _rotations(nbytes)
            src_ids, dst_ids = _block_sets(rng, k, n), _block_sets(rng, k, n)
            maps = [ms.Tensor(np.stack([src_ids[i], dst_ids[i]], 1).astype(np.int64)) for i in range(k)]
            shape = (k * n, BLOCK_SIZE, HEADS, HEAD_SIZE)
            src, dst = _param(shape, f"sw_s{n}", rng), _param(shape, f"sw_d{n}")
            src_v, dst_v = _u8(src).reshape(k * n, block * 2), _u8(dst).reshape(k * n, block * 2)
            mem_src = _u8(src)  # the op's own source cache, read region i of K
            mem_dst = _u8(_param(shape, f"sw_md{n}"))
            np_dst = _u8(_param(shape, f"sw_np{n}")).reshape(k * n, block * 2)

            def memcpy(i, mem_src=mem_src, mem_dst=mem_dst, nbytes=nbytes):
                np.copyto(mem_dst[i * nbytes:(i + 1) * nbytes], mem_src[i * nbytes:(i + 1) * nbytes])

            def fancy(i, np_dst=np_dst, src_v=src_v, src_ids=src_ids, dst_ids=dst_ids):
                np_dst[dst_ids[i]] = src_v[src_ids[i]]

            def check(src_v=src_v, dst_v=dst_v, src_ids=src_ids, dst_ids=dst_ids):
                return np.array_equal(dst_v[dst_ids[0]], src_v[src_ids[0]])

            _measure(rows, "swap_blocks", f"Llama-3-8B {n} blocks", n, nbytes, k,
                     lambda i, a=src, b=dst, maps=maps: ms_kvcache.swap_blocks(a, b, maps[i]),
                     dst, memcpy, fancy, reps, check, 2 * k * nbytes,
                     kernel=_aot_kernel("MskvSwapBlocks", [src, dst], [np.stack([src_ids[i], dst_ids[i]], 1)
                                                                        for i in range(k)]))
    return rows


def _quant_ref(x, scale):
    """numpy float32 model of the int8 codes (docs/quantization.md): x / s (one fp32 division), round half
    to even, saturate; ``scale`` None = dynamic per token-head (s = max|x| / 127, rows [T, H, D])."""
    x = np.asarray(x, np.float32)
    if scale is None:
        s = (np.abs(x).max(-1, keepdims=True) / np.float32(127)).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(s > 0, x / np.where(s > 0, s, 1), 0)
        return np.clip(np.rint(q), -128, 127).astype(np.int8), s[..., 0]
    return np.clip(np.rint(x / np.asarray(scale, np.float32)), -128, 127).astype(np.int8), None


def bench_quant(tokens, reps, rng, modes=QUANT_MODES):
    """Quantizing writes on the cpu backend: reshape_and_cache of bf16 K/V (Llama-3-8B, 8 heads x 128,
    block_size 128) into int8 caches, static per-channel scales ([H, D]) and dynamic per-token scales
    (scale caches [nb, bs, H, 1]), against a memcpy of the float input bytes (issue 17's target: the op
    >= 0.7x that memcpy, same run) and numpy's quantize-and-scatter of the same rows, rotated like the
    other rows (module docstring). Static rows also time the op's cpu kernel alone (_aot_kernel)."""
    ms = _ms()
    from mindspore import Parameter

    import ms_kvcache

    rows = []
    h, d, bs = HEADS, HEAD_SIZE, BLOCK_SIZE
    row_bytes = h * d * 2
    for t in tokens:
        nbytes = 2 * t * row_bytes  # float K and V bytes read (the int8 rows written are half of it)
        k = _rotations(nbytes)
        nb = -(-k * t // bs)
        num_slots = nb * bs
        shape = (nb, bs, h, d)
        key_np, value_np = _bf16((t, h, d), rng), _bf16((t, h, d), rng)
        key, value = _tensor(key_np, ms.bfloat16), _tensor(value_np, ms.bfloat16)
        sets = _slot_sets(rng, num_slots, k, t)
        slots = [ms.Tensor(s) for s in sets]
        memcpy = _kv_memcpy(key, value, k, num_slots, row_bytes, f"q_md{t}")

        kf, vf = key_np.astype(np.float32), value_np.astype(np.float32)
        for mode in modes:
            tag = f"q{t}_{mode.split()[0]}"
            kc = Parameter(ms.Tensor(np.zeros(shape, np.int8)), name=f"{tag}_kc")
            vc = Parameter(ms.Tensor(np.zeros(shape, np.int8)), name=f"{tag}_vc")
            np_kc = np.zeros((num_slots, h, d), np.int8)
            np_vc = np.zeros((num_slots, h, d), np.int8)
            dynamic = mode.startswith("dynamic")
            if dynamic:
                ksc = Parameter(ms.Tensor(np.zeros((nb, bs, h, 1), np.float32)), name=f"{tag}_ksc")
                vsc = Parameter(ms.Tensor(np.zeros((nb, bs, h, 1), np.float32)), name=f"{tag}_vsc")
                kw = dict(k_scale_cache=ksc, v_scale_cache=vsc)
                scale = None
                np_ks = np.zeros((num_slots, h), np.float32)
                kernel = None
            else:
                scale = (np.abs(kf).max(0) / 100 + np.float32(1e-3)).astype(np.float32)  # [H, D]
                sc = ms.Tensor(scale)
                kw = dict(k_scale=sc, v_scale=sc)
                np_ks = None
                kernel = _aot_kernel("MskvReshapeAndCacheQuant", [key, value, kc, vc], sets,
                                     after=[sc, sc, _no_f32(), _no_f32(), _no_f32(), _no_f32()])

            def op(i, kc=kc, vc=vc, kw=kw):
                ms_kvcache.reshape_and_cache(key, value, kc, vc, slots[i], **kw)

            def fancy(i, np_kc=np_kc, np_vc=np_vc, scale=scale, np_ks=np_ks):
                qk, sk = _quant_ref(kf, scale)
                qv, _ = _quant_ref(vf, scale)
                np_kc[sets[i]] = qk
                np_vc[sets[i]] = qv
                if np_ks is not None:
                    np_ks[sets[i]] = sk

            def check(kc=kc, ksc=kw.get("k_scale_cache"), scale=scale):
                want, ws = _quant_ref(kf, scale)
                ok = np.array_equal(kc.asnumpy().reshape(num_slots, h, d)[sets[0]], want)
                if ksc is not None:
                    ok = ok and np.array_equal(ksc.asnumpy().reshape(num_slots, h)[sets[0]], ws)
                return ok

            _measure(rows, "reshape_and_cache_quant", f"bf16->int8 {mode} T={t}", t, nbytes, k, op, kc, memcpy,
                     fancy, reps, check, 2 * num_slots * h * d + nbytes, kernel=kernel)
            rows[-1]["dtype"] = "bfloat16->int8"
            rows[-1]["mode"] = mode
            del kc, vc
    return rows


def _no_f32():
    """The empty float32 [0] tensor standing for an absent optional input (ms_kvcache.ops._quant.NO_F32)."""
    from ms_kvcache.ops import _quant

    return _quant.NO_F32


def run(ops=None, quick=False):
    """Run the benchmark; returns one dict per table row.

    Args:
        ops (iterable of str | None): subset of ``ALL_OPS`` ("reshape_and_cache", "overhead", "no_copy",
            "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks",
            "reshape_and_cache_quant", "overhead_quant"); None = all.
        quick (bool): fewer sizes and repetitions (~1 min instead of several).

    Runs in PyNative on the cpu backend (the MindSpore mode and ms_kvcache backend are restored after).
    Rows: ``bench`` = "reshape_and_cache" (per T: op/memcpy/numpy/scatter_update/setitem times, GB/s,
    ratios), "overhead" (per mode: op vs ops.add us per call at T = 1), "no_copy", or another op's name
    (per size: op, memcpy and numpy times, GB/s, ``ratio_to_memcpy``, ``speedup_vs_numpy``, ``rotations``
    K, ``footprint_mib``, ``correct``; for reshape_and_cache_merged, concat_and_cache_mla and swap_blocks also
    ``kernel_us`` / ``kernel_x_memcpy``: the op's cpu kernel alone, see ``_aot_kernel``). Baselines:
    ``BASELINE_LINE``.
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
        rows += bench_other_ops(selected, reps, rng, tokens=QUICK_OTHER_TOKENS if quick else OTHER_TOKENS,
                                swap_blocks=QUICK_SWAP_BLOCKS if quick else SWAP_BLOCKS)
        if "reshape_and_cache_quant" in selected:
            rows += bench_quant(QUICK_QUANT_TOKENS if quick else QUANT_TOKENS, reps, rng)
        if "overhead_quant" in selected:
            rows += bench_overhead_quant(reps, rng, calls=200 if quick else 1000)
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
                            "scatter_update": r["speedup_vs_scatter_update"], "setitem": r["speedup_vs_setitem"]},
                   note="memcpy: same footprint, cold destination")
    elif kind == "overhead":
        out.update(op="reshape_and_cache", case=f"per-call overhead T=1, {r['mode']}", tokens=1,
                   seconds=r["op_us"] / 1e6, speedup={"ops.add": r["ops_add_us"] / r["op_us"]},
                   note=f"{r['op_us']:.1f} us per call, ops.add {r['ops_add_us']:.1f} us")
    elif kind == "overhead_quant":
        out.update(op=r["case_label"].split()[0], case=f"per-call time T=1, {r['case_label'].split(' ', 1)[1]}",
                   tokens=1, seconds=r["op_us"] / 1e6, speedup={"ops.add": r["add_speedup"]},
                   note=f"{r['op_us']:.1f} us per call, ops.add {r['ops_add_us']:.1f} us")
        if r["case_label"].split()[1] == "int8":
            out["dtype"] = "bfloat16->int8"
    elif kind == "no_copy":
        out.update(op="reshape_and_cache", case=f"no copy: T=1 into a {r['cache_mib']:.2f} MiB cache", tokens=1,
                   dtype="int8", seconds=r["op_us"] / 1e6,
                   note=f"{r['op_us']:.1f} us per call, {r['ratio_to_smallest']:.2f}x the smallest cache")
    else:
        # the quantizing write is the public reshape_and_cache with scale arguments (docs/quantization.md)
        out.update(op="reshape_and_cache" if kind == "reshape_and_cache_quant" else kind, case=r["shape"],
                   bytes=r["bytes"], seconds=r["op_us"] / 1e6, gbps=r["op_gbps"],
                   memcpy_gbps=r["memcpy_gbps"], ratio_memcpy=r["ratio_to_memcpy"])
        if "T" in r:
            out["tokens"] = r["T"]
        if "speedup_vs_numpy" in r:
            out["speedup"] = {"numpy fancy index": r["speedup_vs_numpy"]}
            out["note"] = "memcpy: same footprint, cold destination"
            if "kernel_x_memcpy" in r:
                out["note"] += f"; kernel alone (no MindSpore) x memcpy {r['kernel_x_memcpy']:.2f}"
    return {**r, **out}


def format_table(rows):
    out = []
    main = [r for r in rows if r["bench"] == "reshape_and_cache"]
    if main:
        out.append(f"reshape_and_cache, bf16, {HEADS} KV heads x {HEAD_SIZE}, block_size {BLOCK_SIZE}, PyNative, "
                   "cpu backend")
        out.append(f"{'T':>6} {'bytes':>10} {'K':>3} {'op us':>9} {'op GB/s':>8} {'(spin)':>7} {'memcpy GB/s':>11} "
                   f"{'x memcpy':>9} {'x numpy':>8} {'x scatter_upd':>13} {'x setitem':>10}")
        for r in main:
            out.append(f"{r['T']:>6} {r['bytes']:>10} {r['rotations']:>3} {r['op_us']:>9.1f} {r['op_gbps']:>8.2f} "
                       f"{r['op_gbps_spin_sync']:>7.2f} {r['memcpy_gbps']:>11.2f} {r['ratio_to_memcpy']:>9.2f} "
                       f"{r['speedup_vs_numpy']:>8.2f} {r['speedup_vs_scatter_update']:>13.1f} "
                       f"{r['speedup_vs_setitem']:>10.1f}"
                       + (f"  (cache line offsets {r['cache_line_offsets']})" if "cache_line_offsets" in r else "")
                       + ("" if r["correct"] else "  WRONG VALUES"))
        out.append("  bytes = K+V rows written; K = slot sets rotated over; op = PyNative call, rounds closed by a "
                   "sleep-polling wait for the pipeline ((spin) = closed by Tensor.asnumpy(), whose busy-wait takes a "
                   "core); scatter_update / setitem in float16 (no bf16 CPU kernel), same rotation; speed-ups = their "
                   "time / op time.")
        out.append("  " + BASELINE_LINE)
    ovh = [r for r in rows if r["bench"] == "overhead"]
    if ovh:
        out.append("")
        out.append("per-call overhead at T = 1 (x ops.add = ops.add time / op time: above 1 the op's call is "
                   "cheaper)")
        for r in ovh:
            extra = ""
            if r["mode"] == "pynative":
                extra = (f"  (fast path {'on' if r['fast_path'] else 'OFF'}; through ops.Custom: "
                         f"{r['ops_custom_us']:.1f} us)")
            out.append(f"  {r['mode']:>8}: reshape_and_cache {r['op_us']:7.1f} us, ops.add {r['ops_add_us']:7.1f} us, "
                       f"x ops.add {r['add_speedup']:.2f}{extra}")
    nocopy = [r for r in rows if r["bench"] == "no_copy"]
    if nocopy:
        out.append("")
        out.append("no copy: reshape_and_cache at T = 1, PyNative, per call against the cache size (int8, K and V)")
        for r in nocopy:
            out.append(f"  cache {r['cache_mib']:8.2f} MiB per plane: {r['op_us']:8.1f} us  "
                       f"({r['ratio_to_smallest']:.2f}x the smallest)")
    ovq = [r for r in rows if r["bench"] == "overhead_quant"]
    if ovq:
        out.append("")
        out.append(f"per-call time at T = 1, PyNative, next to ops.add = {ovq[0]['ops_add_us']:.1f} us in the same rounds "
                   "(x ops.add = ops.add time / op time; issue 17's target >= 0.5, i.e. at most 2x ops.add; queued = "
                   "the same op with the direct launch off, every call through MindSpore's pipeline; fast path "
                   f"{'on' if ovq[0]['fast_path'] else 'OFF'})")
        out.append(f"  {'op':<54} {'us':>8} {'x ops.add':>9} {'queued us':>10} {'x ops.add':>9}")
        for r in ovq:
            q = (f"{r['queued_us']:>10.1f} {r['add_speedup_queued']:>9.2f}" if "queued_us" in r else f"{'-':>10} {'-':>9}")
            out.append(f"  {r['case_label']:<54} {r['op_us']:>8.1f} {r['add_speedup']:>9.2f} {q}  "
                       f"{'met' if r['add_speedup'] >= 0.5 else 'NOT met'}" + ("" if r["correct"] else "  WRONG VALUES"))
    other = [r for r in rows if r["bench"] not in ("reshape_and_cache", "overhead", "no_copy", "overhead_quant")]
    if other:
        out.append("")
        out.append("other copy ops (bf16, PyNative, cpu backend)")
        out.append(f"  {'op':<25} {'case':<38} {'MB':>6} {'K':>3} {'op GB/s':>8} {'memcpy GB/s':>11} "
                   f"{'x memcpy':>9} {'x numpy':>8} {'kernel x memcpy':>15} {'queued x memcpy':>15}")
        for r in other:
            out.append(f"  {r['bench']:<25} {r['shape']:<38} {r['bytes'] / 1e6:>6.2f} {r.get('rotations', ''):>3} "
                       f"{r['op_gbps']:>8.2f} {r['memcpy_gbps']:>11.2f} {r['ratio_to_memcpy']:>9.2f} "
                       f"{r.get('speedup_vs_numpy', float('nan')):>8.2f} "
                       + (f"{r['kernel_x_memcpy']:>15.2f}" if "kernel_x_memcpy" in r else f"{'-':>15}")
                       + (f" {r['queued_x_memcpy']:>15.2f}" if "queued_x_memcpy" in r else f" {'-':>15}")
                       + (f"  (cache line offsets {r['cache_line_offsets']})" if "cache_line_offsets" in r else "")
                       + ("" if r.get("correct", True) else "  WRONG VALUES"))
        out.append("  MB = payload written per call; kernel x memcpy = memcpy time / time of the op's cpu kernel called "
                   "directly (ctypes, no MindSpore launch or pipeline; same rotation, same rounds): op and kernel "
                   "differ by the PyNative call's cost; queued x memcpy = the op with its direct launch off (every "
                   "call queued through MindSpore's pipeline, the fast path before the direct launch; same rounds); "
                   "cache line offsets = byte offset of each cache plane from a "
                   "64-byte line (0 = rows on line boundaries); " + BASELINE_LINE)
    return "\n".join(out)


def _case_label(r):
    """The median table's case cell of a row (reshape_and_cache rows get their T appended)."""
    case = r["case"]
    return case if "T=" in case or r.get("tokens") is None or r["bench"] != "reshape_and_cache" else f"{case} T={r['tokens']}"


def summarize_runs(runs, loads=()):
    """The table of several runs of the same benchmark (issue 20's "median of three"): one line per row that
    has a memcpy ratio (op, case), with the median op GB/s and memcpy GB/s and, for ``x memcpy``, ``x numpy``
    and ``kernel x memcpy``, the median followed by every run's figure in run order. ``runs`` = one row list
    per run (``run()``'s result); ``loads`` = per run (load average before, after) for the header. Markdown,
    the baseline line under it."""
    med = lambda v: float(np.median(v))  # noqa: E731
    keys, by = [], {}
    for rows in runs:
        for r in rows:
            if "ratio_memcpy" not in r:
                continue
            key = (r["bench"], _case_label(r))
            if key not in by:
                keys.append(key)
                by[key] = []
            by[key].append(r)

    def cell(vals):
        return f"{med(vals):.2f} ({', '.join(f'{v:.2f}' for v in vals)})" if vals else "-"

    out = [f"median of {len(runs)} runs (python scripts/bench_copy.py --runs {len(runs)}); figures in run order"]
    for i, ld in enumerate(loads):
        out.append(f"  run {i + 1}: load average {ld[0]:.2f} before, {ld[1]:.2f} after")
    out.append("")
    out.append("| op | case | op GB/s | memcpy GB/s | x memcpy: median (runs) | x numpy: median (runs) | "
               "kernel x memcpy: median (runs) | cache line offsets (runs) |")
    out.append("|---|---|---|---|---|---|---|---|")
    for key in keys:
        rs = by[key]
        out.append(f"| {key[0]} | {key[1]} | {med([r['gbps'] for r in rs]):.2f} | "
                   f"{med([r['memcpy_gbps'] for r in rs]):.2f} | {cell([r['ratio_memcpy'] for r in rs])} | "
                   f"{cell([r['speedup']['numpy fancy index'] for r in rs if 'numpy fancy index' in r.get('speedup', {})])} | "
                   f"{cell([r['kernel_x_memcpy'] for r in rs if 'kernel_x_memcpy' in r])} | "
                   f"{', '.join(r['cache_line_offsets'] for r in rs) if all('cache_line_offsets' in r for r in rs) else '-'} |"
                   + ("" if all(r.get("correct", True) for r in rs) else " WRONG VALUES"))
    out.append("")
    out.append(BASELINE_LINE + "; kernel x memcpy = the op's cpu kernel alone (no MindSpore launch), same rounds")
    queued = [(key, [r["queued_x_memcpy"] for r in by[key] if "queued_x_memcpy" in r]) for key in keys]
    queued = [(key, v) for key, v in queued if v]
    if queued:
        out.append("")
        out.append("paired in the same rounds: x memcpy of the op with its direct launch off (every call queued through "
                   "MindSpore's pipeline, the fast path before the direct launch): median (runs)")
        for key, v in queued:
            out.append(f"  {key[0]} {key[1]}: queued x memcpy {cell(v)}")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    p.add_argument("--ops", default=None, help=f"comma-separated subset of {','.join(ALL_OPS)}")
    p.add_argument("--runs", type=int, default=1,
                   help="run the whole benchmark N times in a row and end with the median table of the N runs "
                        "(every run's figure); default 1")
    p.add_argument("--json", default=None, help="write rows as JSON to this file ('-' = stdout; all runs' rows, "
                                                "each with its 'run' number)")
    p.add_argument("--csv", default=None, help="write rows as CSV to this file")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error(f"argument --runs: expected a number >= 1, got {args.runs}")
    runs, loads, all_rows = [], [], []
    for i in range(args.runs):
        load = os.getloadavg()
        rows = run(ops=args.ops.split(",") if args.ops else None, quick=args.quick)
        load_after = os.getloadavg()
        if args.runs > 1:
            print(f"=== run {i + 1} of {args.runs}")
        print(format_table(rows))
        print(f"\nload average (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} before, "
              f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after (CPU figures of this machine)")
        runs.append(rows)
        loads.append((load[0], load_after[0]))
        all_rows += [{**r, "run": i + 1} for r in rows] if args.runs > 1 else rows
    if args.runs > 1:
        print("")
        print(summarize_runs(runs, loads))
    rows = all_rows
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
