"""Adversarial tests of EagerOp's replayed calls (ms_kvcache/_eager.py "Replayed calls", the Plan of
ms_kvcache/csrc/pyboost_module.cpp), written by a reviewer trying to make a replayed call differ from the
Python path: memory shared between caches (numpy buffers, slices of one Parameter, scale caches over a
cache's bytes), index and scale values changed in place between calls of one signature, caches freed and
reallocated, calls from threads, other dtypes and backends.

Each case runs once with the direct launch on (the plan's path: a recorded signature) and, where it
matters, once with it off (the plan declines, the Python checks run on the fast path); the outcome (error
type and message, cache contents) must be the same and match a numpy reference.

Found bugs (both: replays silently stopped, values stayed right; fixed in ms_kvcache/_eager.py):
- BUG 1: after ``set_fast_path(False)`` / ``set_fast_path(True)`` no signature seen before was ever
  replayed again (``EagerOp._planned`` kept the keys while ``set_fast_path`` dropped the plans).
- BUG 2: a signature dropped from a full plan (17 signatures, at most 16 kept) was never recorded again.
"""
import gc
import threading

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


def _outcome(mod, op_name, f):
    """(replayed?, None or (exception type, message)) of f() started with the pipeline idle."""
    mod.wait_idle()
    h0 = _hits(op_name)
    try:
        f()
        mod.wait_idle()
        err = None
    except Exception as exc:  # noqa: BLE001 - compared below
        err = (type(exc), str(exc).split("\n")[0])
    return _hits(op_name) > h0, err


def _same_as_python_path(mod, op_name, f):
    """f() through the plan (must decline: nothing replayed) and through the Python path (direct launch off):
    the same error. Returns it."""
    replayed, err = _outcome(mod, op_name, f)
    old = mod.set_direct_launch(False)
    try:
        _, err_py = _outcome(mod, op_name, f)
    finally:
        mod.set_direct_launch(old)
    assert not replayed and err is not None and err == err_py, (replayed, err, err_py)
    return err


def _rows(x, width):
    return x.asnumpy().reshape(-1, width)


def _quant_ref(x, scale, offset=0.0):
    return np.clip(np.rint(x / np.float32(scale) - np.float32(offset)), -128, 127).astype(np.int8)


OP = "reshape_and_cache"
NB, BS, H, D = 3, 4, 1, 4


def _rac_setup(fast, rng):
    k = rng.standard_normal((2, H, D)).astype(np.float32)
    kc = Parameter(Tensor(np.zeros((NB, BS, H, D), np.float32)), name="bk_kc")
    vc = Parameter(Tensor(np.zeros((NB, BS, H, D), np.float32)), name="bk_vc")
    for _ in range(2):  # recorded, then replayed
        fast.wait_idle()
        ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, Tensor(np.array([0, 1], np.int32)))
    assert _hits(OP) >= 1
    return k, kc, vc


def test_caches_sharing_memory_are_refused_like_the_python_path(fast):
    k, _, _ = _rac_setup(fast, np.random.default_rng(20))
    slots = Tensor(np.array([0, 1], np.int32))

    def call(a, b):
        return lambda: ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), a, b, slots)

    buf = np.zeros((NB + 1, BS, H, D), np.float32)  # two caches over one numpy buffer, one block apart
    err = _same_as_python_path(fast, OP, call(Tensor.from_numpy(buf[:NB]), Tensor.from_numpy(buf[1:])))
    assert err[0] is ValueError and "argument 'value_cache': expected a distinct cache tensor" in err[1]
    same = np.zeros((NB, BS, H, D), np.float32)
    err = _same_as_python_path(fast, OP, call(Tensor.from_numpy(same), Tensor.from_numpy(same)))
    assert "expected a distinct cache tensor" in err[1]
    assert not buf.any() and not same.any()
    big = Parameter(Tensor(np.zeros((NB + 1, BS, H, D), np.float32)), name="bk_big")  # overlapping slices
    fast.wait_idle()
    replayed, err = _outcome(fast, OP, call(big[0:NB], big[1:NB + 1]))
    assert not replayed and err[0] is ValueError and "expected a distinct cache tensor" in err[1]
    assert not big.asnumpy().any()
    # disjoint parts of one buffer / Parameter: replayed, written where the reference says
    buf2 = np.zeros((2 * NB, BS, H, D), np.float32)
    s = np.array([0, 5], np.int32)
    replayed, err = _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(
        Tensor(k), Tensor(k), Tensor.from_numpy(buf2[:NB]), Tensor.from_numpy(buf2[NB:]), Tensor(s)))
    want = np.zeros((2 * NB * BS, D), np.float32)
    want[s] = k[:, 0]
    want[NB * BS + s] = k[:, 0]
    assert replayed and err is None and np.array_equal(buf2.reshape(-1, D), want)
    big2 = Parameter(Tensor(np.zeros((2 * NB, BS, H, D), np.float32)), name="bk_big2")
    fast.wait_idle()
    replayed, err = _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(
        Tensor(k), Tensor(k), big2[0:NB], big2[NB:], Tensor(s)))
    assert replayed and err is None and np.array_equal(_rows(big2, D), want)


def test_slot_values_changed_in_place_between_replayed_calls(fast):
    k, kc, vc = _rac_setup(fast, np.random.default_rng(21))
    sl = np.array([3, 4], np.int32)
    st = Tensor.from_numpy(sl)  # the tensor reads this numpy buffer: changed under the plan's feet

    def call():
        ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, st)

    assert _outcome(fast, OP, call) == (True, None)
    before = _rows(kc, D).copy()
    sl[1] = NB * BS
    err = _same_as_python_path(fast, OP, call)
    assert err == (ValueError, "reshape_and_cache: argument 'slot_mapping': expected every slot < "
                               "num_blocks*block_size = 12, got 12 at index 1")
    sl[1] = 3
    err = _same_as_python_path(fast, OP, call)
    assert err == (ValueError, "reshape_and_cache: argument 'slot_mapping': expected distinct non-negative "
                               "slots, got slot 3 at indices [0, 1]")
    assert np.array_equal(_rows(kc, D), before) and np.array_equal(_rows(vc, D), before)
    sl[:] = -1  # every token skipped: replayed, nothing written
    assert _outcome(fast, OP, call) == (True, None)
    assert np.array_equal(_rows(kc, D), before)
    sl[:] = [-7, NB * BS - 1]  # any negative slot skips; the last slot is in range
    assert _outcome(fast, OP, call) == (True, None)
    before[NB * BS - 1] = k[1, 0]
    assert np.array_equal(_rows(kc, D), before) and np.array_equal(_rows(vc, D), before)
    # through a numpy view of the tensor (asnumpy shares its memory on the CPU)
    s1 = Tensor(np.array([7, 8], np.int32))
    view = s1.asnumpy()
    if not np.shares_memory(view, s1.asnumpy()):
        return
    view[0] = 9
    assert _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, s1)) == (True, None)
    before[[9, 8]] = k[:, 0]
    assert np.array_equal(_rows(kc, D), before)
    view[0] = 100
    err = _same_as_python_path(fast, OP, lambda: ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, s1))
    assert "got 100 at index 0" in err[1] and np.array_equal(_rows(kc, D), before)


def test_other_types_and_dtypes_are_not_replayed(fast):
    k, kc, vc = _rac_setup(fast, np.random.default_rng(22))
    s = Tensor(np.array([4, 5], np.int32))
    for args, name in (((k, Tensor(k), kc, vc, s), "key"), ((Tensor(k), Tensor(k), kc, vc, np.array([4, 5], np.int32)),
                                                           "slot_mapping"),
                       ((Tensor(k), Tensor(k), kc, vc, [4, 5]), "slot_mapping")):
        replayed, err = _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(*args))
        assert not replayed and err[0] is TypeError and f"argument '{name}': expected a mindspore.Tensor" in err[1]
    # caches of another dtype, same shapes; int64 slots: new signatures, right values
    kh = Parameter(Tensor(np.zeros((NB, BS, H, D), np.float16)), name="bk_kh")
    vh = Parameter(Tensor(np.zeros((NB, BS, H, D), np.float16)), name="bk_vh")
    for step, idx in enumerate((np.int64, np.int64, np.int32)):
        slots = np.array([2 * step, 2 * step + 1], idx)
        replayed, err = _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(
            Tensor(k.astype(np.float16)), Tensor(k.astype(np.float16)), kh, vh, Tensor(slots)))
        assert err is None and replayed == (step == 1)
        assert np.array_equal(_rows(kh, D)[slots], k[:, 0].astype(np.float16))
    assert np.count_nonzero(_rows(kh, D).any(1)) == 6


@pytest.mark.parametrize("bad, ok", [(0.0, False), (-0.0, False), (-1.0, False), (np.nan, False), (np.inf, False),
                                     (1e-45, True)])
def test_static_scale_changed_in_place_between_replayed_calls(fast, bad, ok):
    rng = np.random.default_rng(23)
    nb, bs, h, d = 2, 4, 2, 8
    k = rng.standard_normal((2, h, d)).astype(np.float32)
    kc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name="bq_kc")
    vc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name="bq_vc")
    sc = np.full((h, d), 0.02, np.float32)
    of = np.zeros((h, d), np.float32)
    sct, oft = Tensor.from_numpy(sc), Tensor.from_numpy(of)

    def call(s):
        return lambda: ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, Tensor(np.array(s, np.int64)),
                                                    k_scale=sct, v_scale=sct, k_offset=oft, v_offset=oft)

    op = "reshape_and_cache_quant"
    assert _outcome(fast, op, call([0, 1]))[1] is None
    assert _outcome(fast, op, call([2, 3])) == (True, None)
    before = _rows(kc, h * d).copy()
    sc[1, 3] = bad
    if ok:  # a denormal scale is > 0: accepted, the same codes as the Python path
        assert _outcome(fast, op, call([4, 5])) == (True, None)
        got = _rows(kc, h * d)[4:6].copy()
        old = fast.set_direct_launch(False)
        try:
            assert _outcome(fast, op, call([6, 7])) == (False, None)
        finally:
            fast.set_direct_launch(old)
        assert np.array_equal(got, _rows(kc, h * d)[6:8])
        assert np.array_equal(got.reshape(2, h, d)[:, 0], _quant_ref(k[:, 0], 0.02))
        return
    err = _same_as_python_path(fast, op, call([4, 5]))
    assert err == (ValueError, f"reshape_and_cache: argument 'k_scale': expected finite values > 0, got "
                               f"{np.float32(bad)!r} at flat index 11")
    sc[1, 3] = 0.02
    for b in (np.nan, np.inf, -np.inf):
        of[0, 0] = b
        err = _same_as_python_path(fast, op, call([4, 5]))
        assert err == (ValueError, f"reshape_and_cache: argument 'k_offset': expected finite values, got "
                                   f"{np.float32(b)!r} at flat index 0")
    assert np.array_equal(_rows(kc, h * d), before)
    of[0, 0] = -3.0  # any finite offset
    assert _outcome(fast, op, call([4, 5])) == (True, None)
    want = _quant_ref(k, 0.02)
    want[:, 0, 0] = _quant_ref(k[:, 0, 0], 0.02, -3.0)
    assert np.array_equal(_rows(kc, h * d)[4:6].reshape(2, h, d), want)


def test_dynamic_scale_caches_sharing_memory_and_merged_cache(fast):
    rng = np.random.default_rng(24)
    nb, bs, h, d = 2, 4, 2, 8
    k = rng.standard_normal((2, h, d)).astype(np.float32)
    kc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name="bd_kc")
    vc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.int8)), name="bd_vc")
    ksc = Parameter(Tensor(np.zeros((nb, bs, h, 1), np.float32)), name="bd_ksc")
    vsc = Parameter(Tensor(np.zeros((nb, bs, h, 1), np.float32)), name="bd_vsc")
    op = "reshape_and_cache_quant"

    def call(s, a=kc, b=vc, c=ksc, e=vsc):
        return lambda: ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), a, b, Tensor(np.array(s, np.int64)),
                                                    k_scale_cache=c, v_scale_cache=e)

    assert _outcome(fast, op, call([0, 1]))[1] is None
    assert _outcome(fast, op, call([2, 3])) == (True, None)
    buf = np.zeros(nb * bs * h + 1, np.float32)  # scale caches one float apart
    err = _same_as_python_path(fast, op, call([4, 5], c=Tensor.from_numpy(buf[:-1].reshape(nb, bs, h, 1)),
                                              e=Tensor.from_numpy(buf[1:].reshape(nb, bs, h, 1))))
    assert "argument 'v_scale_cache': expected a distinct cache tensor" in err[1] and not buf.any()
    raw = np.zeros(2 * nb * bs * h * d, np.int8)  # a float32 scale cache over the int8 key cache's bytes
    half = nb * bs * h * d
    err = _same_as_python_path(fast, op, call(
        [4, 5], a=Tensor.from_numpy(raw[:half].reshape(nb, bs, h, d)), b=Tensor.from_numpy(raw[half:].reshape(nb, bs, h, d)),
        c=Tensor.from_numpy(raw[:nb * bs * h * 4].view(np.float32).reshape(nb, bs, h, 1))))
    assert "argument 'k_scale_cache': expected a distinct cache tensor" in err[1] and not raw.any()
    # merged cache, static scales: values changed in place refused, good call replayed with reference codes
    kv = Parameter(Tensor(np.zeros((2, nb, bs, h, d), np.int8)), name="bd_kv")
    sc = np.full((h, d), 0.02, np.float32)
    sct = Tensor.from_numpy(sc)
    op = "reshape_and_cache_quant"

    def merged(s):
        return lambda: ms_kvcache.reshape_and_cache_merged(Tensor(k), Tensor(k), kv, Tensor(np.array(s, np.int64)),
                                                           k_scale=sct, v_scale=sct)

    assert _outcome(fast, op, merged([0, 1]))[1] is None
    assert _outcome(fast, op, merged([2, 3])) == (True, None)
    sc[0, 0] = 0.0
    assert "reshape_and_cache_merged: argument 'k_scale': expected finite values > 0" in \
        _same_as_python_path(fast, op, merged([4, 5]))[1]
    sc[0, 0] = 0.02
    assert "expected distinct non-negative slots, got slot 4" in _same_as_python_path(fast, op, merged([4, 4]))[1]
    assert "expected every slot < num_blocks*block_size = 8, got 8" in _same_as_python_path(fast, op, merged([4, 8]))[1]
    got = kv.asnumpy().reshape(2, nb * bs, h, d)
    assert np.array_equal(got[:, 2:4], np.stack([_quant_ref(k, 0.02)] * 2)) and not got[:, 4:].any()


def test_mla_caches_freed_and_reallocated_and_overlapping(fast):
    rng = np.random.default_rng(25)
    nb, bs, r, p = 3, 4, 16, 8
    kv_c = rng.standard_normal((2, r)).astype(np.float32)
    k_pe = rng.standard_normal((2, p)).astype(np.float32)
    s1, s2 = Tensor(np.full((r,), 0.02, np.float32)), Tensor(np.full((p,), 0.02, np.float32))
    op = "concat_and_cache_mla_quant"

    def call(cc, pc, s):
        return lambda: ms_kvcache.concat_and_cache_mla(Tensor(kv_c), Tensor(k_pe), cc, pc,
                                                       Tensor(np.array(s, np.int32)), kv_c_scale=s1, k_pe_scale=s2)

    cc = Parameter(Tensor(np.zeros((nb, bs, r), np.int8)), name="bm_cc")
    pc = Parameter(Tensor(np.zeros((nb, bs, p), np.int8)), name="bm_pc")
    assert _outcome(fast, op, call(cc, pc, [0, 1]))[1] is None
    raw = np.zeros(nb * bs * r, np.int8)  # k_pe_cache inside kv_c_cache's bytes
    err = _same_as_python_path(fast, op, call(Tensor.from_numpy(raw.reshape(nb, bs, r)),
                                              Tensor.from_numpy(raw[:nb * bs * p].reshape(nb, bs, p)), [4, 5]))
    assert "argument 'k_pe_cache': expected a distinct cache tensor" in err[1] and not raw.any()
    for i in range(4):  # the plan keeps no tensor: new caches (perhaps at the old addresses) are written, only
        del cc, pc
        gc.collect()
        cc = Parameter(Tensor(np.zeros((nb, bs, r), np.int8)), name=f"bm_cc{i}")
        pc = Parameter(Tensor(np.zeros((nb, bs, p), np.int8)), name=f"bm_pc{i}")
        assert _outcome(fast, op, call(cc, pc, [i, i + 5])) == (True, None)
        want = np.zeros((nb * bs, r), np.int8)
        want[[i, i + 5]] = _quant_ref(kv_c, 0.02)
        assert np.array_equal(_rows(cc, r), want)
        want = np.zeros((nb * bs, p), np.int8)
        want[[i, i + 5]] = _quant_ref(k_pe, 0.02)
        assert np.array_equal(_rows(pc, p), want)


def test_replayed_calls_from_threads(fast):
    rng = np.random.default_rng(26)
    nb, bs, r, p = 3, 4, 16, 8
    kv_c = rng.standard_normal((2, r)).astype(ml_dtypes.bfloat16)
    k_pe = rng.standard_normal((2, p)).astype(ml_dtypes.bfloat16)
    cc = Parameter(Tensor(np.zeros((nb, bs, r), ml_dtypes.bfloat16)), name="bt_cc")
    pc = Parameter(Tensor(np.zeros((nb, bs, p), ml_dtypes.bfloat16)), name="bt_pc")
    a, b = Tensor(kv_c), Tensor(k_pe)
    fast.wait_idle()
    ms_kvcache.concat_and_cache_mla(a, b, cc, pc, Tensor(np.array([0, 1], np.int32)))
    errors = []

    def worker(j):
        try:
            for it in range(100):
                s = [(2 * j + it) % 12, (2 * j + it + 6) % 12]
                ms_kvcache.concat_and_cache_mla(a, b, cc, pc, Tensor(np.array(s, np.int32)))
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    fast.wait_idle()
    h0 = _hits("concat_and_cache_mla")
    threads = [threading.Thread(target=worker, args=(j,)) for j in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fast.wait_idle()
    assert not errors and _hits("concat_and_cache_mla") > h0
    got = _rows(cc, r).view(np.uint16)
    rows = [kv_c[0].view(np.uint16), kv_c[1].view(np.uint16)]
    assert all(any(np.array_equal(got[i], w) for w in rows) for i in range(nb * bs))


def test_backend_switch_between_replayed_calls(fast):
    k, kc, vc = _rac_setup(fast, np.random.default_rng(27))
    try:
        ms_kvcache.set_backend("sim")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no sim backend: {exc}")
    try:
        replayed, err = _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(
            Tensor(k), Tensor(k), kc, vc, Tensor(np.array([6, 7], np.int32))))
    finally:
        ms_kvcache.set_backend("cpu")
    assert not replayed and err is None and np.array_equal(_rows(kc, D)[6:8], k[:, 0])
    replayed, err = _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(
        Tensor(k), Tensor(k), kc, vc, Tensor(np.array([8, 9], np.int32))))
    assert replayed and err is None and np.array_equal(_rows(kc, D)[8:10], k[:, 0])


def test_bug1_set_fast_path_off_and_on_does_not_end_replays(fast):
    """BUG 1 (fixed): set_fast_path dropped the plans but EagerOp still took the signature as recorded."""
    k, kc, vc = _rac_setup(fast, np.random.default_rng(28))
    old = _custom.set_fast_path(False)
    try:
        assert _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(
            Tensor(k), Tensor(k), kc, vc, Tensor(np.array([2, 3], np.int32)))) == (False, None)
    finally:
        _custom.set_fast_path(old)
    assert not _plans(OP)
    results = [_outcome(fast, OP, lambda s=s: ms_kvcache.reshape_and_cache(
        Tensor(k), Tensor(k), kc, vc, Tensor(np.array(s, np.int32)))) for s in ([4, 5], [6, 7], [8, 9])]
    assert results == [(False, None), (True, None), (True, None)], results
    want = np.zeros((NB * BS, D), np.float32)
    want[0:10:2], want[1:10:2] = k[0, 0], k[1, 0]
    assert np.array_equal(_rows(kc, D), want)


def test_bug2_a_signature_dropped_from_a_full_plan_is_recorded_again(fast):
    """BUG 2 (fixed): the 17th signature pushed the first out of the plan, and the first was never
    recorded again (EagerOp remembered having given it to the plan)."""
    rng = np.random.default_rng(29)
    nb, bs, h, d = 8, 4, 1, 4
    kc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.float32)), name="b2_kc")
    vc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.float32)), name="b2_vc")

    def call(t):
        k = rng.standard_normal((t, h, d)).astype(np.float32)
        s = rng.permutation(nb * bs)[:t].astype(np.int32)
        replayed, err = _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, Tensor(s)))
        assert err is None and np.array_equal(_rows(kc, d)[s], k[:, 0])
        return replayed

    for t in range(1, 18):
        call(t)
        assert call(t)
    assert max(p.num_signatures for p in _plans(OP)) == 16
    assert [call(1) for _ in range(3)] == [False, True, True]  # was [False, False, False]


def test_strided_key_and_padding_rows(fast):
    """A transposed key of the recorded shape is not replayed (the Python path copies it); padding rows
    (T < T') and a skipped slot write nothing."""
    nb, bs, h, d = 2, 4, 2, 4
    kc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.float32)), name="bs_kc")
    vc = Parameter(Tensor(np.zeros((nb, bs, h, d), np.float32)), name="bs_vc")
    k = np.arange(2 * h * d, dtype=np.float32).reshape(2, h, d) + 1
    for s in ([0, 1], [0, 1]):
        _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(Tensor(k), Tensor(k), kc, vc, Tensor(np.array(s, np.int32))))
    kt = Tensor(np.ascontiguousarray(k.transpose(1, 0, 2))).transpose(1, 0, 2)
    assert _outcome(fast, OP, lambda: ms_kvcache.reshape_and_cache(kt, kt, kc, vc, Tensor(np.array([2, 3], np.int32)))) \
        == (False, None)
    k3 = np.arange(3 * h * d, dtype=np.float32).reshape(3, h, d) + 100
    res = [_outcome(fast, OP, lambda s=s: ms_kvcache.reshape_and_cache(Tensor(k3), Tensor(k3), kc, vc,
                                                                        Tensor(np.array(s, np.int32))))
           for s in ([4, 5], [6, -1])]
    assert res == [(False, None), (True, None)]
    want = np.zeros((nb * bs, h, d), np.float32)
    want[0:4] = np.concatenate([k, k])
    want[4:6], want[6] = k3[:2], k3[0]
    assert np.array_equal(kc.asnumpy().reshape(-1, h, d), want) and np.array_equal(vc.asnumpy().reshape(-1, h, d), want)
