#!/usr/bin/env python3
"""A bounded loopback soak of ms_kvcache.disagg: many handoffs of random sizes and layouts, faults at
random chunks, a receiver killed mid-transfer, store puts and loads; then what a long-running service
must keep: every load verified, memory, file descriptors and threads.

    python scripts/soak_disagg.py --handoffs 200                  # the figures in docs/disagg.md
    python scripts/soak_disagg.py --handoffs 24 --max-tokens 512  # the short run of the test suite

Four processes on 127.0.0.1: this one (a KVSender and a KVPrefixStore writer per layout), a worker (a
KVReceiver and a KVPrefixStore reader per layout; this script with ``--worker``, JSON lines on stdin /
stdout), the store's memory (a Mooncake Store client that only contributes ``--pool-mib`` of memory) and
a ``mooncake_master``. The endpoints of a layout are made once per process, as a service makes them.
The layout changes every ``--layout-every`` handoffs (SEPARATE bf16 BSND, MERGED fp16 BNSD, MLA fp32; each
side with its own block size). Each
handoff sends a random number of tokens (0 .. ``--max-tokens``) from random blocks into other random
blocks, with random chunk sizes. A fraction ``--fault-rate`` of them get a fault: a byte of a random chunk
flipped after its checksum (both sides must raise ChecksumMismatch), or the sender aborting after a random
chunk (PeerGone on the receiver); every ``--kill-every``-th handoff the worker is killed with SIGKILL after
a random chunk and restarted. After a good handoff the receiver's rows at its blocks must equal the
sender's rows (XXH3 of both, computed in each process from a fresh d2h); after a failed one the
receiver's caches must be bit for bit what they were. Every ``--store-every`` handoffs the sender puts the
sequence (its tokens are its slots, so sequences starting with the same blocks share a prefix, and equal
tokens always mean equal KV) and the worker loads its longest prefix, verified the same
way.

Prints (and with ``--json`` writes) handoffs done, faults injected and survived, bytes verified,
corrupted loads (must be 0), the sender process's RSS drift against the largest payload, and its file
descriptors and threads left over, against a baseline taken after a warm-up (every layout set up once,
and at least a quarter of the run: Mooncake's and the cpu pool's one-time threads, the connections
Mooncake keeps per peer, and MindSpore's first-use caches do not count); ``trace`` samples them 20 times
over the run. Exit code 0 when nothing was corrupted, every fault was
survived, and RSS drift <= 2x the largest payload.
"""
import argparse
import json
import os
import platform
import select
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: name: kv_format, dtype, cache_layout, num_layers, planes [(num_kv_heads, head_size)]
LAYOUTS = {
    "separate_bf16_bsnd": ("separate", "bfloat16", "BSND", 4, [(4, 64), (4, 64)]),
    "merged_fp16_bnsd": ("merged", "float16", "BNSD", 2, [(8, 64), (8, 64)]),
    "mla_fp32": ("mla", "float32", "BSND", 4, [(1, 128), (1, 16)]),
}


# ---------------------------------------------------------------------------------------------- both sides
def make_caches(case, num_blocks, block_size, seed):
    """Random-bit caches of a layout, as MindSpore Parameters (and the numpy dtype)."""
    from mindspore import Parameter, Tensor

    fmt, dtype, layout, L, planes = LAYOUTS[case]
    if dtype == "bfloat16":
        import ml_dtypes

        dt = np.dtype(ml_dtypes.bfloat16)
    else:
        dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    n = [0]

    def one(shape):
        n[0] += 1
        a = rng.integers(0, 1 << (8 * dt.itemsize), size=shape, dtype=f"u{dt.itemsize}").view(dt)
        return Parameter(Tensor.from_numpy(np.ascontiguousarray(a)), name=f"soak{seed}_{n[0]}", requires_grad=False)

    def shape4(h, d):
        return (num_blocks, h, block_size, d) if layout == "BNSD" else (num_blocks, block_size, h, d)

    if fmt == "separate":
        return [tuple(one(shape4(h, d)) for h, d in planes) for _ in range(L)]
    if fmt == "merged":
        h, d = planes[0]
        return [one((2,) + shape4(h, d)) for _ in range(L)]
    return [tuple(one((num_blocks, block_size, h * d)) for h, d in planes) for _ in range(L)]


def rows_checksum(layout, caches, slots):
    """XXH3 of the KV at ``slots`` (the multi_layer_kv_transfer buffer of those tokens, a fresh d2h)."""
    from mindspore import Tensor

    from ms_kvcache.disagg._layout import checksum, wait_ops
    from ms_kvcache.disagg.handoff import _transfer

    slots = np.asarray(slots, np.int64)
    if slots.size == 0:
        return 0
    buf = np.zeros(layout.buffer_shape(slots.size), layout.np_dtype())
    _transfer(layout, caches, Tensor.from_numpy(buf), slots, "d2h")
    wait_ops()
    return checksum(buf.view(np.uint8).reshape(-1))


def all_slots(layout):
    return np.arange(layout.num_blocks * layout.block_size, dtype=np.int64)


def proc_stats():
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {"rss": rss, "fds": len(os.listdir("/proc/self/fd")), "threads": len(os.listdir("/proc/self/task"))}


# ---------------------------------------------------------------------------------------------- worker
def worker():
    os.environ.setdefault("MC_LOG_LEVEL", "ERROR")
    import mindspore as ms

    ms.set_context(mode=ms.PYNATIVE_MODE)
    from ms_kvcache import disagg

    out = sys.stdout
    sys.stdout = sys.stderr
    st, sides = {}, {}

    def answer(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    answer({"ok": True, "pid": os.getpid()})
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        try:
            if c == "exit":
                break
            if c == "setup":  # the endpoints of a layout: made once per worker, like a service's
                if cmd["case"] not in sides:
                    fmt, _, lay, _, _ = LAYOUTS[cmd["case"]]
                    caches = make_caches(cmd["case"], cmd["num_blocks"], cmd["block_size"], cmd["seed"])
                    sides[cmd["case"]] = {
                        "caches": caches,
                        "rx": disagg.KVReceiver(caches, fmt, cache_layout=lay, max_tokens=cmd["max_tokens"]),
                        # a reader: no segment of its own, so writers never hold connections to it
                        "store": disagg.KVPrefixStore(caches, fmt, cache_layout=lay, master_address=cmd["master"],
                                                      model_id=cmd["case"], chunk_tokens=cmd["chunk_tokens"],
                                                      max_chunks=cmd["max_chunks"], global_segment_size=0,
                                                      local_buffer_size=16 << 20)}
                st.clear()
                st.update(sides[cmd["case"]])
                lay = st["rx"].layout
                answer({"ok": True, "address": st["rx"].address, "num_blocks": lay.num_blocks,
                        "block_size": lay.block_size})
            elif c == "receive":
                try:
                    res = st["rx"].receive(cmd["block_ids"], timeout=cmd["timeout"], stream=cmd.get("stream", False))
                    answer({"ok": True, "num_tokens": res["num_tokens"]})
                except disagg.DisaggError as exc:
                    answer({"ok": False, "error": type(exc).__name__, "message": str(exc)[:300]})
            elif c == "sum":
                lay = st["rx"].layout
                slots = all_slots(lay) if cmd.get("slots") is None else cmd["slots"]
                answer({"ok": True, "sum": rows_checksum(lay, st["caches"], slots)})
            elif c == "load":
                res = st["store"].load(cmd["token_ids"], cmd["block_ids"])
                answer({"ok": True, "tokens": res["tokens"], "stopped": res["stopped"]})
            elif c == "stats":
                answer({"ok": True, **proc_stats()})
        except Exception as exc:  # noqa: BLE001 - reported to the driver
            answer({"ok": False, "error": type(exc).__name__, "message": str(exc)[:500]})
    for side in sides.values():
        side["rx"].close()
        side["store"].close()


def pool(master_address, nbytes):
    """The store's memory: a Mooncake Store client that only contributes a segment (a memory node), so
    neither the writer nor the reader holds KV of the other in its own memory."""
    os.environ.setdefault("MC_LOG_LEVEL", "ERROR")
    from ms_kvcache.disagg import _net
    from ms_kvcache.disagg._mooncake import import_store

    store = import_store().MooncakeDistributedStore()
    with _net.confine_binds("127.0.0.1"):
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", nbytes, 16 << 20, "tcp", "", master_address)
    print(json.dumps({"ok": rc == 0, "rc": rc}), flush=True)
    sys.stdin.read()  # until the driver closes the pipe
    store.close()


class Worker:
    def __init__(self, log, role=("--worker",)):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.setdefault("MC_LOG_LEVEL", "ERROR")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *role], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, env=env, text=True, bufsize=1)
        ans = self.wait(180)
        if not ans.get("ok"):
            raise RuntimeError(f"{role[0]}: {ans}")

    def start(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise RuntimeError(f"the worker gave no answer within {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker exited (code {self.proc.poll()})")
        return json.loads(line)

    def call(self, timeout=120, **cmd):
        self.start(**cmd)
        ans = self.wait(timeout)
        if not ans.get("ok") and cmd["cmd"] != "receive":
            raise RuntimeError(f"worker {cmd['cmd']}: {ans}")
        return ans

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.start(cmd="exit")
                self.proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()


# ---------------------------------------------------------------------------------------------- driver
class _Abort(Exception):
    pass


def run(args):
    os.environ.setdefault("MC_LOG_LEVEL", "ERROR")
    import mindspore as ms

    ms.set_context(mode=ms.PYNATIVE_MODE)
    from ms_kvcache import disagg

    rng = np.random.default_rng(args.seed)
    log = open(args.worker_log, "w") if args.worker_log else subprocess.DEVNULL
    r = {"handoffs": 0, "faults_injected": 0, "faults_survived": 0, "kills": 0, "bytes_verified": 0,
         "corrupted_loads": 0, "store_puts": 0, "store_loads": 0, "store_tokens_loaded": 0, "largest_payload": 0,
         "failures": [], "trace": [], "command": " ".join(sys.argv),
         "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_1min": [round(os.getloadavg()[0], 1)]}
    master = disagg.MooncakeMaster(timeout=30).start()
    memory = Worker(log, ("--pool", master.address, str(args.pool_mib << 20)))
    w = Worker(log)
    cases = list(LAYOUTS)
    st = {}
    base = None
    warmup = args.warmup if args.warmup is not None else max(len(cases) * args.layout_every, args.handoffs // 4)
    r["warmup"] = warmup
    t0 = time.monotonic()

    sides = {}  # case -> this process's caches, sender and store: made once, like a service's endpoints

    def setup(epoch):
        case = cases[epoch % len(cases)]
        fmt, _, lay, _, _ = LAYOUTS[case]
        if case not in sides:
            bs_tx = int(rng.choice([8, 16]))
            nb_tx = -(-args.max_tokens // bs_tx) + 4
            caches = make_caches(case, nb_tx, bs_tx, 1000 + epoch)
            ct = 32
            sides[case] = dict(
                bs_tx=bs_tx, nb_tx=nb_tx, caches=caches, ct=ct,
                # a "system prompt" of blocks every sequence of this layout may start with (shared prefixes)
                sys_blocks=rng.permutation(nb_tx)[:max(1, nb_tx // 2)].tolist(),
                tx=disagg.KVSender(caches, fmt, cache_layout=lay),
                store=disagg.KVPrefixStore(caches, fmt, cache_layout=lay, master_address=master.address,
                                           model_id=case, chunk_tokens=ct, max_chunks=-(-args.max_tokens // ct),
                                           global_segment_size=0, local_buffer_size=16 << 20))
        st.clear()
        st.update(sides[case], case=case)
        bs_rx = int(rng.choice([8, 16]))
        ans = w.call(cmd="setup", case=case, num_blocks=-(-args.max_tokens // bs_rx) + 4, block_size=bs_rx,
                     seed=2000 + epoch, max_tokens=args.max_tokens, master=master.address, chunk_tokens=st["ct"],
                     max_chunks=-(-args.max_tokens // st["ct"]))
        st.update(address=ans["address"], bs_rx=ans["block_size"], nb_rx=ans["num_blocks"])

    def fail(what):
        r["corrupted_loads"] += 1
        r["failures"].append(what)
        print("CORRUPT:", what, flush=True)

    epoch = 0
    setup(epoch)
    try:
        for i in range(args.handoffs):
            if i and i % args.layout_every == 0:
                epoch += 1
                setup(epoch)
            tx, lay = st["tx"], st["tx"].layout
            T = int(rng.integers(0, args.max_tokens + 1))
            need = max(1, -(-T // st["bs_tx"]))
            shared = st["sys_blocks"][:int(rng.integers(0, need + 1))] if rng.random() < 0.7 else []
            rest = [int(b) for b in rng.permutation(st["nb_tx"]) if b not in set(shared)]
            src_blocks = (shared + rest)[:need]
            dst_blocks = rng.permutation(st["nb_rx"])[:max(1, -(-T // st["bs_rx"]))].tolist()
            tx.chunk_tokens = int(rng.integers(1, max(2, T // 2 + 2)))
            tx._ramp = bool(rng.integers(0, 2))
            n_chunks = len(tx.chunk_sizes(T)) if T else 0
            kill = args.kill_every and i % args.kill_every == args.kill_every - 1 and n_chunks > 0
            fault = "kill" if kill else (str(rng.choice(["corrupt", "abort"])) if n_chunks and
                                         rng.random() < args.fault_rate else None)
            at = int(rng.integers(0, n_chunks)) if n_chunks else 0
            if fault == "kill":  # before the last chunk: a receiver killed after it would only cost a timeout
                at = int(rng.integers(-1, n_chunks - 1))  # -1: right after the accept
            nbytes = T * lay.bytes_per_token
            r["largest_payload"] = max(r["largest_payload"], nbytes)
            before = w.call(cmd="sum")["sum"] if fault in ("corrupt", "abort") else None
            tx._fault = ("corrupt", at) if fault == "corrupt" else None

            def hook(event, info, at=at, fault=fault):
                if (event == "chunk" and info["index"] >= at) or (event == "accepted" and at < 0):
                    if fault == "kill":
                        w.kill()
                    else:
                        raise _Abort(f"soak: abort after chunk {info.get('index')}")

            progress = hook if fault in ("abort", "kill") else None
            w.start(cmd="receive", block_ids=dst_blocks, timeout=args.timeout, stream=bool(rng.integers(0, 2)))
            err = None
            try:
                tx.send(st["address"], src_blocks, T, timeout=args.timeout, progress=progress)
            except (disagg.DisaggError, _Abort) as exc:
                err = exc
            tx._fault = None
            if fault == "kill":
                r["kills"] += 1
                r["faults_injected"] += 1
                if isinstance(err, (disagg.PeerGone, disagg.HandoffTimeout, disagg.DisaggError)):
                    r["faults_survived"] += 1
                else:
                    r["failures"].append(f"handoff {i}: worker killed, send gave {err!r}")
                w.close()
                w = Worker(log)
                setup(epoch)  # same layout, a fresh receiver
                r["handoffs"] += 1
                continue
            ans = w.wait(args.timeout + 30)
            r["handoffs"] += 1
            if fault:
                r["faults_injected"] += 1
                want = disagg.ChecksumMismatch if fault == "corrupt" else disagg.PeerGone
                got_rx = ans.get("error")
                ok_tx = isinstance(err, want) or (fault == "abort" and isinstance(err, _Abort))
                after = w.call(cmd="sum")["sum"]
                if after != before:
                    fail(f"handoff {i}: {fault} at chunk {at}: the receiver's caches changed")
                elif ok_tx and got_rx == want.__name__:
                    r["faults_survived"] += 1
                else:
                    r["failures"].append(f"handoff {i}: {fault}: sender {err!r}, receiver {ans}")
                continue
            if err is not None or not ans.get("ok"):
                r["failures"].append(f"handoff {i}: unexpected failure: sender {err!r}, receiver {ans}")
                continue
            src_slots = disagg.slots_from_blocks(src_blocks, st["bs_tx"], T)
            dst_slots = disagg.slots_from_blocks(dst_blocks, st["bs_rx"], T)
            mine = rows_checksum(lay, st["caches"], src_slots)
            theirs = w.call(cmd="sum", slots=dst_slots.tolist())["sum"]
            if mine != theirs:
                fail(f"handoff {i}: {T} tokens arrived different ({mine:#x} sent, {theirs:#x} loaded)")
            else:
                r["bytes_verified"] += nbytes
            if args.store_every and i % args.store_every == 0 and T >= st["ct"]:
                # the tokens are the sender's slots: equal tokens always mean equal KV, as in a model
                toks = src_slots.tolist()
                st["store"].put(toks, src_blocks)
                r["store_puts"] += 1
                blocks2 = rng.permutation(st["nb_rx"])[:-(-T // st["bs_rx"])].tolist()
                res = w.call(cmd="load", token_ids=toks, block_ids=blocks2)
                r["store_loads"] += 1
                k = res["tokens"]
                r["store_tokens_loaded"] += k
                if k:
                    a = rows_checksum(lay, st["caches"], src_slots[:k])
                    b = w.call(cmd="sum", slots=disagg.slots_from_blocks(blocks2, st["bs_rx"], k).tolist())["sum"]
                    if a != b:
                        fail(f"store load {i}: {k} tokens loaded differ from what was put")
                    else:
                        r["bytes_verified"] += k * lay.bytes_per_token
            if base is None and i >= warmup:
                base = proc_stats()  # after the warm-up: one-time threads and MindSpore's caches exist
            if i % max(1, args.handoffs // 20) == 0:
                r["trace"].append([i, *proc_stats().values()])  # [handoff, rss, fds, threads]
        end = proc_stats()
    finally:
        for side in sides.values():
            side["tx"].close()
            side["store"].close()
        w.close()
        memory.close()
        master.stop()
    base = base or end
    r.update(seconds=round(time.monotonic() - t0, 1), rss_base=base["rss"], rss_end=end["rss"],
             rss_drift=end["rss"] - base["rss"], leaked_fds=end["fds"] - base["fds"],
             leaked_threads=end["threads"] - base["threads"])
    r["load_1min"].append(round(os.getloadavg()[0], 1))
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pool", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--pool-mib", type=int, default=256, help="memory of the store's pool process (MiB)")
    ap.add_argument("--handoffs", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=2048, help="largest handoff in tokens (default 2048)")
    ap.add_argument("--layout-every", type=int, default=10, help="handoffs per layout before the next one")
    ap.add_argument("--fault-rate", type=float, default=0.25, help="fraction of handoffs with a fault")
    ap.add_argument("--kill-every", type=int, default=20, help="kill the receiver every N handoffs (0: never)")
    ap.add_argument("--store-every", type=int, default=3, help="store put + load every N handoffs (0: never)")
    ap.add_argument("--warmup", type=int, help="handoffs before the RSS / fd / thread baseline (default: every "
                    "layout once, and at least a quarter of the run)")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--worker-log", help="the worker's stderr (default: discarded)")
    args = ap.parse_args(argv)
    if args.worker:
        worker()
        return 0
    if args.pool:
        pool(args.pool[0], int(args.pool[1]))
        return 0
    r = run(args)
    text = json.dumps(r, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    ok = (r["corrupted_loads"] == 0 and r["faults_survived"] == r["faults_injected"]
          and r["rss_drift"] <= 2 * max(r["largest_payload"], 1))
    print(f"{'OK' if ok else 'FAILED'}: {r['handoffs']} handoffs, {r['faults_survived']}/{r['faults_injected']} "
          f"faults survived ({r['kills']} receivers killed), {r['bytes_verified'] / 2**20:.1f} MiB verified, "
          f"{r['corrupted_loads']} corrupted loads, RSS drift {r['rss_drift'] / 2**20:+.1f} MiB (largest payload "
          f"{r['largest_payload'] / 2**20:.1f} MiB), fds {r['leaked_fds']:+d}, threads {r['leaked_threads']:+d}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
