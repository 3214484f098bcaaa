"""``ms-kvcache demo --disagg``: prefill and decode in two processes on 127.0.0.1, the KV handed over
by the Mooncake transfer engine, and a second request that reloads a shared prefix from Mooncake Store.

Processes (all started and stopped by :func:`run_disagg_demo`, every wait bounded by ``timeout``):

- ``mooncake_master`` on 127.0.0.1 (Mooncake Store's metadata service);
- **prefill** (P): runs the model's prefill of request A's prompt over its paged caches, hands the KV of
  the prompt to D with :class:`ms_kvcache.disagg.KVSender` and puts its whole 16-token chunks into
  Mooncake Store (:class:`ms_kvcache.disagg.KVPrefixStore`);
- **decode** (D): receives A's KV into other block ids (:class:`ms_kvcache.disagg.KVReceiver`) and decodes
  the rest of A one token per step; then serves request B, whose prompt shares a "system prompt" with A:
  it reloads the shared whole chunks from the store (put there by P) and prefills only the rest;
- **single**: the same two requests in one process with no Mooncake at all (A decoded from the cache
  its own prefill wrote; B's shared prefix copied locally from A's blocks), plus the float64
  recomputations without any cache (:mod:`ms_kvcache.demo.reference`).

Checks: P's and D's hidden states equal the single-process run bit for bit; the KV in D's blocks equals
P's (checksums of a fresh d2h on each side); the handoff went to other block ids; B reloaded the
expected number of tokens from the store and their KV equals P's; both requests agree with the float64
recomputation within the demo's tolerance; every process exited; every address was a loopback one.
"""
from dataclasses import asdict, dataclass
import os
import shutil
import tempfile
import time
import traceback
from typing import Optional

import numpy as np

__all__ = ["DisaggOptions", "run_disagg_demo", "format_disagg_report", "build_requests", "CHUNK_TOKENS"]

#: Store chunk = cache block (16 tokens).
CHUNK_TOKENS = 16
MODEL_ID_PREFIX = "ms_kvcache-demo"


@dataclass
class DisaggOptions:
    """Settings of ``ms-kvcache demo --disagg`` (its CLI flags).

    backend: ms_kvcache backend of every op ("cpu" | "sim"); kv_format: "separate" | "merged";
    dtype: KV-cache dtype "float32" | "bfloat16"; layers: first N layers (None = all);
    random_weights: seeded random weights even when the model package is installed;
    timeout: seconds any one wait may take (a worker's start, each step, a handoff, the shutdown).
    """

    backend: str = "cpu"
    kv_format: str = "separate"
    dtype: str = "float32"
    layers: Optional[int] = None
    random_weights: bool = False
    seed: int = 0
    block_size: int = CHUNK_TOKENS
    timeout: float = 180.0
    #: testing only: "corrupt-kv" flips one bit of the KV D received (after the handoff's own checksum
    #: check), so the demo's checks must fail.
    fault: Optional[str] = None


def build_requests(token_ids):
    """Requests A and B from the demo's tokenized texts: a shared "system prompt" (text 0 + text 1)
    followed by text 2 (A) or text 3 (B). Returns a dict with ``system``, ``A``, ``B`` (token lists) and
    ``A_prompt`` / ``B_prompt`` (prompt lengths; the rest of each request is decoded one token per step)."""
    system = list(token_ids[0][:-1]) + list(token_ids[1][1:-1])
    a_tail, b_tail = list(token_ids[2][1:]), list(token_ids[3][1:])
    return {"system": system, "A": system + a_tail, "B": system + b_tail,
            "A_prompt": len(system) + min(16, len(a_tail) // 2), "B_prompt": len(system) + min(8, len(b_tail) // 2)}


def expected_reuse(req, chunk=CHUNK_TOKENS):
    """Tokens of B's prompt the store can serve: whole chunks of A's prompt (what P stored) that B's
    prompt starts with, at most ``B_prompt - 1`` (the last prompt token is always computed)."""
    a, b = req["A"][:req["A_prompt"]], req["B"][:req["B_prompt"]]
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    common = min(common, (len(a) // chunk) * chunk, len(b) - 1)
    return (common // chunk) * chunk


# ============================================================================================ workers
class _Runner:
    """The demo model over paged caches in one process (GRAPH_MODE cells of :mod:`ms_kvcache.demo.cells`)."""

    def __init__(self, opts, num_blocks, max_blocks):
        import mindspore as ms

        import ms_kvcache
        from ms_kvcache.demo import ops_adapter as A
        from ms_kvcache.demo.cells import DecodeStep, PagedBert, PrefillStep
        from ms_kvcache.demo.model import find_model_dir, load_model, random_model

        ms_kvcache.set_backend(opts["backend"])
        ms.set_context(mode=ms.GRAPH_MODE)
        model_dir = None if opts["random_weights"] else find_model_dir()
        self.model = load_model(model_dir, num_layers=opts["layers"]) if model_dir is not None else \
            random_model(num_layers=opts["layers"], seed=opts["seed"])
        cfg = self.model.config
        self.cfg = cfg
        self.bs = opts["block_size"]
        self.max_blocks = max_blocks
        cos_sin = A.cos_sin_cache(cfg.head_size, cfg.max_position_embeddings, 10000.0)
        self.net = PagedBert(cfg, self.model.weights, num_blocks, self.bs, max_blocks, opts["dtype"],
                             opts["kv_format"], cos_sin)
        self.prefill_cell, self.decode_cell = PrefillStep(self.net), DecodeStep(self.net)
        self.kv_format = opts["kv_format"]
        self.fmt = "merged" if opts["kv_format"] == "merged" else "separate"
        self.dtype = opts["dtype"]

    def kv_caches(self):
        if self.net.merged:
            return list(self.net.kv_caches)
        return [(k, v) for k, v in zip(self.net.key_caches, self.net.value_caches)]

    def _step(self, cell, tokens, start, blocks):
        from mindspore import Tensor

        from ms_kvcache.disagg import slots_from_blocks

        n = len(tokens)
        pos = np.arange(start, start + n, dtype=np.int32)
        slots = slots_from_blocks(blocks, self.bs, start + n)[start:].astype(np.int32)
        bt = np.zeros((1, self.max_blocks), np.int32)
        bt[0, :len(blocks)] = blocks
        out = cell(Tensor(np.asarray(tokens, np.int32)), Tensor(pos), Tensor(slots), Tensor(bt))
        return out.asnumpy()

    def prefill(self, tokens, start, blocks):
        """Hidden states ``[len(tokens), hidden]`` of a prefill of ``tokens`` at positions ``start...``."""
        return self._step(self.prefill_cell, tokens, start, blocks)

    def decode(self, tokens, start, blocks):
        """One decode step per token (teacher forcing); hidden states ``[len(tokens), hidden]``."""
        rows = [self._step(self.decode_cell, [t], start + i, blocks) for i, t in enumerate(tokens)]
        return np.concatenate(rows) if rows else np.zeros((0, self.cfg.hidden_size), np.float32)

    def kv_digest(self, blocks, num_tokens):
        """xxh3 / crc32 of the KV of tokens ``[0, num_tokens)`` stored in ``blocks``, from a fresh d2h."""
        import ms_kvcache
        from mindspore import Tensor

        from ms_kvcache.disagg import checksum, slots_from_blocks

        H, D = self.cfg.num_attention_heads, self.cfg.head_size
        shape = ms_kvcache.transfer_buffer_shape(self.fmt, self.cfg.num_hidden_layers, num_tokens, H * D)
        buf = ms_kvcache.alloc_host_buffer(shape, self.net.kv_dtype, pinned=False)
        ms_kvcache.multi_layer_kv_transfer(buf, self.kv_caches(), Tensor(slots_from_blocks(blocks, self.bs, num_tokens)),
                                           kv_format=self.fmt, direction="d2h")
        a = buf.asnumpy()
        return int(checksum(np.ascontiguousarray(a).view(np.uint8)))

    def copy_kv(self, src_blocks, dst_blocks, num_tokens):
        """Local prefix cache of the single-process run: tokens ``[0, num_tokens)`` from ``src_blocks`` to
        ``dst_blocks`` (d2h into host memory, h2d back), no Mooncake."""
        import ms_kvcache
        from mindspore import Tensor

        from ms_kvcache.disagg import slots_from_blocks

        H, D = self.cfg.num_attention_heads, self.cfg.head_size
        shape = ms_kvcache.transfer_buffer_shape(self.fmt, self.cfg.num_hidden_layers, num_tokens, H * D)
        buf = ms_kvcache.alloc_host_buffer(shape, self.net.kv_dtype, pinned=False)
        kv = self.kv_caches()
        ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(slots_from_blocks(src_blocks, self.bs, num_tokens)),
                                           kv_format=self.fmt, direction="d2h")
        ms_kvcache.multi_layer_kv_transfer(buf, kv, Tensor(slots_from_blocks(dst_blocks, self.bs, num_tokens)),
                                           kv_format=self.fmt, direction="h2d")
        ms_kvcache.synchronize()

    def flip_bit(self, block):
        """Testing: flip the sign bit of one non-zero element of layer 0's key row at the first slot of
        ``block``. The sign bit, not the lowest mantissa bit: a last-place change of one key element can be
        rounded away in the attention scores, so the decode's bit-exact check would not see it."""
        from mindspore import Tensor

        from ms_kvcache.demo.pipeline import DemoError

        p = self.net.kv_caches[0] if self.net.merged else self.net.key_caches[0]
        a = p.asnumpy().copy()
        keys = a[0] if self.net.merged else a
        row = keys[block, 0].reshape(-1)  # the first slot's key row (all heads), a view into ``a``
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
    runner = _Runner(opts, opts["num_blocks"], opts["max_blocks"])
    req = build_requests(runner.model.token_ids)
    model_id = f"{MODEL_ID_PREFIX}/{runner.model.source}/L{runner.cfg.num_hidden_layers}"
    sender = receiver = store = None
    fmt = runner.fmt
    if role in ("prefill", "decode"):
        store = disagg.KVPrefixStore(runner.kv_caches(), fmt, master_address=opts["master"], model_id=model_id,
                                     chunk_tokens=CHUNK_TOKENS, max_chunks=16, global_segment_size=32 << 20,
                                     local_buffer_size=16 << 20, setup_timeout=opts["timeout"])
    if role == "prefill":
        sender = disagg.KVSender(runner.kv_caches(), fmt, model_id=model_id)
    if role == "decode":
        receiver = disagg.KVReceiver(runner.kv_caches(), fmt, max_tokens=len(req["A"]), model_id=model_id)
    conn.send(("ok", {"requests": req, "model": {"source": runner.model.source, "real": runner.model.real,
                                                 "layers": runner.cfg.num_hidden_layers,
                                                 "hidden": runner.cfg.hidden_size,
                                                 "heads": runner.cfg.num_attention_heads,
                                                 "head_size": runner.cfg.head_size},
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
            n = args["prompt_len"]
            rows = runner.prefill(args["tokens"][:n], 0, args["blocks"])
            t_prefill = time.perf_counter() - t
            sent = sender.send(args["peer"], args["blocks"], n, request_id=args["request_id"], timeout=opts["timeout"])
            put = store.put(args["tokens"][:n], args["blocks"])
            out = {"rows": rows, "send": sent, "put": put, "prefill_s": t_prefill}
        elif cmd == "receive_decode":  # D: receive A's prompt KV into its own blocks, decode the rest
            n = args["prompt_len"]
            got = receiver.receive(args["blocks"], request_id=args["request_id"], timeout=opts["timeout"])
            if opts.get("fault") == "corrupt-kv":
                runner.flip_bit(args["blocks"][0])
            t_dec = time.perf_counter()
            rows = runner.decode(args["tokens"][n:], n, args["blocks"])
            out = {"rows": rows, "receive": got, "decode_s": time.perf_counter() - t_dec,
                   "decode_steps": len(args["tokens"]) - n}
        elif cmd == "prefix_serve":  # D: request B with its shared prefix reloaded from the store
            n = args["prompt_len"]
            tokens, blocks = args["tokens"], args["blocks"]
            loaded = store.load(tokens[:n], blocks, max_tokens=n - 1)
            k = loaded["tokens"]
            t_p = time.perf_counter()
            pre = runner.prefill(tokens[k:n], k, blocks)
            t_d = time.perf_counter()
            dec = runner.decode(tokens[n:], n, blocks)
            out = {"rows": np.concatenate([pre, dec]), "first_row_position": k, "load": loaded,
                   "prefill_s": t_d - t_p, "prefill_tokens": n - k, "decode_s": time.perf_counter() - t_d}
        elif cmd == "digest":
            out = {"digest": runner.kv_digest(args["blocks"], args["num_tokens"])}
        elif cmd == "single":  # everything in this one process, no Mooncake
            out = _single_run(runner, req, args)
        else:
            raise ValueError(f"unknown command {cmd!r}")
        out["seconds"] = time.perf_counter() - t
        conn.send(("ok", out))
    for obj in (sender, receiver, store):
        if obj is not None:
            obj.close()


def _single_run(runner, req, args):
    from ms_kvcache.demo.reference import reference_hidden

    a_blocks, b_blocks, reuse = args["A_blocks"], args["B_blocks"], args["reuse"]
    na, nb_ = req["A_prompt"], req["B_prompt"]
    a_pre = runner.prefill(req["A"][:na], 0, a_blocks)
    a_dec = runner.decode(req["A"][na:], na, a_blocks)
    runner.copy_kv(a_blocks, b_blocks, reuse)
    b_pre = runner.prefill(req["B"][reuse:nb_], reuse, b_blocks)
    b_dec = runner.decode(req["B"][nb_:], nb_, b_blocks)
    t = time.perf_counter()
    round_to = "bfloat16" if runner.dtype == "bfloat16" else None
    ref_a = reference_hidden(runner.cfg, runner.model.weights, req["A"], round_to=round_to)
    ref_b = reference_hidden(runner.cfg, runner.model.weights, req["B"], round_to=round_to)
    return {"A_prefill": a_pre, "A_decode": a_dec, "B_rows": np.concatenate([b_pre, b_dec]), "ref_A": ref_a,
            "ref_B": ref_b, "reference_s": time.perf_counter() - t}


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
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False, f"shapes {a.shape} vs {b.shape}"
    n = int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
    return n == 0, f"{a.size} values, {n} differ"


def _rel_err(out, ref):
    return float(np.max(np.abs(out.astype(np.float64) - ref))) / max(float(np.max(np.abs(ref))), 1e-30)


def _check(name, passed, value=None, tolerance=None, detail=""):
    return {"name": name, "passed": bool(passed), "value": value, "tolerance": tolerance, "detail": detail}


def run_disagg_demo(opts: DisaggOptions = DisaggOptions(), log=None):
    """Run the two-process demo; return the report dict (``report["ok"]`` False when a check failed).

    Raises:
        DemoError: bad options, Mooncake missing (with the install command), or a process that failed or
            did not answer within ``opts.timeout`` (its log file named); every process is stopped first.
    """
    from ms_kvcache.demo.pipeline import TOLERANCES, DemoError
    from ms_kvcache.disagg import INSTALL_HINT, MooncakeMaster, mooncake_available
    from ms_kvcache.disagg._mooncake import LOOPBACK

    log = log or (lambda m: None)
    if opts.kv_format not in ("separate", "merged"):
        raise DemoError(f"kv_format: expected 'separate' or 'merged', got {opts.kv_format!r}")
    if opts.dtype not in TOLERANCES:
        raise DemoError(f"dtype: expected one of {tuple(TOLERANCES)}, got {opts.dtype!r}")
    if opts.backend not in ("cpu", "sim"):
        raise DemoError(f"--disagg runs on the cpu or sim backend, got {opts.backend!r}")
    if opts.fault not in (None, "corrupt-kv"):
        raise DemoError(f"fault: expected None or 'corrupt-kv', got {opts.fault!r}")
    if not opts.timeout > 0:
        raise DemoError(f"timeout: expected seconds > 0, got {opts.timeout!r}")
    ok, why = mooncake_available()
    if not ok:
        raise DemoError(f"--disagg needs Mooncake: {why.split('. Install:')[0]}. Install it with: {INSTALL_HINT}")
    t_start = time.perf_counter()
    T = float(opts.timeout)
    bs = opts.block_size
    num_blocks, max_blocks = 16, 8  # A and B need 7 + 5 blocks of 16 at most; attention over 8 blocks
    log_dir = tempfile.mkdtemp(prefix="mskv-disagg-")
    master = MooncakeMaster(host=LOOPBACK, timeout=min(T, 30.0))
    workers = {}
    exit_codes = {}
    keep_logs = True
    try:
        log(f"starting mooncake_master on {LOOPBACK}")
        master.start()
        wopts = {"backend": opts.backend, "kv_format": opts.kv_format, "dtype": opts.dtype, "layers": opts.layers,
                 "random_weights": opts.random_weights, "seed": opts.seed, "block_size": bs, "timeout": T,
                 "num_blocks": num_blocks, "max_blocks": max_blocks, "master": master.address, "fault": opts.fault}
        for role in ("prefill", "decode", "single"):
            workers[role] = _Worker(role, wopts, log_dir)
        log("started 3 processes (prefill, decode, single-process reference); loading the model in each")
        init = {role: w.wait(T, "start") for role, w in workers.items()}
        req = init["prefill"]["requests"]
        if any(init[r]["requests"] != req for r in init):
            raise DemoError("disagg demo: the processes built different requests (different models?)")
        reuse = expected_reuse(req, CHUNK_TOKENS)
        nA, nB = -(-len(req["A"]) // bs), -(-len(req["B"]) // bs)
        p_blocks = list(range(nA))                                   # P: 0, 1, 2, ...
        d_blocks_a = list(range(num_blocks - 1, num_blocks - 1 - nA, -1))  # D: 15, 14, ... (other ids)
        d_blocks_b = list(range(num_blocks - 1 - nA, num_blocks - 1 - nA - nB, -1))
        s_blocks_a, s_blocks_b = list(range(nA)), list(range(nA, nA + nB))
        single = workers["single"]
        single.start("single", {"A_blocks": s_blocks_a, "B_blocks": s_blocks_b, "reuse": reuse})

        # ---- request A: prefill in P, KV handed to D, decoded in D
        log(f"request A: prefill of {req['A_prompt']} tokens in the prefill process, KV handed to the decode "
            f"process over Mooncake ({LOOPBACK}), {len(req['A']) - req['A_prompt']} decode steps there")
        D, P = workers["decode"], workers["prefill"]
        D.start("receive_decode", {"tokens": req["A"], "prompt_len": req["A_prompt"], "blocks": d_blocks_a,
                                   "request_id": "A"})
        a_p = P.call("prefill_send", {"tokens": req["A"], "prompt_len": req["A_prompt"], "blocks": p_blocks,
                                      "peer": init["decode"]["address"], "request_id": "A"}, T)
        a_d = D.wait(T)
        # ---- request B: shared prefix from the store, the rest prefilled and decoded in D
        log(f"request B: {len(req['system'])}-token shared system prompt; reload its whole chunks from Mooncake "
            f"Store, prefill the rest, decode")
        b_d = D.call("prefix_serve", {"tokens": req["B"], "prompt_len": req["B_prompt"], "blocks": d_blocks_b}, T)
        k = b_d["load"]["tokens"]
        dig = {"P_A": P.call("digest", {"blocks": p_blocks, "num_tokens": req["A_prompt"]}, T)["digest"],
               "D_A": D.call("digest", {"blocks": d_blocks_a, "num_tokens": req["A_prompt"]}, T)["digest"],
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
        tol = TOLERANCES[opts.dtype]
        checks = []
        eq, d1 = _bits_equal(a_p["rows"], s["A_prefill"])
        checks.append(_check("request A: prefill hidden states (prefill process) == single-process run, bit for bit",
                             eq, detail=d1))
        eq, d2 = _bits_equal(a_d["rows"], s["A_decode"])
        checks.append(_check("request A: decode hidden states (decode process, KV received over Mooncake) == "
                             "single-process run, bit for bit", eq, detail=f"{a_d['decode_steps']} steps; {d2}"))
        checks.append(_check("handoff: KV in the decode process's blocks == the prefill process's (checksum of a "
                             "fresh d2h on each side)", dig["P_A"] == dig["D_A"],
                             detail=f"{req['A_prompt']} tokens, {a_p['send']['nbytes']:,} bytes; "
                                    f"{dig['P_A']:#x} vs {dig['D_A']:#x}"))
        used, src = a_d["receive"]["block_ids"], a_d["receive"]["src_block_ids"][:len(a_d["receive"]["block_ids"])]
        checks.append(_check("handoff: into different block ids", used == d_blocks_a[:len(used)] and
                             not set(used) & set(src), detail=f"prefill {src} -> decode {used}"))
        checks.append(_check("request B: shared prefix reloaded from Mooncake Store, not recomputed",
                             k == reuse and k > 0, value=k,
                             detail=f"{k} of {req['B_prompt']} prompt tokens reloaded ({b_d['load']['chunks']} chunks "
                                    f"put by the prefill process); expected {reuse}"))
        checks.append(_check("request B: reloaded prefix KV == the prefill process's (checksums)",
                             dig["P_prefix"] == dig["D_prefix"], detail=f"{dig['P_prefix']:#x} vs "
                                                                         f"{dig['D_prefix']:#x}"))
        eq, d3 = _bits_equal(b_d["rows"], s["B_rows"])
        checks.append(_check("request B: hidden states (decode process, prefix from the store) == single-process "
                             "run, bit for bit", eq, detail=d3))
        ea = max(_rel_err(a_p["rows"], s["ref_A"][:req["A_prompt"]]),
                 _rel_err(a_d["rows"], s["ref_A"][req["A_prompt"]:]))
        eb = _rel_err(b_d["rows"], s["ref_B"][k:])
        checks.append(_check(f"requests A and B == causal float64 recomputation without cache ({opts.dtype} cache)",
                             max(ea, eb) <= tol, value=max(ea, eb), tolerance=tol,
                             detail=f"A {ea:.2e}, B {eb:.2e}; rel. to max |reference|"))
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
            "requests": {"system_prompt_tokens": len(req["system"]), "A_tokens": len(req["A"]),
                         "A_prompt": req["A_prompt"], "B_tokens": len(req["B"]), "B_prompt": req["B_prompt"]},
            "handoff": {"tokens": a_p["send"]["num_tokens"], "bytes": a_p["send"]["nbytes"],
                        "chunks": a_p["send"]["chunks"], "prefill_blocks": a_d["receive"]["src_block_ids"],
                        "decode_blocks": a_d["receive"]["block_ids"], "checksum": a_d["receive"]["checksum_algo"],
                        "send_s": a_p["send"]["seconds"], "receive_s": a_d["receive"]["seconds"]},
            "prefix": {"tokens_not_recomputed": k, "tokens_computed": b_d["prefill_tokens"],
                       "chunks_put": a_p["put"]["stored"], "chunk_tokens": CHUNK_TOKENS,
                       "chunks_loaded": b_d["load"]["chunks"], "load_s": b_d["load"]["seconds"],
                       "put_s": a_p["put"]["seconds"]},
            "addresses": addresses,
            "exit_codes": exit_codes,
            "checks": checks,
            "timing": {"init_s": {r: init[r]["init_s"] for r in init}, "A_prefill_s": a_p["prefill_s"],
                       "A_decode_s": a_d["decode_s"], "A_decode_steps": a_d["decode_steps"],
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
    o, m, q, h, p, tm = r["options"], r["model"], r["requests"], r["handoff"], r["prefix"], r["timing"]
    lines = []
    add = lines.append
    add(f"ms-kvcache demo --disagg: {m['source']}")
    add(f"  {m['layers']} layers, hidden {m['hidden']}, {m['heads']} heads x {m['head_size']}; backend "
        f"{o['backend']}, kv format {o['kv_format']}, cache dtype {o['dtype']}; Mooncake tcp on 127.0.0.1")
    add("processes: mooncake_master, prefill, decode, single-process reference")
    add(f"request A: {q['A_tokens']} tokens, prompt {q['A_prompt']} prefilled in the prefill process, "
        f"{q['A_tokens'] - q['A_prompt']} decoded in the decode process")
    add(f"  handoff: {h['tokens']} tokens, {h['bytes']:,} bytes in {h['chunks']} chunk(s), blocks "
        f"{h['prefill_blocks']} -> {h['decode_blocks']}, {h['checksum']} checked; send {_fmt_s(h['send_s'])}, "
        f"receive {_fmt_s(h['receive_s'])}")
    add(f"request B: {q['B_tokens']} tokens, prompt {q['B_prompt']}, sharing a {q['system_prompt_tokens']}-token "
        f"system prompt with A")
    add(f"  prefix from Mooncake Store: {p['tokens_not_recomputed']} tokens not recomputed "
        f"({p['chunks_loaded']} chunks of {p['chunk_tokens']}, put by the prefill process), "
        f"{p['tokens_computed']} prompt tokens computed; load {_fmt_s(p['load_s'])}")
    add("checks:")
    for c in r["checks"]:
        val = f" max {c['value']:.2e} (tol {c['tolerance']:.0e})" if c["tolerance"] is not None else ""
        add(f"  [{'PASS' if c['passed'] else 'FAIL'}] {c['name']}{val}" + (f"  -- {c['detail']}" if c["detail"] else ""))
    add("time (CPU figures, this machine):")
    add("  process start + model load: " + ", ".join(f"{k} {_fmt_s(v)}" for k, v in tm["init_s"].items()))
    add(f"  A prefill (incl. compile) {_fmt_s(tm['A_prefill_s'])}, A decode {tm['A_decode_steps']} steps "
        f"{_fmt_s(tm['A_decode_s'])}, B prefill {_fmt_s(tm['B_prefill_s'])}, B decode {_fmt_s(tm['B_decode_s'])}")
    add(f"  single-process run {_fmt_s(tm['single_run_s'])} (float64 reference {_fmt_s(tm['reference_s'])}); "
        f"total {_fmt_s(tm['total_s'])}")
    if r.get("logs"):
        add(f"process logs kept in {r['logs']}")
    add("result: " + ("all checks passed" if r["ok"] else "CHECKS FAILED"))
    return "\n".join(lines)
