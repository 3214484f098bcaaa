"""EagerOp's replayed calls (ms_kvcache/_eager.py "Replayed calls", ms_kvcache/csrc/pyboost_module.cpp
"replayed calls"): once the Python checks accept a signature, later calls with it are checked and launched
in C++. Every value the Python path checks per call is still checked: a bad slot, scale, offset, aliased or
non-contiguous cache after a replayed call raises the same error, writes nothing, and a good call after it
writes the numpy reference values through the plan."""
import ml_dtypes
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_kvcache
from ms_kvcache import _custom

from _replay import direct_launch_context, hits, plans


@pytest.fixture
def fast():
    yield from direct_launch_context("Plan")


_plans, _hits = plans, hits


def _quant_ref(x, scale):
    return np.clip(np.rint(x / np.float32(scale)), -128, 127).astype(np.int8)


def test_mla_replay_hits_and_still_rejects_bad_slots_and_aliases(fast):
    rng = np.random.default_rng(11)
    t, nb, bs, r, p = 4, 3, 4, 32, 8
    kv_c = rng.standard_normal((t, r)).astype(ml_dtypes.bfloat16)
    k_pe = rng.standard_normal((t, p)).astype(ml_dtypes.bfloat16)
    cc = Parameter(Tensor(np.zeros((nb, bs, r), ml_dtypes.bfloat16)), name="rp_cc")
    pc = Parameter(Tensor(np.zeros((nb, bs, p), ml_dtypes.bfloat16)), name="rp_pc")
    args = (Tensor(kv_c), Tensor(k_pe), cc, pc)
    fast.wait_idle()
    ms_kvcache.concat_and_cache_mla(*args, Tensor(np.array([0, 1, 2, 3], np.int64)))  # recorded
    h0 = _hits("concat_and_cache_mla")
    slots = np.array([5, -1, 11, 7], np.int64)
    ms_kvcache.concat_and_cache_mla(*args, Tensor(slots))
    assert _hits("concat_and_cache_mla") == h0 + 1, "the second call with one signature was not replayed"
    got = cc.asnumpy().reshape(-1, r).view(np.uint16)
    for i, s in enumerate(slots):
        if s >= 0:
            assert np.array_equal(got[s], kv_c[i].view(np.uint16))
    before_c, before_p = cc.asnumpy().copy(), pc.asnumpy().copy()
    with pytest.raises(ValueError, match=r"concat_and_cache_mla: argument 'slot_mapping': expected every slot < "
                                         r"num_blocks\*block_size = 12, got 12 at index 2"):
        ms_kvcache.concat_and_cache_mla(*args, Tensor(np.array([4, 6, 12, 8], np.int64)))
    with pytest.raises(ValueError, match=r"argument 'slot_mapping': expected distinct non-negative slots, got slot 6 "
                                         r"at indices \[1, 3\]"):
        ms_kvcache.concat_and_cache_mla(*args, Tensor(np.array([4, 6, 9, 6], np.int64)))
    same = Parameter(Tensor(np.zeros((nb, bs, r), ml_dtypes.bfloat16)), name="rp_same")
    with pytest.raises(ValueError, match=r"argument 'k_pe_cache': expected a distinct cache tensor"):
        ms_kvcache.concat_and_cache_mla(Tensor(kv_c), Tensor(kv_c), same, same, Tensor(slots))
    assert np.array_equal(cc.asnumpy(), before_c) and np.array_equal(pc.asnumpy(), before_p)
    # direct launch off: the Python path queues the call (no replay), same values
    old = fast.set_direct_launch(False)
    try:
        h1 = _hits("concat_and_cache_mla")
        ms_kvcache.concat_and_cache_mla(*args, Tensor(np.array([8, 9, 10, 11], np.int64)))
        got = cc.asnumpy().reshape(-1, r).view(np.uint16)
        assert _hits("concat_and_cache_mla") == h1 and np.array_equal(got[8:12], kv_c.view(np.uint16))
    finally:
        fast.set_direct_launch(old)


def test_rac_replay_rejects_a_non_contiguous_cache_and_keeps_two_signatures(fast):
    rng = np.random.default_rng(12)
    nb, bs, h, d = 2, 4, 2, 16
    kc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.float32)), name="rp_kc")
    vc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.float32)), name="rp_vc")
    fast.wait_idle()
    for t in (1, 3, 1, 3):  # decode-like and prefill-like signatures alternate: both stay recorded
        k = rng.standard_normal((t, h, d)).astype(np.float32)
        slots = rng.permutation(nb * bs)[:t].astype(np.int32)
        ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, Tensor(slots))
        assert np.array_equal(kc.asnumpy().reshape(-1, h, d)[slots], k)
    assert _hits("reshape_and_cache") >= 2 and max(p.num_signatures for p in _plans("reshape_and_cache")) >= 2
    k = rng.standard_normal((1, h, d)).astype(np.float32)
    strided = Tensor(np.zeros((nb, h, bs, d), np.float32)).transpose(0, 2, 1, 3)  # same shape, not contiguous
    with pytest.raises(ValueError, match=r"argument 'value_cache': expected a contiguous tensor"):
        ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, strided, Tensor(np.array([0], np.int32)))


@pytest.mark.parametrize("bad, what", [(0.0, "0.0"), (-0.5, "-0.5"), (np.nan, "nan"), (np.inf, "inf")])
def test_static_quant_replay_rejects_bad_scales_and_offsets(fast, bad, what):
    rng = np.random.default_rng(13)
    t, nb, bs, h, d = 3, 2, 4, 2, 16
    key = rng.standard_normal((t, h, d)).astype(np.float32)
    kc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name="rq_kc")
    vc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name="rq_vc")
    good = np.full((h, d), 0.03, np.float32)
    slots = Tensor(np.array([1, 6, 3], np.int64))
    fast.wait_idle()
    for _ in range(2):
        ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, slots, k_scale=Tensor(good), v_scale=Tensor(good))
    h0 = _hits("reshape_and_cache_quant")
    assert h0 >= 1
    before = kc.asnumpy().copy()
    scale = good.copy()
    scale[1, 5] = bad
    with pytest.raises(ValueError, match=rf"reshape_and_cache: argument 'v_scale': expected finite values > 0, got "
                                         rf"{what} at flat index 21"):
        ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, slots, k_scale=Tensor(good),
                                     v_scale=Tensor(scale))
    off, offb = np.zeros((h, d), np.float32), np.zeros((h, d), np.float32)
    offb[0, 2] = np.nan
    ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, slots, k_scale=Tensor(good), v_scale=Tensor(good),
                                 k_offset=Tensor(off), v_offset=Tensor(off))
    ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, slots, k_scale=Tensor(good), v_scale=Tensor(good),
                                 k_offset=Tensor(off), v_offset=Tensor(off))
    if np.isfinite(bad):
        offb[0, 2] = bad  # a finite offset is fine: only the scales must be > 0
        ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, slots, k_scale=Tensor(good),
                                     v_scale=Tensor(good), k_offset=Tensor(offb), v_offset=Tensor(off))
    else:
        offb[0, 2] = bad
        with pytest.raises(ValueError, match=r"argument 'k_offset': expected finite values, got .* at flat index 2"):
            ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, slots, k_scale=Tensor(good),
                                         v_scale=Tensor(good), k_offset=Tensor(offb), v_offset=Tensor(off))
    ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, slots, k_scale=Tensor(good), v_scale=Tensor(good))
    assert _hits("reshape_and_cache_quant") > h0
    want = _quant_ref(key, 0.03)
    assert np.array_equal(kc.asnumpy().reshape(-1, h, d)[[1, 6, 3]], want)
    assert not np.array_equal(before, np.zeros_like(before))


def test_dynamic_quant_replay_writes_scales_and_rejects_a_bad_scale_cache(fast):
    rng = np.random.default_rng(14)
    t, nb, bs, h, d = 2, 2, 4, 2, 16
    kc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name="rd_kc")
    vc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name="rd_vc")
    ksc = Parameter(Tensor(np.zeros((nb, bs, h, 1), np.float32)), name="rd_ksc")
    vsc = Parameter(Tensor(np.zeros((nb, bs, h, 1), np.float32)), name="rd_vsc")
    fast.wait_idle()
    for step in range(3):
        key = rng.standard_normal((t, h, d)).astype(np.float32)
        slots = np.array([2 * step, 2 * step + 1], np.int64)
        ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, Tensor(slots), k_scale_cache=ksc,
                                     v_scale_cache=vsc)
        s = np.abs(key).max(-1) / np.float32(127)
        assert np.array_equal(ksc.asnumpy().reshape(-1, h)[slots], s.astype(np.float32))
        assert np.array_equal(kc.asnumpy().reshape(-1, h, d)[slots],
                              np.clip(np.rint(key / s[..., None]), -128, 127).astype(np.int8))
    assert _hits("reshape_and_cache_quant") >= 2
    with pytest.raises(ValueError, match=r"argument 'v_scale_cache': expected a distinct cache tensor"):
        ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, Tensor(np.array([6, 7], np.int64)),
                                     k_scale_cache=ksc, v_scale_cache=ksc)
    with pytest.raises(ValueError, match=r"argument 'slot_mapping': expected every slot < num_blocks\*block_size = 8"):
        ms_kvcache.reshape_and_cache(Tensor(key), Tensor(key), kc, vc, Tensor(np.array([6, 8], np.int64)),
                                     k_scale_cache=ksc, v_scale_cache=vsc)


def test_fast_path_off_clears_the_plans(fast):
    rng = np.random.default_rng(15)
    kc = Parameter(Tensor(np.zeros((2, 4, 1, 8), np.float32)), name="rf_kc")
    vc = Parameter(Tensor(np.zeros((2, 4, 1, 8), np.float32)), name="rf_vc")
    k = Tensor(rng.standard_normal((1, 1, 8)).astype(np.float32))
    ms_kvcache.reshape_and_cache(k, k, kc, vc, Tensor(np.array([3], np.int32)))
    assert _plans("reshape_and_cache")
    old = _custom.set_fast_path(False)
    try:
        assert not _plans("reshape_and_cache")
        ms_kvcache.reshape_and_cache(k, k, kc, vc, Tensor(np.array([4], np.int32)))
        assert not _plans("reshape_and_cache")  # ops.Custom path: nothing recorded
        assert np.array_equal(kc.asnumpy().reshape(-1, 8)[[3, 4]], np.repeat(k.asnumpy().reshape(1, 8), 2, 0))
    finally:
        _custom.set_fast_path(old)
