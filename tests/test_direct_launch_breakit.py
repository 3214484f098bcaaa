"""Adversarial checks of the fast path's direct launch (pyboost_module.cpp, "direct launch"): every case
runs with the direct launch on and off (queued) and compares the caches byte for byte with each other and
with a numpy reference. Cases the other direct-launch tests do not cover: caches produced by MindSpore ops
(stubs), views with a storage offset, a jit function writing the cache just before, an earlier op failing in
MindSpore's backend stage (its error stays for the next sync; the pipeline stays usable), and a long
random mix of every cache writer with built-in writes and reads."""

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, ops

import ms_kvcache
from test_direct_launch import fast  # noqa: F401  (the fixture: backend cpu, direct launch on, skip without it)

NB, BS, H, D = 5, 4, 2, 8


def _scatter(cache, rows, slots):
    out = cache.reshape((-1,) + rows.shape[1:]).copy()
    keep = slots >= 0
    out[slots[keep]] = rows[keep]
    return out.reshape(cache.shape)


def _both(fast, f):
    """f(rng) run direct and queued on the same data; returns ((result, launches) direct, queued)."""
    res = []
    for direct in (True, False):
        fast.set_direct_launch(direct)
        fast.wait_idle()
        d0, q0 = fast.launch_counts()
        out = f(np.random.default_rng(11))
        d1, q1 = fast.launch_counts()
        res.append((out, (d1 - d0, q1 - q0)))
    return res


def _data(rng, t=6):
    key = rng.standard_normal((t, H, D)).astype(np.float32)
    value = rng.standard_normal((t, H, D)).astype(np.float32)
    slots = rng.permutation(NB * BS)[:t].astype(np.int64)
    slots[t // 2] = -1
    return key, value, slots


def test_stub_caches_and_offset_views(fast):
    """Caches made by ops (ops.zeros, ops.add: stubs realised by the direct launch) and caches / key that are
    views with a storage offset into bigger tensors: the write lands in the tensor the Python object sees."""
    def f(rng):
        key, value, slots = _data(rng)
        kc = ops.zeros((NB, BS, H, D), ms.float32)
        vbig = rng.standard_normal((NB + 2, BS, H, D)).astype(np.float32)
        vbase = Parameter(Tensor(vbig), name="bk_vbase")
        vc = vbase[1:1 + NB]
        kbig = rng.standard_normal((len(slots) + 3, H, D)).astype(np.float32)
        k = Tensor(kbig)[2:2 + len(slots)]
        fast.wait_idle()
        ms_kvcache.reshape_and_cache(k, ops.add(Tensor(value), 0.0), kc, vc, Tensor(slots))
        want_v = vbig.copy()
        want_v[1:1 + NB] = _scatter(vbig[1:1 + NB], value, slots)
        assert np.array_equal(kc.asnumpy(), _scatter(np.zeros((NB, BS, H, D), np.float32), kbig[2:2 + len(slots)],
                                                     slots))
        assert np.array_equal(vbase.asnumpy(), want_v)
        return kc.asnumpy().tobytes() + vbase.asnumpy().tobytes()
    (a, la), (b, lb) = _both(fast, f)
    assert la == (1, 0) and lb == (0, 1)
    assert a == b


def test_jit_and_graph_writes_before_a_direct_write(fast):
    """A jit function assigning the cache, then a direct write, then a jit function reading it."""
    @ms.jit
    def heavy_assign(p, x):
        for _ in range(4):
            x = ops.matmul(x, x) / 16.0
        ops.assign(p, ops.reshape(x[:NB * BS, :H * D], (NB, BS, H, D)))
        return x

    @ms.jit
    def plus_one(p):
        return ops.add(p, 1.0)

    def f(rng):
        key, value, slots = _data(rng)
        kc = Parameter(Tensor(np.zeros((NB, BS, H, D), np.float32)), name="bk_jk")
        vc = Parameter(Tensor(rng.standard_normal((NB, BS, H, D)).astype(np.float32)), name="bk_jv")
        x = heavy_assign(kc, Tensor(rng.standard_normal((64, 64)).astype(np.float32) / 4))
        ms_kvcache.reshape_and_cache(Tensor(key), Tensor(value), kc, vc, Tensor(slots))
        got = plus_one(kc).asnumpy()
        base = x.asnumpy()[:NB * BS, :H * D].reshape(NB, BS, H, D)
        assert np.array_equal(got, _scatter(base, key, slots) + np.float32(1.0))
        return got.tobytes()
    (a, la), (b, lb) = _both(fast, f)
    assert lb == (0, 1)  # (the direct run may find the pipeline busy after the jit call)
    assert a == b


def _pipeline_settled(fast, timeout_s=60.0):
    """Wait until MindSpore's pipeline is idle and its queue workers are blocked (Linux: every ``*_queue``
    thread in state S), seen with the queues empty before and after. After a task fails, the worker drops
    every task it finds in its queue (AsyncRQueue::WorkerLoop, lock-free in 2.10): the queue already reads
    empty after the failed task itself is dequeued, so a task pushed before the worker's next emptiness
    check is dropped too. The worker blocks only in its wait for a new task, never inside that loop."""
    import os
    import time
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if not fast.wait_idle(timeout_s):
            return False
        try:
            tids = os.listdir("/proc/self/task")
            workers = [t for t in tids if open(f"/proc/self/task/{t}/comm").read().strip().endswith("_queue")]
            states = [open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] for t in workers]
        except OSError:  # no procfs: a grace period instead
            time.sleep(0.2)
            return fast.wait_idle(timeout_s)
        if all(s in ("S", "D") for s in states) and fast.pipeline_idle():
            return True
        time.sleep(0.002)
    return False


def test_pending_backend_error_then_writes(fast):
    """An earlier built-in op fails in MindSpore's backend stage (gather out of range; MindSpore drops the
    tasks queued behind it and keeps the error for the next sync). A later write, direct or queued, still
    writes once the pipeline has settled; the error is raised once, at the next sync, and the pipeline is
    usable afterwards."""
    seen = {}

    def f(rng):
        direct = bool(fast.set_direct_launch(True))  # (read the mode: _both set it just before)
        fast.set_direct_launch(direct)
        key, value, slots = _data(rng)
        kc0 = rng.standard_normal((NB, BS, H, D)).astype(np.float32)
        kc = Parameter(Tensor(kc0), name="bk_ek")
        vc = Parameter(Tensor(np.zeros((NB, BS, H, D), np.float32)), name="bk_ev")
        ops.gather(Tensor(np.ones((4, 3), np.float32)), Tensor(np.array([100], np.int32)), 0)
        # until the failed task and the tasks MindSpore drops behind it are gone (a bounded 200 x 5 ms poll
        # was too short under load, and "all queues empty" alone leaves the drop loop's last check open)
        assert _pipeline_settled(fast), "MindSpore's pipeline did not settle within 60 s"
        d0 = fast.launch_counts()
        ms_kvcache.reshape_and_cache(Tensor(key), Tensor(value), kc, vc, Tensor(slots))
        d1 = fast.launch_counts()
        with pytest.raises(RuntimeError, match="Gather"):
            kc.asnumpy()
        got = kc.asnumpy()  # the error was raised once
        how = f"direct launch {'on' if direct else 'off'}, launched (direct, queued) = " \
              f"{(d1[0] - d0[0], d1[1] - d0[1])}"
        if not direct and np.array_equal(got, kc0):
            # the queued write landed in MindSpore's drop loop after all (its error was raised above)
            seen["dropped"] = how
            return None
        assert np.array_equal(got, _scatter(kc0, key, slots)), \
            f"{how}: cache {'untouched' if np.array_equal(got, kc0) else 'holds other values'}"
        ms_kvcache.reshape_and_cache(Tensor(value), Tensor(key), kc, vc, Tensor(slots))
        assert np.array_equal(ops.add(vc, 0.0).asnumpy(), _scatter(np.zeros_like(kc0), key, slots)), how
        return got.tobytes() + vc.asnumpy().tobytes()
    (a, la), (b, lb) = _both(fast, f)
    assert la[0] >= 1 and lb[0] == 0
    if "dropped" in seen:
        pytest.skip(f"MindSpore dropped the queued write behind the failed gather ({seen['dropped']}); the "
                    "direct run wrote")
    assert a == b


def test_random_mix_matches_queued_and_numpy(fast):
    """150 random steps of reshape_and_cache / _merged / copy_blocks / swap_blocks (same cache) / ops.assign /
    Tensor.copy_, inputs from Tensor(), ops.add or ops.cast, random waits and reads by built-in ops."""
    def f(rng):
        kc = rng.standard_normal((NB, BS, H, D)).astype(np.float32)
        vc = rng.standard_normal((NB, BS, H, D)).astype(np.float32)
        mg = rng.standard_normal((2, NB, BS, H, D)).astype(np.float32)
        K, V = Parameter(Tensor(kc), name="bk_mk"), Parameter(Tensor(vc), name="bk_mv")
        M = Tensor(mg.copy())
        for i in range(150):
            op, t, prod = int(rng.integers(0, 6)), int(rng.integers(0, 7)), int(rng.integers(0, 3))
            key, value, _ = _data(rng, max(t, 1))
            key, value = key[:t], value[:t]
            slots = rng.permutation(NB * BS)[:t].astype(np.int64)
            if t:
                slots[rng.integers(0, t)] = -1

            def mk(a):
                if prod == 1:
                    return ops.add(Tensor(a), 0.0)
                if prod == 2:
                    return ops.cast(Tensor(a.astype(np.float64)), ms.float32)
                return Tensor(a)
            if rng.random() < 0.3:
                fast.wait_idle()
            bm = np.stack([rng.integers(0, NB, 3), rng.integers(0, NB, 3)], 1).astype(np.int64)
            if op == 0:
                ms_kvcache.reshape_and_cache(mk(key), mk(value), K, V, Tensor(slots))
                kc, vc = _scatter(kc, key, slots), _scatter(vc, value, slots)
            elif op == 1:
                ms_kvcache.reshape_and_cache_merged(mk(key), mk(value), M, Tensor(slots))
                mg = np.stack([_scatter(mg[0], key, slots), _scatter(mg[1], value, slots)])
            elif op == 2:
                ms_kvcache.copy_blocks([K], [V], Tensor(bm))
                for s, d in bm:
                    kc[d], vc[d] = kc[s], vc[s]
            elif op == 3:
                ms_kvcache.swap_blocks(K, K, Tensor(bm))
                for s, d in bm:
                    kc[d] = kc[s]
            elif op == 4:
                kc = rng.standard_normal(kc.shape).astype(np.float32)
                ops.assign(K, Tensor(kc))
            else:
                x = rng.standard_normal(kc.shape).astype(np.float32)
                K.copy_(ops.add(K, Tensor(x)))
                kc = kc + x
            rd = int(rng.integers(0, 4))
            if rd == 0:
                assert np.array_equal(K.asnumpy(), kc), f"step {i} op {op}"
            elif rd == 1:
                assert np.array_equal(ops.add(V, 0.0).asnumpy(), vc), f"step {i} op {op}"
            elif rd == 2:
                assert np.array_equal(M[1].asnumpy(), mg[1]), f"step {i} op {op}"
        assert np.array_equal(K.asnumpy(), kc) and np.array_equal(V.asnumpy(), vc)
        assert np.array_equal(M.asnumpy(), mg)
        return K.asnumpy().tobytes() + V.asnumpy().tobytes() + M.asnumpy().tobytes()
    (a, la), (b, lb) = _both(fast, f)
    assert la[0] > 0 and lb[0] == 0
    assert a == b
