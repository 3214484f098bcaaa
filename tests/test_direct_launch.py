"""The fast path's direct launch (ms_kvcache/csrc/pyboost_module.cpp, "direct launch"): a cache writer runs
at once on the calling thread when MindSpore's PyNative pipeline is idle, else it is queued; either way the
op is ordered after every earlier op and before every later one, and its values are those of a numpy
reference."""
import ml_dtypes
import numpy as np
import pytest
from mindspore import Parameter, Tensor, ops

import ms_kvcache

from _replay import direct_launch_context



@pytest.fixture
def fast():
    yield from direct_launch_context("run_or_queue")


def _mla(rng, t=6, nb=3, bs=4, r=32, p=8):
    kv_c = rng.standard_normal((t, r)).astype(ml_dtypes.bfloat16)
    k_pe = rng.standard_normal((t, p)).astype(ml_dtypes.bfloat16)
    cc = rng.standard_normal((nb, bs, r)).astype(ml_dtypes.bfloat16)
    pc = rng.standard_normal((nb, bs, p)).astype(ml_dtypes.bfloat16)
    slots = np.array([nb * bs - 1, 0, -1, 6, 5, 2], np.int64)[:t]
    return kv_c, k_pe, cc, pc, slots


def _want(cache, rows, slots):
    out = cache.reshape(-1, cache.shape[-1]).copy()
    keep = slots >= 0
    out[slots[keep]] = rows[:len(slots)][keep]
    return out.reshape(cache.shape)


def _bits(t):
    return t.asnumpy().view(np.uint16)


def test_idle_pipeline_launches_directly_with_the_reference_values(fast):
    rng = np.random.default_rng(3)
    kv_c, k_pe, cc, pc, slots = _mla(rng)
    caches = [Parameter(Tensor(cc), name="dl_cc"), Parameter(Tensor(pc), name="dl_pc")]
    fast.wait_idle()
    d0, q0 = fast.launch_counts()
    ms_kvcache.concat_and_cache_mla(Tensor(kv_c), Tensor(k_pe), *caches, Tensor(slots))
    d1, q1 = fast.launch_counts()
    assert (d1 - d0, q1 - q0) == (1, 0)
    assert np.array_equal(_bits(caches[0]), _want(cc, kv_c, slots).view(np.uint16))
    assert np.array_equal(_bits(caches[1]), _want(pc, k_pe, slots).view(np.uint16))


def test_switch_off_queues_every_call(fast):
    rng = np.random.default_rng(4)
    kv_c, k_pe, cc, pc, slots = _mla(rng)
    caches = [Parameter(Tensor(cc), name="dq_cc"), Parameter(Tensor(pc), name="dq_pc")]
    fast.wait_idle()
    fast.set_direct_launch(False)
    d0, q0 = fast.launch_counts()
    ms_kvcache.concat_and_cache_mla(Tensor(kv_c), Tensor(k_pe), *caches, Tensor(slots))
    d1, q1 = fast.launch_counts()
    assert (d1 - d0, q1 - q0) == (0, 1)
    assert np.array_equal(_bits(caches[0]), _want(cc, kv_c, slots).view(np.uint16))


def test_order_with_pending_ops_before_and_after(fast):
    """Inputs produced by pending MindSpore ops (kv_c = x + 1, k_pe = y * 2), an earlier op writing a cache
    (ops.assign) and a later op reading one: the write sees the earlier ops' results and lands after the
    assign, and the later op sees the write, in a loop where some calls find the pipeline busy (queued) and
    some idle (direct)."""
    rng = np.random.default_rng(5)
    t, nb, bs, r, p = 6, 3, 4, 32, 8
    cc = np.zeros((nb, bs, r), np.float32)
    pc = np.zeros((nb, bs, p), np.float32)
    caches = [Parameter(Tensor(cc), name="do_cc"), Parameter(Tensor(pc), name="do_pc")]
    want_c, want_p = cc.copy(), pc.copy()
    reads = []
    for step in range(8):
        x = rng.standard_normal((t, r)).astype(np.float32)
        y = rng.standard_normal((t, p)).astype(np.float32)
        slots = rng.permutation(nb * bs)[:t].astype(np.int64)
        slots[step % t] = -1
        base = rng.standard_normal((nb, bs, p)).astype(np.float32)
        ops.assign(caches[1], Tensor(base))  # an earlier op writing the cache: the write must land after it
        want_p = base
        kv_c = ops.add(Tensor(x), 1.0)  # pending op outputs
        k_pe = ops.mul(Tensor(y), 2.0)
        if step % 2:
            fast.wait_idle()  # odd steps: the producers have finished, the write can run at once
        before = fast.launch_counts()[0]
        ms_kvcache.concat_and_cache_mla(kv_c, k_pe, *caches, Tensor(slots))
        if step % 2:  # the finished ops' outputs were realised and the kernel ran at once
            assert fast.launch_counts()[0] == before + 1, f"step {step}: not launched directly"
        reads.append(ops.mul(caches[0], 1.0))  # a later op reading the cache
        want_c = _want(want_c, x + 1.0, slots)
        want_p = _want(want_p, y * 2.0, slots)
        assert np.array_equal(reads[-1].asnumpy(), want_c), f"step {step}"
        assert np.array_equal(caches[1].asnumpy(), want_p), f"step {step}"
    d, q = fast.launch_counts()
    assert d > 0 and q >= 0


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_quantizing_writes_launch_directly(fast, mode):
    """reshape_and_cache into int8 caches (absent optional inputs are empty [0] tensors) also runs at once."""
    rng = np.random.default_rng(6)
    t, nb, bs, h, d = 5, 2, 4, 2, 16
    key = rng.standard_normal((t, h, d)).astype(np.float32)
    value = rng.standard_normal((t, h, d)).astype(np.float32)
    slots = np.array([7, 0, -1, 3, 5], np.int64)
    kc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name=f"dq_kc_{mode}")
    vc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name=f"dq_vc_{mode}")
    if mode == "static":
        scale = np.float32(0.03)
        kw = dict(k_scale=Tensor(np.array(scale)), v_scale=Tensor(np.array(scale)))
    else:
        kw = dict(k_scale_cache=Parameter(Tensor(np.zeros((nb, bs, h, 1), np.float32)), name="dq_ksc"),
                  v_scale_cache=Parameter(Tensor(np.zeros((nb, bs, h, 1), np.float32)), name="dq_vsc"))
    fast.wait_idle()
    d0, _ = fast.launch_counts()
    ms_kvcache.reshape_and_cache(Tensor(key), Tensor(value), kc, vc, Tensor(slots), **kw)
    assert fast.launch_counts()[0] == d0 + 1
    if mode == "static":
        codes = np.clip(np.rint(key / scale), -128, 127).astype(np.int8)
    else:
        s = (np.abs(key).max(-1, keepdims=True) / np.float32(127)).astype(np.float32)
        codes = np.clip(np.rint(key / s), -128, 127).astype(np.int8)
        got_s = kw["k_scale_cache"].asnumpy().reshape(nb * bs, h)
        assert np.array_equal(got_s[slots[slots >= 0]], s[slots >= 0, :, 0])
    got = kc.asnumpy().reshape(nb * bs, h, d)
    assert np.array_equal(got[slots[slots >= 0]], codes[slots >= 0])
    assert not got[1].any() and not got[2].any()  # slots never written stay 0


def test_errors_keep_their_messages(fast):
    """A bad slot raises the wrapper's ValueError before any launch, direct launch or not; nothing is written."""
    rng = np.random.default_rng(7)
    kv_c, k_pe, cc, pc, slots = _mla(rng)
    caches = [Parameter(Tensor(cc), name="de_cc"), Parameter(Tensor(pc), name="de_pc")]
    bad = slots.copy()
    bad[1] = 12
    fast.wait_idle()
    with pytest.raises(ValueError, match=r"concat_and_cache_mla: argument 'slot_mapping': expected every slot < "
                                         r"num_blocks\*block_size = 12, got 12 at index 1"):
        ms_kvcache.concat_and_cache_mla(Tensor(kv_c), Tensor(k_pe), *caches, Tensor(bad))
    assert np.array_equal(_bits(caches[0]), cc.view(np.uint16))


def test_wait_idle_sleeps_longer_as_the_wait_goes_on():
    """wait_idle polls MindSpore's pipeline with a sleep that doubles from poll_us to max_poll_us: a wait of ~100 ms
    wakes the thread every ~0.3 ms, not every ~0.1 ms (a fixed 20 us sleep plus the timer slack; each wake-up takes
    the CPU from whatever else runs there, e.g. a layer-wise copy worker, and the pipeline ran ~1.3x slower). Counted
    as the thread's voluntary context switches."""
    import threading

    from ms_kvcache import _custom

    mod = _custom._fast_module()  # noqa: SLF001
    if mod is None or not hasattr(mod, "wait_idle"):
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    tid = threading.get_native_id()

    def switches():
        with open(f"/proc/self/task/{tid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))

    a = Tensor(np.random.default_rng(0).random((1024, 1024), dtype=np.float32))
    a.asnumpy()
    import time

    t = time.perf_counter()
    for _ in range(30):
        a = ops.matmul(a, a) * 1e-3
    s0 = switches()
    assert mod.wait_idle()
    waited, n = time.perf_counter() - t, switches() - s0
    if waited < 0.03:
        pytest.skip(f"the pipeline was busy for {waited * 1e3:.1f} ms only: too short to tell")
    assert n < waited / 200e-6, f"{n} wake-ups in a {waited * 1e3:.0f} ms wait"  # a fixed 20 us sleep: ~110 us each
    assert mod.wait_idle(1.0, 20.0, 20.0)  # max_poll_us <= poll_us: a fixed sleep


@pytest.mark.parametrize("kwargs, name", [
    ({"poll_us": 0.0}, "poll_us"), ({"poll_us": -5.0}, "poll_us"), ({"poll_us": float("nan")}, "poll_us"),
    ({"poll_us": 1e30}, "poll_us"), ({"max_poll_us": float("inf")}, "max_poll_us"),
    ({"max_poll_us": -1.0}, "max_poll_us"), ({"timeout_s": float("nan")}, "timeout_s"),
    ({"timeout_s": float("inf")}, "timeout_s"), ({"timeout_s": -1.0}, "timeout_s"),
])
def test_wait_idle_refuses_arguments_that_spin_or_never_time_out(kwargs, name):
    """poll_us <= 0 would busy-wait (sleep_for(0) in a loop), a NaN / inf timeout never expires, and values beyond
    int64 microseconds are undefined in the cast: refused with a ValueError naming the argument, even when the
    pipeline is idle (so a bad call is seen at once, not only under load)."""
    from ms_kvcache import _custom

    mod = _custom._fast_module()  # noqa: SLF001
    if mod is None or not hasattr(mod, "wait_idle"):
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    with pytest.raises(ValueError, match=rf"wait_idle: argument '{name}'"):
        mod.wait_idle(**kwargs)
    assert mod.wait_idle(0.0) in (True, False) and mod.wait_idle(1.0, 1.0, 0.0)  # the bounds themselves are valid


def test_wait_idle_returns_at_its_timeout_with_a_long_poll():
    """A poll sleep longer than the timeout does not extend the wait much past it (the last sleep is cut at the
    timeout)."""
    import time

    from ms_kvcache import _custom

    mod = _custom._fast_module()  # noqa: SLF001
    if mod is None or not hasattr(mod, "wait_idle"):
        pytest.skip("the PyNative fast path (ms_kvcache._cpu_pyboost) is not available")
    a = Tensor(np.random.default_rng(0).random((1024, 1024), dtype=np.float32))
    a.asnumpy()
    for _ in range(40):
        a = ops.matmul(a, a) * 1e-3
    t = time.perf_counter()
    idle = mod.wait_idle(0.01, 900000.0, 900000.0)  # 10 ms timeout, 0.9 s poll sleep
    waited = time.perf_counter() - t
    mod.wait_idle()
    if idle and waited < 0.01:
        pytest.skip("the pipeline was idle before the timeout: nothing to tell")
    assert waited < 0.5, f"waited {waited:.3f} s for a 10 ms timeout"
