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
