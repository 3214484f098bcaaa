"""Shared test fixtures: MindSpore execution modes, random data per dtype, exact comparisons."""
import contextlib
import os
import zlib

import ml_dtypes
import numpy as np
import pytest

os.environ.setdefault("GLOG_v", "3")  # keep MindSpore's C++ log quiet in test output

import mindspore as ms  # noqa: E402
from mindspore import Tensor  # noqa: E402

import ms_kvcache  # noqa: E402

MODES = ("pynative", "graph", "jit")

NP_DTYPES = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float32": np.float32,
    "int8": np.int8,
    "int32": np.int32,
    "int64": np.int64,
}
MS_DTYPES = {
    "float16": ms.float16, "bfloat16": ms.bfloat16, "float32": ms.float32, "int8": ms.int8,
    "int32": ms.int32, "int64": ms.int64,
}


def random_array(rng, shape, dtype):
    """Random, non-constant data of ``dtype`` (numpy; bfloat16 via ml_dtypes)."""
    if dtype == "int8":
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    x = rng.standard_normal(size=shape).astype(np.float32)
    return x.astype(NP_DTYPES[dtype])


def to_ms(x, dtype=None):
    """numpy (incl. ml_dtypes.bfloat16) -> mindspore Tensor of the same values."""
    if x.dtype == ml_dtypes.bfloat16 or dtype == "bfloat16":
        return Tensor(np.asarray(x, dtype=np.float32), dtype=ms.bfloat16)
    return Tensor(x)


def to_np(t):
    """mindspore Tensor -> numpy with exact bits (bfloat16 -> ml_dtypes.bfloat16)."""
    a = t.asnumpy()
    if t.dtype == ms.bfloat16:
        return a.view(np.uint16).view(ml_dtypes.bfloat16)
    return a


def assert_bits_equal(actual, expected, msg=""):
    """Byte-exact comparison (NaN-safe, distinguishes -0.0)."""
    a = np.ascontiguousarray(actual)
    e = np.ascontiguousarray(expected)
    assert a.shape == e.shape, f"{msg}: shape {a.shape} != {e.shape}"
    assert a.dtype.itemsize == e.dtype.itemsize, f"{msg}: itemsize differs"
    av, ev = a.view(np.uint8), e.view(np.uint8)
    if not np.array_equal(av, ev):
        bad = np.nonzero((a.view(f"u{a.dtype.itemsize}") != e.view(f"u{e.dtype.itemsize}")).reshape(-1))[0]
        raise AssertionError(f"{msg}: {bad.size} elements differ, first at flat index {bad[:5].tolist()}")


@contextlib.contextmanager
def ms_mode(mode):
    """Run the body with MindSpore in ``mode`` ("pynative" | "graph" | "jit"; jit = PyNative + @ms.jit)."""
    old = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    try:
        yield
    finally:
        ms.set_context(mode=old)


@pytest.fixture
def rng(request):
    # stable per test (also across processes: str hash is randomised), different across tests
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


@pytest.fixture(params=ms_kvcache.BACKENDS[:1])
def cpu_backend():
    ms_kvcache.set_backend("cpu")
    yield "cpu"


# The files that each take minutes (native builds in a subprocess: the ASan emulation build, a wheel built
# and installed in its own venv, the end-to-end ``ms-kvcache bench --quick``, the CANN-form pyboost
# module). Under ``-n 2 --dist loadfile`` they start first, one per worker, so the rest of the suite fills
# in around them instead of one of them running alone at the end.
SLOW_FILES_FIRST = ("test_sim_asan.py", "test_wheel_install.py", "test_cli.py", "test_ascend_pyboost.py")


def pytest_configure(config):
    # pytest-xdist's loadfile/loadscope scheduler sorts the files by their number of tests unless told
    # not to; keep the collection order (below) instead
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    """Stable reorder: the files of SLOW_FILES_FIRST first, in that order; every other file keeps its place."""
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))
