"""The copy-op benchmarks (ms_kvcache.bench.copy_ops / copy_ops_sim): in the package, fair baselines,
one ratio convention (reference time / op time), docs/benchmarks.md consistent with what they print.

Not timed tests: tiny sizes, the assertions are on what is measured and how it is reported."""
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_copy_benches_are_package_modules_with_thin_wrappers():
    """`ms-kvcache bench --list` finds copy_ops and copy_ops_sim in the package (they were scripts loaded by
    path, missing from an installed wheel); scripts/bench_copy*.py only wrap them."""
    from ms_kvcache import bench

    found = {m.name: m.origin for m in bench.discover()}
    assert found.get("copy_ops") == "package" and found.get("copy_ops_sim") == "package", found
    assert "copy" not in found and "copy_sim" not in found, found
    for script, mod in (("bench_copy.py", "copy_ops"), ("bench_copy_sim.py", "copy_ops_sim")):
        path = ROOT / "scripts" / script
        assert bench.wrapped_modules(path) == {"main_for", mod}, script
        assert len(path.read_text().splitlines()) < 20, f"{script} is not a thin wrapper"


@pytest.fixture
def small_copy_bench(monkeypatch):
    from ms_kvcache.bench import copy_ops

    monkeypatch.setattr(copy_ops, "COLD_BYTES", 1 << 20)
    monkeypatch.setattr(copy_ops, "COPY_LAYERS", 2)
    monkeypatch.setattr(copy_ops, "COPY_PAIRS", (2,))
    monkeypatch.setattr(copy_ops, "QUICK_OTHER_TOKENS", (48,))
    monkeypatch.setattr(copy_ops, "QUICK_SWAP_BLOCKS", (2,))
    monkeypatch.setattr(copy_ops, "_inner_for", lambda nbytes: 2)
    return copy_ops


def test_copy_bench_baselines_do_the_same_memory_work(small_copy_bench):
    """Every non-reshape_and_cache row: the op, a memcpy of the same bytes and numpy fancy-index assignment
    of the same rows, rotated over K disjoint regions covering >= COLD_BYTES (each call writes memory the
    previous calls left), the op's values checked, ratios = baseline time / op time, the baseline named."""
    mod = small_copy_bench
    ops = ("reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks", "swap_blocks")
    rows = mod.run(ops=ops, quick=True)
    assert sorted({r["op"] for r in rows}) == sorted(ops)
    for r in rows:
        assert r["correct"], r
        k, payload = r["rotations"], r["bytes"]
        assert k * payload >= mod.COLD_BYTES or k == mod.MAX_ROTATIONS, r
        assert r["footprint_mib"] * 2**20 >= k * payload, r  # the caches hold every rotation's rows
        assert r["ratio_memcpy"] == pytest.approx(r["memcpy_us"] / r["op_us"])
        assert r["speedup"]["numpy fancy index"] == pytest.approx(r["numpy_fancy_us"] / r["op_us"])
        assert r["gbps"] == pytest.approx(payload / (r["op_us"] * 1e-6) / 1e9)
        if r["op"] != "copy_blocks":  # the per-stage view: the kernel alone, timed in the same rounds
            assert r["kernel_x_memcpy"] == pytest.approx(r["memcpy_us"] / r["kernel_us"]), r
            assert "kernel alone" in r["note"]
    text = mod.format_table(rows)
    assert mod.BASELINE_LINE in text and "x memcpy" in text and "op/memcpy" not in text


def test_copy_bench_quant_rows(small_copy_bench, monkeypatch):
    """The quantizing-write rows (issue 17): reshape_and_cache of bf16 K/V into int8 caches, static per-channel
    and dynamic per-token scales, against a memcpy of the float input bytes (the issue's baseline) in the same
    rounds; the codes (and dynamic scales) checked against a numpy float32 model; static rows time the kernel
    alone too."""
    mod = small_copy_bench
    monkeypatch.setattr(mod, "QUICK_QUANT_TOKENS", (24,))
    rows = mod.run(ops=("reshape_and_cache_quant",), quick=True)
    assert [r["mode"] for r in rows] == list(mod.QUANT_MODES)
    for r in rows:
        assert r["bench"] == "reshape_and_cache_quant" and r["dtype"] == "bfloat16->int8" and r["correct"], r
        assert r["op"] == "reshape_and_cache"  # the public op (ms-kvcache bench lists public ops only)
        assert r["bytes"] == 2 * 24 * mod.HEADS * mod.HEAD_SIZE * 2  # float input bytes
        assert r["ratio_memcpy"] == pytest.approx(r["memcpy_us"] / r["op_us"])
        assert ("kernel_x_memcpy" in r) == r["mode"].startswith("static"), r
    text = mod.format_table(rows)
    assert "bf16->int8 dynamic per-token T=24" in text and mod.BASELINE_LINE in text
    # the model the rows are checked with: round half to even, saturation, a zero row's scale 0
    x = np.array([[[0.5, 1.5, -2.5, 300.0]], [[0.0, 0.0, 0.0, 0.0]]], np.float32)
    q, _ = mod._quant_ref(x, np.float32(1.0))
    assert q.tolist() == [[[0, 2, -2, 127]], [[0, 0, 0, 0]]]
    q, s = mod._quant_ref(x, None)
    assert s.tolist() == [[np.float32(300.0) / np.float32(127)], [0.0]] and q[0, 0, 3] == 127 and not q[1].any()


def test_copy_bench_kernel_stage_does_the_ops_work():
    """The kernel-alone stage (ctypes on the AOT entry point) writes the rows the op writes: numpy reference,
    random data, a slot -1 skipped, the last slot; concat_and_cache_mla, bfloat16."""
    import ml_dtypes
    import mindspore as ms

    from ms_kvcache.bench import copy_ops

    rng = np.random.default_rng(7)
    T, R, P, nb, bs = 5, 32, 8, 3, 4
    kv_c = rng.standard_normal((T, R)).astype(ml_dtypes.bfloat16)
    k_pe = rng.standard_normal((T, P)).astype(ml_dtypes.bfloat16)
    tensors = [ms.Tensor(kv_c), ms.Tensor(k_pe), ms.Tensor(np.zeros((nb, bs, R), ml_dtypes.bfloat16)),
               ms.Tensor(np.zeros((nb, bs, P), ml_dtypes.bfloat16))]
    slots = np.array([nb * bs - 1, 0, -1, 6, 5], np.int64)
    run = copy_ops._aot_kernel("MskvConcatAndCacheMla", tensors, [slots])
    assert run is not None
    run(0)
    want_c, want_p = np.zeros((nb * bs, R), ml_dtypes.bfloat16), np.zeros((nb * bs, P), ml_dtypes.bfloat16)
    keep = slots >= 0
    want_c[slots[keep]], want_p[slots[keep]] = kv_c[keep], k_pe[keep]
    assert np.array_equal(tensors[2].asnumpy().reshape(-1, R).view(np.uint16), want_c.view(np.uint16))
    assert np.array_equal(tensors[3].asnumpy().reshape(-1, P).view(np.uint16), want_p.view(np.uint16))


def test_copy_bench_overhead_ratio_is_add_time_over_op_time():
    """The per-call overhead line says 'x ops.add' = ops.add time / op time, the convention of every other
    ratio (it printed 'ratio' = op time / ops.add time: 0.70 meant the op was faster)."""
    from ms_kvcache.bench import copy_ops

    raw = {"bench": "overhead", "mode": "pynative", "T": 1, "op_us": 20.0, "ops_add_us": 30.0, "add_speedup": 1.5,
           "fast_path": True, "ops_custom_us": 100.0}
    line = [x for x in copy_ops.format_table([raw]).splitlines() if "pynative" in x][0]
    assert "x ops.add 1.50" in line and "ratio" not in line, line
    assert copy_ops._standard_keys(dict(raw))["speedup"]["ops.add"] == pytest.approx(1.5)


def test_copy_sim_swap_blocks_rows_leave_the_kernel_columns_blank():
    """swap_blocks has no AscendC kernel: its emulation-table row shows traffic and ACL calls, and blank
    cores / UB / copies-per-core cells (it showed cores '0/0', UB 0.0, 0 copies)."""
    from ms_kvcache.bench import copy_ops_sim, format_tables

    rows = copy_ops_sim._swap_blocks("Ascend910B1")
    assert [r["acl_calls"] for r in rows] == [1, 1, 1] and [r["acl_copies"] for r in rows] == [16, 64, 4]
    assert all(r["gm_ratio"] == pytest.approx(1.0, abs=1e-3) for r in rows)
    (_, head, cells, _), = format_tables(rows)
    for c in cells:
        row = dict(zip(head, c))
        assert "0/0" not in c and row.get("cores", "") == "" and row.get("UB KiB", "") == "", row
        assert "ACL call" in row["note"]


def test_benchmarks_page_copy_section_is_what_the_bench_writes():
    """docs/benchmarks.md's copy family section is the bench's own output (`--report`): its tables use the
    bench's column names and ratio wording, list every copy op, and name the memcpy baseline."""
    from ms_kvcache.bench._runner import MEMCPY_BASELINES, RATIO_NOTE

    text = (ROOT / "docs" / "benchmarks.md").read_text()
    sec = text.split("<!-- bench-report: copy_ops -->", 1)[1].split("<!-- /bench-report: copy_ops -->", 1)[0]
    assert "| op | case | tokens |" in sec and "x memcpy" in sec and "op/memcpy" not in sec
    assert RATIO_NOTE[0].upper() + RATIO_NOTE[1:] in sec and MEMCPY_BASELINES["copy_ops"] in sec
    assert not re.search(r"ratio \d", sec), "old 'ratio 0.70' wording (op time / reference time)"
    for op in ("reshape_and_cache", "reshape_and_cache_merged", "concat_and_cache_mla", "copy_blocks",
               "swap_blocks"):
        assert [x for x in sec.splitlines() if x.startswith(f"| {op} ")], f"{op} missing from the copy section"


def test_copy_bench_median_of_runs_table():
    """`--runs 3` ends with the median-of-runs table: per (op, case) the median op / memcpy GB/s and, for x memcpy,
    x numpy and kernel x memcpy, the median followed by the three runs' figures in run order; the load of
    every run and the baseline line are printed with it (issue 20: median of three in one command)."""
    from ms_kvcache.bench import copy_ops

    def row(bench, case, tokens, ratio, numpy_x, kernel_x=None, gbps=10.0):
        r = {"bench": bench, "op": bench, "case": case, "tokens": tokens, "gbps": gbps, "memcpy_gbps": gbps * ratio,
             "ratio_memcpy": ratio, "speedup": {"numpy fancy index": numpy_x}, "correct": True}
        if kernel_x is not None:
            r["kernel_x_memcpy"] = kernel_x
        return r

    runs = [[row("reshape_and_cache", "bf16 H8 D128 bs128", 1024, r, 2.0 * r),
             row("concat_and_cache_mla", "DeepSeek-V3 T=1024", 1024, r + 0.1, 1.5, 1.2, gbps=g),
             {"bench": "overhead", "op": "reshape_and_cache", "case": "per-call overhead"}]
            for r, g in ((0.9, 5.0), (1.3, 7.0), (1.1, 6.0))]
    text = copy_ops.summarize_runs(runs, [(1.0, 2.0), (2.0, 3.0), (3.0, 4.0)])
    lines = [x for x in text.splitlines() if x.startswith("| ")]
    assert lines[0].startswith("| op | case |")
    assert lines[1] == ("| reshape_and_cache | bf16 H8 D128 bs128 T=1024 | 10.00 | 11.00 | 1.10 (0.90, 1.30, 1.10) | "
                        "2.20 (1.80, 2.60, 2.20) | - | - |")
    assert lines[2].startswith("| concat_and_cache_mla | DeepSeek-V3 T=1024 | 6.00 | ")
    assert "| 1.20 (1.00, 1.40, 1.20) | 1.50 (1.50, 1.50, 1.50) | 1.20 (1.20, 1.20, 1.20) |" in lines[2]
    assert len(lines) == 3  # the overhead row has no memcpy ratio
    assert "run 3: load average 3.00 before, 4.00 after" in text and copy_ops.BASELINE_LINE in text
    # a reader (and a test) can read the median back from the three figures
    med = re.search(r"\(([\d.]+), ([\d.]+), ([\d.]+)\)", lines[1])
    assert med and f"{float(np.median([float(v) for v in med.groups()])):.2f}" in lines[1].split("(")[0]


def test_copy_bench_main_runs_option(small_copy_bench, capsys, tmp_path):
    """`python scripts/bench_copy.py --runs 2`: both runs' tables, then the median table of the two; --json
    holds every run's rows with their run number; --runs 0 is refused."""
    mod = small_copy_bench
    out = tmp_path / "rows.json"
    assert mod.main(["--quick", "--ops", "swap_blocks", "--runs", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "=== run 1 of 2" in text and "=== run 2 of 2" in text and "median of 2 runs" in text
    line = [x for x in text.splitlines() if x.startswith("| swap_blocks | Llama-3-8B 2 blocks |")]
    assert len(line) == 1 and re.search(r"\| [\d.]+ \([\d.]+, [\d.]+\) \|", line[0]), line
    import json

    rows = json.loads(out.read_text())
    assert sorted({r["run"] for r in rows}) == [1, 2] and all(r["correct"] for r in rows)
    with pytest.raises(SystemExit):
        mod.main(["--runs", "0"])


def test_copy_sim_quant_rows_name_the_public_op():
    """The emulation rows of the quantizing writes name the public op a user calls (reshape_and_cache /
    concat_and_cache_mla with scale arguments), as every bench row must (`ms-kvcache bench` keys its table
    and plot on public op names): they said reshape_and_cache_quant / concat_and_cache_mla_quant."""
    import ms_kvcache
    from ms_kvcache.bench import copy_ops_sim
    from _copy_sim_ref import sim_module

    sim = sim_module()
    rows = copy_ops_sim._quant_rows(sim, "Ascend910B1", 4, "bfloat16")
    rows += copy_ops_sim._mla_quant_rows(sim, "Ascend910B1", 4, "bfloat16")
    assert {r["op"] for r in rows} == {"reshape_and_cache", "concat_and_cache_mla"}
    assert all(r["op"] in ms_kvcache.ops.__all__ and "-> int8" in r["case"] for r in rows)


def test_rope_sim_mla_quant_rows_gm_traffic_at_the_minimum():
    """Issue 17's GM-traffic target for the quantizing MLA RoPE-write: the emulation's bench rows of
    MskvRopeConcatAndCacheMlaQuant (static and dynamic on Atlas A2, static only on Ascend310P) name the
    public op and move at most 1.05x the minimum GM bytes (the minimum counted independently of the
    kernel in ms_kvcache/bench/rope_sim.py: every input read once, outputs and int8 codes written once)."""
    import ms_kvcache
    from ms_kvcache.bench import rope_sim
    from _copy_sim_ref import sim_module

    sim = sim_module()
    rng = np.random.default_rng(0)
    rows = rope_sim._mla_quant(sim, "Ascend910B1", 64, rng) + rope_sim._mla_quant(sim, "Ascend310P3", 64, rng)
    assert [r["soc"] for r in rows] == ["Ascend910B1", "Ascend910B1", "Ascend310P3"]
    assert all(r["op"] == "rope_concat_and_cache_mla" and r["op"] in ms_kvcache.ops.__all__ for r in rows)
    assert ["static" in r["case"] for r in rows] == [True, False, True]
    for r in rows:
        assert r["work"] == 64 and r["gm_min_bytes"] > 64 * (512 + 64)
        assert 1.0 <= r["gm_ratio"] <= 1.05, r
