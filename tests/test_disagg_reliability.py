"""ms_kvcache.disagg in a long-running service: bounded memory, truthful lifecycles, hostile input, store
semantics a server can rely on, and sockets that listen only where asked.

Each test names the failure it guards against; every one of them failed on the code before these
guarantees (a raised raw exception, a success that was not one, memory that only grew, a mixed load, a
listener on every interface). The other process is ``tests/_disagg_peer.py``. Skipped (with the reason)
only when Mooncake cannot be imported.
"""
import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ms_kvcache import disagg
from ms_kvcache.disagg import _channel, _net

_OK, _WHY = disagg.mooncake_available()
if not _OK:
    pytest.skip(f"Mooncake cannot be imported: {_WHY}", allow_module_level=True)

sys.path.insert(0, os.path.dirname(__file__))
import _disagg_peer as P  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = "separate_bf16_bsnd"
WIDE = "separate_fp16_wide"  # 8 KiB per token


def _caches(case, num_blocks, block_size, seed):
    arrays = P.make_arrays(case, num_blocks, block_size, seed)
    return arrays, P.to_tensors(arrays)


def _rows(case, tensors):
    return P.token_rows(case, P.from_tensors(tensors))


def _same_rows(case, got, want, what):
    for i, (g, e) in enumerate(zip(got, want)):
        bad = np.flatnonzero((g != e).any(axis=1))
        assert bad.size == 0, f"{what}: plane {i}: {bad.size} token rows differ, first at slot {bad[:5]}"


def _endpoint_args(case):
    fmt, _, layout = P.CASES[case][:3]
    return fmt, layout


class _Receiving:
    """``receive()`` of ``rx`` in a thread, again and again, recording every outcome, until stopped."""

    def __init__(self, rx, block_ids, timeout=5):
        self.rx, self.block_ids, self.timeout = rx, block_ids, timeout
        self.outcomes = []  # ("ok", result) | ("error", exception)
        self.stop = False
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        while not self.stop:
            try:
                self.outcomes.append(("ok", self.rx.receive(self.block_ids, timeout=self.timeout)))
            except disagg.HandoffTimeout as exc:
                if not self.stop:
                    self.outcomes.append(("error", exc))
            except BaseException as exc:  # noqa: BLE001 - recorded for the test
                self.outcomes.append(("error", exc))

    def join(self):
        self.stop = True
        self.th.join(self.timeout + 10)
        assert not self.th.is_alive()


# ------------------------------------------------------------------------------------------------ item 1
def test_sender_staging_memory_stays_bounded_over_growing_sends(tmp_path):
    """20 sends of growing size (the largest 8 MiB) from one KVSender: its RSS ends within 2x the largest
    payload of where it started, and it holds one staging buffer of < 1.5x that payload. The old sender
    registered a new pinned buffer whenever a send needed more room and kept every one until close():
    RSS grew with the sum of all payloads (477 -> 821 MB for 20 sends up to 31 MiB)."""
    bs, nb = 16, 80
    sizes = [int(t) for t in np.linspace(64, nb * bs, 20)]  # tokens; 8 KiB each
    largest = sizes[-1] * 8192
    tx_peer = P.Peer(tmp_path, "sender")
    try:
        fmt, layout = _endpoint_args(WIDE)
        _, dst = _caches(WIDE, nb, bs, 2)
        tx_peer.call(cmd="caches", case=WIDE, num_blocks=nb, block_size=bs, seed=1)
        with disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=nb * bs) as rx:
            def handoff(n):
                tx_peer.start(cmd="send", peer=rx.address, block_ids=list(range(nb)), num_tokens=n, timeout=60,
                              direct=False)
                got = rx.receive(list(range(nb)), timeout=60)
                ans = tx_peer.wait(60)
                assert ans["ok"] and got["num_tokens"] == n, ans

            handoff(16)
            handoff(256)  # 2 MiB: the cpu pool's helper thread and Mooncake's connections exist from here on
            base = tx_peer.call(cmd="stats")
            for n in sizes:
                handoff(n)
            end = tx_peer.call(cmd="stats")
    finally:
        tx_peer.close()
    drift = end["rss"] - base["rss"]
    assert drift <= 2 * largest, f"sender RSS grew by {drift / 2**20:.1f} MiB over {len(sizes)} sends (largest " \
                                 f"{largest / 2**20:.1f} MiB)"
    assert largest <= end["staged"] <= 1.5 * largest, end["staged"]
    new_fds = sorted(set(end["fd_targets"]) - set(base["fd_targets"]))
    assert end["threads"] <= base["threads"], (base["threads"], end["threads"])
    # Mooncake's TCP transport opens up to 4 connections ("lanes") to a peer as the load asks for them
    assert end["fds"] - base["fds"] <= 3 and all(t.startswith("socket:") for t in new_fds), new_fds


# ------------------------------------------------------------------------------------------------ item 2
def test_master_refuses_a_port_another_process_holds():
    """The old start() connected to whoever listened on the port, reported success, and the real
    mooncake_master exited 1 three seconds later."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        m = disagg.MooncakeMaster(port=port, timeout=10)
        t = time.monotonic()
        with pytest.raises(disagg.DisaggError, match=f"port {port} on 127.0.0.1 is in use by another process"):
            m.start()
        assert time.monotonic() - t < 5 and m.proc is None


def test_master_that_exits_fails_start():
    m = disagg.MooncakeMaster(timeout=10, extra_args=("--no_such_flag_for_mooncake_master=1",))
    with pytest.raises(disagg.DisaggError, match="mooncake_master exited"):
        m.start()
    assert m.proc is None


def test_master_does_not_outlive_a_crashed_parent():
    """A process that started a master and died without stop() (a crash: os._exit) used to leave the
    mooncake_master running, orphaned."""
    code = ("import json, os; from ms_kvcache.disagg import MooncakeMaster; m = MooncakeMaster().start(); "
            "print(json.dumps(m.proc.pid), flush=True); os._exit(3)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    pid = json.loads(p.stdout.strip().splitlines()[-1])
    for _ in range(100):
        try:
            with open(f"/proc/{pid}/stat") as f:
                alive = f.read().split(")")[-1].split()[0] not in ("Z", "X")
        except OSError:
            alive = False
        if not alive:
            break
        time.sleep(0.05)
    assert not alive, f"mooncake_master {pid} still runs after its parent died"


# ------------------------------------------------------------------------------------------------ items 3, 4, 8
@pytest.fixture
def master():
    with disagg.MooncakeMaster(timeout=20) as m:  # one per test: the store's capacity is the test's own
        yield m


def _store(caches, case, master, **kw):
    fmt, layout = _endpoint_args(case)
    kw.setdefault("global_segment_size", 16 << 20)
    return disagg.KVPrefixStore(caches, fmt, cache_layout=layout, master_address=master.address,
                                local_buffer_size=16 << 20, **kw)


def test_load_after_the_writer_died_returns_the_prefix_still_readable(tmp_path, master):
    """The writer (its segment holds the chunks) is killed with -9: lookup() still reports the chunks, the
    old load() raised StoreError (-800, TRANSFER_FAIL). Now the prefix ends at the first unreadable
    chunk, the reason is given, and the caches are untouched."""
    bs, nb, ct = 4, 8, 4
    tokens = list(range(100, 112))
    writer = P.Peer(tmp_path, "writer")
    try:
        writer.call(cmd="caches", case=CASE, num_blocks=nb, block_size=bs, seed=5)
        writer.call(cmd="store", master=master.address, model_id="m", chunk_tokens=ct)
        assert writer.call(cmd="store_put", token_ids=tokens, block_ids=[0, 1, 2])["result"]["stored"] == 3
        arrays, caches = _caches(CASE, nb, bs, 6)
        with _store(caches, CASE, master, model_id="m", chunk_tokens=ct) as reader:
            assert reader.lookup(tokens) == 12
            writer.kill()
            assert reader.lookup(tokens) == 12  # the master still lists them
            res = reader.load(tokens, [3, 4, 5])
            assert res["tokens"] == 0 and "chunk 0 could not be read" in res["stopped"], res
            _same_rows(CASE, _rows(CASE, caches), P.token_rows(CASE, arrays), "reader caches")
    finally:
        writer.close()


def test_put_into_a_full_store_stores_a_prefix_and_says_so(master):
    """A 16 MiB store and 20 chunks of 1 MiB: the old put() raised StoreError part-way, leaving an unknown
    part stored. Now it stores chunks in order until one does not fit, returns the tokens stored and why
    it stopped, and load() gets exactly that prefix back, bit for bit."""
    bs, ct = 16, 128  # 128 tokens x 8 KiB = 1 MiB per chunk
    n_chunks = 20
    nb = n_chunks * ct // bs
    arrays, caches = _caches(WIDE, nb, bs, 7)
    tokens = list(range(5000, 5000 + n_chunks * ct))
    with _store(caches, WIDE, master, model_id="full", chunk_tokens=ct, max_chunks=n_chunks) as store:
        res = store.put(tokens, list(range(nb)))
        assert 0 < res["tokens"] < len(tokens), res
        assert res["stored"] == res["tokens"] // ct and res["stopped"].startswith(f"chunk {res['stored']} could not be "
                                                                                  "put (code -200"), res
        again = store.put(tokens, list(range(nb)))  # the same call again: nothing new fits, nothing is lost
        assert again["tokens"] == res["tokens"] and again["present"] == res["stored"], again
        _, other = _caches(WIDE, nb, bs, 8)
        with _store(other, WIDE, master, model_id="full", chunk_tokens=ct, max_chunks=n_chunks) as reader:
            got = reader.load(tokens, list(range(nb)))
        assert got["tokens"] == res["tokens"], (got, res)
    want = P.token_rows(WIDE, arrays)
    have = _rows(WIDE, other)
    k = res["tokens"]
    _same_rows(WIDE, [h[:k] for h in have], [w[:k] for w in want], "reloaded prefix")


def test_two_writers_of_one_key_never_produce_a_mixed_load(tmp_path, master):
    """Writer A stores 2 chunks of a prompt, writer B (other KV for the same tokens) stores 4. The old B
    skipped A's 2 chunks, stored its own 2 after them, and every load mixed A's and B's chunks, each valid,
    with neither writer told. Now B is told (its put stops at chunk 0: stored with other content), the
    load is A's 2 chunks only, and a third writer with A's content extends A's prefix."""
    bs, nb, ct = 4, 8, 4
    tokens = list(range(300, 316))
    a_arrays, a_caches = _caches(CASE, nb, bs, 21)
    b_arrays, b_caches = _caches(CASE, nb, bs, 22)
    blocks = [0, 1, 2, 3]
    with _store(a_caches, CASE, master, model_id="m2", chunk_tokens=ct) as a, \
            _store(b_caches, CASE, master, model_id="m2", chunk_tokens=ct) as b:
        ra = a.put(tokens[:8], blocks[:2])
        assert ra["stored"] == 2 and ra["tokens"] == 8 and ra["stopped"] is None, ra
        rb = b.put(tokens, blocks)
        assert rb["tokens"] == 0 and rb["stored"] == 0, rb
        assert "chunk 0: it is stored with other content" in rb["stopped"], rb
        assert b.lookup(tokens) == 8
        res = b.load(tokens, [4, 5, 6, 7])
        assert res["tokens"] == 8 and res["stopped"] == "end of stored prefix", res
        rows_b = _rows(CASE, b_caches)
        want = P.token_rows(CASE, a_arrays)
        _same_rows(CASE, [r[16:24] for r in rows_b], [w[0:8] for w in want], "A's prefix in B's blocks 4-5")
        # A writes the rest: its chunks continue its own prefix
        ra = a.put(tokens, blocks)
        assert ra["tokens"] == 16 and ra["present"] == 2 and ra["stored"] == 2, ra
        res = b.load(tokens, [4, 5, 6, 7])
        assert res["tokens"] == 16, res
        _same_rows(CASE, [r[16:32] for r in _rows(CASE, b_caches)], [w[0:16] for w in want], "A's 4 chunks")


def test_load_stops_where_another_writers_chunk_follows(master):
    """Chunks 2-3 stored by a writer whose chunks 0-1 differ (as a racing put could leave them): the
    fingerprints do not chain, the load stops at chunk 2 with the reason."""
    bs, nb, ct = 4, 8, 4
    tokens = list(range(400, 416))
    _, a_caches = _caches(CASE, nb, bs, 31)
    _, b_caches = _caches(CASE, nb, bs, 32)
    with _store(a_caches, CASE, master, model_id="m3", chunk_tokens=ct) as a, \
            _store(b_caches, CASE, master, model_id="m3", chunk_tokens=ct) as b:
        assert b.put(tokens, [0, 1, 2, 3])["tokens"] == 16
        keys = a.keys(tokens)
        for k in keys[:2]:
            assert b.store.remove(k, True) == 0
        assert a.put(tokens[:8], [0, 1])["tokens"] == 8  # A's chunks 0-1 before B's 2-3
        res = a.load(tokens, [4, 5, 6, 7])
        assert res["tokens"] == 8 and "chunk 2 does not match" in res["stopped"] and "another writer" in \
            res["stopped"], res


def test_a_put_that_loses_a_race_removes_only_its_own_unreachable_chunks(master):
    """Writer A stores chunks 0-1 between writer B's existence check and B's puts (simulated: B's check
    sees nothing). B's puts of keys 0-1 store nothing (Mooncake keeps A's), B's 2-3 are stored but can never
    be loaded (they do not continue A's fingerprints). B must take out its own 2-3 and leave A's 0-1. The
    old code asked to remove all four (A's too) without force, and the lease of its own header read-back
    made every remove fail: B's unreachable chunks stayed, and only that lease kept A's chunks."""
    bs, nb, ct = 4, 8, 4
    tokens = list(range(500, 516))
    a_arrays, a_caches = _caches(CASE, nb, bs, 41)
    _, b_caches = _caches(CASE, nb, bs, 42)
    with _store(a_caches, CASE, master, model_id="m4", chunk_tokens=ct) as a, \
            _store(b_caches, CASE, master, model_id="m4", chunk_tokens=ct) as b:
        keys = a.keys(tokens)
        assert a.put(tokens[:8], [0, 1])["tokens"] == 8
        b._exist = lambda ks: [0] * len(ks)  # B looked before A's chunks were in
        removed = []
        real = b.store

        class Spy:
            def __getattr__(self, name):
                return getattr(real, name)

            def batch_remove(self, ks, *args):
                removed.extend(ks)
                return real.batch_remove(ks, *args)

        b.store = Spy()
        try:
            rb = b.put(tokens, [0, 1, 2, 3])
        finally:
            b.store = real
            del b._exist
        assert rb["tokens"] == 0 and rb["stored"] == 0 and "chunk 0" in rb["stopped"], rb
        assert not set(removed) & set(keys[:2]), "B asked to remove A's chunks"
        assert list(a.store.batch_is_exist(keys)) == [1, 1, 0, 0], "B's unreachable chunks 2-3 are still stored"
        res = b.load(tokens, [4, 5, 6, 7])  # A's prefix, intact
        assert res["tokens"] == 8 and res["stopped"] == "end of stored prefix", res
        want = P.token_rows(CASE, a_arrays)
        _same_rows(CASE, [r[16:24] for r in _rows(CASE, b_caches)], [w[0:8] for w in want], "A's prefix")


# ------------------------------------------------------------------------------------------------ item 5
def _fuzz_messages():
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                        st.floats(allow_nan=False), st.text(max_size=20))
    values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8),
                                                                                                c, max_size=4)),
                          max_leaves=12)
    good = {"type": "offer", "protocol": disagg.PROTOCOL, "session": "s", "seq": 0, "request_id": "r",
            "layout": {"kv_format": "SEPARATE_KV"}, "model_id": None, "num_tokens": 4, "nbytes": 0,
            "chunk_tokens": 2, "chunks": [2, 2], "src_block_ids": [0], "src_block_size": 4, "checksum_algo": "crc32"}

    def mutate(args):
        kind, field, value = args
        msg = dict(good) if kind == "offer" else {"type": kind, "session": "s", "seq": 1, "nonce": "n", "index": 0,
                                                  "checksum": 1, "checksums": [1], "reason": "x"}
        if field == "(drop)":
            msg.pop("session", None)
        else:
            msg[field] = value
        return json.dumps(msg).encode()

    fields = st.sampled_from(["type", "session", "layout", "num_tokens", "nbytes", "chunks", "chunk_tokens",
                              "src_block_ids", "request_id", "model_id", "protocol", "index", "checksum",
                              "checksums", "seq", "nonce", "(drop)"])
    mutated = st.tuples(st.sampled_from(["offer", "chunk", "done", "abort", "loaded", "nonsense"]), fields,
                        values).map(mutate)
    return st.one_of(mutated, values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64))


def test_fuzzed_control_messages_are_answered_and_never_end_a_receive_with_a_raw_exception():
    """Hypothesis (bounded: 150 messages over loopback) sends malformed control messages to a receiver
    that is in receive(): offers whose layout is a string or a list, sessions that are lists, huge ints,
    missing fields, raw bytes. The old receiver ended the receive with a raw ValueError / TypeError and
    gave no reply to a bad layout (the sender waited out its timeout). Every message must be answered
    (except an abort, which has no answer) and a receive may only end with a documented DisaggError;
    afterwards a real handoff still works, bit for bit."""
    zmq = pytest.importorskip("zmq")
    from hypothesis import HealthCheck, given, settings

    fmt, layout = _endpoint_args(CASE)
    src_arrays, src = _caches(CASE, 8, 4, 1)
    dst_arrays, dst = _caches(CASE, 8, 4, 2)
    rx = disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16)
    loop = _Receiving(rx, [0, 1, 2, 3], timeout=3)
    ctx = zmq.Context()
    unanswered = []
    try:
        @settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(_fuzz_messages())
        def one(raw):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"tcp://{rx.address}")
            try:
                sock.send(raw)
                try:
                    is_abort = json.loads(raw).get("type") == "abort"
                except Exception:  # noqa: BLE001
                    is_abort = False
                if not is_abort and not sock.poll(5000):
                    unanswered.append(raw[:200])
                if sock.poll(0):
                    reply = json.loads(sock.recv())
                    assert reply.get("type") in ("reject", "error"), reply
            finally:
                sock.close()

        one()
        raw_errors = [e for k, e in loop.outcomes if k == "error" and not isinstance(e, disagg.DisaggError)]
        assert not raw_errors, raw_errors[:3]
        assert not unanswered, unanswered[:5]
        assert rx.server.refused > 0
        loop.join()
        # still serves a real handoff
        with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3) as tx:
            done = _Receiving(rx, [4, 5, 6], timeout=5)
            tx.send(rx.address, [0, 1, 2], 10, timeout=30)
            for _ in range(300):
                if done.outcomes:
                    break
                time.sleep(0.05)
            done.join()
        assert done.outcomes[0][0] == "ok", done.outcomes
    finally:
        loop.stop = True
        ctx.term()
        rx.close()
    got = _rows(CASE, dst)
    want = [r.copy() for r in P.token_rows(CASE, dst_arrays)]
    srcr = P.token_rows(CASE, src_arrays)
    for w, s_ in zip(want, srcr):
        w[16:26] = s_[0:10]
    _same_rows(CASE, got, want, "receiver after the fuzzing and one real handoff")


def test_message_schema_rejects_each_field_kind():
    """The schema check itself, field by field (what the fuzz test relies on)."""
    ok = {"type": "chunk", "session": "s", "seq": 2, "nonce": "n", "index": 3, "checksum": 2**64 - 1}
    assert _channel.message_problem(ok, _channel.TO_RECEIVER) is None
    for field, bad in (("index", -1), ("index", True), ("index", 1.0), ("checksum", 2**64), ("session", ["s"]),
                       ("session", "x" * 5000), ("type", "accept"), ("seq", -1), ("seq", None), ("nonce", None)):
        msg = dict(ok, **{field: bad})
        assert _channel.message_problem(msg, _channel.TO_RECEIVER), (field, bad)
    assert "layout" in _channel.message_problem({"type": "offer", "session": "s", "seq": 0, "protocol": "p",
                                                 "layout": "x", "num_tokens": 1, "nbytes": 1, "chunk_tokens": 1,
                                                 "checksum_algo": "crc32"}, _channel.TO_RECEIVER)


# ------------------------------------------------------------------------------------------------ item 7
def test_receiver_on_a_busy_port_raises_and_releases_everything():
    """The old KVReceiver raised a raw zmq.error.ZMQError and kept a transfer engine (threads, an fd,
    ~6 MB) until garbage collection. Now DisaggError naming the port, with nothing left behind (counted
    with the garbage collector off)."""
    fmt, layout = _endpoint_args(CASE)
    _, dst = _caches(CASE, 8, 4, 2)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=4).close()  # warm: Mooncake's one-time state
        gc.collect()
        gc.disable()
        try:
            threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
            tasks = len(os.listdir("/proc/self/task"))
            with pytest.raises(disagg.DisaggError, match=f"cannot listen on port {port} of '127.0.0.1'"):
                disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=4, port=port)
            assert threading.active_count() == threads
            assert len(os.listdir("/proc/self/fd")) == fds
            assert len(os.listdir("/proc/self/task")) == tasks
        finally:
            gc.enable()


# ------------------------------------------------------------------------------------------------ item 9
@pytest.mark.parametrize("cls", ["KVSender", "KVReceiver"])
def test_non_contiguous_cache_is_refused_at_construction(cls):
    """The old classes took a transposed (non-contiguous) cache and failed only at the first send."""
    from mindspore import Tensor

    fmt, layout = _endpoint_args(CASE)
    arrays = P.make_arrays(CASE, 8, 4, 3)
    caches = P.to_tensors(arrays)
    k = Tensor(np.ascontiguousarray(arrays[1][0].transpose(0, 2, 1, 3))).transpose(0, 2, 1, 3)  # [nb, bs, H, D]
    assert not k.is_contiguous() and tuple(k.shape) == arrays[1][0].shape
    caches[1] = (k, caches[1][1])
    kw = {"max_tokens": 4} if cls == "KVReceiver" else {}
    with pytest.raises(ValueError, match=r"argument 'kv_caches': expected contiguous tensors .* at flat index 2"):
        getattr(disagg, cls)(caches, fmt, cache_layout=layout, **kw)


# ------------------------------------------------------------------------------------------------ item 11
_LISTEN_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ.setdefault("MC_LOG_LEVEL", "ERROR")
import _disagg_peer as P
from ms_kvcache import disagg
from ms_kvcache.disagg import _net
fmt, _, layout = P.CASES["separate_bf16_bsnd"][:3]
caches = P.to_tensors(P.make_arrays("separate_bf16_bsnd", 8, 4, 1))
m = disagg.MooncakeMaster().start()
rx = disagg.KVReceiver(caches, fmt, cache_layout=layout, max_tokens=8)
tx = disagg.KVSender(caches, fmt, cache_layout=layout)
st = disagg.KVPrefixStore(caches, fmt, master_address=m.address, model_id="x", chunk_tokens=4,
                          global_segment_size=16 << 20, local_buffer_size=16 << 20)
print(json.dumps({"self": _net.listening_sockets(), "master": _net.listening_sockets(m.proc.pid)}))
st.close(); tx.close(); rx.close(); m.stop()
"""


def test_every_socket_listens_on_the_callers_host_only():
    """A receiver, a sender, a store client and a master with the default hostname: every listening socket
    of the process (/proc/net/tcp{,6}) and of the master is on 127.0.0.1. The old code left Mooncake's
    handshake and TCP-transport listeners (4 per process with a store client) on 0.0.0.0 / ::."""
    p = subprocess.run([sys.executable, "-c", _LISTEN_CHILD, os.path.dirname(os.path.abspath(__file__))],
                       capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(got["self"]) >= 5 and len(got["master"]) >= 1, got  # control + 2 engines x 2, master rpc
    assert {h for h, _ in got["self"] + got["master"]} == {"127.0.0.1"}, got


@pytest.mark.parametrize("host", ["::1", "[::1]", "::", "no-such-host.invalid"])
def test_an_ipv6_hostname_is_refused_naming_the_argument(host):
    """The control channel and Mooncake's TCP transport listen on IPv4 only. A KVReceiver on '::1' (or on a name
    that does not resolve) failed in zmq's bind with 'cannot listen on a free port ...; another process may
    hold it', a KVSender in the transfer engine's listener check; now each says at once what 'hostname' must be."""
    fmt, layout = _endpoint_args(CASE)
    _, caches = _caches(CASE, 8, 4, 1)
    for make in (lambda: disagg.KVReceiver(caches, fmt, cache_layout=layout, max_tokens=8, hostname=host),
                 lambda: disagg.KVSender(caches, fmt, cache_layout=layout, hostname=host),
                 lambda: disagg.KVPrefixStore(caches, fmt, cache_layout=layout, master_address="127.0.0.1:1",
                                              model_id="m", hostname=host, setup_timeout=0.1)):
        with pytest.raises(ValueError, match="argument 'hostname': expected an IPv4 address or a (host )?name"):
            make()


def test_bind_rewrite_of_wildcard_addresses():
    import ipaddress
    import struct

    v4 = struct.pack("<H", socket.AF_INET) + struct.pack(">H", 80) + b"\0" * 4 + b"\0" * 8
    new = _net._rewrite(_buf(v4), len(v4), "127.0.0.1")
    assert new[4:8] == bytes([127, 0, 0, 1]) and new[2:4] == v4[2:4]
    v6 = struct.pack("<H", socket.AF_INET6) + struct.pack(">H", 80) + b"\0" * 4 + b"\0" * 16 + b"\0" * 4
    new = _net._rewrite(_buf(v6), len(v6), "127.0.0.1")
    assert ipaddress.IPv6Address(new[8:24]).ipv4_mapped == ipaddress.IPv4Address("127.0.0.1")
    specific = struct.pack("<H", socket.AF_INET) + b"\0\x50" + bytes([10, 0, 0, 1]) + b"\0" * 8
    assert _net._rewrite(_buf(specific), len(specific), "127.0.0.1") is None  # only wildcards change


def _buf(raw):
    import ctypes

    b = ctypes.create_string_buffer(raw, len(raw))
    _buf.keep = b
    return ctypes.addressof(b)


@pytest.mark.parametrize("who", ["sender without", "sender with a wrong", "receiver without"])
def test_a_peer_without_the_token_is_refused_before_any_kv_moves(who):
    """Optional shared token: a sender without it (or with another one) fails the control channel's
    handshake with a receiver that has one (CURVE keys derived from the token), and so does a sender with
    one at a receiver without; the sender raises AuthenticationFailed, nothing moves, the receiver's caches
    keep their bits, and the receiver then serves an authenticated sender."""
    fmt, layout = _endpoint_args(CASE)
    _, src = _caches(CASE, 8, 4, 1)
    dst_arrays, dst = _caches(CASE, 8, 4, 2)
    rx_token = None if who == "receiver without" else "s3cret"
    tx_token = {"sender without": None, "sender with a wrong": "guess", "receiver without": "s3cret"}[who]
    rx = disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16, token=rx_token)
    loop = _Receiving(rx, [4, 5, 6], timeout=5)
    try:
        with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3, token=tx_token) as tx:
            with pytest.raises(disagg.AuthenticationFailed, match="handshake"):
                tx.send(rx.address, [0, 1, 2], 10, timeout=10)
        time.sleep(0.3)
        _same_rows(CASE, _rows(CASE, dst), P.token_rows(CASE, dst_arrays), "receiver after the refused sender")
        if rx_token is not None:
            assert not loop.outcomes  # the receive goes on
            with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3, token=rx_token) as tx:
                tx.send(rx.address, [0, 1, 2], 10, timeout=20)
            for _ in range(200):
                if loop.outcomes:
                    break
                time.sleep(0.05)
            assert loop.outcomes and loop.outcomes[0][0] == "ok", loop.outcomes
    finally:
        loop.join()
        rx.close()


# ---------------------------------------------------------------------------------------------- control-channel bounds
def _dealer(ctx, address, curve_key=None):
    import zmq

    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if curve_key is not None:
        s.curve_serverkey = curve_key
        s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()
    s.connect("tcp://" + address)
    return s


#: the documented bounds (docs/disagg.md, "Hostile input"), not read from the code under test: a frame's
#: bytes, messages queued per connection, commas of a message
_MAX_FRAME, _RCV_QUEUE, _MAX_ITEMS = 4 << 20, 4, 1 << 19


def test_the_documented_bounds_are_the_codes():
    """The constants the channel uses are the documented ones, and a message this end would send beyond
    them is a DisaggError here (the receiver would refuse it unread: the sender would only time out)."""
    assert (_channel.MAX_MESSAGE, _channel.RCV_QUEUE, _channel.MAX_ITEMS) == (_MAX_FRAME, _RCV_QUEUE, _MAX_ITEMS)
    done = {"type": "done", "session": "s", "seq": 1, "nonce": "n"}
    assert _channel._decode(_channel._encode(dict(done, checksums=[7] * (_MAX_ITEMS - 8))), _channel.TO_RECEIVER)
    with pytest.raises(disagg.DisaggError, match="commas exceeds"):
        _channel._encode(dict(done, checksums=[7] * (_MAX_ITEMS + 2)))
    with pytest.raises(disagg.DisaggError, match="objects and lists"):
        _channel._encode(dict(done, checksums=[], x=[[]] * 9000))


def test_a_frame_above_the_bound_drops_the_connection_unread():
    """A frame of 4 MiB + 1 byte (MAXMSGSIZE) makes ZeroMQ drop that connection: the receiver never reads
    it and sends no answer (before, frames up to 16 MiB were read, parsed and answered); a frame of
    exactly 4 MiB is read and refused as malformed."""
    zmq = pytest.importorskip("zmq")
    ctx = zmq.Context()
    srv = _channel.ControlServer()
    try:
        big, edge = _dealer(ctx, srv.address), _dealer(ctx, srv.address)
        big.send(b"x" * (_MAX_FRAME + 1))
        assert srv.recv(time.monotonic() + 1.5) is None
        assert srv.refused == 0 and not big.poll(300), "the oversized frame was read and answered"
        edge.send(b"x" * _MAX_FRAME)
        assert srv.recv(time.monotonic() + 1.5) is None and srv.refused == 1
        assert edge.poll(3000) and json.loads(edge.recv())["type"] == "error"
    finally:
        srv.close()
        ctx.destroy(0)


def test_a_many_frame_message_is_dropped_frame_by_frame_not_assembled():
    """A message of 64 frames of 256 KiB (16 MiB) is read one frame at a time and dropped as it is read:
    Python holds at most one frame of it (tracemalloc peak under 2 MiB; before, recv_multipart built all
    16 MiB as bytes objects before looking at the count). The sender is told it sent 64 frames."""
    import tracemalloc

    zmq = pytest.importorskip("zmq")
    ctx = zmq.Context()
    srv = _channel.ControlServer()
    try:
        s = _dealer(ctx, srv.address)
        frame = b"y" * (256 << 10)
        for i in range(64):
            s.send(frame, zmq.SNDMORE if i < 63 else 0, copy=False)
        assert srv.sock.poll(5000), "the message did not arrive"
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            assert srv.recv(time.monotonic() + 1.0) is None
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert srv.refused == 1
        assert peak < 2 << 20, f"reading the message took {peak >> 20} MiB of Python memory"
        assert s.poll(3000)
        reply = json.loads(s.recv())
        assert reply["type"] == "error" and "64 frames" in reply["reason"], reply
    finally:
        srv.close()
        ctx.destroy(0)


@pytest.mark.parametrize("client", ["plain", "curve with a guessed key", "curve with another token"])
def test_a_client_without_the_token_gets_no_message_queued(client):
    """With a token the control socket is a CURVE server: a client without the token (plain ZeroMQ, CURVE
    with a guessed server key, or the key of another token) never gets a message to the receiver: nothing
    is queued, read or answered (before, every message was queued, read, parsed and then refused for its
    signature)."""
    zmq = pytest.importorskip("zmq")
    if not zmq.has("curve"):
        pytest.skip("pyzmq without CURVE")
    ctx = zmq.Context()
    srv = _channel.ControlServer(token=b"s3cret")
    try:
        key = {"plain": None, "curve with a guessed key": zmq.curve_keypair()[0],
               "curve with another token": _channel.curve_server_keys(b"guess")[0]
               if hasattr(_channel, "curve_server_keys") else zmq.curve_keypair()[0]}[client]
        s = _dealer(ctx, srv.address, key)
        s.send(json.dumps({"type": "offer", "session": "s", "seq": 0}).encode())
        assert srv.recv(time.monotonic() + 1.5) is None
        assert srv.refused == 0 and not srv.pending(), "the message reached the receiver"
        assert not s.poll(300)
    finally:
        srv.close()
        ctx.destroy(0)


#: a hostile peer speaking raw ZeroMQ (no ms_kvcache): ADDRESS MODE COUNT SIZE [curve]; prints "sent" once its
#: messages are queued (or ZeroMQ has stopped taking them: a receiver that drops the connection at the handshake
#: leaves the DEALER without a peer, where a send would block for ever), then holds its connection until a line
#: on stdin
_FLOOD = r"""
import sys, zmq
addr, mode, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.SNDHWM, 0)
s.setsockopt(zmq.SNDTIMEO, 3000)
if len(sys.argv) > 5:  # CURVE with a guessed server key
    s.curve_serverkey = zmq.curve_keypair()[0]
    s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()
s.connect("tcp://" + addr)
frame = b"x" * size
if mode == "json":  # a JSON list of ints as long as the channel parses: each int a Python object
    frame = ("[" + ",".join(["-123456"] * (size // 8 - 1)) + "]").encode()
try:
    for i in range(n):
        s.send(frame, (zmq.SNDMORE if mode == "frames" and i < n - 1 else 0), copy=False)
except zmq.Again:
    pass
print("sent", flush=True)
sys.stdin.readline()
"""


def _vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) << 10
    raise AssertionError(key)


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_a_hostile_peer_cannot_make_the_receiver_hold_more_than_the_documented_bound(tmp_path, token):
    """Raw ZeroMQ peers flood an idle receiver's control port: 40 frames of 15 MB in one message, 40
    messages of 15 MB, 40 messages just under MAX_MESSAGE, 40 JSON lists of as many ints as a message may
    hold; with a token also 40 frames under MAX_MESSAGE in one message, and all of it again over CURVE
    with a guessed key. The old receiver queued all of it (its peak RSS grew by 1.5 GB: MAXMSGSIZE bounds a
    frame, the default RCVHWM let 1000 messages wait, the HMAC was checked only after ZeroMQ had queued
    them). The receiver's peak RSS may now grow by at most the documented bound: without a token
    (RCV_QUEUE + 1) * MAX_MESSAGE per connection that can send (a frame above MAX_MESSAGE drops the
    connection), and while a message is read ~8 * MAX_MESSAGE more; with a token nothing (a peer without
    it is dropped at the handshake). While the floods hold their connections, a real handoff to that
    receiver succeeds, bit for bit."""
    M = _MAX_FRAME
    peer = P.Peer(tmp_path)
    floods = []
    try:
        peer.call(cmd="caches", case=CASE, num_blocks=8, block_size=4, seed=2)
        addr = peer.call(cmd="receiver", max_tokens=16, token=token)["address"]
        pid = peer.proc.pid
        attacks = [("frames", 40, 15 << 20), ("messages", 40, 15 << 20), ("messages", 40, M - 64),
                   ("json", 40, 8 * _MAX_ITEMS)]
        if token is not None:
            attacks += [("frames", 40, M - 64)]
            attacks += [a + ("curve",) for a in attacks]
        # without a token, 40 frames under MAX_MESSAGE in one message are the documented exception: ZeroMQ
        # bounds a frame's size, not the frames of a message, and holds a multipart message whole until read
        can_send = 2 if token is None else 0  # connections that can queue messages: the last two
        bound = can_send * (_RCV_QUEUE + 1) * M + (24 << 20)  # + allocator noise
        time.sleep(0.5)
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # peak RSS := RSS now
        base = _vm(pid, "VmRSS")
        for a in attacks:
            floods.append(subprocess.Popen([sys.executable, "-c", _FLOOD, addr, *map(str, a)], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True))
        for f in floods:
            assert f.stdout.readline().strip() == "sent"
        time.sleep(2.0)  # ZeroMQ moves what it will take
        idle = _vm(pid, "VmHWM") - base
        assert idle <= bound, f"idle receiver: peak RSS +{idle >> 20} MiB, bound {bound >> 20} MiB"
        # a real handoff while the floods hold their connections (without a token the receiver reads and
        # refuses the queued junk, and ZeroMQ refills the queue from the flood, as it serves)
        fmt, layout = _endpoint_args(CASE)
        src_arrays, src = _caches(CASE, 8, 4, 1)
        peer.start(cmd="receive", block_ids=[4, 5, 6], timeout=60)
        with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3, token=token) as tx:
            sent = tx.send(addr, [0, 1, 2], 10, timeout=60)
        got = peer.wait(60)
        assert got["ok"] and got["result"]["num_tokens"] == 10 and sent["num_tokens"] == 10, got
        peak = _vm(pid, "VmHWM") - base
        reading = 8 * M if can_send else 0  # the message being read: its bytes, its text, its parsed values
        assert peak <= bound + reading, (f"during the handoff: peak RSS +{peak >> 20} MiB, bound "
                                         f"{(bound + reading) >> 20} MiB")
        peer.call(cmd="dump", path=str(tmp_path / "rx.npz"))
        dst_arrays = P.make_arrays(CASE, 8, 4, 2)
        with np.load(tmp_path / "rx.npz") as z:
            flat = iter([z[f"arr_{i}"] for i in range(len(z.files))])
            got_arrays = [tuple(next(flat).view(a.dtype) for a in layer) for layer in dst_arrays]
        want = [r.copy() for r in P.token_rows(CASE, dst_arrays)]
        for w, s_ in zip(want, P.token_rows(CASE, src_arrays)):
            w[16:26] = s_[0:10]  # blocks 4, 5, 6 of 4 tokens: slots 16..25
        _same_rows(CASE, P.token_rows(CASE, got_arrays), want, "receiver after a handoff under a flood")
    finally:
        for f in floods:
            f.kill()
            f.wait(10)
        peer.close()


# ------------------------------------------------------------------------------------------------ replays
def _recording(monkeypatch):
    """Every control message this process signs and sends, as ``(type, bytes on the wire)``, in order."""
    sent = []
    real = _channel._encode

    def encode(msg, token=None):
        data = real(msg, token)
        sent.append((msg.get("type"), data))
        return data

    monkeypatch.setattr(_channel, "_encode", encode)
    return sent


def _raw_dealer(ctx, address, token):
    """A raw DEALER connected to ``address``; with ``token`` it passes the handshake (it holds the token)."""
    import zmq

    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    keys = getattr(_channel, "curve_server_keys", None)
    if keys is not None:
        s.curve_serverkey = keys(token.encode())[0]
        s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()
    s.connect("tcp://" + address)
    return s


def _receiving_once(rx, block_ids, timeout):
    out = {}

    def run():
        try:
            out["result"] = rx.receive(block_ids, timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            out["exc"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()

    def join():
        th.join(timeout + 15)
        assert not th.is_alive()
        return out

    return join


def test_a_replayed_session_loads_nothing(monkeypatch):
    """A handoff's messages (offer, chunks, done; signed with the token) are captured and replayed into the
    same receiver once it has forgotten that session (MAX_DONE_SESSIONS later; 0 here) while its buffer
    still holds that session's bytes. The old receiver accepted the offer and the replayed chunk messages,
    whose checksums matched the stale buffer, and receive() loaded the old KV into the blocks it was given.
    Now every accept carries a fresh nonce that the replayed messages lack: they are refused, receive()
    ends in HandoffTimeout and the caches keep their bits."""
    zmq = pytest.importorskip("zmq")
    from ms_kvcache.disagg import handoff

    token = "s3cret"
    fmt, layout = _endpoint_args(CASE)
    _, src = _caches(CASE, 8, 4, 1)
    _, dst = _caches(CASE, 8, 4, 2)
    monkeypatch.setattr(handoff, "MAX_DONE_SESSIONS", 0)
    sent = _recording(monkeypatch)
    ctx = zmq.Context()
    rx = disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16, token=token)
    try:
        with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3, token=token) as tx:
            join = _receiving_once(rx, [0, 1, 2], 20)
            tx.send(rx.address, [0, 1, 2], 10, timeout=20)
            assert "result" in join(), "the real handoff failed"
        after = _rows(CASE, dst)
        captured = [(k, d) for k, d in sent if k in ("offer", "chunk", "done")]
        assert [k for k, _ in captured] == ["offer", "chunk", "chunk", "chunk", "chunk", "done"], captured
        replayer = _raw_dealer(ctx, rx.address, token)
        join = _receiving_once(rx, [4, 5, 6], 3)
        replayer.send(captured[0][1])
        assert replayer.poll(10000), "no answer to the replayed offer"
        assert json.loads(replayer.recv())["type"] == "accept"  # a session it has forgotten: accepted
        for _, data in captured[1:]:
            replayer.send(data)
        out = join()
        assert isinstance(out.get("exc"), disagg.HandoffTimeout), out
        _same_rows(CASE, _rows(CASE, dst), after, "receiver after a replayed session")
    finally:
        ctx.destroy(0)
        rx.close()


def test_a_message_replayed_into_its_own_session_is_refused(monkeypatch):
    """During a handoff, a copy of the sender's first signed chunk message is sent again from another
    connection. The old receiver took it as chunk 0 repeated and failed the session (DisaggError on both
    sides). Now a session's messages must come from its offer's connection with a seq above the last one:
    the copy is refused and the handoff completes, bit for bit."""
    zmq = pytest.importorskip("zmq")
    token = "s3cret"
    fmt, layout = _endpoint_args(CASE)
    src_arrays, src = _caches(CASE, 8, 4, 1)
    dst_arrays, dst = _caches(CASE, 8, 4, 2)
    sent = _recording(monkeypatch)
    ctx = zmq.Context()
    rx = disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16, token=token)
    replayer = _raw_dealer(ctx, rx.address, token)

    def on(event, info):
        if event == "chunk" and info["index"] == 0:
            replayer.send(next(d for k, d in sent if k == "chunk"))

    try:
        refused = rx.server.refused
        with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3, token=token) as tx:
            join = _receiving_once(rx, [4, 5, 6], 20)
            tx.send(rx.address, [0, 1, 2], 10, timeout=20, progress=on)
            out = join()
        assert "result" in out, out
        assert rx.server.refused == refused + 1
    finally:
        ctx.destroy(0)
        rx.close()
    want = [r.copy() for r in P.token_rows(CASE, dst_arrays)]
    for w, s_ in zip(want, P.token_rows(CASE, src_arrays)):
        w[16:26] = s_[0:10]
    _same_rows(CASE, _rows(CASE, dst), want, "receiver after a handoff with a replayed chunk message")


def test_an_accept_replayed_to_another_session_is_dropped(monkeypatch):
    """A receiver's signed accept captured from one handoff is sent as the answer to a sender's next offer
    (by a peer that holds the token, so it passes the handshake). The old sender did not check the
    accept's session: it wrote its KV to the address in it and waited for a 'loaded'. Now the sender drops
    an answer of another session and ends in HandoffTimeout 'did not answer'; it never saw an accept."""
    zmq = pytest.importorskip("zmq")
    token = "s3cret"
    fmt, layout = _endpoint_args(CASE)
    _, src = _caches(CASE, 8, 4, 1)
    _, dst = _caches(CASE, 8, 4, 2)
    sent = _recording(monkeypatch)
    ctx = zmq.Context()
    fake = ctx.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    keys = getattr(_channel, "curve_server_keys", None)
    if keys is not None:
        fake.curve_publickey, fake.curve_secretkey = keys(token.encode())
        fake.curve_server = True
    port = fake.bind_to_random_port("tcp://127.0.0.1")
    events = []
    with disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16, token=token) as rx, \
            disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3, token=token) as tx:
        try:
            join = _receiving_once(rx, [0, 1, 2], 20)
            tx.send(rx.address, [0, 1, 2], 10, timeout=20)
            assert "result" in join()
            accept = next(d for k, d in sent if k == "accept")

            def answer():
                if fake.poll(10000):
                    who = fake.recv_multipart()[0]
                    fake.send_multipart([who, accept])

            th = threading.Thread(target=answer, daemon=True)
            th.start()
            with pytest.raises(disagg.HandoffTimeout, match="did not answer"):
                tx.send(f"127.0.0.1:{port}", [0, 1, 2], 10, timeout=2, progress=lambda e, i: events.append(e))
            th.join(15)
            assert not events, events
        finally:
            ctx.destroy(0)


def test_queued_offers_are_bounded_in_bytes(monkeypatch):
    """Offers wait (as the bytes that arrived) while receive() looks for another request: at most
    MAX_BACKLOG of them and MAX_BACKLOG_BYTES (1 MiB here) of them; one beyond is rejected as busy. The
    old receiver counted offers only: 64 offers of up to a message each (and their parsed lists) stayed."""
    zmq = pytest.importorskip("zmq")
    from ms_kvcache.disagg import handoff

    monkeypatch.setattr(handoff, "MAX_BACKLOG_BYTES", 1 << 20, raising=False)
    fmt, layout = _endpoint_args(CASE)
    _, dst = _caches(CASE, 8, 4, 2)
    ctx = zmq.Context()
    with disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16) as rx:
        try:
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect("tcp://" + rx.address)
            offer = {"type": "offer", "protocol": disagg.PROTOCOL, "seq": 0, "request_id": "queued",
                     "layout": rx.layout.describe(), "model_id": None, "num_tokens": 4,
                     "nbytes": 4 * rx.layout.bytes_per_token, "chunk_tokens": 4,
                     "src_block_ids": list(range(100000, 200000)), "src_block_size": 4, "checksum_algo": "crc32"}
            sizes = []
            for session in ("s1", "s2"):
                raw = json.dumps(dict(offer, session=session)).encode()
                sizes.append(len(raw))
                s.send(raw)
            assert sizes[0] < 1 << 20 < sum(sizes)
            with pytest.raises(disagg.HandoffTimeout, match="no offer for request 'other'"):
                rx.receive([0, 1], request_id="other", timeout=1.5)
            assert s.poll(5000)
            reply = json.loads(s.recv())
            assert reply["type"] == "reject" and reply["session"] == "s2" and "busy" in reply["reason"], reply
            assert not s.poll(200)  # s1 waits, unanswered
            assert [e[1] for e in rx._backlog] == ["s1"] and rx._backlog_bytes == sizes[0]
        finally:
            ctx.destroy(0)


def test_an_abort_withdraws_only_an_offer_of_its_own_connection():
    """A queued offer is withdrawn by an abort of its session sent later on the same connection; an abort
    naming that session from another connection (a peer that read or guessed the session id) leaves it
    queued, and the offer is then served (accepted, on its own connection)."""
    zmq = pytest.importorskip("zmq")
    fmt, layout = _endpoint_args(CASE)
    _, dst = _caches(CASE, 8, 4, 2)
    ctx = zmq.Context()
    with disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16) as rx:
        try:
            owner, other = _dealer(ctx, rx.address), _dealer(ctx, rx.address)
            offer = {"type": "offer", "protocol": disagg.PROTOCOL, "session": "s1", "seq": 0, "request_id": "r1",
                     "layout": rx.layout.describe(), "model_id": None, "num_tokens": 4,
                     "nbytes": 4 * rx.layout.bytes_per_token, "chunk_tokens": 4, "src_block_ids": [0],
                     "src_block_size": 4, "checksum_algo": disagg.CHECKSUM_ALGO}
            owner.send(json.dumps(offer).encode())
            with pytest.raises(disagg.HandoffTimeout, match="no offer for request 'other'"):
                rx.receive([0, 1], request_id="other", timeout=1.0)
            other.send(json.dumps({"type": "abort", "session": "s1", "seq": 9, "withdrawn": True}).encode())
            with pytest.raises(disagg.HandoffTimeout, match="no offer for request 'other'"):
                rx.receive([0, 1], request_id="other", timeout=1.0)
            assert [e[1] for e in rx._backlog] == ["s1"], "another connection's abort withdrew the offer"
            owner.send(json.dumps({"type": "abort", "session": "s1", "seq": 1, "withdrawn": True}).encode())
            with pytest.raises(disagg.HandoffTimeout, match="no offer for request 'other'"):
                rx.receive([0, 1], request_id="other", timeout=1.0)
            assert rx._backlog == [] and rx._backlog_bytes == 0
        finally:
            ctx.destroy(0)


def test_a_token_needs_curve_and_too_many_chunks_are_refused_before_sending(monkeypatch):
    """A pyzmq without CURVE cannot authenticate the handshake: token= is refused when the sender /
    receiver is made (MooncakeUnavailable naming CURVE), not at the first send. A send whose chunks would
    not fit one 'done' message (MAX_CHUNKS; 2 here) is a ValueError before anything moves."""
    zmq = pytest.importorskip("zmq")
    from ms_kvcache.disagg import handoff

    fmt, layout = _endpoint_args(CASE)
    _, caches = _caches(CASE, 8, 4, 2)
    real = zmq.has
    monkeypatch.setattr(zmq, "has", lambda what: what != "curve" and real(what))
    for make in (lambda: disagg.KVReceiver(caches, fmt, cache_layout=layout, max_tokens=8, token="t"),
                 lambda: disagg.KVSender(caches, fmt, cache_layout=layout, token="t")):
        with pytest.raises(disagg.MooncakeUnavailable, match="'token' needs pyzmq with CURVE"):
            make()
    monkeypatch.setattr(zmq, "has", real)
    monkeypatch.setattr(handoff, "MAX_CHUNKS", 2, raising=False)
    with disagg.KVSender(caches, fmt, cache_layout=layout, chunk_tokens=3) as tx:
        with pytest.raises(ValueError, match="argument 'num_tokens': 10 tokens make 4 chunks"):
            tx.send("127.0.0.1:1", [0, 1, 2], 10, timeout=5)


# ------------------------------------------------------------------------------------------------ the soak
def test_short_soak_of_handoffs_faults_and_store(tmp_path):
    """scripts/soak_disagg.py, short: random sizes and layouts, faults at random chunks, a receiver killed
    mid-transfer, store puts and loads. Every load verified, memory within 2x the largest payload, no fd or
    thread left behind. (The 200-handoff run and its figures: docs/disagg.md.)"""
    out = tmp_path / "soak.json"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "soak_disagg.py"), "--handoffs", "30",
                        "--max-tokens", "2048", "--layout-every", "3", "--warmup", "12", "--kill-every", "10",
                        "--seed", "3", "--json", str(out)],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    r = json.loads(out.read_text())
    assert r["handoffs"] == 30 and r["corrupted_loads"] == 0, r
    assert r["faults_injected"] >= 4 and r["faults_survived"] == r["faults_injected"], r
    assert r["store_loads"] >= 2 and r["kills"] >= 1, r
    assert r["rss_drift"] <= 2 * r["largest_payload"], r
    # fds: Mooncake opens up to 4 connections per peer as the load asks for them, and keeps those to a
    # receiver that died until the sender renews its engine (KVSender.MAX_PEERS); without the renewal every
    # killed receiver left them in each of the 3 senders
    assert r["leaked_fds"] <= 16 and r["leaked_threads"] <= 1, r
