"""`ms-kvcache bench` from a wheel installed outside the checkout works as from the checkout.

Builds the wheel of this checkout (``pip wheel --no-deps``; CMake's build directory is kept in the tests'
build cache, ``tests/_cache.py``, folder ``wheel/<checkout key>``, so a later run recompiles only what
changed), by default without the AscendC emulation module (``MS_KVCACHE_BUILD_SIM=OFF``: the emulation
is most of the compile time; ``MS_KVCACHE_WHEEL_TEST_SIM=1`` builds the full wheel and also runs an
emulation benchmark: 16 min the first time at load 8 on 2 cores, 75 s for a rerun; without the emulation
11.6 min at load 11-13, of which 2.4 min CPU time), installs it with
``pip install --no-deps --target`` into a temp venv of its own (its dependencies - MindSpore, numpy,
ml_dtypes, matplotlib - come from the running environment's site-packages, reached without running that
environment's .pth files, so an editable install of the checkout there cannot be imported instead), and,
from a temp cwd, with that venv's Python,
runs ``ms-kvcache --help``, ``bench --list`` (every package benchmark module, no script of the checkout)
and ``bench --quick --ops transfer`` (plus ``transfer_sim`` with the emulation; ~1 min), and checks bench.csv / bench.md / bench.png and that no deprecation warning is printed. The wheel and the
install are deleted afterwards (only the build cache stays).
"""
import csv
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from _cache import build_dir

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_BENCHES = {"copy_ops", "copy_ops_sim", "list_ops", "rope", "rope_sim", "transfer", "transfer_sim"}


def _run(cmd, cwd, env, timeout):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.mark.slow
def test_bench_from_a_wheel_installed_outside_the_checkout(tmp_path):
    if shutil.which("cmake") is None and importlib.util.find_spec("cmake") is None:
        pytest.skip("cmake is missing")
    no_isolation = all(importlib.util.find_spec(m) for m in ("scikit_build_core", "pybind11"))
    full = os.environ.get("MS_KVCACHE_WHEEL_TEST_SIM") == "1"
    cache = build_dir("wheel-full" if full else "wheel", ROOT)
    wheels, venv, work = tmp_path / "wheels", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MS_KVCACHE_BACKEND")}
    env.update(GLOG_v="3", CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("JOBS", "2"))
    try:
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
               "-C", f"build-dir={cache / 'build'}", str(ROOT)]
        if not full:
            cmd[-1:-1] = ["-C", "cmake.define.MS_KVCACHE_BUILD_SIM=OFF"]
        if no_isolation:
            cmd.insert(4, "--no-build-isolation")
        _run(cmd, ROOT, env, 3600)
        wheel, = wheels.glob("ms_kvcache-*.whl")
        # a venv of its own: the running environment may hold an editable install of this checkout, whose
        # import hook (a .pth file) would win over any PYTHONPATH. Its packages reach the new venv through
        # a plain path entry in a .pth file, which adds the folder without running the .pth files inside.
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
        py = str(venv / "bin" / "python")
        site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
        parent = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
        (site / "zz_parent_env.pth").write_text("".join(f"{d}\n" for d in sorted(parent)))
        _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
             work, env, 600)
        where = _run([py, "-c", "import ms_kvcache, sys; print(ms_kvcache.__file__); "
                      "print('mindspore' in sys.modules)"], work, env, 120).stdout.split()
        assert Path(where[0]).is_relative_to(site) and where[1] == "False", where
        exe = [py, "-m", "ms_kvcache.cli"]
        assert "bench" in _run(exe + ["--help"], work, env, 120).stdout
        listed = _run(exe + ["bench", "--list"], work, env, 300).stdout.split("\n")
        found = {ln.split()[0]: ln for ln in listed if ln.strip()}
        # only package modules: a script found by path ends its line with "[<path>]"
        assert PACKAGE_BENCHES <= set(found) and not any(ln.rstrip().endswith("]") for ln in found.values()), found
        out = work / "bench_out"
        families = ["transfer", "transfer_sim"] if full else ["transfer"]
        p = _run(exe + ["bench", "--quick", "--no-progress", "--ops", *families, "--out", str(out)], work, env, 1800)
        assert "deprecat" not in (p.stdout + p.stderr).lower(), p.stderr[-3000:]
        rows = list(csv.DictReader(open(out / "bench.csv")))
        assert {r["module"] for r in rows} == set(families)
        png = (out / "bench.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
        md = (out / "bench.md").read_text()
        assert "CPU timings" in md and ("AscendC kernels through the emulation" in md) == full
        for line in md.splitlines():
            if line.startswith("| ") and not line.startswith("| op "):
                cells = [c.strip() for c in line.strip("|").split(" | ")]
                assert sum(1 for c in cells[2:] if c) >= 2, f"blank row: {line}"
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)
