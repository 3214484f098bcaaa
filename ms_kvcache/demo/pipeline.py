"""``ms-kvcache demo``: SmolLM2-135M-Instruct generating text through paged KV caches in MindSpore
GRAPH_MODE, with continuous batching, prefix sharing (copy-on-write) and a preemption that offloads a
sequence's KV to host and reloads it into other blocks; every generated token checked against an
independent numpy model without cache.

:func:`run_demo` returns a report dict (see :func:`format_report`); ``report["ok"]`` is False when a
check failed. ``docs/demo.md`` describes the pipeline, the checks and the tolerances.
"""
from dataclasses import asdict, dataclass, field
import os
import time
from typing import Optional

import numpy as np

__all__ = ["DemoOptions", "DemoError", "run_demo", "format_report", "TOLERANCES", "PROMPTS", "DEFAULT_PROMPTS"]

#: Largest |pipeline logit - reference logit| allowed, per KV-cache dtype (logit units; justified in
#: docs/demo.md). A generated token must be the reference's argmax, or within this much of it (a near tie).
TOLERANCES = {"float32": 2e-3, "bfloat16": 1.0, "int8": 2.0}

#: (user message, arrival step): four requests arrive together and are prefilled as one padded batch; the
#: fifth arrives while they decode, every row busy: a running sequence is preempted to admit it.
DEFAULT_PROMPTS = (
    ("What is the capital of France?", 0),
    ("Name three primary colors.", 0),
    ("Write a haiku about the sea.", 0),
    ("Explain in two sentences why the sky is blue during the day and red at sunset.", 0),
    ("Give me one tip for learning to cook.", 2),
)
PROMPTS = DEFAULT_PROMPTS
#: The prompt whose completion must name Paris (real model, every layer).
FRANCE = 0


class DemoError(Exception):
    """A user-facing problem with the demo's configuration or environment (message is one line)."""


@dataclass
class DemoOptions:
    """Demo settings (the CLI flags of ``ms-kvcache demo``).

    backend: "cpu" | "sim" | "ascend" (ms_kvcache backend of every op); kv_format: "separate" | "merged";
    dtype: KV-cache dtype "float32" | "bfloat16" | "int8" (separate only: dynamic per-token scales);
    rope_style: "neox" (q / k rows un-permuted, ``is_neox_style=True``) | "gptj" (the GGUF rows as stored,
    ``is_neox_style=False``); layers: first N layers (None = all); random_weights: the tiny seeded model;
    max_new_tokens: completion budget (None: 64, 24 with random weights); num_rows: batch rows;
    baseline: time the recompute-without-cache baseline; bench_reps: rounds of the timing probes after the
    checks (at least 3; 0: no RoPE-write probe); use_cache: the on-disk weight cache; prompts: (user
    message, arrival step) pairs, the demo's preemption happening at the last arrival.
    """

    backend: str = "cpu"
    kv_format: str = "separate"
    dtype: str = "float32"
    rope_style: str = "neox"
    layers: Optional[int] = None
    random_weights: bool = False
    seed: int = 0
    block_size: int = 16
    max_new_tokens: Optional[int] = None
    num_rows: int = 4
    baseline: bool = True
    bench_reps: int = 10
    use_cache: bool = True
    prompts: tuple = field(default_factory=lambda: DEFAULT_PROMPTS)
    #: testing only: "host-bitflip" flips one bit of the host buffer before the reload, "skip-reload"
    #: leaves the new blocks as they are, "skip-copy" skips the copy-on-write copy, "scale-stray" (int8)
    #: writes one scale-cache element outside the slot mapping after the first prefill and one during the
    #: reload, "decode-stray" writes one K-cache element outside the slot mapping after the first whole-model
    #: decode step; each must make checks fail (proves the checks can fail).
    fault: Optional[str] = None


FAULTS = (None, "host-bitflip", "skip-reload", "skip-copy", "scale-stray", "decode-stray")


def _step_times(step):
    """``(step with the transfer, step alone)`` seconds of a layer loop as report fields (None: no loop)."""
    return {"step_s": step[0] if step else None, "step_alone_s": step[1] if step else None}


def _offload_beside_decode(plan):
    """Whether the plan's offloads may run beside its decode step's layer loop (``save_layer(i)`` after layer i):
    the decode must neither write a row being saved (the scheduler gives it other blocks when it can) nor need
    anything of the step done first (a copy-on-write of its own, a reload). The copy-on-write copies and the
    prefill, which rewrite the freed blocks, then run after the saves; otherwise the saves are issued and waited
    for before the step, with no loop to hide behind."""
    if plan.decode is None or plan.swap_in or set(plan.copy_owner) & set(plan.decode.rows.values()):
        return False
    saved = np.concatenate([so.slots for so in plan.swap_out])
    return not np.intersect1d(plan.decode.slot_mapping, saved).size


def _check(name, passed, value=None, tolerance=None, detail=""):
    return {"name": name, "passed": bool(passed), "value": value, "tolerance": tolerance, "detail": detail}


def _n_diff(a, b):
    return int(np.count_nonzero(a != b))


def _set_backend(name):
    import ms_kvcache

    try:
        ms_kvcache.set_backend(name)
    except ImportError as exc:
        raise DemoError(f"backend {name!r} is not available in this build ({exc})") from None
    except (RuntimeError, ValueError) as exc:
        raise DemoError(str(exc)) from None


def _validate(opts):
    if opts.kv_format not in ("separate", "merged"):
        raise DemoError(f"kv_format: expected 'separate' or 'merged', got {opts.kv_format!r}")
    if opts.dtype not in TOLERANCES:
        raise DemoError(f"dtype: expected one of {tuple(TOLERANCES)}, got {opts.dtype!r}")
    if opts.dtype == "int8" and opts.kv_format != "separate":
        raise DemoError(f"dtype: int8 caches run with kv_format 'separate' (got {opts.kv_format!r})")
    if opts.rope_style not in ("neox", "gptj"):
        raise DemoError(f"rope_style: expected 'neox' or 'gptj', got {opts.rope_style!r}")
    if opts.fault not in FAULTS:
        raise DemoError(f"fault: expected one of {FAULTS}, got {opts.fault!r}")
    if opts.fault == "scale-stray" and opts.dtype != "int8":
        raise DemoError(f"fault: 'scale-stray' needs dtype 'int8' (got {opts.dtype!r})")
    last = max(a for _, a in opts.prompts) if opts.prompts else 0
    if opts.max_new_tokens is not None and not max(8, last + 4) <= opts.max_new_tokens <= 512:
        raise DemoError(f"max_new_tokens: expected {max(8, last + 4)}..512 (room for the preemption at step {last} "
                        f"and a reload), got {opts.max_new_tokens!r}")
    if not 2 <= opts.num_rows <= 16:
        raise DemoError(f"num_rows: expected 2..16, got {opts.num_rows!r}")
    if opts.block_size not in (8, 16, 32, 64):
        raise DemoError(f"block_size: expected 8, 16, 32 or 64, got {opts.block_size!r}")
    if len(opts.prompts) < 2:
        raise DemoError(f"prompts: expected at least 2, got {len(opts.prompts)}")


def load_demo_model(opts):
    """The model of ``opts`` (:class:`ms_kvcache.demo.model.DemoModel`). Raises DemoError (install
    command for a missing package, 'layers' for a bad layer count)."""
    from ms_kvcache.demo.model import ModelNotInstalled, load_model, random_model

    try:
        if opts.random_weights:
            return random_model(num_layers=opts.layers, seed=opts.seed)
        return load_model(num_layers=opts.layers, use_cache=opts.use_cache)
    except ModelNotInstalled as exc:
        raise DemoError(str(exc)) from None
    except (ValueError, FileNotFoundError) as exc:
        raise DemoError(str(exc)) from None
    except ImportError as exc:
        raise DemoError(f"loading the model needs gguf and tokenizers ({exc}); install them with: "
                        f"python -m pip install gguf tokenizers") from None


def run_demo(opts: DemoOptions = DemoOptions(), log=None):
    """Run the whole pipeline; return the report dict. Raises DemoError for configuration problems."""
    import mindspore as ms

    import ms_kvcache
    from ms_kvcache.demo import ops_adapter as A

    log = log or (lambda msg: None)
    _validate(opts)
    old_mode, old_backend = ms.get_context("mode"), ms_kvcache.get_backend()
    _set_backend(opts.backend)
    try:
        A.check_backend(opts.kv_format)
    except A.BackendUnsupported as exc:
        ms_kvcache.set_backend(old_backend)
        raise DemoError(str(exc)) from None
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        return _Run(opts, log).run()
    finally:
        ms.set_context(mode=old_mode)
        ms_kvcache.set_backend(old_backend)


class _Run:
    """One demo run (state shared by the steps of :meth:`run`)."""

    def __init__(self, opts, log):
        self.opts = opts
        self.log = log
        self.checks = []
        self.decode_writes = []
        self.notes = []
        self.t = {"prefill_s": [], "decode_s": [], "decode_rows": [], "copy_s": [], "loop_s": []}
        self._last_loop_step = None

    # ------------------------------------------------------------------ snapshots
    def _planes(self):
        """[(K bits, V bits) per layer] reshaped to ``[slots, H*D]``, and the scale planes ``[slots, H]``."""
        m = self.net
        hd = m.kv_heads * m.head_size
        data = [(k.reshape(-1, hd), v.reshape(-1, hd)) for k, v in m.cache_planes()]
        scales = [(k.reshape(-1, m.kv_heads), v.reshape(-1, m.kv_heads)) for k, v in m.scale_planes()]
        return data, scales

    @staticmethod
    def _rows(planes, slots):
        data, scales = planes
        return ([(k[slots].copy(), v[slots].copy()) for k, v in data],
                [(k[slots].copy(), v[slots].copy()) for k, v in scales])

    @staticmethod
    def _diff_rows(a, b):
        """Elements that differ between two _rows() results."""
        return sum(_n_diff(x[0], y[0]) + _n_diff(x[1], y[1]) for part in (0, 1) for x, y in zip(a[part], b[part]))

    def _diff_outside(self, before, after, slots):
        """Elements changed outside ``slots`` (every layer, K and V, scale caches too)."""
        total = self.sched.alloc.num_blocks * self.opts.block_size
        slots = np.asarray(slots)
        other = np.ones(total, bool)
        other[slots[slots >= 0]] = False
        n = sum(int(np.count_nonzero((x != y)[other])) for part in (0, 1) for a, b in zip(before[part], after[part])
                for x, y in zip(a, b))
        return n, int(other.sum())

    # ------------------------------------------------------------------ run
    def run(self):
        from mindspore import Tensor

        from ms_kvcache.demo import ops_adapter as A
        from ms_kvcache.demo.cells import DecodeStep, LayerLoop, LlamaWeights, PagedLlama, PrefillStep
        from ms_kvcache.demo.scheduler import Scheduler

        opts, log = self.opts, self.log
        t_start = time.perf_counter()
        t0 = time.perf_counter()
        model = load_demo_model(opts)
        self.model = model
        cfg = model.config
        self.t["load_s"] = time.perf_counter() - t0
        log(f"loaded {model.source} in {self.t['load_s']:.2f} s")
        if model.cache_note:
            self.notes.append(model.cache_note)
        tok = model.tokenizer
        budget = opts.max_new_tokens or (64 if model.real else 24)
        texts = [p for p, _ in opts.prompts]
        prompts = [tok.encode(tok.chat_prompt(p)) for p in texts]
        arrivals = [a for _, a in opts.prompts]
        preempt_at = max(arrivals)
        bs = opts.block_size
        R = opts.num_rows
        S = -(-max(len(p) for p in prompts) // bs) * bs
        MB = -(-(max(len(p) for p in prompts) + budget) // bs)
        num_blocks = R * MB + 1
        self.sched = sched = Scheduler(prompts, R, num_blocks, bs, MB, S, budget, model.stop_ids, arrivals)
        t0 = time.perf_counter()
        log(f"building the GRAPH_MODE model: {cfg.num_layers} layers, {num_blocks} cache blocks of {bs} tokens, "
            f"{opts.kv_format} {opts.dtype} caches, {opts.rope_style} RoPE")
        weights = LlamaWeights(cfg, model.weights, opts.rope_style)
        cos_sin = A.cos_sin_cache(cfg.head_size, MB * bs, cfg.rope_base)
        self.net = net = PagedLlama(cfg, weights, num_blocks, bs, MB, opts.dtype, opts.kv_format, cos_sin,
                                    opts.rope_style == "neox")
        prefill, decode = PrefillStep(net), DecodeStep(net)
        loop = LayerLoop(net)  # the preemption's steps: layer by layer, the KV moved beside the layers
        self.t["build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        loop.warm_up(R)  # compiles its graphs now (every slot -1: writes nothing)
        self.t["loop_compile_s"] = time.perf_counter() - t0
        logits = {s.seq_id: [] for s in sched.seqs}
        self.host = {}  # seq -> (HostKV, rows snapshot, SwapOut)
        self.swaps = swaps = []
        self.first_prefill = True
        cows = []
        prefill_writes = []
        max_iters = len(prompts) * (budget + 2) + 64
        while not sched.done():
            if sched.step > max_iters:
                raise RuntimeError(f"demo: the schedule did not finish within {max_iters} iterations")
            # the demo's preemption: at the last request's arrival (to admit it when every row is busy, as
            # with the default prompts; forced if a row happens to be free, so that it always happens)
            plan = sched.plan(forced_preempt=sched.step == preempt_at and not swaps)
            saves = self._begin_offloads(plan)
            overlap = bool(saves) and _offload_beside_decode(plan)
            if saves and not overlap:
                for sv in saves:
                    sv[1].issue_all()
                self._finish_offloads(plan, saves)
            dtoks = None
            if overlap:  # ------------------------------------------- decode first, the offload behind its layers
                dtoks = self._decode(plan, decode, loop, logits, saves=saves)
                self._finish_offloads(plan, saves, step=self._last_loop_step)
            if plan.copies:  # ------------------------------------------------------------ copy-on-write
                before = self._planes()
                src = np.concatenate([np.arange(s * bs, (s + 1) * bs) for s, _ in plan.copies])
                dst = np.concatenate([np.arange(d * bs, (d + 1) * bs) for _, d in plan.copies])
                t = time.perf_counter()
                if opts.fault != "skip-copy":
                    A.copy_blocks(net, plan.copies)
                self.t["copy_s"].append(time.perf_counter() - t)
                after = self._planes()
                changed, _ = self._diff_outside(before, after, dst)
                cows.append({"step": plan.step, "pairs": [list(p) for p in plan.copies],
                             "owners": {str(k): v for k, v in plan.copy_owner.items()},
                             "mismatch": self._diff_rows(self._rows(after, dst), self._rows(before, src)),
                             "other_changed": changed})
            if plan.prefill is not None:  # ------------------------------------------------------ prefill
                b = plan.prefill
                log(f"step {plan.step}: prefill of sequences {sorted(b.rows.values())} as one padded batch "
                    f"[{R} x {S}] ({int((b.slot_mapping >= 0).sum())} tokens)")
                before = self._planes()
                out, dt = self._step(prefill, b, Tensor)
                self.t["prefill_s"].append(dt)
                if self.first_prefill and opts.fault == "scale-stray":
                    self._stray_scale(b.slot_mapping, before, first=True)
                after = self._planes()
                changed, n_other = self._diff_outside(before, after, b.slot_mapping)
                prefill_writes.append({"step": plan.step, "changed_outside": changed, "other_slots": n_other,
                                       "tokens": int((b.slot_mapping >= 0).sum()), "first": self.first_prefill})
                self.first_prefill = False
                ptoks = self._sample(out, b, logits)
            else:
                ptoks = None
            if plan.decode is not None and not overlap:  # ------------------------------------------- decode
                dtoks = self._decode(plan, decode, loop, logits, reloads=self._begin_reloads(plan))
            elif plan.swap_in:  # (no decode batch in this step: the reload alone, nothing to hide it behind)
                before = self._planes()
                loads, overwritten = self._prepare_reloads(self._begin_reloads(plan), before, np.zeros(0, np.int32))
                if opts.fault != "skip-reload":
                    for _, ld, _, _ in loads:
                        ld.start()
                        ld.finish()
                self._finish_reloads(plan, loads, before, self._planes(), np.zeros(0, np.int32), overwritten)
            n_before = sum(1 for s in sched.seqs if s.state == "finished")
            sched.finish_iteration(plan, ptoks, dtoks)
            if sum(1 for s in sched.seqs if s.state == "finished") > n_before:
                for s in sched.seqs:
                    if s.finished_at == plan.step:
                        log(f"step {plan.step}: sequence {s.seq_id} finished ({s.finish_reason}, "
                            f"{len(s.generated)} tokens)")
        self.t["generate_s"] = (time.perf_counter() - t_start - self.t["load_s"] - self.t["build_s"]
                                - self.t["loop_compile_s"])

        # ------------------------------------------------------------------ reference and checks
        log("checking every generated token against the numpy float32 reference (no cache)")
        t0 = time.perf_counter()
        ref = self._reference_checks(logits)
        self.t["reference_s"] = time.perf_counter() - t0
        self._structure_checks(swaps, cows, prefill_writes)

        # ------------------------------------------------------------------ timing probes
        perf = self._timing_probes(prompts, MB, cos_sin, weights, decode)
        self.t["total_s"] = time.perf_counter() - t_start
        return self._report(texts, prompts, ref, swaps, cows, prefill_writes, perf, S, MB, num_blocks, budget)

    # ------------------------------------------------------------------ preemption: offload and reload
    def _begin_offloads(self, plan):
        """One :class:`LayerwiseSave` per swapped-out sequence (not issued yet), with the rows it must save."""
        from ms_kvcache.demo.offload import LayerwiseSave

        out = []
        for so in plan.swap_out:
            self.log(f"step {plan.step}: preempt sequence {so.seq} ({so.reason}): offload {so.num_tokens} tokens x "
                     f"{self.net.num_layers} layers to host, layer by layer (LayerwiseTransfer, d2h)")
            snap = self._rows(self._planes(), so.slots)
            out.append((so, LayerwiseSave(self.net, so.slots), snap))
        return out

    def _finish_offloads(self, plan, saves, step=None):
        """Wait for the saves (vLLM's wait_for_save: before anything overwrites the freed blocks), check the host
        buffers against the rows snapshotted before, time each transfer alone (same rows, nothing changed them)."""
        for so, sv, snap in saves:
            sv.finish()
            bad = self._compare_host(sv.host.host_bits(), snap, so.num_tokens)
            sv.time_alone()
            hk = sv.host
            self.host[so.seq] = (hk, snap, so)
            self.swaps.append({"seq": so.seq, "step": plan.step, "reason": so.reason, "tokens": so.num_tokens,
                               "offload_blocks": list(so.blocks), "buffer_shape": list(hk.shape),
                               "pinned": hk.pinned, "bytes": hk.nbytes, "host_mismatch": bad,
                               "offload": {**sv.summary(), **_step_times(step)}})
            sv.close()

    def _begin_reloads(self, plan):
        """``(SwapIn, HostKV, rows snapshot, SwapOut)`` of each swapped-in sequence."""
        out = []
        for si in plan.swap_in:
            hk, snap, so = self.host.pop(si.seq)
            self.log(f"step {plan.step}: reload sequence {si.seq} into blocks {si.blocks} (was {si.old_blocks}), "
                     f"layer by layer beside the decode step (LayerwiseTransfer, h2d)")
            out.append((si, hk, snap, so))
        return out

    def _prepare_reloads(self, reloads, before, step_slots):
        """Before the reloads start: the faults that corrupt them, whether the old blocks were reused, then one
        :class:`LayerwiseLoad` per reload (not started; built after the faults: ``set_data`` gives a Parameter new
        memory, which a transfer built before would not see). Returns ``(loads, overwritten)``."""
        from ms_kvcache.demo.offload import LayerwiseLoad

        opts = self.opts
        overwritten = {}
        for si, hk, snap, so in reloads:
            # the old blocks were handed to other sequences and overwritten meanwhile
            overwritten[si.seq] = self._overwritten(before, so, snap)
            if opts.fault == "host-bitflip":
                raw = hk.buffer.asnumpy()
                raw.view(np.uint8).reshape(-1)[raw.nbytes // 3] ^= 0x10  # in place (CPU tensor memory)
        if opts.fault == "scale-stray":
            self._stray_scale(np.concatenate([r[0].slots for r in reloads] + [step_slots]), before)
        loads = [(si, LayerwiseLoad(self.net, hk, si.slots), snap, so) for si, hk, snap, so in reloads]
        return loads, overwritten

    def _finish_reloads(self, plan, loads, before, after, step_slots, overwritten, step=None):
        """The reload checks (rows bit-identical to the snapshot before the offload; nothing else changed but the
        step's own writes at ``step_slots``), each transfer timed alone, the report's record."""
        mine = np.concatenate([si.slots for si, *_ in loads] + [np.asarray(step_slots, np.int32)])
        changed, n_other = self._diff_outside(before, after, mine)
        for si, ld, snap, so in loads:
            back = self._rows(after, si.slots)
            if self.opts.fault != "skip-reload":
                ld.time_alone()
            rec = next(w for w in self.swaps if w["seq"] == si.seq and "reload_blocks" not in w)
            rec.update(reload_step=plan.step, reload_blocks=list(si.blocks),
                       reload={**ld.summary(), **_step_times(step)},
                       reload_mismatch=self._diff_rows(back, snap), other_changed=changed, other_slots=n_other,
                       old_blocks_overwritten=overwritten[si.seq],
                       moved=[b for j, b in enumerate(si.blocks) if j >= len(so.blocks) or b != so.blocks[j]])
            ld.close()

    def _decode(self, plan, decode, loop, logits, saves=(), reloads=()):
        """The decode step: the compiled whole-model graph, or, when a preempted sequence's KV moves in this step, the
        layer loop (:class:`LayerLoop`) with ``save_layer(i)`` after layer i (offload) / ``wait_layer(i)`` before layer
        i's cache accesses (reload). Returns the sampled tokens."""
        from mindspore import Tensor

        batch = plan.decode
        if not saves and not reloads:
            before = self._planes()
            out, dt = self._step(decode, batch, Tensor)
            self.t["decode_s"].append(dt)
            self.t["decode_rows"].append(len(batch.rows))
            if self.opts.fault == "decode-stray" and len(self.t["decode_s"]) == 1:
                self._stray_kv(batch.slot_mapping)
            changed, n_other = self._diff_outside(before, self._planes(), batch.slot_mapping)
            self.decode_writes.append({"step": plan.step, "changed_outside": changed, "other_slots": n_other})
            return self._sample(out, batch, logits)
        args = [Tensor(a) for a in (batch.input_ids, batch.positions, batch.slot_mapping, batch.block_tables,
                                    batch.logit_index)]
        step_slots = batch.slot_mapping[batch.slot_mapping >= 0]
        loads = ()
        if reloads:
            before = self._planes()
            loads, overwritten = self._prepare_reloads(reloads, before, step_slots)
        moving = [ld for _, ld, _, _ in loads] if self.opts.fault != "skip-reload" else []
        for ld in moving:
            ld.start()
        hooks = {}
        if moving:
            hooks["before_cache"] = lambda i: [ld.before_cache(i) for ld in moving]
        if saves:
            hooks["after_layer"] = lambda i: [sv.after_layer(i) for _, sv, _ in saves]
        t = time.perf_counter()
        out = loop(*args, **hooks)
        for x in moving + [sv for _, sv, _ in saves]:
            x.finish()  # (a save: vLLM's wait_for_save; the freed blocks are rewritten after this step)
        dt = time.perf_counter() - t
        if loads:
            after = self._planes()
        # the same step without a transfer (idempotent: the same rows get the same values), for the report
        alone = []
        for _ in range(3):
            t = time.perf_counter()
            loop(*args)
            alone.append(time.perf_counter() - t)
        step = (dt, float(np.median(alone)))
        self._last_loop_step = step
        self.t["loop_s"].append(dt)
        if loads:
            self._finish_reloads(plan, loads, before, after, step_slots, overwritten, step)
        return self._sample(out, batch, logits)

    # ------------------------------------------------------------------ steps
    def _step(self, cell, batch, Tensor):
        args = (Tensor(batch.input_ids), Tensor(batch.positions), Tensor(batch.slot_mapping),
                Tensor(batch.block_tables), Tensor(batch.logit_index))
        t = time.perf_counter()
        out = cell(*args).asnumpy()
        return out, time.perf_counter() - t

    @staticmethod
    def _sample(out, batch, logits):
        """Greedy: the argmax of each active row's logits; keeps the logits for the checks."""
        toks = {}
        for r, sid in batch.rows.items():
            toks[r] = int(np.argmax(out[r]))
            logits[sid].append(out[r].astype(np.float32))
        return toks

    def _compare_host(self, bits, snap, T):
        """Elements of the host buffer that differ from the cache rows snapshotted before the offload."""
        m = self.net
        L, hd = m.num_layers, m.kv_heads * m.head_size
        data, scales = snap
        if m.quant:  # 1-D bytes: [2, L, T, H*D] int8, then [2, L, T, H] float32
            nd = 2 * L * T * hd
            sh = bits[nd:].view(np.uint32).reshape(2, L, T, m.kv_heads)
            d = bits[:nd].reshape(2, L, T, hd)
        else:
            d, sh = bits.reshape(2, L, T, hd), None
        bad = sum(_n_diff(d[0, i], k) + _n_diff(d[1, i], v) for i, (k, v) in enumerate(data))
        if sh is not None:
            bad += sum(_n_diff(sh[0, i], k) + _n_diff(sh[1, i], v) for i, (k, v) in enumerate(scales))
        return bad

    def _overwritten(self, planes, so, snap):
        """Old blocks of an offloaded sequence whose rows now differ from what the sequence had there."""
        bs = self.opts.block_size
        n = 0
        for j, b in enumerate(so.blocks):
            lo, hi = j * bs, min((j + 1) * bs, so.num_tokens)
            rows = np.arange(b * bs, b * bs + (hi - lo))
            cur = self._rows(planes, rows)
            was = ([(k[lo:hi], v[lo:hi]) for k, v in snap[0]], [(k[lo:hi], v[lo:hi]) for k, v in snap[1]])
            n += int(self._diff_rows(cur, was) > 0)
        return n

    def _stray_kv(self, slots):
        """fault "decode-stray": flip a bit of one K-cache element of the last layer at a slot outside ``slots``."""
        from mindspore import Tensor

        m = self.net
        total = self.sched.alloc.num_blocks * self.opts.block_size
        other = int(np.setdiff1d(np.arange(total), slots[slots >= 0])[-1])
        p = m.kv_caches[-1] if m.merged else m.key_caches[-1]
        a = p.asnumpy().copy()
        bits = (a[0] if m.merged else a).reshape(total, -1)
        bits.view(f"u{bits.dtype.itemsize}")[other, 0] ^= 1  # the lowest bit of one element
        p.set_data(Tensor(a))

    def _stray_scale(self, slots, before, first=False):
        """fault "scale-stray": add 1 to one scale-cache element of a slot outside ``slots``."""
        from mindspore import Tensor

        m = self.net
        total = self.sched.alloc.num_blocks * self.opts.block_size
        others = np.setdiff1d(np.arange(total), slots[slots >= 0])
        p = m.k_scale_caches[0] if first else m.v_scale_caches[m.num_layers - 1]
        a = p.asnumpy().copy()
        a.reshape(-1, m.kv_heads)[int(others[0] if first else others[-1]), 0] += 1.0
        p.set_data(Tensor(a))

    # ------------------------------------------------------------------ checks
    def _reference_checks(self, logits):
        from ms_kvcache.demo.reference import compare_tokens, reference_logits

        opts, model, sched = self.opts, self.model, self.sched
        tol = TOLERANCES[opts.dtype]
        per_seq = []
        for s in sched.seqs:
            ref = reference_logits(model.config, model.weights, s.prompt + s.generated[:-1], first=len(s.prompt) - 1)
            per_seq.append({"seq": s.seq_id, **compare_tokens(ref, np.stack(logits[s.seq_id]), s.generated, tol)})
        summary = reference_summary(per_seq)
        self.checks += reference_checks(summary, opts.dtype, len(sched.seqs))
        from ms_kvcache.demo.model import MODEL_FILE

        if model.real and model.path is not None and model.path.name == MODEL_FILE and FRANCE < len(sched.seqs) \
                and model.config.num_layers == model.config.file_layers \
                and opts.prompts[FRANCE][0] == DEFAULT_PROMPTS[FRANCE][0]:
            text = model.tokenizer.decode(sched.seqs[FRANCE].generated)
            self.checks.append(_check("the France prompt answers with Paris", "Paris" in text, detail=repr(text)))
        return {"per_sequence": per_seq, **summary}

    def _structure_checks(self, swaps, cows, prefill_writes):
        sched = self.sched
        bad = sum(p["changed_outside"] for p in prefill_writes)
        first = next((p for p in prefill_writes if p["first"]), None)
        quant = " (data and scale caches)" if self.net.quant else ""
        self.checks.append(_check("prefill writes only its slot mapping (padding rows, slot -1, write nothing)",
                                  bad == 0, value=bad, detail=f"{len(prefill_writes)} prefill(s); first: "
                                  f"{first['tokens'] if first else 0} tokens, {first['other_slots'] if first else 0} "
                                  f"other slots unchanged{quant}; value = elements changed"))
        dw = self.decode_writes
        self.checks.append(_check("decode writes only its slot mapping (every whole-model decode step)",
                                  sum(d["changed_outside"] for d in dw) == 0,
                                  value=sum(d["changed_outside"] for d in dw),
                                  detail=f"{len(dw)} decode steps, {dw[0]['other_slots'] if dw else 0} other slots "
                                         f"unchanged in the first{quant}; value = elements changed"))
        shared = [s for s in sched.seqs if s.shared_prefix]
        self.checks.append(_check("prefix sharing: a request reuses another's cached system-prompt blocks",
                                  bool(shared), detail="; ".join(
                                      f"sequence {s.seq_id} shares {s.shared_prefix[1]} tokens in blocks "
                                      f"{s.shared_prefix[2]} of sequence {s.shared_prefix[0]}" for s in shared)
                                  or "no request shared a prefix"))
        mism = sum(c["mismatch"] for c in cows)
        other = sum(c["other_changed"] for c in cows)
        self.checks.append(_check("copy-on-write: copied blocks bit-identical to the shared ones, nothing else changed",
                                  bool(cows) and mism == 0 and other == 0, value=mism + other,
                                  detail=(", ".join(f"{p[0]} -> {p[1]} at step {c['step']}" for c in cows
                                                    for p in c["pairs"]) or "no copy happened")
                                  + f"{quant}; value = elements that differ"))
        done = [w for w in swaps if "reload_blocks" in w]
        if not swaps:
            self.checks.append(_check("preemption: a sequence offloaded and reloaded", False,
                                      detail="no sequence was preempted"))
            return
        self.checks.append(_check("offload: host buffer holds the sequence's K/V bit-exactly",
                                  all(w["host_mismatch"] == 0 for w in swaps),
                                  value=sum(w["host_mismatch"] for w in swaps),
                                  detail=f"{len(swaps)} offload(s), all layers x K and V"
                                         f"{' + scales' if self.net.quant else ''}, saved layer by layer; value = "
                                         f"elements that differ"))
        self.checks.append(_check("reload: K/V bit-identical to before the offload, into other blocks",
                                  len(done) == len(swaps)
                                  and all(w["reload_mismatch"] == 0 and w["moved"] for w in done),
                                  value=sum(w["reload_mismatch"] for w in done),
                                  detail="; ".join(f"sequence {w['seq']}: {w['offload_blocks']} -> {w['reload_blocks']}"
                                                   for w in done) + "; value = elements that differ"))
        self.checks.append(_check("reload: every other cache slot unchanged",
                                  all(w["other_changed"] == 0 for w in done),
                                  value=sum(w["other_changed"] for w in done),
                                  detail=f"{done[0]['other_slots'] if done else 0} slots x layers x K and V{quant} "
                                         f"(all but the reloaded rows and the new rows of the decode step the reload "
                                         f"ran in)"))
        self.checks.append(_check("offload: freed blocks reused (and overwritten) by other sequences",
                                  any(w["old_blocks_overwritten"] for w in done),
                                  value=sum(w["old_blocks_overwritten"] for w in done),
                                  detail="; ".join(f"{w['old_blocks_overwritten']} of {len(w['offload_blocks'])} old "
                                                   f"blocks of sequence {w['seq']}" for w in done)))
        fin = [s.finished_at for s in sched.seqs]
        adm = [s.admitted_at for s in sched.seqs]
        self.checks.append(_check("continuous batching: sequences join and finish at different steps",
                                  len(set(fin)) > 1 and len(set(adm)) > 1,
                                  detail=f"admitted at {adm}, finished at {fin}"))

    # ------------------------------------------------------------------ timing
    def _timing_probes(self, prompts, MB, cos_sin, weights, decode):
        """After the checks (the caches may be overwritten now), in interleaved rounds so that a change of the
        machine's load hits every probe alike: the decode step with every row active, the RoPE-write op of
        every layer alone (minus a graph that does nothing: its share of the step), and the same model
        recomputing the whole sequence without a cache at the mean context length of a completion. The
        speed-up is the median over rounds of (recompute / decode) measured back to back."""
        from mindspore import Tensor

        from ms_kvcache.demo.cells import DATA_DTYPES, EmptyStep, KVWriteBench, RecomputeLlama

        opts, cfg, net = self.opts, self.model.config, self.net
        R, bs = opts.num_rows, opts.block_size
        ctx = max(len(p) for p in prompts) + self.sched.max_new_tokens // 2
        Sb = -(-ctx // bs) * bs
        pos = min(ctx - 1, MB * bs - 1)
        tables = np.arange(R * MB, dtype=np.int32).reshape(R, MB)  # the pool has R * MB + 1 blocks
        dargs = [Tensor(a) for a in (np.array([prompts[r % len(prompts)][-1] for r in range(R)], np.int32),
                                     np.full(R, pos, np.int32), tables[:, pos // bs] * bs + pos % bs, tables,
                                     np.arange(R, dtype=np.int32))]
        probes = {"decode": lambda: decode(*dargs).asnumpy()}
        perf = {"probe_context": int(pos + 1)}
        if opts.bench_reps > 0:
            self.log("timing the RoPE-write op family (all layers, decode shape)")
            bench, empty = KVWriteBench(net), EmptyStep()
            rng = np.random.default_rng(1)
            dt = DATA_DTYPES[opts.dtype]
            q = Tensor(rng.standard_normal((R, cfg.num_heads, cfg.head_size)).astype(np.float32), dtype=dt)
            k, v = (Tensor(rng.standard_normal((R, cfg.num_kv_heads, cfg.head_size)).astype(np.float32), dtype=dt)
                    for _ in range(2))
            p_ = Tensor(np.arange(R, dtype=np.int32))
            wargs = (p_, q, k, v, Tensor(np.arange(R, dtype=np.int32) * 3))
            probes["rope_write"] = lambda: bench(*wargs).asnumpy()
            probes["empty"] = lambda: empty(p_).asnumpy()
        if opts.baseline:
            self.log(f"timing the recompute-without-cache baseline: [{R} x {Sb}] tokens per step (compiling)")
            base = RecomputeLlama(cfg, weights, cos_sin, opts.rope_style == "neox")
            bargs = [Tensor(a) for a in (np.tile(np.asarray((list(prompts[0]) * Sb)[:Sb], np.int32), R),
                                         np.tile(np.arange(Sb, dtype=np.int32), R), np.ones(R * Sb, np.float32),
                                         np.arange(R, dtype=np.int32) * Sb + Sb - 1)]
            t = time.perf_counter()
            base(*bargs).asnumpy()
            perf["baseline_first_s"] = time.perf_counter() - t
            perf["baseline_context"] = Sb
            probes["baseline"] = lambda: base(*bargs).asnumpy()
        for fn in probes.values():
            fn()  # warm-up (the RoPE-write and empty graphs compile here)
        times = {k: [] for k in probes}
        rounds = max(3, opts.bench_reps)
        for r in range(rounds):
            for name, fn in probes.items():
                if name == "baseline" and r >= 3:  # a recompute step is the costly one: 3 rounds
                    continue
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        perf["decode_probe_s"] = float(np.median(times["decode"]))
        if "rope_write" in times:
            perf["rope_write_step_s"] = float(np.median(times["rope_write"]))
            perf["empty_graph_s"] = float(np.median(times["empty"]))
            perf["ops_share"] = float(np.median([max(w - e, 0.0) / d for w, e, d in
                                                 zip(times["rope_write"], times["empty"], times["decode"])]))
        if "baseline" in times:
            perf["baseline_step_s"] = float(np.median(times["baseline"]))
            perf["speedup"] = float(np.median([b / d for b, d in zip(times["baseline"], times["decode"])]))
        return perf

    # ------------------------------------------------------------------ report
    def _report(self, texts, prompts, ref, swaps, cows, prefill_writes, perf, S, MB, num_blocks, budget):
        import ms_kvcache
        from ms_kvcache.demo import ops_adapter as A

        opts, model, sched, t = self.opts, self.model, self.sched, self.t
        cfg = model.config
        tok = model.tokenizer
        seqs = []
        for s, text in zip(sched.seqs, texts):
            seqs.append({"seq": s.seq_id, "prompt": text, "prompt_tokens": len(s.prompt),
                         "completion": tok.decode(s.generated), "completion_tokens": len(s.generated),
                         "token_ids": list(s.generated), "arrival": s.arrival, "admitted_at": s.admitted_at,
                         "finished_at": s.finished_at, "finish_reason": s.finish_reason,
                         "shared_prefix": ({"with": s.shared_prefix[0], "tokens": s.shared_prefix[1],
                                            "blocks": s.shared_prefix[2]} if s.shared_prefix else None),
                         "preempted": any(w["seq"] == s.seq_id for w in swaps)})
        dec = t["decode_s"][1:] or t["decode_s"]
        rows = t["decode_rows"][1:] or t["decode_rows"]
        step = float(np.median(dec)) if dec else None
        mean_rows = float(np.mean(rows)) if rows else 0.0
        first_prefill = next((p for p in prefill_writes if p["first"]), {"tokens": 0})
        timing = {
            "load_s": t["load_s"], "build_s": t["build_s"], "generate_s": t["generate_s"],
            "layer_loop_compile_s": t["loop_compile_s"],
            "prefill_first_call_s": t["prefill_s"][0] if t["prefill_s"] else None,
            "prefill_steady_s": t["prefill_s"][1] if len(t["prefill_s"]) > 1 else None,
            "prefill_tokens_first": first_prefill["tokens"],
            # the [R x S] graph costs the same whatever its padding: the first batch's tokens at a later call's time
            "prefill_tokens_per_s": (first_prefill["tokens"] / t["prefill_s"][1]) if len(t["prefill_s"]) > 1 else None,
            "decode_first_call_s": t["decode_s"][0] if t["decode_s"] else None,
            "decode_step_median_s": step, "decode_steps": len(t["decode_s"]),
            "decode_rows_mean": mean_rows,
            "decode_tokens_per_s": mean_rows / step if step else None,
            "copy_blocks_s": t["copy_s"][0] if t["copy_s"] else None,
            "reference_s": t["reference_s"], "total_s": t["total_s"],
            "load_average": os.getloadavg()[0],
        }
        timing.update(decode_probe_s=perf["decode_probe_s"], probe_context=perf["probe_context"])
        if "rope_write_step_s" in perf:
            timing.update(rope_write_step_s=perf["rope_write_step_s"], empty_graph_s=perf["empty_graph_s"],
                          ops_share_of_decode_step=perf["ops_share"])
        if "baseline_step_s" in perf:
            timing.update(baseline_context=perf["baseline_context"], baseline_first_call_s=perf["baseline_first_s"],
                          baseline_step_s=perf["baseline_step_s"],
                          baseline_tokens_per_s=opts.num_rows / perf["baseline_step_s"],
                          decode_speedup_vs_recompute=perf["speedup"])
        for w in swaps:
            w.setdefault("reload", None)
        timing["layer_loop_steps"] = len(t["loop_s"])
        report = {
            "ok": all(c["passed"] for c in self.checks),
            "options": {**asdict(opts), "prompts": [list(p) for p in opts.prompts]},
            "model": {"source": model.source, "real_weights": model.real, "layers": cfg.num_layers,
                      "file_layers": cfg.file_layers, "hidden": cfg.hidden_size, "num_heads": cfg.num_heads,
                      "num_kv_heads": cfg.num_kv_heads, "head_size": cfg.head_size, "vocab": cfg.vocab_size,
                      "rope": f"{opts.rope_style} (is_neox_style={opts.rope_style == 'neox'}), base {cfg.rope_base:g}, "
                              f"rotary_dim {cfg.head_size}"},
            "backend": opts.backend, "mindspore_mode": "GRAPH_MODE", "ms_kvcache": ms_kvcache.__version__,
            "notes": self.notes,
            "ops": A.status(opts.kv_format),
            "sequences": seqs,
            "events": [{"step": s, "event": e} for s, e in sched.events],
            "shapes": {"prefill": [opts.num_rows, S], "decode": [opts.num_rows, 1], "max_blocks_per_seq": MB,
                       "max_new_tokens": budget},
            "blocks": {"block_size": opts.block_size, "num_blocks": num_blocks, "peak_used": sched.alloc.peak_used,
                       "allocations": sched.alloc.allocations, "cache_bytes": int(self.net.cache_nbytes()),
                       "cache_bytes_bf16": int(2 * cfg.num_layers * 2 * num_blocks * opts.block_size * cfg.kv_size)},
            "preemptions": swaps,
            "copy_on_write": cows,
            "reference": ref,
            "checks": self.checks,
            "timing": timing,
        }
        return report


def reference_summary(per_seq):
    """Totals of :func:`ms_kvcache.demo.reference.compare_tokens` results."""
    return {"tokens": sum(p["tokens"] for p in per_seq), "exact": sum(p["exact"] for p in per_seq),
            "near_ties": sum(p["near_ties"] for p in per_seq), "mismatch": sum(p["mismatch"] for p in per_seq),
            "max_logit_err": max(p["max_logit_err"] for p in per_seq),
            "min_ref_margin": min(p["min_ref_margin"] for p in per_seq),
            "max_abs_logit": max(p["max_abs_logit"] for p in per_seq),
            "max_tie_gap": max(p["max_tie_gap"] for p in per_seq),
            "agree_before_first_tie": [p["first_mismatch"] if p["first_mismatch"] is not None else p["tokens"]
                                       for p in per_seq]}


def reference_checks(summary, dtype, num_seqs):
    """The two reference checks (tokens, logits) of a run with a ``dtype`` KV cache."""
    tol = TOLERANCES[dtype]
    s = summary
    return [
        _check(f"every generated token == argmax of the numpy float32 reference without cache ({dtype} cache)",
               s["mismatch"] == 0, value=s["mismatch"],
               detail=f"{s['tokens']} tokens of {num_seqs} sequences, one causal pass each over prompt + completion; "
                      f"{s['exact']} exact, {s['near_ties']} near ties (the token's reference logit within {tol:g} "
                      f"of the maximum; largest shortfall {s['max_tie_gap']:.3g}), {s['mismatch']} other; leading "
                      f"tokens equal to the reference's own greedy completion, per sequence: "
                      f"{s['agree_before_first_tie']}"),
        _check("logits == reference logits", s["max_logit_err"] <= tol, value=s["max_logit_err"], tolerance=tol,
               detail=f"max |pipeline - reference| over every generated position, logit units (largest |logit| "
                      f"{s['max_abs_logit']:.1f})"),
    ]


# ================================================================================================ report
def _fmt_s(x):
    if x is None:
        return "-"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def _fmt_us(x):
    return "-" if x is None else (f"{x * 1e6:.0f} us" if x < 1e-3 else _fmt_s(x))


def _fmt_transfer(x, how):
    """One layer-wise transfer of the report: alone, and the step's host time in its calls."""
    if x["alone_s"] is None:
        return "not run"
    text = (f"{_fmt_us(x['alone_s'])} alone; in the step: issue {_fmt_us(x['issue_s'])} + wait "
            f"{_fmt_us(x['waited_s'])}")
    if not x["overlapped"]:
        return text + " (no layer loop to hide it behind)"
    text += f" ({how}; longest wait {_fmt_us(x['max_layer_wait_s'])})" if x["max_layer_wait_s"] is not None \
        else f" ({how})"
    host = x["issue_s"] + x["waited_s"]
    text += (f": {x['hidden'] * 100:.0f} % of it hidden" if x["hidden"] >= 0 else
             f": the per-layer calls cost the host {host / x['alone_s']:.1f}x the transfer alone, nothing hidden")
    if x.get("step_s") is not None:
        text += f"; step {_fmt_s(x['step_s'])} (without the transfer {_fmt_s(x['step_alone_s'])})"
    return text


def display_text(text, indent=13):
    """A completion for the terminal: control characters shown as U+FFFD, later lines indented."""
    text = "".join(c if c.isprintable() or c == "\n" else "\ufffd" for c in text.strip())
    return text.replace("\n", "\n" + " " * indent) if text else "(empty)"


def format_report(r):
    """Human-readable report: the prompts and completions, the checks, the timing table."""
    o, m, tm = r["options"], r["model"], r["timing"]
    lines = []
    add = lines.append
    add(f"ms-kvcache demo: {m['source']}")
    add(f"  {m['layers']} layers, hidden {m['hidden']}, {m['num_heads']} query heads / {m['num_kv_heads']} KV heads x "
        f"{m['head_size']}, RoPE {m['rope']}")
    add(f"  backend {o['backend']}, {o['kv_format']} {o['dtype']} KV caches (block size {r['blocks']['block_size']}, "
        f"{r['blocks']['num_blocks']} blocks, {r['blocks']['cache_bytes'] / 1e6:.1f} MB), MindSpore GRAPH_MODE, "
        f"prefill [{r['shapes']['prefill'][0]} x {r['shapes']['prefill'][1]}], decode [{r['shapes']['decode'][0]} x 1]")
    for n in r["notes"]:
        add(f"  note: {n}")
    add("")
    for s in r["sequences"]:
        flags = []
        if s["shared_prefix"]:
            flags.append(f"shares {s['shared_prefix']['tokens']} prompt tokens with #{s['shared_prefix']['with']}")
        if s["preempted"]:
            flags.append("preempted and reloaded")
        add(f"#{s['seq']} [{s['prompt_tokens']} prompt tokens, joined step {s['admitted_at']}, "
            f"finished step {s['finished_at']} ({s['finish_reason']}, {s['completion_tokens']} tokens)"
            + (f"; {'; '.join(flags)}" if flags else "") + "]")
        add(f"  user:      {s['prompt']}")
        add(f"  assistant: {display_text(s['completion'])}")
    add("")
    add("schedule:")
    for e in r["events"]:
        if "admitted" in e["event"] and e["step"] == 0:
            continue
        add(f"  step {e['step']:3d}: {e['event']}")
    add("ops:")
    for fam, what in r["ops"].items():
        add(f"  {fam:14s} {what}")
    add("checks:")
    for c in r["checks"]:
        val = ""
        if c["value"] is not None and c["tolerance"] is not None:
            val = f" max {c['value']:.2e} (tol {c['tolerance']:g})"
        elif c["value"] is not None and not c["passed"]:
            val = f" (value {c['value']})"
        add(f"  [{'PASS' if c['passed'] else 'FAIL'}] {c['name']}{val}"
            + (f"  -- {c['detail']}" if c["detail"] else ""))
    add(f"timing (CPU figures of this machine, load average {tm['load_average']:.1f}):")
    rows = [("load the model (weights + tokenizer)", _fmt_s(tm["load_s"])),
            ("build the model (Parameters)", _fmt_s(tm["build_s"])),
            ("prefill, first call (graph compile included)", _fmt_s(tm["prefill_first_call_s"])),
            ("decode, first call (graph compile included)", _fmt_s(tm["decode_first_call_s"])),
            ("layer loop's graphs, compile (a run writing nothing)", _fmt_s(tm["layer_loop_compile_s"])),
            ("prefill, a later call (same compiled graph)", _fmt_s(tm["prefill_steady_s"])
             + (f"  ({tm['prefill_tokens_per_s']:.0f} tokens/s for the first batch's {tm['prefill_tokens_first']} "
                f"prompt tokens)" if tm.get("prefill_tokens_per_s") else "")),
            ("decode step, whole-model graph (median)", f"{_fmt_s(tm['decode_step_median_s'])}  ({tm['decode_steps']} "
                                                       f"steps, {tm['decode_rows_mean']:.1f} rows mean; "
                                                       f"{tm['layer_loop_steps']} more as a layer loop, below)"),
            ("decode throughput", f"{tm['decode_tokens_per_s']:.1f} tokens/s" if tm["decode_tokens_per_s"] else "-")]
    rows.append((f"decode step, every row active (context {tm['probe_context']}; probe rounds)",
                 f"{_fmt_s(tm['decode_probe_s'])}  ({o['num_rows'] / tm['decode_probe_s']:.1f} tokens/s)"))
    if "ops_share_of_decode_step" in tm:
        rows.append(("  of which ms_kvcache (RoPE-write, all layers)",
                     f"{_fmt_s(max(tm['rope_write_step_s'] - tm['empty_graph_s'], 0.0))}  "
                     f"({tm['ops_share_of_decode_step'] * 100:.1f} % of the step)"))
    if "baseline_step_s" in tm:
        rows.append((f"recompute without cache, step over [{o['num_rows']} x {tm['baseline_context']}]",
                     f"{_fmt_s(tm['baseline_step_s'])}  ({tm['baseline_tokens_per_s']:.2f} tokens/s; first call "
                     f"{_fmt_s(tm['baseline_first_call_s'])})"))
        rows.append(("decode speed-up from the KV cache (paired rounds)",
                     f"{tm['decode_speedup_vs_recompute']:.1f}x per token"))
    for w in r["preemptions"]:
        rows.append((f"offload d2h layer by layer, sequence {w['seq']} ({w['tokens']} tokens x {m['layers']} layers, "
                     f"{w['bytes']:,} B)", _fmt_transfer(w["offload"], "save_layer after each layer")))
        if w.get("reload") is not None:
            rows.append((f"reload h2d layer by layer, sequence {w['seq']}",
                         _fmt_transfer(w["reload"], "wait_layer before each layer's cache accesses")))
    if tm["copy_blocks_s"] is not None:
        rows.append(("copy-on-write copy (first call incl. compile)", _fmt_s(tm["copy_blocks_s"])))
    rows += [("reference (numpy float32, no cache)", _fmt_s(tm["reference_s"])),
             ("total (excluding the Python / MindSpore import)", _fmt_s(tm["total_s"]))]
    w = max(len(a) for a, _ in rows)
    for a, b in rows:
        add(f"  {a:<{w}}  {b}")
    add("result: " + ("all checks passed" if r["ok"] else "CHECKS FAILED"))
    return "\n".join(lines)
