"""MindSpore 2.7.x reshape() / view() outputs (issue 14): they carry no storage info, so the ops.Custom
PyNative path cannot see that they are views, and an in-place write into one is lost. There
_validate.require_write_lands refuses a written tensor whose C++ conversion is at another address than
its data_ptr() (test_cache_views.py runs the real case on 2.7). The decision logic is tested here on any
MindSpore with a stand-in for ms_kvcache._cpu_pyboost that reports what 2.7 reports."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_kvcache
from ms_kvcache import _backend, _custom, _pyboost_loader
from ms_kvcache import _validate as V

from conftest import assert_bits_equal, random_array, to_ms, to_np
from copy_util import fast_path


class Fake27:
    """The fast module as MindSpore 2.7 shows a reshape output: no storage info, a pending op's output
    (data_address_nosync None) whose conversion is a copy elsewhere. Other tensors: as the real module
    (or its absence) reports them."""

    def __init__(self, views=(), converted_ok=()):
        self._real = _custom._fast_module()  # noqa: WPS437
        self.views = {id(t) for t in views}
        self.ok = {id(t) for t in converted_ok}

    def __getattr__(self, name):
        return getattr(self._real, name)

    def view_info(self, x):
        return False if id(x) in self.views | self.ok else self._real.view_info(x)

    def data_address_nosync(self, x):
        if id(x) in self.views | self.ok:
            return None  # "the output of a pending op"
        fn = getattr(self._real, "data_address_nosync", None)
        return fn(x) if fn is not None else None

    def converted_address(self, x):
        if id(x) in self.views:
            return x.data_ptr() + 4096  # the conversion's copy in other memory
        if id(x) in self.ok:
            return x.data_ptr()
        raise AssertionError("converted_address called for a tensor that is no pending op's output")


@pytest.fixture
def ms27(monkeypatch):
    """Make require_not_view behave as on MindSpore 2.7 with the given stand-in module."""
    def use(fake):
        monkeypatch.setattr(V, "MS_VIEWS_WITHOUT_STORAGE_INFO", True)
        monkeypatch.setattr(_pyboost_loader, "fast_module", lambda: fake)  # what _validate and _custom load
        return fake
    return use


def test_decision_refuses_a_write_that_would_land_elsewhere(ms27):
    a = Tensor(np.zeros((4, 8), np.float32))
    view, own_out, fresh = a.reshape(32), a * 1, Tensor(np.zeros((4, 8), np.float32))
    ms27(Fake27(views=[view], converted_ok=[own_out]))
    with pytest.raises(ValueError, match=r"^reshape_and_cache: argument 'key_cache': expected a tensor that owns its "
                                         r"memory, got a view of another tensor \(shape \[32\]\): on MindSpore .* "
                                         r"reshape\(\) / view\(\).*lost.*Pass the cache tensor itself"):
        V.require_not_view("reshape_and_cache", "key_cache", view)
    V.require_not_view("reshape_and_cache", "key_cache", own_out)  # an op's own output: same address
    V.require_not_view("reshape_and_cache", "key_cache", fresh)    # not pending: converted_address not asked
    V.require_not_view("reshape_and_cache", "key_cache", Parameter(Tensor(np.zeros(4, np.float32)), name="p27"))
    V.require_not_view("reshape_and_cache", "key_cache", Tensor(np.zeros((0, 4), np.float32)))  # nothing written


class NoModule:
    """ms_kvcache._cpu_pyboost not built: none of its functions."""


def test_decision_without_the_module_accepts_only_parameters(ms27):
    ms27(NoModule())
    with pytest.raises(ValueError, match=r"^copy_blocks: argument 'key_caches\[0\]': expected a Parameter: on "
                                         r"MindSpore .*without ms_kvcache._cpu_pyboost"):
        V.require_not_view("copy_blocks", "key_caches[0]", Tensor(np.zeros((4, 8), np.float32)))
    V.require_not_view("copy_blocks", "key_caches[0]", Parameter(Tensor(np.zeros((4, 8), np.float32)), name="p27m"))


def test_not_applied_from_mindspore_2_8(monkeypatch):
    """2.8+ detect every view by its storage info: no address comparison (no extra pipeline wait)."""
    monkeypatch.setattr(V, "MS_VIEWS_WITHOUT_STORAGE_INFO", False)
    monkeypatch.setattr(V, "require_write_lands", lambda *a: pytest.fail("called on >= 2.8"))
    V.require_not_view("reshape_and_cache", "key_cache", Tensor(np.zeros((4, 8), np.float32)))


@pytest.mark.parametrize("path", ["cpu-custom", "sim"])
def test_public_op_refuses_and_writes_nothing(path, ms27, rng):
    """Through the public op on an ops.Custom path (was, on 2.7: returned normally, 0 rows written)."""
    if path == "sim":
        from ms_kvcache._backends import sim

        if not sim.available()[0]:
            pytest.skip("sim backend not built")
    base0 = random_array(rng, (32, 2, 16), "float32")
    base = Tensor(base0.copy())
    view = base.reshape(4, 8, 2, 16)
    ms27(Fake27(views=[view]))
    key = to_ms(random_array(rng, (3, 2, 16), "float32"))
    old = _backend.get_backend()
    ms_kvcache.set_backend("sim" if path == "sim" else "cpu")
    try:
        with fast_path(False):
            with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'value_cache': expected a tensor that "
                                                 r"owns its memory, got a view of another tensor"):
                ms_kvcache.reshape_and_cache(key, key, Tensor(np.zeros((4, 8, 2, 16), np.float32)), view,
                                             Tensor(np.array([0, 9, 31], np.int32)))
    finally:
        ms_kvcache.set_backend(old)
    assert_bits_equal(to_np(base), base0, "untouched")


def test_no_fast_path_where_views_lose_its_writes(monkeypatch, rng):
    """On MindSpore 2.7.x the cpu fast path's write into a reshape() view of a Parameter was lost (the
    kernel got the memory MindSpore converts the view to: a copy), with no error: measured on 2.7.2,
    tests/test_cache_views.py::test_fast_path_writes_through_reshape_views, 96 of 96 elements missing. There
    the fast path is off, so every write goes through the ops.Custom path's view checks and such a view is
    refused. Simulated here on any MindSpore by flipping the version flag (the old code kept the fast path
    and wrote through, so this test fails on it)."""
    if _custom._fast_module() is None:  # noqa: WPS437
        pytest.skip("ms_kvcache._cpu_pyboost not built")
    monkeypatch.setattr(V, "MS_VIEWS_WITHOUT_STORAGE_INFO", True)
    monkeypatch.setattr(_custom, "_LAUNCHERS", {})  # launchers chosen under the flag
    ok, why = _custom.fast_path_available("cpu")
    assert not ok and "reshape() / view() output carries no storage info" in why, why
    base0 = random_array(rng, (32, 2, 16), "float32")
    kb = Parameter(Tensor(base0.copy()), name="kb27")
    key = to_ms(random_array(rng, (3, 2, 16), "float32"))
    old = _backend.get_backend()
    ms_kvcache.set_backend("cpu")
    try:
        with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'key_cache': expected a tensor that owns "
                                             r"its memory, got a view"):
            ms_kvcache.reshape_and_cache(key, key, kb.reshape(4, 8, 2, 16), Tensor(np.zeros((4, 8, 2, 16), np.float32)),
                                         Tensor(np.array([0, 9, 31], np.int32)))
    finally:
        ms_kvcache.set_backend(old)
    assert_bits_equal(to_np(kb), base0, "untouched")


def test_claimed_mindspore_range_is_the_tested_one():
    """pyproject.toml claims the MindSpore versions CI tests (.ci/run installs mindspore==2.10.*): the range
    starts at the running release, so no claimed version goes untested. Other releases are checked with
    scripts/test_mindspore_versions.py."""
    import os
    import re

    import mindspore

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
        m = re.search(r'"mindspore>=(\d+)\.(\d+)(?:\.\d+)?,<(\d+)\.(\d+)"', f.read())
    assert m, "pyproject.toml: no 'mindspore>=A.B,<C.D' dependency"
    lo, hi = (int(m[1]), int(m[2])), (int(m[3]), int(m[4]))
    ci = os.path.join(root, ".ci", "run")
    if os.path.isfile(ci):
        with open(ci, encoding="utf-8") as f:
            pins = re.findall(r'mindspore==(\d+)\.(\d+)\.\*', f.read())
        assert pins and all((int(a), int(b)) == lo for a, b in pins), (pins, lo)
        assert hi == (lo[0], lo[1] + 1), f"claimed {lo}..{hi}, CI tests {lo} only"
    running = tuple(int(x) for x in mindspore.__version__.split(".")[:2])
    if running != lo:
        pytest.skip(f"MindSpore {mindspore.__version__} is outside the claimed (tested) range {lo}; "
                    f"scripts/test_mindspore_versions.py checks other releases")
