"""Benchmark of the demo's model: SmolLM2-135M-Instruct (MindSpore GRAPH_MODE, cpu backend) generating with
the paged KV caches, against the same model recomputing the whole sequence without a cache. CPU figures
of the machine it runs on, not NPU figures.

One batch of ``rows`` chat prompts (the demo's first prompts) is prefilled as one padded batch, then
decoded together for ``new_tokens`` greedy steps (stop tokens ignored, so every row generates exactly
``new_tokens`` tokens):

- **prefill**: the prefill step ``[rows, S]`` (S: the longest prompt rounded up to 16), median of
  ``repeats`` calls after the compiling one; tokens/s = prompt tokens / time;
- **decode, paged KV**: every decode step timed (the first call, which compiles, is run once before);
  tokens/s = rows * new_tokens / the steps' total;
- **decode, recompute without cache**: the same model with dense causal attention over the whole
  sequence (``RecomputeLlama``), the shape a static graph needs at each step: ``[rows, L]`` with L the
  longest row's length rounded up to 16. Every bucket is compiled once and timed (median of ``repeats``);
  the completion's time is the sum over its steps of their bucket's time. The speed-up compares each
  bucket's recompute step with a decode step timed back to back with it (``repeats`` rounds, medians), so a
  change of the machine's load between the two measurements does not skew it; weighted by the steps;
- **ms_kvcache share**: the RoPE-write op of every layer at the decode shape (``KVWriteBench`` minus a
  graph that does nothing) over the median decode step.

    python scripts/bench_demo.py [--quick] [--new-tokens N] [--rows R] [--repeats N] [--dtype D] [--out DIR]
    # or: ms-kvcache bench --ops demo

``--quick`` runs the tiny seeded random model (seconds). Without the model package the full run returns
no rows and says how to install it.
"""
import os
import sys
import time

__all__ = ["run", "main"]

NEW_TOKENS = 64
ROWS = 4
REPEATS = 3


def _median_time(fn, reps):
    import numpy as np

    ts = []
    for _ in range(max(1, reps)):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def run(quick=False, log=None, new_tokens=None, rows=ROWS, repeats=None, dtype="float32", kv_format="separate"):
    """Rows of the benchmark (module docstring); ``[]`` when the model package is not installed (full run)."""
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor

    import ms_kvcache
    from ms_kvcache.demo import ops_adapter as A
    from ms_kvcache.demo.cells import (DATA_DTYPES, DecodeStep, EmptyStep, KVWriteBench, LlamaWeights, PagedLlama,
                                       PrefillStep, RecomputeLlama)
    from ms_kvcache.demo.model import INSTALL_HINT, ModelNotInstalled, load_model, random_model
    from ms_kvcache.demo.pipeline import DEFAULT_PROMPTS
    from ms_kvcache.demo.scheduler import slots_of

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    new_tokens = new_tokens or (8 if quick else NEW_TOKENS)
    repeats = repeats or (1 if quick else REPEATS)
    try:
        model = random_model() if quick else load_model()
    except ModelNotInstalled:
        log(f"demo: skipped: the model package is not installed ({INSTALL_HINT})")
        return []
    cfg, tok = model.config, model.tokenizer
    old_mode, old_backend = ms.get_context("mode"), ms_kvcache.get_backend()
    ms_kvcache.set_backend("cpu")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        prompts = [tok.encode(tok.chat_prompt(p)) for p, _ in DEFAULT_PROMPTS[:rows]]
        rows = len(prompts)
        bs = 16
        longest = max(len(p) for p in prompts)
        S = -(-longest // bs) * bs
        MB = -(-(longest + new_tokens) // bs)
        num_blocks = rows * MB
        weights = LlamaWeights(cfg, model.weights, "neox")
        cos_sin = A.cos_sin_cache(cfg.head_size, MB * bs, cfg.rope_base)
        net = PagedLlama(cfg, weights, num_blocks, bs, MB, dtype, kv_format, cos_sin, True)
        prefill, decode = PrefillStep(net), DecodeStep(net)
        tables = np.arange(num_blocks, dtype=np.int32).reshape(rows, MB)  # row r owns blocks r*MB ...
        ids = np.zeros((rows, S), np.int32)
        pos = np.zeros((rows, S), np.int32)
        slots = np.full((rows, S), -1, np.int32)
        for r, p in enumerate(prompts):
            ids[r, :len(p)] = p
            pos[r, :len(p)] = np.arange(len(p))
            slots[r, :len(p)] = slots_of(tables[r], 0, len(p), bs)
        last = np.array([r * S + len(p) - 1 for r, p in enumerate(prompts)], np.int32)
        pargs = [Tensor(a) for a in (ids.reshape(-1), pos.reshape(-1), slots.reshape(-1), tables, last)]
        log(f"demo: {model.source}: prefill [{rows} x {S}] (compiling)")
        t = time.perf_counter()
        out = prefill(*pargs).asnumpy()
        prefill_first = time.perf_counter() - t
        prefill_s = _median_time(lambda: prefill(*pargs).asnumpy(), repeats)  # rewrites the same rows
        toks = out.argmax(-1).astype(np.int32)
        lens = np.array([len(p) for p in prompts])

        def dargs(t_):
            p_ = (lens + t_).astype(np.int32)
            sl = np.array([slots_of(tables[r], p_[r], p_[r] + 1, bs)[0] for r in range(rows)], np.int32)
            return [Tensor(a) for a in (toks, p_, sl, tables, np.arange(rows, dtype=np.int32))]

        log(f"demo: decode [{rows} x 1] x {new_tokens} steps (compiling first)")
        t = time.perf_counter()
        decode(*dargs(0)).asnumpy()  # compiles; the timed loop writes the same row again
        decode_first = time.perf_counter() - t
        steps = []
        for t_ in range(new_tokens - 1):  # the prefill gave token 0; each step feeds one and samples the next
            a = dargs(t_)
            t = time.perf_counter()
            lg = decode(*a).asnumpy()
            steps.append(time.perf_counter() - t)
            toks = lg.argmax(-1).astype(np.int32)
        decode_total = float(np.sum(steps)) * new_tokens / max(1, len(steps))  # per new_tokens steps
        step_median = float(np.median(steps))

        log("demo: RoPE-write op family alone (all layers, decode shape)")
        bench, empty = KVWriteBench(net), EmptyStep()
        rng = np.random.default_rng(1)
        dt = DATA_DTYPES[dtype]
        q = Tensor(rng.standard_normal((rows, cfg.num_heads, cfg.head_size)).astype(np.float32), dtype=dt)
        k, v = (Tensor(rng.standard_normal((rows, cfg.num_kv_heads, cfg.head_size)).astype(np.float32), dtype=dt)
                for _ in range(2))
        pp = Tensor(np.arange(rows, dtype=np.int32))
        wargs = (pp, q, k, v, Tensor(np.arange(rows, dtype=np.int32) * 3))
        bench(*wargs).asnumpy()
        empty(pp).asnumpy()
        write_s = _median_time(lambda: bench(*wargs).asnumpy(), 5 * repeats)
        empty_s = _median_time(lambda: empty(pp).asnumpy(), 5 * repeats)

        base = RecomputeLlama(cfg, weights, cos_sin, True)
        buckets = {}
        for t_ in range(new_tokens - 1):
            L = int(-(-(longest + t_ + 1) // bs) * bs)  # the longest row holds longest + t_ + 1 tokens
            buckets[L] = buckets.get(L, 0) + 1
        base_s, paired_dec = {}, {}
        probe = dargs(new_tokens // 2)  # a decode step mid-completion, timed back to back with the baseline
        for L, count in sorted(buckets.items()):
            log(f"demo: recompute baseline [{rows} x {L}] ({count} steps; compiling)")
            bid = Tensor(np.tile(np.asarray((prompts[0] * L)[:L], np.int32), rows))
            bpos = Tensor(np.tile(np.arange(L, dtype=np.int32), rows))
            valid = Tensor(np.ones(rows * L, np.float32))
            blast = Tensor(np.arange(rows, dtype=np.int32) * L + L - 1)
            base(bid, bpos, valid, blast).asnumpy()
            bt_, dt_ = [], []
            for _ in range(repeats):  # rounds: a load change hits both alike
                dt_.append(_median_time(lambda: decode(*probe).asnumpy(), 1))
                bt_.append(_median_time(lambda: base(bid, bpos, valid, blast).asnumpy(), 1))
            base_s[L], paired_dec[L] = float(np.median(bt_)), float(np.median(dt_))
        base_total = sum(base_s[L] * c for L, c in buckets.items()) * new_tokens / max(1, new_tokens - 1)
        speedup = sum(base_s[L] * c for L, c in buckets.items()) / sum(paired_dec[L] * c for L, c in buckets.items())
    finally:
        ms.set_context(mode=old_mode)
        ms_kvcache.set_backend(old_backend)
    load = os.getloadavg()[0]
    name = "SmolLM2-135M" if model.real else "tiny random Llama"
    case = f"{name} {cfg.num_layers}L {dtype} {kv_format}, {rows} rows, prompts {min(lens)}-{max(lens)}"
    share = max(write_s - empty_s, 0.0) / step_median
    gen = rows * new_tokens
    return [
        {"op": "rope_reshape_and_cache", "case": f"{case}: decode {new_tokens} tokens, paged KV", "tokens": gen,
         "backend": "cpu", "dtype": dtype, "seconds": decode_total,
         "speedup": {"recompute without cache": speedup},
         "tokens_per_s": gen / decode_total, "step_median_s": step_median, "first_call_s": decode_first,
         "rope_write_step_s": write_s, "empty_graph_s": empty_s, "ops_share": share, "load": load,
         "baseline_seconds": base_total, "baseline_tokens_per_s": gen / base_total,
         "baseline_buckets": {str(k): v for k, v in base_s.items()},
         "paired_decode_step_s": {str(k): v for k, v in paired_dec.items()},
         "note": f"{gen / decode_total:.1f} tokens/s (recompute {gen / base_total:.2f}); RoPE-write op "
                 f"{share * 100:.1f} % of a step; load {load:.1f}"},
        {"op": "rope_reshape_and_cache", "case": f"{case}: prefill [{rows} x {S}]", "tokens": int(lens.sum()),
         "backend": "cpu", "dtype": dtype, "seconds": prefill_s, "tokens_per_s": float(lens.sum()) / prefill_s,
         "first_call_s": prefill_first, "load": load,
         "note": f"{lens.sum() / prefill_s:.0f} prompt tokens/s; first call (compile) {prefill_first:.2f} s"},
    ]


def main(argv=None):
    """``python scripts/bench_demo.py [--quick] [--new-tokens N] [--rows R] [--repeats N] [--dtype D] [--out DIR]``."""
    import argparse

    from ms_kvcache.bench._runner import print_table, write_outputs

    p = argparse.ArgumentParser(description="SmolLM2 decoding with paged KV caches vs recomputing without a cache "
                                            "(CPU figures)")
    p.add_argument("--quick", action="store_true", help="the tiny seeded random model, seconds")
    p.add_argument("--new-tokens", type=int, default=None, help=f"tokens generated per row (default {NEW_TOKENS})")
    p.add_argument("--rows", type=int, default=ROWS, help=f"batch rows, at most 5 (default {ROWS})")
    p.add_argument("--repeats", type=int, default=None, help=f"timed calls per shape (default {REPEATS})")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "int8"), default="float32", help="KV-cache dtype")
    p.add_argument("--out", help="also write bench.csv / bench.md to this folder")
    a = p.parse_args(argv)
    if not 1 <= a.rows <= 5:
        p.error(f"--rows: expected 1..5, got {a.rows}")
    if a.new_tokens is not None and not 2 <= a.new_tokens <= 256:
        p.error(f"--new-tokens: expected 2..256, got {a.new_tokens}")
    rows = run(quick=a.quick, new_tokens=a.new_tokens, rows=a.rows, repeats=a.repeats, dtype=a.dtype)
    print_table(rows)
    if a.out:
        print(write_outputs(rows, a.out))
    return 0
