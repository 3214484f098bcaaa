"""Cross-core fidelity of the AscendC emulation runtime (issue 13): GM races between cores in every core
order (read-then-write too), SyncAll (hardware and software forms), the watchdog (SPIN_WAIT, DEADLOCK),
fault isolation (KERNEL_FAULT), uninitialised workspace reads and the data-cache model
(GlobalTensor::SetValue / DataCacheCleanAndInvalid).

Kernels: tests/sim_kernels/bad/sim_runtime.cpp (tiling key 0 = correct twin, 1 = broken), built once per
session. Every broken kernel is run in the forward, reverse and threaded core order and must fail with
the named rule; every twin runs clean and gives the bytes an independent numpy computation predicts.
No kernel here may hang or kill the test process: the spin / busy-loop kernels run under a small
watchdog budget, and the fault kernels' signals become EmulationError.
"""
import os
from pathlib import Path

import numpy as np
import pytest

from ms_kvcache import sim

HERE = Path(__file__).resolve().parent
N = 1024
ORDERS = ("forward", "reverse", "threads")
CORES = 4
WS = 16 * 1024 * 1024 + 4096  # GetLibApiWorkSpaceSize() on Ascend910B1 (16 MiB) + the user part
UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")


@pytest.fixture(scope="module")
def rt():
    return sim.build("sim_runtime", [HERE / "sim_kernels" / "bad" / "sim_runtime.cpp"])


@pytest.fixture
def small_watchdog(monkeypatch):
    monkeypatch.setenv("MS_KVCACHE_SIM_SPIN_LIMIT", "20000")
    monkeypatch.setenv("MS_KVCACHE_SIM_WATCHDOG_S", "0.3")


def _x():
    x = np.arange(N, dtype=np.int32)
    x[512:] = 0  # the software SyncAll's gmWorkspace (x + 512) must start zeroed
    return x


def _run(kernel, key, order, block_dim=CORES, x=None, soc="Ascend910B1"):
    x = _x() if x is None else x
    y = np.zeros(N, np.int32)
    st = sim.launch_kernel(kernel, [x, y], block_dim, tiling=b"\0" * 8, tiling_key=key, workspace_bytes=WS,
                           soc=soc, order=order)
    return x, y, st


def _fails(kernel, rule, order, block_dim=CORES):
    y_before = np.zeros(N, np.int32)
    with pytest.raises(sim.EmulationError) as ei:
        _run(kernel, 1, order, block_dim)
    assert ei.value.rule == rule, str(ei.value)
    assert f"op {kernel}" in str(ei.value) and ei.value.core is not None
    return ei.value, y_before


def _partials_sum():
    return int((2 * _x()[:8 * CORES].astype(np.int64)).sum())


# (kernel, rule of the broken variant, {order: rule} overrides)
CASES = [
    ("rt_two_phase", "GM_RACE", {}),
    ("rt_two_phase_ws", "GM_RACE", {}),
    ("rt_soft_sync", "SYNCALL_PARAMS", {}),
    ("rt_sync_mismatch", "DEADLOCK", {}),
    ("rt_read_then_write", "GM_RACE", {}),
    ("rt_ws_uninit", "WORKSPACE_UNINIT_READ", {}),
    ("rt_dcache_line", "DCACHE_CONFLICT", {}),
    ("rt_dcache_clean", "DCACHE_CONFLICT", {}),
]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kernel,rule,over", CASES, ids=[c[0] for c in CASES])
def test_broken_fails_in_every_order(rt, kernel, rule, over, order):
    err, _ = _fails(kernel, over.get(order, rule), order)
    if rule == "GM_RACE":
        assert "core" in err.message and ("SyncAll" in err.message or "barrier" in err.message)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kernel", [c[0] for c in CASES])
def test_twin_runs_clean(rt, kernel, order):
    x, y, st = _run(kernel, 0, order)
    if kernel in ("rt_two_phase", "rt_soft_sync"):
        assert y[1000] == _partials_sum()
        np.testing.assert_array_equal(y[:8 * CORES], 2 * _x()[:8 * CORES])
    elif kernel == "rt_two_phase_ws":
        assert y[1000] == _partials_sum()
    elif kernel == "rt_ws_uninit":
        np.testing.assert_array_equal(y[0:16 * CORES:16], np.full(CORES, 7))
    elif kernel == "rt_dcache_line":
        np.testing.assert_array_equal(y[0:16 * CORES:16], np.arange(1, CORES + 1))
    elif kernel == "rt_dcache_clean":
        assert y[0] == 42 and y[16] == 42
    elif kernel == "rt_read_then_write":
        assert y[0] == 0 and x[16] == 5


def test_two_phase_twin_agrees_across_orders(rt):
    x, y = _x(), np.zeros(N, np.int32)
    st = sim.launch_kernel_all_orders("rt_two_phase", [x, y], CORES, tiling=b"\0" * 8, tiling_key=0,
                                      workspace_bytes=WS, soc="Ascend910B1")
    assert y[1000] == _partials_sum() and st["cores_used"] == CORES
    # core 0 read the 8 * CORES partials with GetValue (4 bytes each) after the SyncAll
    assert st["gm_read_bytes_per_core"][0] >= 8 * CORES * 4


def test_spin_on_flag_fails_cleanly(rt, small_watchdog):
    # forward: core 0 polls a flag core 1 sets later -> SPIN_WAIT (no hang); reverse: core 1 already set it,
    # core 0 reads a byte another core wrote in the same phase -> GM_RACE; threads: either, by timing
    err, _ = _fails("rt_spin_flag", "SPIN_WAIT", "forward", 2)
    assert err.core == 0 and "MS_KVCACHE_SIM_SPIN_LIMIT" in err.message and "SyncAll" in err.message
    assert "DataCacheCleanAndInvalid" in err.message and "byte offset 64 of" in err.message
    _fails("rt_spin_flag", "GM_RACE", "reverse", 2)
    with pytest.raises(sim.EmulationError) as ei:
        _run("rt_spin_flag", 1, "threads", 2)
    assert ei.value.rule in ("SPIN_WAIT", "GM_RACE")
    for order in ORDERS:  # the SyncAll twin
        _, y, _ = _run("rt_spin_flag", 0, order, 2)
        assert y[0] == 1 and y[16] == 1


@pytest.mark.parametrize("order", ORDERS)
def test_busy_loop_watchdog(rt, small_watchdog, order):
    err, _ = _fails("rt_busy_loop", "DEADLOCK", order, 2)
    assert "watchdog" in err.message and "MS_KVCACHE_SIM_WATCHDOG_S" in err.message
    _, y, _ = _run("rt_busy_loop", 0, order, 2)  # later launches still work
    assert y[0] == 0


@pytest.mark.skipif(UNDER_ASAN, reason="AddressSanitizer owns SIGSEGV / SIGBUS / SIGFPE")
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kernel,sig", [("rt_fault_fpe", "SIGFPE"), ("rt_fault_segv", "SIGSEGV"),
                                        ("rt_fault_abort", "SIGABRT")])
def test_fault_becomes_emulation_error(rt, kernel, sig, order):
    x = _x()
    y = np.full(N, -3, np.int32)
    with pytest.raises(sim.EmulationError) as ei:
        sim.launch_kernel(kernel, [x, y], 2, tiling=b"\0" * 8, tiling_key=1,
                          workspace_bytes=WS, soc="Ascend910B1", order=order)
    e = ei.value
    assert e.rule == "KERNEL_FAULT" and sig in e.message and e.core is not None, str(e)
    assert kernel in e.message  # the kernel function the fault happened in
    np.testing.assert_array_equal(y, np.full(N, -3, np.int32))  # the caller's arrays are untouched
    _, y2, _ = _run(kernel, 0, order, 2)  # and the next launch runs
    assert y2[0] in (1, 100)


def test_check_settings_names_bad_watchdog_values(monkeypatch):
    monkeypatch.setenv("MS_KVCACHE_SIM_SPIN_LIMIT", "lots")
    monkeypatch.setenv("MS_KVCACHE_SIM_WATCHDOG_S", "-1")
    with pytest.raises(ValueError) as ei:
        sim.check_settings()
    assert "MS_KVCACHE_SIM_SPIN_LIMIT='lots'" in str(ei.value) and "MS_KVCACHE_SIM_WATCHDOG_S='-1'" in str(ei.value)
    monkeypatch.setenv("MS_KVCACHE_SIM_SPIN_LIMIT", "5000")
    monkeypatch.setenv("MS_KVCACHE_SIM_WATCHDOG_S", "2.5")
    sim.check_settings()
    # bounded: a limit past 2**64 saturated in the runner (a spinning core was never caught)
    monkeypatch.setenv("MS_KVCACHE_SIM_SPIN_LIMIT", "99999999999999999999999")
    with pytest.raises(ValueError, match=r"MS_KVCACHE_SIM_SPIN_LIMIT='9+': expected an integer in 1\.\.1000000000000"):
        sim.check_settings()
    monkeypatch.setenv("MS_KVCACHE_SIM_SPIN_LIMIT", str(sim.MAX_SPIN_LIMIT))
    sim.check_settings()


def test_syncall_forms_on_310p(rt):
    # Atlas inference series: no hardware SyncAll (the official dav_m200 implementation reports it
    # unsupported), the software form works
    with pytest.raises(sim.EmulationError) as ei:
        _run("rt_two_phase", 0, "forward", soc="Ascend310P3")
    assert ei.value.rule == "UNSUPPORTED_API" and "Ascend310P3" in ei.value.message
    for order in ORDERS:
        _, y, st = _run("rt_soft_sync", 0, order, soc="Ascend310P3")
        assert y[1000] == _partials_sum() and st["npu_arch"] == 2002


def test_syncall_block_dim_above_the_cores_deadlocks(rt):
    with pytest.raises(sim.EmulationError) as ei:
        _run("rt_sync_mismatch", 0, "forward", block_dim=49)  # Ascend910B1 has 48 vector cores
    assert ei.value.rule == "DEADLOCK" and "block dim 49" in ei.value.message and "48 vector cores" in ei.value.message
