"""The emulation under AddressSanitizer + UndefinedBehaviorSanitizer.

Builds libascendc_sim.so and _sim with ``-DMS_KVCACHE_SANITIZE=ON`` into the tests' build cache
(``tests/_cache.py``: ``$MS_KVCACHE_TEST_CACHE``, else ``~/.cache/ms_kvcache/tests``, folder
``sim-asan/<checkout key>``, ~210 MB; reused by later runs of the same checkout, pruned when its checkout
is gone, at most two checkouts kept), lays out a minimal ``ms_kvcache`` package there whose
``sim`` subpackage (and the op registry it reads: ``_spec``, ``_opspecs``, ``_formats``) is this checkout's, and runs the emulation test files (tests/test_sim_rules.py,
tests/test_sim_semantics.py: every rule, every API's semantics, all three core orders) in a
subprocess with libasan preloaded, plus the host-side tests (tests/test_sim_host_*.py: OpDef,
TilingData, tiling contexts) and the kernel + tiling tests of the repository's copy and RoPE-write ops
(tests/test_*_sim.py without MindSpore: the real op_kernel / op_host code under ASan + UBSan); the test kernels / ops they build with ``ms_kvcache.sim.build`` are
instrumented too ($MS_KVCACHE_SIM_CXXFLAGS). MindSpore itself is not loaded under ASan (the AOT path
is covered by tests/test_sim_ops.py in the normal build). First run ~2-3 min on 2 cores, then seconds.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _cache import build_dir

ROOT = Path(__file__).resolve().parent.parent
SAN = "-fsanitize=address,undefined -fno-omit-frame-pointer"


def _lib(name):
    p = subprocess.run(["g++", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return p if p and os.path.isabs(p) and os.path.exists(p) else None


@pytest.mark.slow
def test_emulation_tests_pass_under_asan_ubsan():
    libasan, libstdcxx = _lib("libasan.so"), _lib("libstdc++.so")
    if libasan is None or libstdcxx is None or shutil.which("cmake") is None:
        pytest.skip("g++ has no libasan or cmake is missing")
    base = build_dir("sim-asan", ROOT)
    bdir, pkg = base / "build", base / "pkg"
    mod = pkg / "ms_kvcache"
    mod.mkdir(parents=True, exist_ok=True)
    (mod / "__init__.py").write_text('"""ms_kvcache stub for the sanitizer run: only the sim subpackage."""\n')
    # the sim subpackage and the pure-Python modules it imports (the op registry: ``sim.launch`` maps attribute
    # names to codes through the OpSpecs)
    for name in ("sim", "_spec.py", "_formats.py", "_opspecs"):
        link, target = mod / name, ROOT / "ms_kvcache" / name
        if link.is_symlink() and Path(os.readlink(link)) != target:
            link.unlink()
        if not link.exists():
            link.symlink_to(target, target_is_directory=target.is_dir())
    cfg = ["cmake", "-S", str(ROOT), "-B", str(bdir), "-DMS_KVCACHE_SANITIZE=ON", "-DCMAKE_BUILD_TYPE=Release",
           f"-DMS_KVCACHE_SIM_OUTPUT_DIR={mod}", f"-DPython_EXECUTABLE={sys.executable}"]
    r = subprocess.run(cfg, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["cmake", "--build", str(bdir), "--target", "_sim", "-j", os.environ.get("JOBS", "2")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]

    env = dict(os.environ)
    env.update({
        "PYTHONPATH": str(pkg),
        # libstdc++ too: python does not link it, and ASan must intercept __cxa_throw (emulation errors
        # are C++ exceptions) at start-up
        "LD_PRELOAD": f"{libasan} {libstdcxx}",
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:halt_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "MS_KVCACHE_SIM_CXXFLAGS": SAN,
        "MS_KVCACHE_SIM_CACHE": str(base / "cache"),
    })
    names = ["test_sim_rules.py", "test_sim_semantics.py",  # kernel side + runner
             "test_sim_host_checks.py", "test_sim_host_tiling.py", "test_sim_host_tilingdata.py",  # host side
             # the repository's AscendC kernels + tilings (their MindSpore public-op tests deselected)
             "test_reshape_and_cache_sim.py", "test_reshape_and_cache_merged_sim.py", "test_concat_and_cache_mla_sim.py",
             "test_copy_blocks_sim.py", "test_rope_reshape_and_cache_sim.py", "test_rerope_cached_keys_sim.py",
             "test_rope_concat_and_cache_mla_sim.py"]
    tests = [str(ROOT / "tests" / n) for n in names if (ROOT / "tests" / n).exists()]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--noconftest",
                        "-k", "not public_op", "-W", "ignore::RuntimeWarning", "--rootdir", str(ROOT / "tests"),
                        *tests],
                       capture_output=True, text=True, env=env, cwd=str(ROOT / "tests"))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "passed" in out and "ERROR: AddressSanitizer" not in out and "runtime error:" not in out, out[-6000:]
