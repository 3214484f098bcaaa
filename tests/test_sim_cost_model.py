"""The emulation's opt-in DMA cost model (docs/emulation.md, "The cost model"): its rules on small kernels
(exact timelines from the documented rules), its calibration against HeteroFusedKernels' published A3 table
(tests/_cost_calibration.py: held-out rows within the stated tolerance), and ms_kvcache's block transfer
predicted at least as fast as the published figures. A model, not a measurement."""
import os
import re
from pathlib import Path

import numpy as np
import pytest

import _cost_calibration as cal
from ms_kvcache import sim

HERE = Path(__file__).resolve().parent
SEM = HERE / "sim_kernels" / "cost" / "cost_semantics.cpp"
A2, A3 = "Ascend910B1", "Ascend910_9391"


@pytest.fixture(scope="module")
def sem():
    return sim.build("cost_semantics", [SEM], socs=[A2])


@pytest.fixture(scope="module")
def hfk():
    return cal.build()


def params(soc=A2):
    return {k: v["value"] for k, v in sim.cost_params(soc).items()}


def tiling(chunk, chunks, rows=1, gap=0):
    return np.array([chunk, chunks, rows, gap], np.uint32).tobytes()


def copy(kernel, chunk=16384, chunks=6, cores=1, host=(), cost=True, rows=1, gap=0, soc=A2):
    rng = np.random.default_rng(chunk + chunks + cores)
    if kernel == "cost_copy_strided":
        src = rng.integers(-128, 127, cores * rows * (chunk // rows + gap), dtype=np.int8)
        dst = np.zeros(cores * chunk, np.int8)
    else:
        src = rng.integers(-128, 127, cores * chunk * chunks, dtype=np.int8)
        dst = np.zeros_like(src)
    st = sim.launch_kernel(kernel, [dst, src], cores, tiling=tiling(chunk, chunks, rows, gap), soc=soc,
                           cost_model=cost, host=list(host) if cost else None)
    if kernel == "cost_copy_strided":
        want = src.reshape(cores, rows, -1)[:, :, :chunk // rows].reshape(-1)
    else:
        want = src
    assert np.array_equal(dst, want)
    return st


def dma_ns(p, nbytes, link="hbm", runs=1, cores=1):
    """One DataCopy as the documented model prices it: call_cycles + runs * run time + bytes at the core's
    share of the link (independent of the C++ implementation)."""
    call = p["call_cycles"] / p["freq_ghz"]
    if link == "hbm":
        rate = min(p["hbm_core_gbps"], p["hbm_gbps"] / cores)
        return call + runs * p["hbm_run_ns"] + nbytes / rate
    rate = min(p["host_core_gbps"], p["pcie_gbps"] / cores)
    return call + runs * p["host_run_ns"] + nbytes / rate


# ------------------------------------------------------------------------------------------ the rules
def test_double_buffering_overlaps_single_buffer_serialises(sem):
    p = params()
    n, chunk = 6, 16384
    d = dma_ns(p, chunk)
    single = copy("cost_copy_single", chunk, n)["cost"]
    double = copy("cost_copy_double", chunk, n)["cost"]
    barrier = copy("cost_copy_barrier", chunk, n)["cost"]
    flags = copy("cost_copy_flags", chunk, n)["cost"]
    # one buffer: copy-in of chunk i + 1 after the copy-out of chunk i; two: they overlap
    assert single["core_us"] * 1e3 == pytest.approx(2 * n * d, rel=1e-9)
    assert double["core_us"] * 1e3 == pytest.approx((n + 1) * d, rel=1e-9)
    assert barrier["core_us"] * 1e3 == pytest.approx(2 * n * d, rel=1e-9)  # PipeBarrier<PIPE_ALL> each chunk
    assert flags["core_us"] * 1e3 == pytest.approx(2 * n * d, rel=1e-9)  # SetFlag/WaitFlag both ways
    for c in (single, double, barrier, flags):
        assert c["mte2_busy_us"][0] * 1e3 == pytest.approx(n * d, rel=1e-9)
        assert c["time_us"] == pytest.approx(p["launch_us"] + c["core_us"], rel=1e-9)
        assert c["hbm_bytes_per_core"] == [2 * n * chunk]


def test_host_link_and_runs(sem):
    p = params()
    chunk = 8192
    zc = copy("cost_copy_single", chunk, 4, host=["src"])["cost"]
    assert zc["core_us"] * 1e3 == pytest.approx(4 * (dma_ns(p, chunk, "host") + dma_ns(p, chunk)), rel=1e-9)
    assert zc["host_bytes_per_core"] == [4 * chunk] and zc["host_runs_per_core"] == [4]
    assert zc["hbm_bytes_per_core"] == [4 * chunk]
    # the same bytes as 16 rows 64 bytes apart: 16 runs of host latency instead of 1
    for gap, runs in ((0, 1), (64, 16)):
        st = copy("cost_copy_strided", chunk, 1, rows=16, gap=gap, host=["src"])["cost"]
        assert st["host_runs_per_core"] == [runs] and st["host_copies_per_core"] == [1]
        assert st["core_us"] * 1e3 == pytest.approx(dma_ns(p, chunk, "host", runs) + dma_ns(p, chunk), rel=1e-9)
    # by index as well as by name
    by_index = copy("cost_copy_single", chunk, 4, host=["1"])["cost"]
    assert by_index["core_us"] == zc["core_us"]


def test_links_are_shared_by_the_cores(sem):
    p = params()
    cores, chunk, n = 48, 16384, 2
    c = copy("cost_copy_double", chunk, n, cores=cores, host=["src"])["cost"]
    per_core = dma_ns(p, chunk, "host", cores=cores)  # PCIe: pcie_gbps / 48 per core
    assert c["mte2_busy_us"] == pytest.approx([n * per_core / 1e3] * cores, rel=1e-9)
    assert c["pcie_link_us"] * 1e3 == pytest.approx(cores * n * chunk / p["pcie_gbps"], rel=1e-9)
    assert c["time_us"] == pytest.approx(p["launch_us"] + c["core_us"], rel=1e-9)
    assert c["core_us"] >= c["pcie_link_us"] and c["core_us"] >= c["hbm_link_us"]
    # HBM shared too: hbm_gbps / 48 per core when that is below one core's own rate
    slow = copy("cost_copy_double", chunk, n, cores=cores, cost={"hbm_gbps": 100})["cost"]
    assert slow["mte2_busy_us"][0] * 1e3 == pytest.approx(n * dma_ns(dict(p, hbm_gbps=100), chunk, cores=cores),
                                                        rel=1e-9)


def test_model_off_changes_nothing(sem):
    off = copy("cost_copy_double", 4096, 3, cores=4, cost=False)
    on = copy("cost_copy_double", 4096, 3, cores=4, host=["src"])
    assert "cost" not in off and "cost" in on
    for k in off:
        assert off[k] == on[k], k  # every count of the launch is the same with the model on


def test_settings_and_errors(sem, monkeypatch):
    z = np.zeros(4096, np.int8)
    with pytest.raises(ValueError, match="host"):  # host memory without the model
        sim.launch_kernel("cost_copy_single", [z, z.copy()], 1, tiling=tiling(4096, 1), cost_model=False, host=["src"])
    with pytest.raises(sim.EmulationError, match="COST_MODEL_PARAM.*nope"):
        copy("cost_copy_single", cost={"nope": 1.0})
    with pytest.raises(sim.EmulationError, match="COST_MODEL_PARAM.*pcie_gbps"):
        copy("cost_copy_single", cost={"pcie_gbps": 0})
    with pytest.raises(sim.EmulationError, match="LAUNCH.*host: 'dest'"):
        copy("cost_copy_single", host=["dest"])
    with pytest.raises(sim.EmulationError, match="COST_MODEL_SOC"):
        sim.cost_params("Ascend310P3")
    with pytest.raises(TypeError, match="cost_model"):
        sim.launch_kernel("cost_copy_single", [np.zeros(32, np.int8)] * 2, 1, tiling=tiling(32, 1), cost_model="on")
    monkeypatch.setenv("MS_KVCACHE_SIM_COST", "yes")
    with pytest.raises(ValueError, match="MS_KVCACHE_SIM_COST='yes'"):
        sim.check_settings()
    monkeypatch.setenv("MS_KVCACHE_SIM_COST", "1")
    sim.check_settings()
    prev = sim.get_cost_model()
    try:
        sim.set_cost_model(True)
        assert "cost" in copy("cost_copy_single", cost=None)
        sim.set_cost_model(False)
        assert "cost" not in copy("cost_copy_single", cost=None)
    finally:
        sim.set_cost_model(prev)
    assert sim.cost_memcpy_us(36e3 * 100, A3) == pytest.approx(params(A3)["memcpy_us"] + 100.0)


@pytest.mark.parametrize("value", ["abc", None, True])
def test_an_override_that_is_not_a_number_names_the_parameter(sem, value):
    """cost_model={"launch_us": "abc"} raised float()'s bare ValueError, None its TypeError, and True was taken
    as 1 us; now each is a TypeError naming the argument and the parameter."""
    with pytest.raises(TypeError, match="argument 'cost_model': parameter 'launch_us': expected a number"):
        copy("cost_copy_single", cost={"launch_us": value})


@pytest.mark.parametrize("kw,exc,match", [
    ({"params": {"memcpy_gbps": 0}}, sim.EmulationError, "COST_MODEL_PARAM.*'memcpy_gbps' = 0: expected a finite "
                                                          "number > 0"),
    ({"params": {"memcpy_gbps": -5.0}}, sim.EmulationError, "COST_MODEL_PARAM.*memcpy_gbps"),
    ({"params": {"memcpy_gbps": float("nan")}}, sim.EmulationError, "COST_MODEL_PARAM.*memcpy_gbps"),
    ({"params": {"memcpy_us": -100}}, sim.EmulationError, "COST_MODEL_PARAM.*memcpy_us.*>= 0"),
    ({"params": {"nope": 1}}, sim.EmulationError, "COST_MODEL_PARAM.*unknown cost-model parameter 'nope'"),
    ({"params": {"memcpy_us": "1"}}, TypeError, "argument 'params': parameter 'memcpy_us'"),
    ({"nbytes": "x"}, ValueError, "argument 'nbytes'"),
    ({"nbytes": float("inf")}, ValueError, "argument 'nbytes'"),
])
def test_cost_memcpy_us_checks_its_parameters_as_a_launch_does(kw, exc, match):
    """cost_memcpy_us took any override: memcpy_gbps 0 raised ZeroDivisionError, a negative rate or fixed time
    gave a negative time and NaN a NaN time, where a launch refuses each (COST_MODEL_PARAM)."""
    args = {"nbytes": 1 << 20, "soc": A3, **kw}
    with pytest.raises(exc, match=match):
        sim.cost_memcpy_us(**args)
    assert sim.cost_memcpy_us(1 << 20, A3, {"memcpy_gbps": 18.0}) == pytest.approx(2 * sim.cost_memcpy_us(1 << 20, A3))


def test_parameter_table_sources_and_docs():
    """Every parameter has a unit and a source; the fitted ones say so; docs/emulation.md lists each with the
    same value."""
    doc = (HERE.parent / "docs" / "emulation.md").read_text()
    for soc in (A2, "Ascend910B3", A3):
        table = sim.cost_params(soc)
        for name, row in table.items():
            assert row["unit"] and len(row["source"]) > 20, name
            assert ("fitted" in row["source"]) == (name in cal.FITTED), name
            m = re.search(rf"^\| `{name}` \| ([^|]+) \|", doc, re.M)
            assert m, f"docs/emulation.md has no row for {name}"
            assert float(m.group(1).split()[0]) == pytest.approx(row["value"]), name


# ------------------------------------------------------------------------------------------ calibration
def test_calibration_held_out_rows_within_tolerance(hfk):
    pred = cal.predict_all()
    for shape, mode, pub, got, res, role in cal.table_rows(pred):
        if role == "held out":
            assert abs(res) <= cal.TOLERANCE, (shape, mode, pub, got)
        elif role == "fit":
            assert abs(res) <= 0.2, (shape, mode, pub, got)
    (excl,) = cal.EXCLUDED  # reported, not reproduced: 4 MB slower than 8 MB of the same structure
    assert pred[excl] > 1.5 * cal.published(*excl)


@pytest.mark.slow
def test_calibration_fitted_values_are_the_fit(hfk):
    """The committed fitted parameters minimise the fit rows' residuals: moving any of them by 5% makes the fit
    worse (a local minimum of the least squares the table's values came from)."""
    base = {k: v["value"] for k, v in sim.cost_params(cal.SOC).items()}
    loss = cal._loss({r: cal.run(*r, check=False)[0] for r in cal.FIT_ROWS})
    for k in cal.FITTED:
        for f in (0.95, 1.05):
            p = {k: base[k] * f}
            assert cal._loss({r: cal.run(*r, p, check=False)[0] for r in cal.FIT_ROWS}) > loss, (k, f)


# ------------------------------------------------------------------------------------------ ms_kvcache vs HFK
def _status():
    return np.zeros(1, np.int32)


def block_transfer(shape, mode, soc):
    """ms_kvcache's block transfer moving HFK's block as two planes (K, V) of the same total bytes: H / 2
    heads each (H = 1: head_dim / 2), int8, BNSD caches, one block, h2d. Returns (GB/s, stats)."""
    bs, L, H, D = shape
    heads, hd = (H // 2, D) if H > 1 else (1, D // 2)
    rng = np.random.default_rng(L * H)
    host = [rng.integers(-128, 127, (1, bs, L, heads, hd), dtype=np.int8) for _ in range(2)]
    caches = [np.zeros((2, heads, bs, hd), np.int8) for _ in range(2 * L)]
    ids = np.array([1], np.int32)
    payload = sum(h.nbytes for h in host)
    staging = np.zeros(payload, np.int8) if mode == "staging" else None
    attrs = {"kv_format": 2, "direction": "h2d", "cache_layout": "BNSD", "num_layers": L, "aiv_num": 0}
    st = sim.launch("MskvMultiLayerBlockTransfer", [ids, staging, host, caches, _status()], attrs=attrs, soc=soc,
                    gm_copy="never", cost_model=True, host=[] if mode == "staged" else ["host_blocks"])
    for l in range(L):
        for p in range(2):
            assert np.array_equal(caches[2 * l + p][1], host[p][0, :, l].transpose(1, 0, 2)), (shape, mode, l, p)
    t = st["cost"]["time_us"] + (sim.cost_memcpy_us(payload, soc) if mode == "staged" else 0.0)
    minimum = (2 if staging is None else 4) * payload + ids.nbytes
    assert st["gm_read_bytes"] + st["gm_write_bytes"] <= 1.05 * minimum
    return payload / (t * 1e3), st


@pytest.mark.parametrize("soc", [A2, A3])
@pytest.mark.parametrize("shape", list(cal.HFK_TABLE), ids=lambda s: "x".join(map(str, s)))
def test_block_transfer_predicted_at_least_hfk_published(shape, soc):
    """Zero-copy (host blocks read over PCIe), staged (aclrtMemcpyAsync into HBM, then the kernel - HFK's fused
    mode) and the kernel's own staging mode: every core busy, GM traffic <= 1.05x the minimum, predicted GB/s
    >= HeteroFusedKernels' published A3 figure of the mode (staging mode against the staged figure)."""
    cores = int(sim.platform(soc)["aiv_cores"])
    for mode, pub in (("zero-copy", cal.published(shape, "zero-copy")), ("staged", cal.published(shape, "staged")),
                      ("staging", cal.published(shape, "staged"))):
        gbps, st = block_transfer(shape, mode, soc)
        assert st["cores_used"] == cores, (mode, st["cores_used"])
        assert gbps >= pub, (mode, gbps, pub)
        if mode == "zero-copy":  # whole token rows: a handful of host runs per core, not one per head / layer
            assert max(st["cost"]["host_runs_per_core"]) <= 32, st["cost"]["host_runs_per_core"]


def test_bench_table_says_what_its_reference_column_is():
    """The emulation table of 'ms-kvcache bench --ops transfer_sim' shows HFK's published figures in a 'ref GB/s'
    column next to the predictions; its note explained 'pred GB/s' but not that column (whose figures, which
    SoC they were measured on)."""
    from ms_kvcache.bench import format_tables

    row = {"module": "transfer_sim", "op": "multi_layer_block_transfer", "case": "HFK [1024, 32, 1, 128] int8 BNSD h2d "
           "zero-copy", "backend": "sim", "soc": "Ascend910B1", "gm_bytes": 10, "gm_min_bytes": 10,
           "pred_gbps": 18.6, "ref_gbps": 9.65}
    (_, head, _, note), = format_tables([row])
    assert "pred GB/s" in head and "ref GB/s" in head
    assert "pred GB/s: the emulation's cost model" in note and "not a measurement" in note
    assert "ref GB/s: the published figure" in note and "HeteroFusedKernels" in note and "A3" in note


def test_check_settings_flags_the_cost_model_on_a_soc_without_parameters(monkeypatch):
    """MS_KVCACHE_SIM_COST=1 with Ascend310P3 (no cost parameters) made every later launch fail with COST_MODEL_SOC;
    check_settings (what set_backend("sim") runs) passed it. It names the variable, the SoC and the SoCs that work."""
    prev_soc, prev_cost = sim.get_soc(), sim.get_cost_model()
    try:
        sim.set_soc("Ascend310P3")
        sim.set_cost_model(True)
        with pytest.raises(ValueError, match=r"set_cost_model\(True\) with SoC 'Ascend310P3'.*Ascend910B"):
            sim.check_settings()
        sim.set_cost_model(False)
        sim.check_settings()
        sim.set_soc(prev_soc if prev_soc != "Ascend310P3" else "Ascend910B1")
        sim.set_cost_model(True)
        sim.check_settings()  # A2 has parameters
    finally:
        sim.set_soc(prev_soc)
        sim.set_cost_model(prev_cost)
