"""The other process of the ms_kvcache.disagg tests: a JSON-lines server on stdin / stdout.

``python tests/_disagg_peer.py`` reads one command per line and answers one JSON line per command
(``{"ok": true, ...}`` or ``{"ok": false, "error": <exception class>, "message": ...}``). It holds caches
made by :func:`make_arrays` from a case and a seed (the test process makes the same arrays to know the
expected bits), a KVSender / KVReceiver over them, and a KVPrefixStore. The helpers at the top are also
imported by the tests.
"""
import json
import os
import select
import signal
import subprocess
import sys

import numpy as np

#: name: kv_format, dtype, cache_layout, num_layers, planes [(num_kv_heads, head_size)]
CASES = {
    "separate_bf16_bsnd": ("separate", "bfloat16", "BSND", 3, [(2, 8), (2, 8)]),
    "merged_fp16_bnsd": ("merged", "float16", "BNSD", 2, [(3, 4), (3, 4)]),
    "merged_fp16_bsnd": ("merged", "float16", "BSND", 2, [(3, 4), (3, 4)]),
    "mla_fp32": ("mla", "float32", "BSND", 2, [(1, 16), (1, 4)]),
    "dsa_int8": ("dsa", "int8", "BSND", 2, [(1, 16), (1, 4), (1, 8)]),
    # int8 caches with per-token float32 scale caches (the dynamic quantizing writes'), moved with the data
    "separate_int8_scaled": ("separate", "int8", "BSND", 2, [(2, 8), (2, 8)]),
    "mla_int8_scaled": ("mla", "int8", "BSND", 2, [(1, 16), (1, 4)]),
    # 8 KiB per token: payloads of MiB with few blocks (memory and store-capacity tests)
    "separate_fp16_wide": ("separate", "float16", "BSND", 2, [(8, 128), (8, 128)]),
}


def scaled(case):
    return isinstance(case, str) and case.endswith("_scaled")


def make_scales(case, num_blocks, block_size, seed):
    """Per-layer float32 scale caches (a tuple of one ``[nb, bs, H]`` per plane; MLA / DSA ``H = 1``) of
    a scaled case, random positive values; None for the other cases."""
    if not scaled(case):
        return None
    fmt, _, _, L, planes = CASES[case]
    rng = np.random.default_rng(seed + 1000)
    heads = [1 if fmt in ("mla", "dsa") else h for h, _ in planes]
    return [tuple(rng.uniform(1e-3, 1.0, (num_blocks, block_size, h)).astype(np.float32) for h in heads)
            for _ in range(L)]


def endpoint_kw(case, scale_tensors=None):
    """The scale keywords of a KVSender / KVReceiver / KVPrefixStore over this case's caches: int8 with
    scale caches -> scale_caches, int8 without -> static_scales=True, others none."""
    if scaled(case):
        return {"scale_caches": scale_tensors}
    return {"static_scales": True} if CASES[case][1] == "int8" else {}


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def make_arrays(case, num_blocks, block_size, seed):
    """Per-layer caches as numpy arrays (random bits, no NaN worries: compared as bits)."""
    fmt, dtype, layout, L, planes = CASES[case] if isinstance(case, str) else case
    dt = np_dtype(dtype)
    rng = np.random.default_rng(seed)

    def one(shape):
        return rng.integers(0, 1 << (8 * dt.itemsize), size=shape, dtype=f"u{dt.itemsize}").view(dt)

    def shape4(h, d):
        return (num_blocks, h, block_size, d) if layout == "BNSD" else (num_blocks, block_size, h, d)

    if fmt == "separate":
        return [tuple(one(shape4(h, d)) for h, d in planes) for _ in range(L)]
    if fmt == "merged":
        h, d = planes[0]
        return [one((2,) + shape4(h, d)) for _ in range(L)]
    return [tuple(one((num_blocks, block_size, h * d)) for h, d in planes) for _ in range(L)]


def token_rows(case, arrays):
    """Every plane of every layer as bits ``[num_blocks * block_size, row]`` (token-major), in order."""
    fmt, dtype, layout, L, planes = CASES[case] if isinstance(case, str) else case
    out = []
    for layer in arrays:
        parts = [layer[0], layer[1]] if fmt == "merged" else list(layer)
        for a in parts:
            bits = a.view(f"u{a.dtype.itemsize}")
            if bits.ndim == 4 and layout == "BNSD":
                bits = bits.transpose(0, 2, 1, 3)
            nb, bs = bits.shape[0], bits.shape[1]
            out.append(np.ascontiguousarray(bits).reshape(nb * bs, -1))
    return out


def to_tensors(arrays):
    from mindspore import Parameter, Tensor

    n = [0]

    def p(a):
        n[0] += 1
        return Parameter(Tensor.from_numpy(np.ascontiguousarray(a).copy()), name=f"cache{n[0]}", requires_grad=False)

    return [tuple(p(a) for a in layer) if isinstance(layer, tuple) else p(layer) for layer in arrays]


def from_tensors(tensors):
    out = []
    for layer in tensors:
        if isinstance(layer, tuple):
            out.append(tuple(t.asnumpy() for t in layer))
        else:
            out.append(layer.asnumpy())
    return out


def resource_rss():
    """Resident set size of this process in bytes (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _as_bits(a):
    return a.view(f"u{a.dtype.itemsize}")


class Peer:
    """The other process; every wait on it is bounded."""

    def __init__(self, tmp_path, name="peer"):
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("MC_LOG_LEVEL", "WARNING")
        self.log = open(tmp_path / f"{name}.log", "w+")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, text=True, bufsize=1)
        self.wait(120)

    def start(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout=60):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise AssertionError(f"the peer process gave no answer within {timeout} s; log: {self._tail()}")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the peer process exited (code {self.proc.poll()}); log: {self._tail()}")
        return json.loads(line)

    def call(self, timeout=60, **cmd):
        self.start(**cmd)
        ans = self.wait(timeout)
        assert ans["ok"], ans
        return ans

    def _tail(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.start(cmd="exit")
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.kill()
        self.log.close()


def main():
    os.environ.setdefault("MC_LOG_LEVEL", "WARNING")  # Mooncake's own log level (it ignores GLOG_*)
    import mindspore as ms

    ms.set_context(mode=ms.PYNATIVE_MODE)
    from ms_kvcache import disagg

    st = {}
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the answer channel

    def answer(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    answer({"ok": True, "ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        try:
            if c == "exit":
                answer({"ok": True})
                break
            if c == "caches":  # new caches: the endpoints over the old ones go
                for k in ("receiver", "sender", "store"):
                    if k in st:
                        st.pop(k).close()
                case = cmd["case"]
                st["case"] = case
                st["caches"] = to_tensors(make_arrays(case, cmd["num_blocks"], cmd["block_size"], cmd["seed"]))
                sc = make_scales(case, cmd["num_blocks"], cmd["block_size"], cmd["seed"])
                st["kw"] = endpoint_kw(case, to_tensors(sc) if sc is not None else None)
                fmt, _, layout = CASES[case][:3]
                st["fmt"], st["layout"] = fmt, layout
                answer({"ok": True})
            elif c == "receiver":
                if "receiver" in st:
                    st.pop("receiver").close()
                r = disagg.KVReceiver(st["caches"], st["fmt"], cache_layout=st["layout"], max_tokens=cmd["max_tokens"],
                                      model_id=cmd.get("model_id"), token=cmd.get("token"), **st["kw"])
                st["receiver"] = r
                answer({"ok": True, "address": r.address})
            elif c == "receive":
                res = st["receiver"].receive(cmd["block_ids"], timeout=cmd["timeout"], stream=cmd.get("stream", False),
                                             request_id=cmd.get("request_id"))
                answer({"ok": True, "result": res})
            elif c == "send":
                s = st.get("sender")
                if s is None:
                    s = st["sender"] = disagg.KVSender(st["caches"], st["fmt"], cache_layout=st["layout"],
                                                      chunk_tokens=cmd.get("chunk_tokens"), token=cmd.get("token"),
                                                      direct=cmd.get("direct"), **st["kw"])
                die = cmd.get("fault") == "die-after-accept"

                def progress(event, info, die=die):
                    if die and event == "accepted":
                        os._exit(3)  # as if the process had been killed
                res = s.send(cmd["peer"], cmd["block_ids"], cmd["num_tokens"], timeout=cmd["timeout"],
                             request_id=cmd.get("request_id"), progress=progress)
                answer({"ok": True, "result": res})
            elif c == "stats":  # what a long-running process must keep bounded
                s = st.get("sender")
                fds = sorted(os.listdir("/proc/self/fd"))
                answer({"ok": True, "rss": resource_rss(), "fds": len(fds),
                        "fd_targets": [os.readlink(f"/proc/self/fd/{f}") for f in fds
                                       if os.path.exists(f"/proc/self/fd/{f}")],
                        "threads": len(os.listdir("/proc/self/task")),
                        "staged": getattr(s, "staged_capacity", -1) if s is not None else 0,
                        "listening": disagg._net.listening_sockets()})
            elif c == "dump":
                arrays = from_tensors(st["caches"])
                np.savez(cmd["path"], *[_as_bits(a) for layer in arrays
                                         for a in (layer if isinstance(layer, tuple) else (layer,))])
                answer({"ok": True})
            elif c == "dump_scales":
                sc = st["kw"].get("scale_caches") or []
                np.savez(cmd["path"], *[t.asnumpy() for layer in sc for t in layer])
                answer({"ok": True})
            elif c == "store":
                st["store"] = disagg.KVPrefixStore(st["caches"], st["fmt"], cache_layout=st["layout"],
                                                   master_address=cmd["master"], model_id=cmd["model_id"],
                                                   chunk_tokens=cmd["chunk_tokens"],
                                                   global_segment_size=cmd.get("segment", 16 << 20),
                                                   local_buffer_size=16 << 20, **st["kw"])
                answer({"ok": True})
            elif c == "store_put":
                answer({"ok": True, "result": st["store"].put(cmd["token_ids"], cmd["block_ids"])})
            elif c == "store_load":
                answer({"ok": True, "result": st["store"].load(cmd["token_ids"], cmd["block_ids"])})
            else:
                answer({"ok": False, "error": "ValueError", "message": f"unknown command {c!r}"})
        except Exception as exc:  # noqa: BLE001 - reported to the test
            answer({"ok": False, "error": type(exc).__name__, "message": str(exc)})
    for k in ("receiver", "sender", "store"):
        if k in st:
            st[k].close()


if __name__ == "__main__":
    main()
