"""``ms-kvcache demo --disagg``: prefill and decode of SmolLM2-135M-Instruct in two processes on
127.0.0.1, the KV handed over by the Mooncake transfer engine, and a second request that reloads a shared
prefix from Mooncake Store.

Processes (all started and stopped by :func:`run_disagg_demo`, every wait bounded by ``timeout``):

- ``mooncake_master`` on 127.0.0.1 (Mooncake Store's metadata service);
- **prefill** (P): prefills request A's chat prompt over its paged caches (the first completion token
  comes from its logits), hands the prompt's KV to D with :class:`ms_kvcache.disagg.KVSender` and puts
  its whole 16-token chunks into Mooncake Store (:class:`ms_kvcache.disagg.KVPrefixStore`);
- **decode** (D): receives A's KV into other block ids (:class:`ms_kvcache.disagg.KVReceiver`) and
  generates A's completion greedily; then serves request B, whose prompt starts with the same system
  prompt: it reloads the shared whole chunks from the store (put there by P), prefills only the rest and
  generates B's completion;
- **single**: the same two requests in one process with no Mooncake (A decoded from the cache its own
  prefill wrote; B's shared prefix copied locally from A's blocks), and the numpy reference without cache
  (:mod:`ms_kvcache.demo.reference`).

Checks: P's and D's logits (and so the tokens) equal the single-process run bit for bit; the KV in D's
blocks equals P's (checksums of a fresh d2h on each side); the handoff went to other block ids; B
reloaded the expected number of tokens from the store and their KV equals P's; both completions agree
with the numpy reference (the demo's token and logit checks); every process exited; every address was a
loopback one.
"""
from dataclasses import asdict, dataclass
import os
import shutil
import tempfile
import time
import traceback
from typing import Optional

import numpy as np

__all__ = ["DisaggOptions", "run_disagg_demo", "format_disagg_report", "build_requests", "expected_reuse",
           "CHUNK_TOKENS", "REQUESTS"]

#: Store chunk = cache block (16 tokens).
CHUNK_TOKENS = 16
MODEL_ID_PREFIX = "ms_kvcache-demo"
LOOPBACK = "127.0.0.1"
#: The user messages of requests A and B (both get the model's default system prompt).
REQUESTS = ("What is the capital of France?", "Name three primary colors.")


@dataclass
class DisaggOptions:
    """Settings of ``ms-kvcache demo --disagg`` (its CLI flags).

    backend: ms_kvcache backend of every op ("cpu" | "sim"); kv_format: "separate" | "merged";
    dtype: KV-cache dtype "float32" | "bfloat16" | "int8" (separate; the scale caches travel with the
    data); rope_style: "neox" | "gptj"; layers: first N layers (None = all); random_weights: the tiny
    seeded model; max_new_tokens: completion budget (None: 64, 24 with random weights);
    timeout: seconds any one wait may take (a worker's start, each step, a handoff, the shutdown).
    """

    backend: str = "cpu"
    kv_format: str = "separate"
    dtype: str = "float32"
    rope_style: str = "neox"
    layers: Optional[int] = None
    random_weights: bool = False
    seed: int = 0
    block_size: int = CHUNK_TOKENS
    max_new_tokens: Optional[int] = None
    use_cache: bool = True
    timeout: float = 180.0
    #: testing only: "corrupt-kv" flips one bit of the KV D received (after the handoff's own checksum
    #: check), so the demo's checks must fail.
    fault: Optional[str] = None


def build_requests(tokenizer):
    """Requests A and B: the chat prompts of :data:`REQUESTS` (token lists); they share the system prompt."""
    return {"A": tokenizer.encode(tokenizer.chat_prompt(REQUESTS[0])),
            "B": tokenizer.encode(tokenizer.chat_prompt(REQUESTS[1]))}


def expected_reuse(a_prompt, b_prompt, chunk=CHUNK_TOKENS):
    """Tokens of B's prompt the store can serve: whole chunks of A's prompt (what P stored) that B's prompt
    starts with, at most ``len(b_prompt) - 1`` (the last prompt token is always computed)."""
    common = 0
    while common < min(len(a_prompt), len(b_prompt)) and a_prompt[common] == b_prompt[common]:
        common += 1
    common = min(common, (len(a_prompt) // chunk) * chunk, len(b_prompt) - 1)
    return (common // chunk) * chunk


# ============================================================================================ workers
class _Runner:
    """The demo model over paged caches in one process, one batch row (GRAPH_MODE cells of
    :mod:`ms_kvcache.demo.cells`)."""

    def __init__(self, opts):
        import mindspore as ms

        import ms_kvcache
        from ms_kvcache.demo import ops_adapter as A
        from ms_kvcache.demo.cells import DecodeStep, LlamaWeights, PagedLlama, PrefillStep
        from ms_kvcache.demo.pipeline import DemoOptions, load_demo_model

        ms_kvcache.set_backend(opts["backend"])
        ms.set_context(mode=ms.GRAPH_MODE)
        self.model = load_demo_model(DemoOptions(layers=opts["layers"], random_weights=opts["random_weights"],
                                                 seed=opts["seed"], use_cache=opts["use_cache"]))
        cfg = self.cfg = self.model.config
        self.req = build_requests(self.model.tokenizer)
        self.budget = opts["max_new_tokens"] or (64 if self.model.real else 24)
        self.bs = opts["block_size"]
        longest = max(len(p) for p in self.req.values())
        self.S = -(-longest // self.bs) * self.bs
        self.max_blocks = -(-(longest + self.budget) // self.bs)
        self.num_blocks = 4 * self.max_blocks
        cos_sin = A.cos_sin_cache(cfg.head_size, self.max_blocks * self.bs, cfg.rope_base)
        weights = LlamaWeights(cfg, self.model.weights, opts["rope_style"])
        self.net = PagedLlama(cfg, weights, self.num_blocks, self.bs, self.max_blocks, opts["dtype"],
                              opts["kv_format"], cos_sin, opts["rope_style"] == "neox")
        self.prefill_cell, self.decode_cell = PrefillStep(self.net), DecodeStep(self.net)
        self.fmt = "merged" if opts["kv_format"] == "merged" else "separate"

    def kv_caches(self):
        if self.net.merged:
            return list(self.net.kv_caches)
        return [(k, v) for k, v in zip(self.net.key_caches, self.net.value_caches)]

    def scale_caches(self):
        if not self.net.quant:
            return None
        return [(k, v) for k, v in zip(self.net.k_scale_caches, self.net.v_scale_caches)]

    def _run(self, cell, tokens, start, blocks, S):
        from mindspore import Tensor

        from ms_kvcache.demo.scheduler import slots_of

        n = len(tokens)
        ids = np.zeros(S, np.int32)
        pos = np.zeros(S, np.int32)
        slots = np.full(S, -1, np.int32)
        ids[:n] = tokens
        pos[:n] = np.arange(start, start + n)
        slots[:n] = slots_of(blocks, start, start + n, self.bs)
        bt = np.zeros((1, self.max_blocks), np.int32)
        bt[0, :len(blocks)] = blocks
        out = cell(Tensor(ids), Tensor(pos), Tensor(slots), Tensor(bt), Tensor(np.array([n - 1], np.int32)))
        return out.asnumpy()[0].astype(np.float32)

    def prefill(self, tokens, start, blocks):
        """Logits ``[vocab]`` of the last of ``tokens`` (positions ``start...``), their KV cached."""
        return self._run(self.prefill_cell, tokens, start, blocks, self.S)

    def generate(self, first, start, blocks):
        """Greedy completion from its first token (``first``, sampled from the prefill's logits) at
        position ``start``: (tokens, logits ``[m, vocab]`` of each fed position incl. none for ``first``)."""
        toks, rows = [int(first)], []
        while toks[-1] not in self.model.stop_ids and len(toks) < self.budget:
            lg = self._run(self.decode_cell, [toks[-1]], start + len(toks) - 1, blocks, 1)
            rows.append(lg)
            toks.append(int(np.argmax(lg)))
        return toks, (np.stack(rows) if rows else np.zeros((0, self.cfg.vocab_size), np.float32))

    def _transfer(self, buf, slots, direction):
        import ms_kvcache
        from mindspore import Tensor

        kw = {"scale_caches": self.scale_caches()} if self.net.quant else {}
        ms_kvcache.multi_layer_kv_transfer(buf, self.kv_caches(), Tensor(slots.astype(np.int32)), kv_format=self.fmt,
                                           direction=direction, **kw)

    def _buffer(self, num_tokens):
        import ms_kvcache

        kw = {"scale_sizes": self.cfg.num_kv_heads} if self.net.quant else {}
        shape = ms_kvcache.transfer_buffer_shape(self.fmt, self.cfg.num_layers, num_tokens, self.cfg.kv_size, **kw)
        return ms_kvcache.alloc_host_buffer(shape, self.net.kv_dtype, pinned=False)

    def kv_digest(self, blocks, num_tokens):
        """Checksum of the KV (and scales) of tokens ``[0, num_tokens)`` stored in ``blocks``, from a fresh d2h."""
        from ms_kvcache.disagg import checksum
        from ms_kvcache.demo.scheduler import slots_of

        buf = self._buffer(num_tokens)
        self._transfer(buf, slots_of(blocks, 0, num_tokens, self.bs), "d2h")
        return int(checksum(np.ascontiguousarray(buf.asnumpy()).view(np.uint8)))

    def copy_kv(self, src_blocks, dst_blocks, num_tokens):
        """Local prefix cache of the single-process run: tokens ``[0, num_tokens)`` from ``src_blocks`` to
        ``dst_blocks`` (d2h into host memory, h2d back), no Mooncake."""
        import ms_kvcache

        from ms_kvcache.demo.scheduler import slots_of

        buf = self._buffer(num_tokens)
        self._transfer(buf, slots_of(src_blocks, 0, num_tokens, self.bs), "d2h")
        self._transfer(buf, slots_of(dst_blocks, 0, num_tokens, self.bs), "h2d")
        ms_kvcache.synchronize()

    def flip_bit(self, block):
        """Testing: flip the sign bit of one non-zero element of layer 0's key row at the first slot of
        ``block`` (the sign bit: a last-place change can round away in the attention scores)."""
        from mindspore import Tensor

        from ms_kvcache.demo.pipeline import DemoError

        p = self.net.kv_caches[0] if self.net.merged else self.net.key_caches[0]
        a = p.asnumpy().copy()
        keys = a[0] if self.net.merged else a
        row = keys[block, 0].reshape(-1)
        nz = np.flatnonzero(row != 0)
        if nz.size == 0:
            raise DemoError(f"fault corrupt-kv: block {block}'s first key row is all zero")
        bits = row.view(f"u{row.dtype.itemsize}")
        bits[nz[0]] ^= np.array(1 << (8 * row.dtype.itemsize - 1), dtype=bits.dtype)
        p.set_data(Tensor.from_numpy(a))


def _worker_main(role, conn, opts, log_path):
    """Entry point of a worker process (spawned). Answers ``(status, payload)`` per command."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # MindSpore's and Mooncake's own logs go to the worker's log file
    os.environ.setdefault("GLOG_v", "3")
    os.environ.setdefault("MC_LOG_LEVEL", "WARNING")  # Mooncake's own log level (it ignores GLOG_*)
    try:
        _serve(role, conn, opts)
    except BaseException:  # noqa: BLE001 - reported to the parent, then exit
        try:
            conn.send(("error", traceback.format_exc()))
        except (OSError, BrokenPipeError):
            pass
        raise SystemExit(1)


def _serve(role, conn, opts):
    from ms_kvcache import disagg

    t0 = time.perf_counter()
    runner = _Runner(opts)
    req = runner.req
    cfg = runner.cfg
    model_id = f"{MODEL_ID_PREFIX}/{runner.model.source}/L{cfg.num_layers}/{opts['rope_style']}"
    sender = receiver = store = None
    fmt = runner.fmt
    kv, sc = runner.kv_caches(), runner.scale_caches()
    if role in ("prefill", "decode"):
        store = disagg.KVPrefixStore(kv, fmt, master_address=opts["master"], model_id=model_id,
                                     chunk_tokens=CHUNK_TOKENS, max_chunks=16, global_segment_size=64 << 20,
                                     local_buffer_size=32 << 20, setup_timeout=opts["timeout"], scale_caches=sc)
    if role == "prefill":
        sender = disagg.KVSender(kv, fmt, model_id=model_id, scale_caches=sc)
    if role == "decode":
        receiver = disagg.KVReceiver(kv, fmt, max_tokens=len(req["A"]), model_id=model_id, scale_caches=sc)
    conn.send(("ok", {"requests": req, "model": {"source": runner.model.source, "real": runner.model.real,
                                                 "layers": cfg.num_layers, "hidden": cfg.hidden_size,
                                                 "heads": cfg.num_heads, "kv_heads": cfg.num_kv_heads,
                                                 "head_size": cfg.head_size},
                      "geometry": {"num_blocks": runner.num_blocks, "max_blocks": runner.max_blocks,
                                   "prefill_len": runner.S, "budget": runner.budget},
                      "address": receiver.address if receiver else None,
                      "engine": (sender or receiver).engine.address if (sender or receiver) else None,
                      "model_id": model_id, "init_s": time.perf_counter() - t0, "pid": os.getpid()}))
    while True:
        if not conn.poll(opts["timeout"]):
            break  # the parent went quiet: stop (bounded life)
        cmd, args = conn.recv()
        if cmd == "stop":
            break
        t = time.perf_counter()
        if cmd == "prefill_send":  # P: prefill A's prompt, hand its KV to D, put its chunks into the store
            p = req["A"]
            logits = runner.prefill(p, 0, args["blocks"])
            t_prefill = time.perf_counter() - t
            sent = sender.send(args["peer"], args["blocks"], len(p), request_id="A", timeout=opts["timeout"])
            put = store.put(p, args["blocks"])
            out = {"logits": logits, "send": sent, "put": put, "prefill_s": t_prefill}
        elif cmd == "receive":  # D: receive A's prompt KV into its own blocks
            out = {"receive": receiver.receive(args["blocks"], request_id="A", timeout=opts["timeout"])}
            if opts.get("fault") == "corrupt-kv":
                runner.flip_bit(args["blocks"][0])
        elif cmd == "decode":  # D: A's completion from the received KV
            toks, logits = runner.generate(args["first"], len(req["A"]), args["blocks"])
            out = {"tokens": toks, "text": runner.model.tokenizer.decode(toks), "logits": logits,
                   "decode_steps": len(logits)}
        elif cmd == "prefix_serve":  # D: request B with its shared prefix reloaded from the store
            p, blocks = req["B"], args["blocks"]
            loaded = store.load(p, blocks, max_tokens=len(p) - 1)
            k = loaded["tokens"]
            t_p = time.perf_counter()
            first_logits = runner.prefill(p[k:], k, blocks)
            t_d = time.perf_counter()
            toks, logits = runner.generate(int(np.argmax(first_logits)), len(p), blocks)
            out = {"logits": np.concatenate([first_logits[None], logits]), "tokens": toks, "load": loaded,
                   "text": runner.model.tokenizer.decode(toks),
                   "prefill_s": t_d - t_p, "prefill_tokens": len(p) - k, "decode_s": time.perf_counter() - t_d}
        elif cmd == "digest":
            out = {"digest": runner.kv_digest(args["blocks"], args["num_tokens"])}
        elif cmd == "single":  # everything in this one process, no Mooncake
            out = _single_run(runner, req, args, opts)
        else:
            raise ValueError(f"unknown command {cmd!r}")
        out["seconds"] = time.perf_counter() - t
        conn.send(("ok", out))
    for obj in (sender, receiver, store):
        if obj is not None:
            obj.close()


def _single_run(runner, req, args, opts):
    from ms_kvcache.demo.pipeline import TOLERANCES
    from ms_kvcache.demo.reference import compare_tokens, reference_logits

    a_blocks, b_blocks, reuse = args["A_blocks"], args["B_blocks"], args["reuse"]
    pa, pb = req["A"], req["B"]
    a_first = runner.prefill(pa, 0, a_blocks)
    a_toks, a_dec = runner.generate(int(np.argmax(a_first)), len(pa), a_blocks)
    runner.copy_kv(a_blocks, b_blocks, reuse)
    b_first = runner.prefill(pb[reuse:], reuse, b_blocks)
    b_toks, b_dec = runner.generate(int(np.argmax(b_first)), len(pb), b_blocks)
    t = time.perf_counter()
    cmp = {}
    for name, p, toks, lg in (("A", pa, a_toks, np.concatenate([a_first[None], a_dec])),
                              ("B", pb, b_toks, np.concatenate([b_first[None], b_dec]))):
        ref = reference_logits(runner.cfg, runner.model.weights, p + toks[:-1], first=len(p) - 1)
        cmp[name] = compare_tokens(ref, lg, toks, TOLERANCES[opts["dtype"]])
    return {"A_prefill_logits": a_first, "A_tokens": a_toks, "A_decode_logits": a_dec,
            "B_logits": np.concatenate([b_first[None], b_dec]), "B_tokens": b_toks, "reference": cmp,
            "reference_s": time.perf_counter() - t}


# ============================================================================================ parent
class _Worker:
    """One worker process and its pipe; every wait on it is bounded."""

    def __init__(self, role, opts, log_dir):
        import multiprocessing as mp

        self.role = role
        self.log_path = os.path.join(log_dir, f"{role}.log")
        ctx = mp.get_context("spawn")  # never fork a process that runs MindSpore / Mooncake threads
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(role, child, opts, self.log_path), name=f"mskv-{role}")
        self.proc.start()
        child.close()
        self.pending = None

    def start(self, cmd, args=None):
        self.conn.send((cmd, args or {}))
        self.pending = cmd

    def wait(self, timeout, what=None):
        from ms_kvcache.demo.pipeline import DemoError

        what = what or self.pending or "start"
        if not self.conn.poll(timeout):
            raise DemoError(f"disagg demo: the {self.role} process gave no answer to '{what}' within {timeout:g} s "
                            f"(log: {self.log_path})")
        try:
            status, payload = self.conn.recv()
        except EOFError:
            raise DemoError(f"disagg demo: the {self.role} process exited (code {self.proc.exitcode}) during "
                            f"'{what}' (log: {self.log_path})") from None
        if status != "ok":
            last = payload.strip().splitlines()[-1] if payload.strip() else "?"
            raise DemoError(f"disagg demo: the {self.role} process failed in '{what}': {last} (log: {self.log_path})")
        self.pending = None
        return payload

    def call(self, cmd, args, timeout):
        self.start(cmd, args)
        return self.wait(timeout)

    def stop(self, timeout):
        """Ask to stop, wait, then terminate / kill; returns the exit code."""
        if self.proc.is_alive():
            try:
                self.conn.send(("stop", None))
            except (OSError, BrokenPipeError):
                pass
            self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()
        return self.proc.exitcode


def _bits_equal(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.shape != b.shape:
        return False, f"shapes {a.shape} vs {b.shape}"
    n = int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
    return n == 0, f"{a.size} logits, {n} differ"


def _check(name, passed, value=None, tolerance=None, detail=""):
    return {"name": name, "passed": bool(passed), "value": value, "tolerance": tolerance, "detail": detail}


def run_disagg_demo(opts: DisaggOptions = DisaggOptions(), log=None):
    """Run the two-process demo; return the report dict (``report["ok"]`` False when a check failed).

    Raises:
        DemoError: bad options, Mooncake or the model missing (with the install command), or a process that
            failed or did not answer within ``opts.timeout`` (its log file named); every process is stopped first.
    """
    from ms_kvcache.demo.model import ModelNotInstalled, find_model_file, INSTALL_HINT as MODEL_HINT
    from ms_kvcache.demo.pipeline import TOLERANCES, DemoError, reference_checks, reference_summary
    from ms_kvcache.disagg import INSTALL_HINT, MooncakeMaster, mooncake_available

    log = log or (lambda m: None)
    if opts.kv_format not in ("separate", "merged"):
        raise DemoError(f"kv_format: expected 'separate' or 'merged', got {opts.kv_format!r}")
    if opts.dtype not in TOLERANCES:
        raise DemoError(f"dtype: expected one of {tuple(TOLERANCES)}, got {opts.dtype!r}")
    if opts.dtype == "int8" and opts.kv_format != "separate":
        raise DemoError(f"dtype: int8 caches run with kv_format 'separate' (got {opts.kv_format!r})")
    if opts.rope_style not in ("neox", "gptj"):
        raise DemoError(f"rope_style: expected 'neox' or 'gptj', got {opts.rope_style!r}")
    if opts.backend not in ("cpu", "sim"):
        raise DemoError(f"--disagg runs on the cpu or sim backend, got {opts.backend!r}")
    if opts.fault not in (None, "corrupt-kv"):
        raise DemoError(f"fault: expected None or 'corrupt-kv', got {opts.fault!r}")
    if not opts.timeout > 0:
        raise DemoError(f"timeout: expected seconds > 0, got {opts.timeout!r}")
    if opts.max_new_tokens is not None and not 2 <= opts.max_new_tokens <= 512:
        raise DemoError(f"max_new_tokens: expected 2..512, got {opts.max_new_tokens!r}")
    if not opts.random_weights and find_model_file() is None:
        raise DemoError(str(ModelNotInstalled(f"the demo model is not installed; install it with: {MODEL_HINT} "
                                              f"(or run the tiny seeded model: ms-kvcache demo --disagg "
                                              f"--random-weights)")))
    ok, why = mooncake_available()
    if not ok:
        raise DemoError(f"--disagg needs Mooncake: {why.split('. Install:')[0]}. Install it with: {INSTALL_HINT}")
    t_start = time.perf_counter()
    T = float(opts.timeout)
    bs = opts.block_size
    log_dir = tempfile.mkdtemp(prefix="mskv-disagg-")
    master = MooncakeMaster(host=LOOPBACK, timeout=min(T, 30.0))
    workers = {}
    exit_codes = {}
    keep_logs = True
    try:
        log(f"starting mooncake_master on {LOOPBACK}")
        master.start()
        wopts = {"backend": opts.backend, "kv_format": opts.kv_format, "dtype": opts.dtype, "layers": opts.layers,
                 "rope_style": opts.rope_style, "random_weights": opts.random_weights, "seed": opts.seed,
                 "block_size": bs, "timeout": T, "max_new_tokens": opts.max_new_tokens, "use_cache": opts.use_cache,
                 "master": master.address, "fault": opts.fault}
        for role in ("prefill", "decode", "single"):
            workers[role] = _Worker(role, wopts, log_dir)
        log("started 3 processes (prefill, decode, single-process reference); loading the model in each")
        init = {role: w.wait(T, "start") for role, w in workers.items()}
        req, geo = init["prefill"]["requests"], init["prefill"]["geometry"]
        if any(init[r]["requests"] != req for r in init):
            raise DemoError("disagg demo: the processes built different requests (different models?)")
        reuse = expected_reuse(req["A"], req["B"], CHUNK_TOKENS)
        nb, mb = geo["num_blocks"], geo["max_blocks"]
        p_blocks = list(range(mb))                                   # P: 0, 1, 2, ...
        d_blocks_a = list(range(nb - 1, nb - 1 - mb, -1))            # D: the last ids, descending (other ids)
        d_blocks_b = list(range(nb - 1 - mb, nb - 1 - 2 * mb, -1))
        s_blocks_a, s_blocks_b = list(range(mb)), list(range(mb, 2 * mb))
        single = workers["single"]
        single.start("single", {"A_blocks": s_blocks_a, "B_blocks": s_blocks_b, "reuse": reuse})

        # ---- request A: prefill in P, KV handed to D, decoded in D
        D, P = workers["decode"], workers["prefill"]
        log(f"request A: prefill of {len(req['A'])} prompt tokens in the prefill process, KV handed to the decode "
            f"process over Mooncake ({LOOPBACK}), completion generated there")
        D.start("receive", {"blocks": d_blocks_a})
        a_p = P.call("prefill_send", {"blocks": p_blocks, "peer": init["decode"]["address"]}, T)
        a_r = D.wait(T)
        a_d = D.call("decode", {"first": int(np.argmax(a_p["logits"])), "blocks": d_blocks_a}, T)
        # ---- request B: shared prefix from the store, the rest prefilled and decoded in D
        log("request B: the shared system prompt's whole chunks reloaded from Mooncake Store, the rest prefilled, "
            "completion generated")
        b_d = D.call("prefix_serve", {"blocks": d_blocks_b}, T)
        k = b_d["load"]["tokens"]
        na = len(req["A"])
        dig = {"P_A": P.call("digest", {"blocks": p_blocks, "num_tokens": na}, T)["digest"],
               "D_A": D.call("digest", {"blocks": d_blocks_a, "num_tokens": na}, T)["digest"],
               "P_prefix": P.call("digest", {"blocks": p_blocks, "num_tokens": max(k, 1)}, T)["digest"],
               "D_prefix": D.call("digest", {"blocks": d_blocks_b, "num_tokens": max(k, 1)}, T)["digest"]}
        log("waiting for the single-process run")
        s = single.wait(T)
        addresses = {"mooncake_master": master.address, "decode control channel": init["decode"]["address"],
                     "prefill transfer engine": init["prefill"]["engine"],
                     "decode transfer engine": init["decode"]["engine"]}
        for role in ("prefill", "decode", "single"):
            exit_codes[role] = workers[role].stop(min(T, 30.0))
        mproc = master.proc
        master.stop()
        exit_codes["mooncake_master"] = mproc.returncode if mproc is not None else None
        alive = [r for r, w in workers.items() if w.proc.is_alive()]

        # ---- checks
        checks = []
        eq, d1 = _bits_equal(a_p["logits"], s["A_prefill_logits"])
        checks.append(_check("request A: prefill logits (prefill process) == single-process run, bit for bit", eq,
                             detail=d1))
        eq, d2 = _bits_equal(a_d["logits"], s["A_decode_logits"])
        checks.append(_check("request A: decode logits (decode process, KV received over Mooncake) == "
                             "single-process run, bit for bit", eq and a_d["tokens"] == s["A_tokens"],
                             detail=f"{a_d['decode_steps']} steps; {d2}; tokens "
                                    f"{'equal' if a_d['tokens'] == s['A_tokens'] else 'differ'}"))
        checks.append(_check("handoff: KV in the decode process's blocks == the prefill process's (checksum of a "
                             "fresh d2h on each side)", dig["P_A"] == dig["D_A"],
                             detail=f"{na} tokens, {a_p['send']['nbytes']:,} bytes; {dig['P_A']:#x} vs "
                                    f"{dig['D_A']:#x}"))
        rcv = a_r["receive"]
        used, src = rcv["block_ids"], rcv["src_block_ids"][:len(rcv["block_ids"])]
        checks.append(_check("handoff: into different block ids", used == d_blocks_a[:len(used)] and
                             not set(used) & set(src), detail=f"prefill {src} -> decode {used}"))
        checks.append(_check("request B: shared prefix reloaded from Mooncake Store, not recomputed",
                             k == reuse and k > 0, value=k,
                             detail=f"{k} of {len(req['B'])} prompt tokens reloaded ({b_d['load']['chunks']} chunks "
                                    f"put by the prefill process); expected {reuse}"))
        checks.append(_check("request B: reloaded prefix KV == the prefill process's (checksums)",
                             dig["P_prefix"] == dig["D_prefix"],
                             detail=f"{dig['P_prefix']:#x} vs {dig['D_prefix']:#x}"))
        eq, d3 = _bits_equal(b_d["logits"], s["B_logits"])
        checks.append(_check("request B: logits (decode process, prefix from the store) == single-process run, bit "
                             "for bit", eq and b_d["tokens"] == s["B_tokens"], detail=d3))
        # the decode process's completions against the numpy reference (the single process computed it for its
        # own tokens; equal tokens and bit-identical logits make it the decode process's too)
        summary = reference_summary([{"seq": n, **s["reference"][n]} for n in ("A", "B")])
        checks += reference_checks(summary, opts.dtype, 2)
        stopped = not alive and not master_running(master)
        checks.append(_check("every process stopped", stopped,
                             detail=", ".join(f"{r} exit {c}" for r, c in exit_codes.items())))
        loop = all(str(a).split(":")[0] == LOOPBACK for a in addresses.values())
        checks.append(_check("only loopback addresses", loop, detail="; ".join(f"{k2} {v}" for k2, v in
                                                                              addresses.items())))
        keep_logs = not all(c["passed"] for c in checks)
        report = {
            "ok": all(c["passed"] for c in checks),
            "options": asdict(opts),
            "model": init["prefill"]["model"],
            "model_id": init["prefill"]["model_id"],
            "requests": {"A": {"prompt": REQUESTS[0], "prompt_tokens": na, "tokens": a_d["tokens"],
                               "completion": a_d["text"]},
                         "B": {"prompt": REQUESTS[1], "prompt_tokens": len(req["B"]), "tokens": b_d["tokens"],
                               "completion": b_d["text"]}},
            "handoff": {"tokens": a_p["send"]["num_tokens"], "bytes": a_p["send"]["nbytes"],
                        "chunks": a_p["send"]["chunks"], "prefill_blocks": src,
                        "decode_blocks": rcv["block_ids"], "checksum": rcv["checksum_algo"],
                        "send_s": a_p["send"]["seconds"], "receive_s": rcv["seconds"]},
            "prefix": {"tokens_not_recomputed": k, "tokens_computed": b_d["prefill_tokens"],
                       "chunks_put": a_p["put"]["stored"], "chunk_tokens": CHUNK_TOKENS,
                       "chunks_loaded": b_d["load"]["chunks"], "load_s": b_d["load"]["seconds"],
                       "put_s": a_p["put"]["seconds"]},
            "reference": summary,
            "addresses": addresses,
            "exit_codes": exit_codes,
            "checks": checks,
            "timing": {"init_s": {r: init[r]["init_s"] for r in init}, "A_prefill_s": a_p["prefill_s"],
                       "A_decode_s": a_d["seconds"], "A_decode_steps": a_d["decode_steps"],
                       "B_prefill_s": b_d["prefill_s"], "B_decode_s": b_d["decode_s"],
                       "single_run_s": s["seconds"], "reference_s": s["reference_s"],
                       "total_s": time.perf_counter() - t_start},
            "logs": log_dir if keep_logs else None,
        }
        return report
    finally:
        for w in workers.values():
            if w.proc.is_alive() or w.proc.exitcode is None:
                w.stop(5.0)
        master.stop()
        if not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)


def master_running(master):
    return master.proc is not None and master.proc.poll() is None


def _fmt_s(x):
    if x is None:
        return "-"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def format_disagg_report(r):
    """Human-readable report of :func:`run_disagg_demo`."""
    from ms_kvcache.demo.pipeline import display_text

    o, m, q, h, p, tm = r["options"], r["model"], r["requests"], r["handoff"], r["prefix"], r["timing"]
    lines = []
    add = lines.append
    add(f"ms-kvcache demo --disagg: {m['source']}")
    add(f"  {m['layers']} layers, hidden {m['hidden']}, {m['heads']} query heads / {m['kv_heads']} KV heads x "
        f"{m['head_size']}; backend {o['backend']}, {o['kv_format']} {o['dtype']} caches, {o['rope_style']} RoPE; "
        f"Mooncake tcp on 127.0.0.1")
    add("processes: mooncake_master, prefill, decode, single-process reference")
    for name in ("A", "B"):
        add(f"request {name} [{q[name]['prompt_tokens']} prompt tokens, {len(q[name]['tokens'])} generated]")
        add(f"  user:      {q[name]['prompt']}")
        add(f"  assistant: {display_text(q[name]['completion'])}")
    add("request A: prompt prefilled in the prefill process, completion generated in the decode process")
    add(f"  handoff: {h['tokens']} tokens, {h['bytes']:,} bytes in {h['chunks']} chunk(s), blocks "
        f"{h['prefill_blocks']} -> {h['decode_blocks']}, {h['checksum']} checked; send {_fmt_s(h['send_s'])}, "
        f"receive {_fmt_s(h['receive_s'])}")
    add("request B: shares the system prompt with A")
    add(f"  prefix from Mooncake Store: {p['tokens_not_recomputed']} tokens not recomputed "
        f"({p['chunks_loaded']} chunks of {p['chunk_tokens']}, put by the prefill process), "
        f"{p['tokens_computed']} prompt tokens computed; load {_fmt_s(p['load_s'])}")
    add("checks:")
    for c in r["checks"]:
        val = f" max {c['value']:.2e} (tol {c['tolerance']:g})" if c["tolerance"] is not None else ""
        add(f"  [{'PASS' if c['passed'] else 'FAIL'}] {c['name']}{val}"
            + (f"  -- {c['detail']}" if c["detail"] else ""))
    add("time (CPU figures, this machine):")
    add("  process start + model load + compile: " + ", ".join(f"{k} {_fmt_s(v)}" for k, v in tm["init_s"].items()))
    add(f"  A prefill (incl. compile) {_fmt_s(tm['A_prefill_s'])}, A decode {tm['A_decode_steps']} steps "
        f"{_fmt_s(tm['A_decode_s'])}, B prefill {_fmt_s(tm['B_prefill_s'])}, B decode {_fmt_s(tm['B_decode_s'])}")
    add(f"  single-process run {_fmt_s(tm['single_run_s'])} (numpy reference {_fmt_s(tm['reference_s'])}); "
        f"total {_fmt_s(tm['total_s'])}")
    if r.get("logs"):
        add(f"process logs kept in {r['logs']}")
    add("result: " + ("all checks passed" if r["ok"] else "CHECKS FAILED"))
    return "\n".join(lines)
