"""ms_kvcache.disagg: KV handoff between two processes through the Mooncake transfer engine, and prefix
sharing through Mooncake Store.

The other process is ``tests/_disagg_peer.py`` (a JSON-lines server); both processes build their caches
from the same seeded function, so the test knows the expected bits of either side. Every handoff goes to
other block ids (and, for SEPARATE_KV, another block size) and is compared bit for bit with the source
rows, and every other cache row of the receiver must keep its bits. Failure paths: no receiver, a
receiver or sender that dies mid-transfer, layout / size / block mismatches, a corrupted payload,
timeouts: each must raise its clear error and leave the receiver's caches untouched.

Skipped (with the reason) only when Mooncake cannot be imported.
"""
import json
import os
import select
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ms_kvcache import disagg

_OK, _WHY = disagg.mooncake_available()
if not _OK:
    pytest.skip(f"Mooncake cannot be imported: {_WHY}", allow_module_level=True)

sys.path.insert(0, os.path.dirname(__file__))
import _disagg_peer as P  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_disagg_peer.py")


Peer = P.Peer  # the other process (tests/_disagg_peer.py)


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    p = Peer(tmp_path_factory.mktemp("disagg"))
    yield p
    p.close()


@pytest.fixture(scope="module")
def master():
    with disagg.MooncakeMaster(timeout=20) as m:
        yield m


def _caches(case, num_blocks, block_size, seed):
    arrays = P.make_arrays(case, num_blocks, block_size, seed)
    return arrays, P.to_tensors(arrays)


def _bits(tensors):
    return P.from_tensors(tensors)


def _expected(case, dst_initial, src, src_slots, dst_slots):
    """Token-major rows of the receiver after the handoff: its initial rows, rows at dst_slots replaced."""
    out = []
    for d, s in zip(P.token_rows(case, dst_initial), P.token_rows(case, src)):
        e = d.copy()
        e[dst_slots] = s[src_slots]
        out.append(e)
    return out


def _assert_rows(case, got_arrays, expected_rows, what):
    got = P.token_rows(case, got_arrays)
    assert len(got) == len(expected_rows)
    for i, (g, e) in enumerate(zip(got, expected_rows)):
        bad = np.flatnonzero((g != e).any(axis=1))
        assert bad.size == 0, f"{what}: plane {i}: {bad.size} token rows differ, first at slot {bad[:5]}"


def _load_dump(path, like):
    data = np.load(path)
    flat = [data[f"arr_{i}"] for i in range(len(data.files))]
    out, k = [], 0
    for layer in like:
        if isinstance(layer, tuple):
            out.append(tuple(flat[k + j].view(a.dtype) for j, a in enumerate(layer)))
            k += len(layer)
        else:
            out.append(flat[k].view(layer.dtype))
            k += 1
    return out


# ------------------------------------------------------------------------------------------ round trips
# (case, who sends, sender block_size, receiver block_size, stream)
ROUND_TRIPS = [
    ("separate_bf16_bsnd", "test", 4, 8, False),
    ("merged_fp16_bnsd", "peer", 4, 4, False),
    ("mla_fp32", "test", 4, 4, True),
    ("dsa_int8", "peer", 8, 4, False),
    ("separate_int8_scaled", "test", 4, 8, False),
    ("mla_int8_scaled", "peer", 8, 4, True),
]


def _scale_rows(scales):
    """Every scale cache of every layer as float32 bits ``[nb * bs, H]`` (token-major), in order."""
    return [np.ascontiguousarray(a).view(np.uint32).reshape(a.shape[0] * a.shape[1], -1)
            for layer in scales for a in layer]


def _check_scales(case, got, dst_initial, src, src_slots, dst_slots):
    """The receiver's scale caches: the sender's scale rows at dst_slots, their own everywhere else."""
    for i, (g, d, s_) in enumerate(zip(_scale_rows(got), _scale_rows(dst_initial), _scale_rows(src))):
        e = d.copy()
        e[dst_slots] = s_[src_slots]
        bad = np.flatnonzero((g != e).any(axis=1))
        assert bad.size == 0, f"{case}: scale cache {i}: {bad.size} token rows differ, first at slot {bad[:5]}"


@pytest.mark.parametrize("case, sender, bs_src, bs_dst, stream", ROUND_TRIPS)
def test_handoff_round_trip_is_bit_exact(peer, tmp_path, case, sender, bs_src, bs_dst, stream):
    """13 tokens (3 chunks of 5, the last partial) from blocks [5, 1, 6, 2] of one process into blocks
    [7, 0, 3] / ... of the other, with the other's block size: the rows arrive bit for bit and no other
    row of the receiver changes."""
    T, nb = 13, 10
    src_blocks = [5, 1, 6, 2][: -(-T // bs_src)]
    dst_blocks = [7, 0, 3, 9][: -(-T // bs_dst)]
    src_seed, dst_seed = 11, 22
    src_arrays = P.make_arrays(case, nb, bs_src, src_seed)
    dst_arrays = P.make_arrays(case, nb, bs_dst, dst_seed)
    src_slots = disagg.slots_from_blocks(src_blocks, bs_src, T)
    dst_slots = disagg.slots_from_blocks(dst_blocks, bs_dst, T)
    expected = _expected(case, dst_arrays, src_arrays, src_slots, dst_slots)
    src_scales, dst_scales = P.make_scales(case, nb, bs_src, src_seed), P.make_scales(case, nb, bs_dst, dst_seed)
    fmt, _, layout = P.CASES[case][:3]
    if sender == "test":
        peer.call(cmd="caches", case=case, num_blocks=nb, block_size=bs_dst, seed=dst_seed)
        addr = peer.call(cmd="receiver", max_tokens=32, model_id="m")["address"]
        peer.start(cmd="receive", block_ids=dst_blocks, timeout=30, stream=stream)
        kw = P.endpoint_kw(case, P.to_tensors(src_scales) if src_scales is not None else None)
        with disagg.KVSender(P.to_tensors(src_arrays), fmt, cache_layout=layout, chunk_tokens=5, model_id="m",
                             **kw) as tx:
            assert tx.path == ("gather" if src_scales is not None else "direct")
            sres = tx.send(addr, src_blocks, T, timeout=30, request_id="r1")
        rres = peer.wait(30)
        assert rres["ok"], rres
        rres = rres["result"]
        peer.call(cmd="dump", path=str(tmp_path / "rx.npz"))
        got = _load_dump(tmp_path / "rx.npz", dst_arrays)
        if dst_scales is not None:
            peer.call(cmd="dump_scales", path=str(tmp_path / "rx_scales.npz"))
            data = np.load(tmp_path / "rx_scales.npz")
            flat = [data[f"arr_{i}"] for i in range(len(data.files))]
            P_ = len(dst_scales[0])
            got_scales = [tuple(flat[k * P_:(k + 1) * P_]) for k in range(len(dst_scales))]
    else:
        peer.call(cmd="caches", case=case, num_blocks=nb, block_size=bs_src, seed=src_seed)
        dst = P.to_tensors(dst_arrays)
        dst_sc = P.to_tensors(dst_scales) if dst_scales is not None else None
        with disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=32, **P.endpoint_kw(case, dst_sc)) as rx:
            peer.start(cmd="send", peer=rx.address, block_ids=src_blocks, num_tokens=T, timeout=30, chunk_tokens=5,
                       request_id="r1")
            rres = rx.receive(dst_blocks, timeout=30, stream=stream)
            sres = peer.wait(30)
            assert sres["ok"], sres
            sres = sres["result"]
        got = _bits(dst)
        if dst_sc is not None:
            got_scales = P.from_tensors(dst_sc)
    _assert_rows(case, got, expected, f"{case}: receiver caches after the handoff")
    if dst_scales is not None:  # the scale rows arrived with the data rows, nothing else changed
        _check_scales(case, got_scales, dst_scales, src_scales, src_slots, dst_slots)
    assert rres["request_id"] == "r1" and rres["num_tokens"] == T and rres["chunks"] == 3
    assert rres["block_ids"] == dst_blocks and rres["src_block_ids"] == src_blocks
    assert rres["src_block_size"] == bs_src
    assert sres["peer_block_ids"] == dst_blocks and sres["nbytes"] == rres["nbytes"] > 0


def test_ramp_chunk_sizes():
    """The default chunking: /8, /4, /2 of the chunk first, /4, /8 last, whole chunks between; small
    payloads double from /8; always >= 1 token each and summing to the payload."""
    r = disagg._layout.ramp_chunk_sizes
    assert r(0, 8) == [] and r(1, 128) == [1]
    assert r(37, 8) == [1, 2, 4, 8, 8, 8, 3, 2, 1]
    assert r(13, 8) == [1, 2, 4, 6]
    assert r(4096, 128)[:4] == [16, 32, 64, 128] and r(4096, 128)[-3:] == [96, 32, 16]
    for T in (0, 1, 5, 17, 18, 19, 100, 1023):
        for ct in (1, 2, 3, 8, 13):
            sizes = r(T, ct)
            assert sum(sizes) == T and all(1 <= n <= ct for n in sizes), (T, ct, sizes)


def test_ramped_handoff_across_processes_is_bit_exact(peer, tmp_path):
    """The default (ramped) chunk plan travels in the offer: 37 tokens in 9 chunks of 1..8 tokens into
    another process (stream mode: chunks load as they verify), bit for bit."""
    case, T, nb, bs = CASE, 37, 12, 4
    src_blocks = [11, 0, 5, 3, 9, 1, 7, 2, 10, 4]
    dst_blocks = [6, 2, 9, 0, 11, 3, 8, 1, 5, 7]
    src_arrays = P.make_arrays(case, nb, bs, 31)
    dst_arrays = P.make_arrays(case, nb, bs, 32)
    expected = _expected(case, dst_arrays, src_arrays, disagg.slots_from_blocks(src_blocks, bs, T),
                         disagg.slots_from_blocks(dst_blocks, bs, T))
    fmt, _, layout = P.CASES[case][:3]
    peer.call(cmd="caches", case=case, num_blocks=nb, block_size=bs, seed=32)
    addr = peer.call(cmd="receiver", max_tokens=40)["address"]
    peer.start(cmd="receive", block_ids=dst_blocks, timeout=30, stream=True)
    with disagg.KVSender(P.to_tensors(src_arrays), fmt, cache_layout=layout, chunk_tokens=8, ramp=True) as tx:
        assert tx.chunk_sizes(T) == [1, 2, 4, 8, 8, 8, 3, 2, 1]
        sres = tx.send(addr, src_blocks, T, timeout=30)
    rres = peer.wait(30)
    assert rres["ok"], rres
    assert rres["result"]["chunks"] == sres["chunks"] == 9
    peer.call(cmd="dump", path=str(tmp_path / "rx.npz"))
    _assert_rows(case, _load_dump(tmp_path / "rx.npz", dst_arrays), expected, "receiver after a ramped handoff")


# ------------------------------------------------------------------------------------------ failure paths
CASE = "separate_bf16_bsnd"


def _pair(nb=8, bs=4, seed=1, direct=None, **rx_kw):
    fmt, _, layout = P.CASES[CASE][:3]
    src_arrays, src = _caches(CASE, nb, bs, seed)
    dst_arrays, dst = _caches(CASE, nb, bs, seed + 1)
    tx = disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3, direct=direct)
    rx = disagg.KVReceiver(dst, fmt, cache_layout=layout, **{"max_tokens": 16, **rx_kw})
    return tx, rx, dst_arrays, dst


def _in_thread(fn):
    """Run fn() in a thread (it must not call MindSpore ops); returns a join() -> (result, exception)."""
    box = {}

    def body():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["exc"] = exc

    th = threading.Thread(target=body, daemon=True)
    th.start()

    def join(timeout=30):
        th.join(timeout)
        assert not th.is_alive(), "the receiving thread did not finish in time"
        return box.get("result"), box.get("exc")

    return join


def _assert_untouched(dst, dst_arrays, what):
    _assert_rows(CASE, _bits(dst), P.token_rows(CASE, dst_arrays), what)


def test_no_receiver_is_peer_gone_at_once():
    """Nothing listens at the address: PeerGone (connection refused), without waiting for the timeout."""
    fmt, _, layout = P.CASES[CASE][:3]
    _, src = _caches(CASE, 8, 4, 1)
    port = disagg._mooncake.free_port()
    with disagg.KVSender(src, fmt, cache_layout=layout) as tx:
        t = time.monotonic()
        with pytest.raises(disagg.PeerGone, match="connection refused"):
            tx.send(f"127.0.0.1:{port}", [0, 1], 6, timeout=20)
        assert time.monotonic() - t < 5


FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_disagg_fake_peer.py")


def _fake(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("MC_LOG_LEVEL", "WARNING")
    return subprocess.Popen([sys.executable, FAKE, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, text=True)


def _readline(proc, timeout=30):
    r, _, _ = select.select([proc.stdout], [], [], timeout)
    assert r, "the fake peer said nothing in time"
    return proc.stdout.readline().strip()


def test_receiver_killed_after_accept_is_peer_gone():
    """The receiver process (a real transfer engine and control channel) dies right after accepting:
    the sender's Mooncake write fails -> PeerGone, not a hang, well within the timeout."""
    fmt, _, layout = P.CASES[CASE][:3]
    fake = _fake("receiver")
    try:
        addr = _readline(fake)
        _, src = _caches(CASE, 8, 4, 1)

        def on(event, info):
            if event == "accepted":
                fake.kill()
                fake.wait(10)

        with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3) as tx:
            t = time.monotonic()
            with pytest.raises(disagg.PeerGone, match="Mooncake"):
                tx.send(addr, [4, 5, 6], 10, timeout=15, progress=on)
            assert time.monotonic() - t < 10
    finally:
        if fake.poll() is None:
            fake.kill()
        fake.wait(10)


def test_sender_killed_after_accept_times_out_receiver_untouched():
    """The sender dies after the accept: the receiver's bounded wait ends in HandoffTimeout and its
    caches are untouched."""
    fmt, _, layout = P.CASES[CASE][:3]
    dst_arrays, dst = _caches(CASE, 8, 4, 6)
    with disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16) as rx:
        T = 10
        offer = {"type": "offer", "protocol": disagg.PROTOCOL, "session": "s-victim", "seq": 0,
                 "request_id": "victim", "layout": rx.layout.describe(), "model_id": None, "num_tokens": T,
                 "nbytes": T * rx.layout.bytes_per_token, "chunk_tokens": 3, "src_block_ids": [0, 1, 2],
                 "src_block_size": 4, "checksum_algo": disagg.CHECKSUM_ALGO}
        fake = _fake("sender", rx.address, json.dumps(offer))
        try:
            assert _readline(fake) == "ready"
            fake.stdin.write("go\n")
            fake.stdin.flush()
            t = time.monotonic()
            with pytest.raises(disagg.HandoffTimeout, match="went silent"):
                rx.receive([3, 4, 5], timeout=3)
            assert time.monotonic() - t < 3 + 2
            assert fake.wait(10) == 3  # it had got the accept
        finally:
            if fake.poll() is None:
                fake.kill()
            fake.wait(10)
    _assert_untouched(dst, dst_arrays, "receiver after its sender died")


def test_layout_mismatch_is_rejected_on_both_sides():
    """A receiver whose caches have another head size rejects the offer: MetadataMismatch on both sides,
    naming the field; the receiver's caches are untouched."""
    fmt, _, layout = P.CASES[CASE][:3]
    _, src = _caches(CASE, 8, 4, 1)
    other = ("separate", "bfloat16", "BSND", 3, [(2, 16), (2, 16)])
    dst_arrays = P.make_arrays(other, 8, 4, 2)
    dst = P.to_tensors(dst_arrays)
    with disagg.KVSender(src, fmt, cache_layout=layout) as tx, \
            disagg.KVReceiver(dst, fmt, cache_layout=layout, max_tokens=16) as rx:
        join = _in_thread(lambda: rx.receive([0, 1], timeout=20))
        with pytest.raises(disagg.MetadataMismatch, match=r"planes: \[\[2, 16\], \[2, 16\]\] here, \[\[2, 8\]"):
            tx.send(rx.address, [3, 4], 8, timeout=20)
        _, exc = join()
    assert isinstance(exc, disagg.MetadataMismatch) and "planes" in str(exc)
    _assert_rows(other, _bits(dst), P.token_rows(other, dst_arrays), "receiver after a layout mismatch")


def test_int8_caches_need_their_scales_accounted_for(master):
    """int8 caches without scale_caches or static_scales=True would hand the KV over without the scales it
    was quantized with (the old code moved the int8 bytes only): KVSender, KVReceiver and KVPrefixStore
    refuse that, naming 'scale_caches'; both at once, either with float caches, scale caches of another
    shape or dtype are refused too."""
    from mindspore import Tensor

    case, nb, bs = "separate_int8_scaled", 6, 4
    fmt, _, layout = P.CASES[case][:3]
    _, caches = _caches(case, nb, bs, 5)
    scales = P.to_tensors(P.make_scales(case, nb, bs, 5))
    _, floats = _caches(CASE, nb, bs, 5)
    store_kw = {"master_address": master.address, "model_id": "m", "global_segment_size": 0,
                "local_buffer_size": 1 << 20}
    makers = [lambda **kw: disagg.KVSender(caches if "c" not in kw else kw.pop("c"), fmt, **kw),
              lambda **kw: disagg.KVReceiver(caches if "c" not in kw else kw.pop("c"), fmt, max_tokens=8, **kw),
              lambda **kw: disagg.KVPrefixStore(caches if "c" not in kw else kw.pop("c"), fmt, **store_kw, **kw)]
    for make in makers:
        with pytest.raises(ValueError, match=r"argument 'scale_caches': int8 'kv_caches' need their scales.*"
                                             r"static_scales=True"):
            make()
        with pytest.raises(ValueError, match=r"argument 'static_scales': expected False with scale_caches given"):
            make(scale_caches=scales, static_scales=True)
        with pytest.raises(ValueError, match=r"argument 'static_scales': expected only with int8 'kv_caches'.*bfloat16"):
            make(c=floats, static_scales=True)
        with pytest.raises(ValueError, match=r"argument 'scale_caches': expected only with int8"):
            make(c=floats, scale_caches=scales)
        with pytest.raises(ValueError, match=r"static_scales.*expected True or False"):
            make(static_scales="yes")
        wrong = [tuple(Tensor(np.ones((nb, bs, 3), np.float32)) for _ in range(2)) for _ in range(2)]
        with pytest.raises(ValueError, match=r"scale_caches"):
            make(scale_caches=wrong)
        halves = [tuple(Tensor(np.ones((nb, bs, 2), np.float16)) for _ in range(2)) for _ in range(2)]
        with pytest.raises(TypeError, match=r"scale_caches"):
            make(scale_caches=halves)
        with pytest.raises(ValueError, match=r"scale_caches"):
            make(scale_caches=scales[:1])  # one layer's scale caches for two layers
    with disagg.KVSender(caches, fmt, static_scales=True) as tx:
        assert tx.layout.scales == () and tx.path == "direct"
    with disagg.KVSender(caches, fmt, scale_caches=scales) as tx:
        assert tx.layout.scales == (2, 2) and tx.path == "gather" and "scale caches" in tx.direct_reason
        L, h = 2, 16
        assert tx.layout.bytes_per_token == L * (2 * h + 4 * 2 * 2)
    with pytest.raises(ValueError, match=r"argument 'direct'.*scale caches"):
        disagg.KVSender(caches, fmt, scale_caches=scales, direct=True)


def test_scaled_and_static_int8_ends_do_not_match():
    """A sender whose int8 caches carry per-token scale caches and a receiver that declared static scales
    (or the other way round) disagree on what the payload is: MetadataMismatch on both sides naming
    'scales', the receiver's caches and scale caches untouched."""
    case, nb, bs = "separate_int8_scaled", 8, 4
    fmt = P.CASES[case][0]
    _, src = _caches(case, nb, bs, 1)
    src_scales = P.to_tensors(P.make_scales(case, nb, bs, 1))
    dst_arrays, dst = _caches(case, nb, bs, 2)
    dst_scale_arrays = P.make_scales(case, nb, bs, 2)
    dst_scales = P.to_tensors(dst_scale_arrays)
    for tx_kw, rx_kw in (({"scale_caches": src_scales}, {"static_scales": True}),
                         ({"static_scales": True}, {"scale_caches": dst_scales})):
        with disagg.KVSender(src, fmt, **tx_kw) as tx, disagg.KVReceiver(dst, fmt, max_tokens=16, **rx_kw) as rx:
            join = _in_thread(lambda: rx.receive([0, 1], timeout=20))
            with pytest.raises(disagg.MetadataMismatch, match=r"scales: "):
                tx.send(rx.address, [3, 4], 8, timeout=20)
            _, exc = join()
        assert isinstance(exc, disagg.MetadataMismatch) and "scales" in str(exc)
        _assert_rows(case, _bits(dst), P.token_rows(case, dst_arrays), "receiver after a scales mismatch")
        _check_scales(case, P.from_tensors(dst_scales), dst_scale_arrays, dst_scale_arrays, [], [])


def test_prefix_store_carries_int8_scale_caches(master):
    """Prefix chunks of int8 caches with per-token scale caches: put() stores the scale rows with the data,
    load() in another client writes both into other blocks bit for bit; a client of the same caches that
    declared static scales has another layout identity and finds nothing."""
    case, bs, nb, ct = "mla_int8_scaled", 4, 10, 4
    fmt = P.CASES[case][0]
    tokens = list(range(300, 310))
    src_arrays, src = _caches(case, nb, bs, 61)
    src_sc_arrays = P.make_scales(case, nb, bs, 61)
    dst_arrays, dst = _caches(case, nb, bs, 62)
    dst_sc_arrays = P.make_scales(case, nb, bs, 62)
    dst_sc = P.to_tensors(dst_sc_arrays)
    kw = {"master_address": master.address, "model_id": "int8-scaled", "chunk_tokens": ct,
          "global_segment_size": 16 << 20, "local_buffer_size": 16 << 20}
    src_blocks, dst_blocks = [4, 0, 7], [9, 2, 5]
    with disagg.KVPrefixStore(src, fmt, scale_caches=P.to_tensors(src_sc_arrays), **kw) as a:
        assert a.put(tokens, src_blocks)["stored"] == 2
        with disagg.KVPrefixStore(dst, fmt, static_scales=True, **kw) as other:
            assert other.lookup(tokens) == 0
        with disagg.KVPrefixStore(dst, fmt, scale_caches=dst_sc, **kw) as b:
            assert b.lookup(tokens) == 8
            assert b.load(tokens, dst_blocks)["tokens"] == 8
    src_slots = disagg.slots_from_blocks(src_blocks, bs, 8)
    dst_slots = disagg.slots_from_blocks(dst_blocks, bs, 8)
    _assert_rows(case, _bits(dst), _expected(case, dst_arrays, src_arrays, src_slots, dst_slots),
                 "caches after the scaled prefix reload")
    _check_scales(case, P.from_tensors(dst_sc), dst_sc_arrays, src_sc_arrays, src_slots, dst_slots)


@pytest.mark.parametrize("what", ["max_tokens", "blocks", "model_id", "nbytes", "chunks"])
def test_size_mismatch_is_rejected_receiver_untouched(what):
    """More tokens than the receiver's buffer holds, than the blocks given to receive() hold, another
    model_id, or an offer whose byte count does not match its token count: rejected with the reason,
    both sides raise MetadataMismatch, the receiver's caches are untouched."""
    tx, rx, dst_arrays, dst = _pair(model_id="model-a")
    try:
        T, blocks = 10, [0, 1, 2]
        if what == "max_tokens":
            rx.max_tokens = 8  # the buffer holds 16 tokens; the receiver accepts at most 8
        elif what == "blocks":
            blocks = [0, 1]  # 8 slots for 10 tokens
        elif what == "model_id":
            tx.model_id = "model-b"
        elif what == "nbytes":
            tx.layout.bytes_per_token += 2  # the offer claims 2 bytes more per token than its layout has
        elif what == "chunks":
            tx.chunk_sizes = lambda n: [n - 1]  # a chunk plan that does not cover the payload
        join = _in_thread(lambda: rx.receive(blocks, timeout=20))
        with pytest.raises(disagg.MetadataMismatch, match="rejected") as ei:
            tx.send(rx.address, [5, 6, 7], T, timeout=20)
        _, exc = join()
        assert isinstance(exc, disagg.MetadataMismatch)
        key = {"max_tokens": "max_tokens=8", "blocks": "2 blocks", "model_id": "model_id", "nbytes": "nbytes",
               "chunks": "summing to num_tokens=10"}[what]
        assert key in str(ei.value) and key in str(exc)
    finally:
        tx.close()
        rx.close()
    _assert_untouched(dst, dst_arrays, f"receiver after a {what} mismatch")


@pytest.mark.parametrize("path, chunk", [("gather", 2), ("direct", 1)])
def test_corrupted_payload_is_a_checksum_mismatch_receiver_untouched(path, chunk):
    """A byte of chunk 2 / 1 (of 4) changed after the sender's checksum: the receiver finds it and writes
    nothing, not even the chunks that verified before it; both raise ChecksumMismatch. On the direct
    path every other chunk is read from the caches, the corrupted one is staged."""
    tx, rx, dst_arrays, dst = _pair(direct=path == "direct")
    try:
        assert tx.path == path
        tx.direct_min_bytes = 0
        tx._fault = ("corrupt", chunk)
        join = _in_thread(lambda: rx.receive([0, 1, 2], timeout=20))
        with pytest.raises(disagg.ChecksumMismatch):
            tx.send(rx.address, [5, 6, 7], 10, timeout=20)
        _, exc = join()
        assert isinstance(exc, disagg.ChecksumMismatch) and f"chunk {chunk}" in str(exc)
    finally:
        tx.close()
        rx.close()
    _assert_untouched(dst, dst_arrays, "receiver after a corrupted payload")


def test_stream_mode_failure_restores_the_written_rows(peer, tmp_path):
    """stream=True writes chunks as they verify; a later chunk failing (corrupt) must put every written
    row back: the receiver's caches end bit for bit as before."""
    fmt, _, layout = P.CASES[CASE][:3]
    peer.call(cmd="caches", case=CASE, num_blocks=8, block_size=4, seed=8)
    dst_arrays = P.make_arrays(CASE, 8, 4, 8)
    addr = peer.call(cmd="receiver", max_tokens=32)["address"]
    peer.start(cmd="receive", block_ids=[0, 1, 2, 3], timeout=30, stream=True)
    _, src = _caches(CASE, 8, 4, 9)
    with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=3) as tx:
        tx._fault = ("corrupt", 3)  # chunks 0-2 verify and are written first
        with pytest.raises(disagg.ChecksumMismatch):
            tx.send(addr, [4, 5, 6, 7], 14, timeout=30)
    ans = peer.wait(30)
    assert not ans["ok"] and ans["error"] == "ChecksumMismatch" and "restored" in ans["message"], ans
    peer.call(cmd="dump", path=str(tmp_path / "rx.npz"))
    _assert_untouched_arrays = P.token_rows(CASE, _load_dump(tmp_path / "rx.npz", dst_arrays))
    for g, e in zip(_assert_untouched_arrays, P.token_rows(CASE, dst_arrays)):
        assert np.array_equal(g, e)


def test_timeouts_are_bounded():
    """receive() without a sender and send() to a receiver that never calls receive() both end in
    HandoffTimeout after about their timeout."""
    tx, rx, dst_arrays, dst = _pair()
    try:
        t = time.monotonic()
        with pytest.raises(disagg.HandoffTimeout, match="no offer"):
            rx.receive([0, 1], timeout=0.5)
        assert 0.4 < time.monotonic() - t < 3
        t = time.monotonic()
        with pytest.raises(disagg.HandoffTimeout, match="did not answer"):
            tx.send(rx.address, [5, 6], 8, timeout=0.7)
        assert 0.6 < time.monotonic() - t < 4
        # the stale offer was aborted: a later receive() does not pick it up
        with pytest.raises(disagg.HandoffTimeout, match="no offer"):
            rx.receive([0, 1], timeout=0.3)
    finally:
        tx.close()
        rx.close()
    _assert_untouched(dst, dst_arrays, "receiver after timeouts")


def _delay_first_accept(rx, before_accept):
    """Make rx's first 'accept' wait for before_accept() (run in the receiving thread) before it is sent."""
    real, state = rx.server.send, {"first": True}

    def send(peer_id, msg):
        if msg.get("type") == "accept" and state["first"]:
            state["first"] = False
            before_accept()
        return real(peer_id, msg)

    rx.server.send = send


def test_offer_withdrawn_while_being_accepted_then_next_offer_is_served(peer):
    """CI saw this race (stop 25): a sender times out waiting for the accept and withdraws its offer just
    as receive() picks the offer up. Nothing moved, so receive() drops that offer and serves the next one
    within its own timeout (it raised PeerGone before). The second, real handoff lands bit for bit."""
    nb, bs, T = 8, 4, 7
    src_seed = 31
    peer.call(cmd="caches", case=CASE, num_blocks=nb, block_size=bs, seed=src_seed)
    tx, rx, dst_arrays, dst = _pair(nb=nb, bs=bs)
    first = {}

    def before_accept():
        # the first sender gives up (its timeout passes while the accept is held back), then the second
        # sender offers; only after both does the held accept go out
        first["result"], first["exc"] = first.pop("join")()
        peer.start(cmd="send", peer=rx.address, block_ids=[6, 2], num_tokens=T, timeout=30, request_id="second")

    try:
        _delay_first_accept(rx, before_accept)
        first["join"] = _in_thread(lambda: tx.send(rx.address, [5, 6], 8, timeout=0.5, request_id="first"))
        got = rx.receive([1, 4, 3], timeout=30)
        sres = peer.wait(30)
    finally:
        tx.close()
        rx.close()
    assert isinstance(first["exc"], disagg.HandoffTimeout) and "did not answer" in str(first["exc"]), first
    assert sres["ok"], sres
    assert got["request_id"] == "second" and got["num_tokens"] == T and got["block_ids"] == [1, 4]
    src_arrays = P.make_arrays(CASE, nb, bs, src_seed)
    expected = _expected(CASE, dst_arrays, src_arrays, disagg.slots_from_blocks([6, 2], bs, T),
                         disagg.slots_from_blocks([1, 4], bs, T))
    _assert_rows(CASE, _bits(dst), expected, "receiver after a withdrawn offer and a real one")


def test_withdrawn_abort_after_the_accept_is_not_an_error():
    """The receiver's side of the same race, message by message: an offer, the accept, then the sender's
    'abort' marked withdrawn (what a sender that timed out before seeing the accept sends). receive()
    keeps waiting and ends in HandoffTimeout 'no offer' at its own timeout; the caches are untouched. A
    plain abort (the sender failed after the accept) stays PeerGone."""
    from ms_kvcache.disagg._channel import ControlClient

    for withdrawn in (True, False):
        tx, rx, dst_arrays, dst = _pair()
        tx.close()
        T = 6

        def sender(withdrawn=withdrawn):
            c = ControlClient(rx.address)
            try:
                c.send({"type": "offer", "protocol": disagg.PROTOCOL, "session": "s1", "request_id": "r1",
                        "layout": rx.layout.describe(), "model_id": None, "num_tokens": T,
                        "nbytes": T * rx.layout.bytes_per_token, "chunk_tokens": 3, "src_block_ids": [0, 1],
                        "src_block_size": 4, "checksum_algo": disagg.CHECKSUM_ALGO})
                reply = c.recv(time.monotonic() + 20)
                msg = {"type": "abort", "session": "s1", "reason": "the sender timed out waiting for an accept"}
                if withdrawn:
                    msg["withdrawn"] = True
                c.send(msg)
                abort_sent.append(time.monotonic())
                return reply
            finally:
                c.close()

        abort_sent = []
        try:
            join = _in_thread(sender)
            t = time.monotonic()
            if withdrawn:
                with pytest.raises(disagg.HandoffTimeout) as info:
                    rx.receive([2, 3], timeout=4)
                assert 3.5 < time.monotonic() - t < 9
            else:
                with pytest.raises(disagg.PeerGone, match="the sender aborted"):
                    rx.receive([2, 3], timeout=20)
            reply, exc = join()
            assert exc is None and reply["type"] == "accept", (reply, exc)
            if withdrawn:
                # The withdrawn offer is dropped and the wait goes on to the deadline: 'no offer'. Only an
                # abort that left the sender near the deadline (a starved machine: the full suite once took
                # 2 s here) may instead find the receiver still waiting for chunks of the accepted offer.
                if abort_sent[0] - t < 3:
                    assert "no offer" in str(info.value), (str(info.value), abort_sent[0] - t)
                else:
                    assert "no offer" in str(info.value) or "went silent" in str(info.value), str(info.value)
        finally:
            rx.close()
        _assert_untouched(dst, dst_arrays, f"receiver after an abort (withdrawn={withdrawn})")


def test_sender_abort_mid_transfer_receiver_untouched():
    """The sender fails after the accept (its progress callback raises): it tells the receiver, which
    raises PeerGone naming the reason and writes nothing."""
    tx, rx, dst_arrays, dst = _pair()
    try:
        def on(event, info):
            if event == "accepted":
                raise RuntimeError("prefill node shutting down")

        join = _in_thread(lambda: rx.receive([0, 1, 2], timeout=20))
        with pytest.raises(RuntimeError, match="shutting down"):
            tx.send(rx.address, [5, 6, 7], 10, timeout=20, progress=on)
        _, exc = join()
        assert isinstance(exc, disagg.PeerGone) and "shutting down" in str(exc)
    finally:
        tx.close()
        rx.close()
    _assert_untouched(dst, dst_arrays, "receiver after the sender aborted")


def test_zero_tokens_and_a_growing_sender_buffer():
    """A handoff of 0 tokens completes (nothing moves, nothing is written); a later, larger one makes the
    sender grow its registered buffer."""
    tx, rx, dst_arrays, dst = _pair()
    try:
        join = _in_thread(lambda: rx.receive([0], timeout=20))
        res = tx.send(rx.address, [5], 0, timeout=20)
        got, exc = join()
        assert exc is None and got["num_tokens"] == 0 and got["chunks"] == 0 and got["block_ids"] == []
        assert res["nbytes"] == 0 and res["peer_block_ids"] == []
        before = tx.staging.nbytes if tx.staging is not None else 0
        rx.max_tokens = 16
        join = _in_thread(lambda: rx.receive([0, 1, 2, 3], timeout=20))  # rejected below: only the size matters
        tx.model_id, rx.model_id = "a", "b"
        with pytest.raises(disagg.MetadataMismatch):
            tx.send(rx.address, [4, 5, 6, 7], 16, timeout=20)
        join()
        assert tx.staging.nbytes >= 16 * tx.layout.bytes_per_token > before
    finally:
        tx.close()
        rx.close()
    _assert_untouched(dst, dst_arrays, "receiver after a 0-token handoff")


def test_bad_arguments_raise_before_any_transfer():
    tx, rx, dst_arrays, dst = _pair()
    try:
        with pytest.raises(ValueError, match=r"KVReceiver.receive: argument 'block_ids': expected distinct"):
            rx.receive([1, 1], timeout=1)
        with pytest.raises(ValueError, match=r"argument 'block_ids': expected block ids in \[0, 8\), got 8"):
            rx.receive([8], timeout=1)
        with pytest.raises(ValueError, match=r"KVSender.send: argument 'num_tokens': expected <= "):
            tx.send(rx.address, [0], 5, timeout=1)
        with pytest.raises(ValueError, match=r"argument 'timeout'"):
            tx.send(rx.address, [0], 1, timeout=0)
        with pytest.raises(ValueError, match=r"argument 'peer': expected 'host:port'"):
            tx.send("nowhere", [0], 1, timeout=1)
        with pytest.raises(ValueError, match=r"KVReceiver: argument 'max_tokens'"):
            disagg.KVReceiver(dst, "separate", max_tokens=0)
        # a timeout ZeroMQ cannot poll with (it was an OverflowError from deep inside the wait), and request ids
        # no message may carry (they were sent, refused by the receiver's schema or never matched: a timeout)
        for bad in (float("inf"), 1e30, float("nan")):
            with pytest.raises(ValueError, match=r"KVReceiver.receive: argument 'timeout': expected a number of "
                                                 r"seconds in \(0, 1e\+06\]"):
                rx.receive([0], timeout=bad)
            with pytest.raises(ValueError, match=r"KVSender.send: argument 'timeout'"):
                tx.send(rx.address, [0], 1, timeout=bad)
        with pytest.raises(TypeError, match=r"KVSender.send: argument 'request_id': expected a str or None, got int"):
            tx.send(rx.address, [0], 1, timeout=1, request_id=5)
        with pytest.raises(ValueError, match=r"KVSender.send: argument 'request_id': expected at most 4096"):
            tx.send(rx.address, [0], 1, timeout=1, request_id="x" * 4097)
        with pytest.raises(TypeError, match=r"KVReceiver.receive: argument 'request_id': expected a str or None"):
            rx.receive([0], timeout=1, request_id=5)
        assert rx.server.refused == 0 and not rx.server.pending()  # nothing reached the receiver
        with pytest.raises(ValueError, match=r"KVPrefixStore: argument 'setup_timeout': expected a number of seconds"):
            disagg.KVPrefixStore(dst, "separate", master_address="127.0.0.1:1", model_id="m", setup_timeout=0)
    finally:
        tx.close()
        rx.close()


# ------------------------------------------------------------------------------------------ prefix store
def test_prefix_store_reuse_across_processes(peer, master, tmp_path):
    """The peer puts a sequence's KV (2 full chunks of 6 tokens + 3 more) into Mooncake Store; this
    process looks up a prompt sharing the first 12 tokens and reloads them into other blocks, bit for
    bit; prompts with another start, another model_id or another layout find nothing."""
    case, bs, nb, ct = "separate_bf16_bsnd", 4, 12, 6
    fmt, _, layout = P.CASES[case][:3]
    tokens = [101, 7, 42, 42, 9, 3, 55, 60, 61, 2, 8, 13, 77, 78, 79]
    src_blocks = [3, 0, 5, 1]
    peer.call(cmd="caches", case=case, num_blocks=nb, block_size=bs, seed=31)
    peer.call(cmd="store", master=master.address, model_id="minilm-test", chunk_tokens=ct)
    put = peer.call(cmd="store_put", token_ids=tokens, block_ids=src_blocks)["result"]
    assert put["chunks"] == 2 and put["stored"] == 2 and put["tokens"] == 12
    again = peer.call(cmd="store_put", token_ids=tokens, block_ids=src_blocks)["result"]
    assert again["stored"] == 0 and again["present"] == 2

    src_arrays = P.make_arrays(case, nb, bs, 31)
    dst_arrays, dst = _caches(case, nb, bs, 32)
    prompt = tokens[:12] + [500, 501, 502, 503, 504]
    dst_blocks = [10, 4, 7, 2, 8]
    with disagg.KVPrefixStore(dst, fmt, cache_layout=layout, master_address=master.address, model_id="minilm-test",
                              chunk_tokens=ct, global_segment_size=16 << 20, local_buffer_size=16 << 20) as store:
        assert store.lookup(prompt) == 12
        assert store.lookup(tokens[:11]) == 6  # only whole chunks
        assert store.lookup([1] + tokens[1:]) == 0  # another first token: another hash chain
        res = store.load(prompt, dst_blocks)
        assert res["tokens"] == 12 and res["chunks"] == 2 and res["stopped"] == "end of stored prefix"
        limited = store.load(prompt, dst_blocks, max_tokens=11)
        assert limited["tokens"] == 6 and limited["stopped"] == "max_tokens"
    expected = _expected(case, dst_arrays, src_arrays, disagg.slots_from_blocks(src_blocks, bs, 12),
                         disagg.slots_from_blocks(dst_blocks, bs, 12))
    _assert_rows(case, _bits(dst), expected, "caches after the prefix reload")
    # the identity is part of the key: another model or another layout shares nothing
    _, other = _caches(case, nb, bs, 33)
    with disagg.KVPrefixStore(other, fmt, cache_layout=layout, master_address=master.address, model_id="other-model",
                              chunk_tokens=ct, global_segment_size=0, local_buffer_size=16 << 20) as s2:
        assert s2.lookup(prompt) == 0
    mla = P.to_tensors(P.make_arrays("mla_fp32", nb, bs, 1))
    with disagg.KVPrefixStore(mla, "mla", master_address=master.address, model_id="minilm-test", chunk_tokens=ct,
                              global_segment_size=0, local_buffer_size=16 << 20) as s3:
        assert s3.lookup(prompt) == 0


def test_prefix_store_load_ends_the_prefix_at_a_corrupt_object(master):
    """An object under a chunk's key that is not that chunk (foreign bytes, then a flipped data byte):
    load() returns the verified prefix before it (none, then one chunk), says why it stopped, and writes
    nothing else."""
    case, bs, nb, ct = "mla_fp32", 4, 8, 4
    fmt, _, layout = P.CASES[case][:3]
    dst_arrays, dst = _caches(case, nb, bs, 41)
    tokens = list(range(900, 912))
    with disagg.KVPrefixStore(dst, fmt, master_address=master.address, model_id="corrupt-test", chunk_tokens=ct,
                              global_segment_size=16 << 20, local_buffer_size=16 << 20) as store:
        keys = store.keys(tokens)
        assert store.store.put(keys[0], b"\0" * store.object_nbytes) == 0
        assert store.lookup(tokens) == ct
        res = store.load(tokens, [0, 1, 2])
        assert res["tokens"] == 0 and "chunk 0 does not match: no ms_kvcache chunk header" in res["stopped"], res
        _assert_rows(case, _bits(dst), P.token_rows(case, dst_arrays), "caches after a foreign object")
        put = store.put(tokens, [5, 6, 7])
        assert put["tokens"] == 0 and put["stored"] == 0 and "chunk 0: no ms_kvcache chunk header" in put["stopped"]
        store.store.remove(keys[0], True)
        put = store.put(tokens, [5, 6, 7])
        assert put["stored"] == 3 and put["tokens"] == 12 and put["stopped"] is None, put
        raw = bytearray(store.store.get(keys[1]))
        raw[-1] ^= 1
        store.store.remove(keys[1], True)
        assert store.store.put(keys[1], bytes(raw)) == 0
        res = store.load(tokens, [0, 1, 2])
        assert res["tokens"] == ct and "chunk 1 does not match: checksum" in res["stopped"], res
        rows = P.token_rows(case, dst_arrays)
        want = [r.copy() for r in rows]
        for w, r in zip(want, rows):
            w[0:4] = r[20:24]  # chunk 0 (tokens 0-3, from block 5) into block 0; nothing else
        _assert_rows(case, _bits(dst), want, "caches after a corrupt chunk 1")


def test_prefix_store_without_master_is_peer_gone():
    _, dst = _caches(CASE, 8, 4, 1)
    port = disagg._mooncake.free_port()
    t = time.monotonic()
    with pytest.raises(disagg.PeerGone, match="no mooncake_master"):
        disagg.KVPrefixStore(dst, "separate", master_address=f"127.0.0.1:{port}", model_id="m", setup_timeout=0.5)
    assert time.monotonic() - t < 3


def test_prefix_chunk_hashes_chain():
    """Keys depend on every earlier token (a hash chain), on the salt, and only whole chunks get one."""
    a = disagg.prefix_chunk_hashes([1, 2, 3, 4, 5], 2, b"s")
    b = disagg.prefix_chunk_hashes([1, 2, 3, 4], 2, b"s")
    c = disagg.prefix_chunk_hashes([9, 2, 3, 4], 2, b"s")
    d = disagg.prefix_chunk_hashes([1, 2, 3, 4], 2, b"t")
    assert len(a) == 2 and a == b and c[1] != a[1] and d[0] != a[0]
    import hashlib

    h0 = hashlib.sha256(b"s" + np.array([1, 2], "<i8").tobytes()).digest()
    assert a[0] == h0.hex()
    assert a[1] == hashlib.sha256(h0 + np.array([3, 4], "<i8").tobytes()).hexdigest()


# ------------------------------------------------------------------------------------------ direct sender path
def _direct_round_trip(peer, tmp_path, case, T, src_blocks, dst_blocks, bs, min_bytes, direct=True, before_send=None,
                       chunk_tokens=5, keep=None):
    """Send from this process (direct or gathered) into the peer's receiver; returns (sender result,
    receiver result), after checking the peer's caches bit for bit against the expected rows."""
    nb, src_seed, dst_seed = 10, 51, 52
    src_arrays = P.make_arrays(case, nb, bs, src_seed)
    dst_arrays = P.make_arrays(case, nb, bs, dst_seed)
    fmt, _, layout = P.CASES[case][:3]
    peer.call(cmd="caches", case=case, num_blocks=nb, block_size=bs, seed=dst_seed)
    addr = peer.call(cmd="receiver", max_tokens=40)["address"]
    src = P.to_tensors(src_arrays)
    with disagg.KVSender(src, fmt, cache_layout=layout, chunk_tokens=chunk_tokens, direct=direct,
                         **P.endpoint_kw(case)) as tx:
        tx.direct_min_bytes = min_bytes
        if before_send is not None:
            src_arrays = before_send(tx, src, src_arrays)
        expected = _expected(case, dst_arrays, src_arrays, disagg.slots_from_blocks(src_blocks, bs, T),
                             disagg.slots_from_blocks(dst_blocks, bs, T))
        peer.start(cmd="receive", block_ids=dst_blocks, timeout=30)
        sres = tx.send(addr, src_blocks, T, timeout=30)
        if keep is not None:
            keep["regions"] = dict(tx._cache_regions)
    rres = peer.wait(30)
    assert rres["ok"], rres
    peer.call(cmd="dump", path=str(tmp_path / "rx.npz"))
    _assert_rows(case, _load_dump(tmp_path / "rx.npz", dst_arrays), expected, f"{case}: receiver after a direct send")
    return sres, rres["result"]


@pytest.mark.parametrize("case, min_bytes", [("separate_bf16_bsnd", 0), ("merged_fp16_bsnd", 0), ("mla_fp32", 0),
                                             ("dsa_int8", 32)])
def test_direct_send_reads_the_cache_rows(peer, tmp_path, case, min_bytes):
    """The sender's direct path (cpu backend, BSND): Mooncake reads runs of consecutive slots straight
    from the registered caches into the peer's staging buffer; blocks [2, 3] are consecutive (one run),
    a chunk border cuts a block. With min_bytes=0 every piece is a direct write (no byte staged); for
    DSA (rows of 16 / 4 / 8 bytes, 4-token blocks) the 32-byte threshold mixes direct and staged pieces.
    The receiver's caches get the rows bit for bit."""
    T, bs = 13, 4
    src_blocks, dst_blocks = [2, 3, 7, 0], [8, 1, 4, 6]
    sres, rres = _direct_round_trip(peer, tmp_path, case, T, src_blocks, dst_blocks, bs, min_bytes)
    assert sres["path"] == "direct" and rres["chunks"] == sres["chunks"] == 3
    fmt, _, _, L, planes = P.CASES[case]
    # per chunk of 5 tokens (slots 8..12 | 13..15, 28, 29 | 30, 31, 0): runs 1 | 2 | 2 -> 5 runs per plane and layer
    if min_bytes == 0:
        assert sres["requests"] == 5 * len(planes) * L and sres["staged_bytes"] == 0
    else:  # staged pieces next to each other go as one write
        assert 0 < sres["staged_bytes"] < sres["nbytes"] and sres["requests"] < 5 * len(planes) * L


def test_direct_send_waits_for_pending_writes_and_follows_a_moved_cache(peer, tmp_path):
    """Mooncake reads the caches behind MindSpore's back, so send() must first wait for the ops still
    writing them (an h2d load launched just before the send), and must see a cache whose memory moved
    (Parameter.set_data) since the last send (re-registered at its new address)."""
    import ms_kvcache
    from mindspore import Tensor

    case, T, bs = "separate_bf16_bsnd", 12, 4
    fmt, _, layout, L, planes = P.CASES[case]
    src_blocks, dst_blocks = [4, 5, 6], [0, 9, 3]

    def write_then_send(tx, src, arrays):
        tx._register_caches()  # as a previous send did: the caches' memory is registered
        old = src[1][1].data_ptr()
        assert old in tx._cache_regions
        moved = np.ascontiguousarray(P.make_arrays(case, 10, bs, 77)[1][1])
        src[1][1].set_data(Tensor.from_numpy(moved.copy()))  # layer 1's value cache moves to other memory
        assert src[1][1].data_ptr() != old
        arrays[1] = (arrays[1][0], moved)
        box["moved"] = src[1][1].data_ptr()
        # then overwrite slots 16..27 (blocks 4-6) of every layer with new rows through an h2d op (async)
        h = planes[0][0] * planes[0][1]
        rng = np.random.default_rng(78)
        buf = rng.integers(0, 1 << 16, size=(2, L, T, h), dtype=np.uint16).view(arrays[0][0].dtype)
        slots = disagg.slots_from_blocks(src_blocks, bs, T)
        ms_kvcache.multi_layer_kv_transfer(Tensor.from_numpy(buf.copy()), src, Tensor(slots), kv_format=fmt,
                                           direction="h2d", cache_layout=layout)
        out = []
        for l, (k, v) in enumerate(arrays):
            k, v = k.copy(), v.copy()
            for p, a in enumerate((k, v)):
                a.reshape(-1, h)[slots] = buf[p, l]
            out.append((k, v))
        return out

    box = {}
    sres, _ = _direct_round_trip(peer, tmp_path, case, T, src_blocks, dst_blocks, bs, 0, before_send=write_then_send,
                                 keep=box)
    assert sres["path"] == "direct" and sres["staged_bytes"] == 0
    assert box["moved"] in box["regions"] and len(box["regions"]) == 2 * L  # the old range was unregistered


def test_gather_path_still_round_trips(peer, tmp_path):
    """direct=False: the gather (d2h into the registered buffer) path, on the same BSND caches."""
    sres, _ = _direct_round_trip(peer, tmp_path, "separate_bf16_bsnd", 13, [2, 3, 7, 0], [8, 1, 4, 6], 4, 0,
                                 direct=False)
    assert sres["path"] == "gather" and sres["requests"] == sres["chunks"] == 3
    assert sres["staged_bytes"] == sres["nbytes"]


def test_direct_path_choice_and_block_aligned_chunks():
    """direct=None picks the direct path for BSND caches on the cpu backend and the gather for BNSD;
    direct=True where it cannot work is a ValueError naming the argument; the default chunks of the
    direct path end on block borders (no run of rows cut), ramped."""
    _, src = _caches(CASE, 64, 4, 1)
    with disagg.KVSender(src, "separate") as tx:
        assert tx.path == "direct" and tx.direct_reason == ""
        tx.chunk_tokens = 16  # 4 blocks
        sizes = tx.chunk_sizes(203)
        assert sum(sizes) == 203 and all(n % 4 == 0 for n in sizes[:-1]) and sizes[0] < 16 and max(sizes) == 16
    bnsd = P.to_tensors(P.make_arrays("merged_fp16_bnsd", 8, 4, 1))
    with disagg.KVSender(bnsd, "merged", cache_layout="BNSD") as tx:
        assert tx.path == "gather" and "BNSD" in tx.direct_reason
    with pytest.raises(ValueError, match=r"KVSender: argument 'direct': expected caches Mooncake can read directly.*BNSD"):
        disagg.KVSender(bnsd, "merged", cache_layout="BNSD", direct=True)
    with pytest.raises(ValueError, match=r"KVSender: argument 'direct': expected None, True or False, got 'yes'"):
        disagg.KVSender(src, "separate", direct="yes")
    with disagg.KVSender(src, "separate", direct=False) as tx:
        assert tx.path == "gather" and tx.chunk_sizes(37) == disagg._layout.ramp_chunk_sizes(37, tx.chunk_tokens)


@pytest.mark.parametrize("algo", ["xxh3_64", "crc32"])
def test_checksum_stream_equals_the_checksum_of_the_concatenation(algo):
    rng = np.random.default_rng(5)
    parts = [rng.integers(0, 256, n, dtype=np.uint8) for n in (0, 1, 31, 4096, 100003)]
    h = disagg._layout.ChecksumStream(algo)
    for p in parts:
        h.update(p)
    assert h.value() == disagg.checksum(np.concatenate(parts), algo)
    with pytest.raises(ValueError, match="algo"):
        disagg._layout.ChecksumStream("md5")


def test_receiver_chunk_ops_check_once_then_launch_directly(monkeypatch):
    """The receiver's per-chunk op calls (handoff._ChunkOps): the first of each direction goes through
    multi_layer_kv_transfer with all its checks, the later ones launch the kernel directly; the rows they
    move are the same as a numpy gather / scatter (bit for bit)."""
    from mindspore import Tensor

    from ms_kvcache import _custom
    from ms_kvcache.disagg import handoff as H
    from ms_kvcache.disagg._layout import HostStaging, KVLayout, wait_ops

    if not _custom.fast_path_available()[0]:
        pytest.skip(f"no PyNative fast path: {_custom.fast_path_available()[1]}")
    rng = np.random.default_rng(3)
    nb, bs, L, heads, d = 6, 4, 3, 2, 8
    keys = [rng.standard_normal((nb, bs, heads, d)).astype(np.float16) for _ in range(L)]
    vals = [rng.standard_normal((nb, bs, heads, d)).astype(np.float16) for _ in range(L)]
    caches = [(Tensor(k), Tensor(v)) for k, v in zip(keys, vals)]
    lay = KVLayout.from_caches(caches, "separate")
    st = HostStaging(nb * bs * lay.bytes_per_token)
    public = []
    real = H._transfer
    monkeypatch.setattr(H, "_transfer", lambda *a: (public.append(a[4]), real(*a))[1])  # a[4]: direction
    ops = H._ChunkOps(lay, caches)
    src = np.array([9, 10, 11, 2, 3], np.int64)  # two chunks of a d2h
    ops(st.chunk_tensor(lay, 0, 3), src[:3], "d2h")
    ops(st.chunk_tensor(lay, 3 * lay.bytes_per_token, 2), src[3:], "d2h")
    wait_ops()
    dst = np.array([20, 0, 1, 21, 22], np.int64)
    ops(st.chunk_tensor(lay, 0, 3), dst[:3], "h2d")
    ops(st.chunk_tensor(lay, 3 * lay.bytes_per_token, 2), dst[3:], "h2d")
    wait_ops()
    assert public == ["d2h", "h2d"]  # one checked call per direction, the rest direct
    for lyr, (k, v) in enumerate(caches):
        for plane, (t, ref) in enumerate(((k, keys[lyr]), (v, vals[lyr]))):
            want = ref.reshape(nb * bs, heads, d).copy()
            want[dst] = ref.reshape(nb * bs, heads, d)[src]
            np.testing.assert_array_equal(t.asnumpy().reshape(nb * bs, heads, d).view(np.uint16),
                                          want.view(np.uint16), err_msg=f"layer {lyr} plane {plane}")
    st.close()


def test_sender_writes_stay_within_the_byte_window(monkeypatch):
    """handoff._Writes submits a write only while at most one is in flight or the bytes in flight plus it
    fit WINDOW_BYTES (so a write larger than the window still goes, with one other), so the chunks complete
    in order; each chunk's message goes once all its writes
    completed, in chunk order, with its checksum. A fake engine completes a write on its 3rd poll."""
    from ms_kvcache.disagg import handoff as H

    monkeypatch.setattr(H, "WINDOW_BYTES", 10, raising=False)
    monkeypatch.setattr(H, "_POLL_SLEEP", 0)
    monkeypatch.setattr(H, "_WINDOW_SLEEP", 0)

    class Engine:
        def __init__(self):
            self.polls, self.sizes, self.live, self.over, self.peak = {}, {}, set(), [], 0

        def submit_write(self, peer, src, dst, n, what=""):
            live = sum(self.sizes[b] for b in self.live)
            if len(self.live) >= 2 and live + n > 10:  # two or more in flight and beyond the window
                self.over.append((len(self.live), live, n))
            self.peak = max(self.peak, live + n)
            bid = len(self.sizes) + 1
            self.sizes[bid] = n
            self.live.add(bid)
            return bid

        def poll(self, bid, what="", peer=""):
            self.polls[bid] = self.polls.get(bid, 0) + 1
            if self.polls[bid] >= 3:
                self.live.discard(bid)
                return True
            return False

    class Client:
        def __init__(self):
            self.sent = []

        def send(self, msg):
            self.sent.append(msg)

        def recv(self, deadline):
            return None

    eng, client = Engine(), Client()
    plan = [(0, 1, 0, 12), (1, 2, 12, 8), (2, 3, 20, 8)]
    w = H._Writes("op", "r", eng, "peer", client, "s", plan, time.monotonic() + 30, 30, None)
    w.submit(0, 0, 0, 12)  # alone it may exceed the window
    w.close_chunk(0, 100)
    for k in range(4):
        w.submit(1, 12 + 2 * k, 12 + 2 * k, 2)
    w.close_chunk(1, 101)
    for k in range(2):
        w.submit(2, 20 + 4 * k, 20 + 4 * k, 4)
    w.close_chunk(2, 102)
    w.wait(0)
    assert not eng.over, eng.over  # (writes in flight, their bytes, the new write's) of each violation
    assert eng.peak == 14  # the 2-byte write joined the 12-byte one alone in flight, nothing more did
    assert [(m["index"], m["checksum"]) for m in client.sent] == [(0, 100), (1, 101), (2, 102)]
    assert w.inflight == 0 and not w.queue and w.count == 7


def test_bench_ablation_rows_are_marked_and_the_code_is_put_back():
    """``bench_disagg.py --ablate``: its diagnostic rows (checksums / load switched off) are marked as not
    being handoffs, the real handoff rows are unchanged, and the handoff code is the original again
    after the run and after an error inside an ablation."""
    from ms_kvcache.bench import disagg as B
    from ms_kvcache.disagg import handoff as H

    original = (H.checksum, H.ChecksumStream, H._ChunkOps.__call__)
    with pytest.raises(RuntimeError, match="inside"):
        with B._ablated("no checksums, no load"):
            assert H.checksum(b"abc") == 0 and H._ChunkOps.__call__ is B._no_load
            raise RuntimeError("inside")
    assert (H.checksum, H.ChecksumStream, H._ChunkOps.__call__) == original
    with pytest.raises(ValueError, match="ablation"):
        with B._ablated("no verify"):
            pass
    rows = B.run(quick=True, repeats=1, modes=("verify-all",), paths=("direct",), ablate=True, log=lambda m: None)
    assert (H.checksum, H.ChecksumStream, H._ChunkOps.__call__) == original
    assert H.checksum(b"abc") != 0
    real = [r for r in rows if not r.get("diagnostic")]
    diag = [r for r in rows if r.get("diagnostic")]
    assert len(real) == 2 and len(diag) == 6  # tokens 64 and 512: one handoff, two ablations, raw paged rows
    assert all("handoff" in r["case"] and "ablation" not in r for r in real)
    assert sorted({r["ablation"] for r in diag}) == sorted(B.ABLATIONS + (B.RAW_PAGED,))
    assert all("not a handoff" in r["case"] and r["note"].startswith("ABLATION") for r in diag)
    assert "not a handoff" in B.format_summary(rows)
