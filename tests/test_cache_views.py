"""Caches that are views of other tensors (W2): on the ops.Custom path (the sim backend in PyNative,
cpu with the fast path off) every view, a whole-tensor reshape included, is rejected with a ValueError
naming the argument, and nothing is written; on the cpu fast path the same views are written through."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_kvcache
from ms_kvcache import _backend, _custom

from conftest import assert_bits_equal, random_array, to_ms, to_np
from copy_util import fast_path


def _has_view_info():
    return getattr(_custom._fast_module(), "view_info", None) is not None  # noqa: WPS437


pytestmark = pytest.mark.skipif(not _has_view_info(), reason="ms_kvcache._cpu_pyboost (MindSpore storage metadata "
                                                             "reader) not built: only offset views are detected")

#: MindSpore 2.7.x: reshape() / view() outputs carry no TensorStorageInfo (view_info says "owns its memory")
#: and an in-place write into one through ops.Custom - or MindSpore's own Tensor.copy_ - is lost
#: (test_mindspore_27_reshape_outputs_lose_inplace_writes); ms_kvcache refuses them there by the address
#: the kernel would get (_validate.require_write_lands: it differs from data_ptr()), 2.8+ by storage info.
import mindspore as _ms  # noqa: E402

_MS27 = tuple(int(x) for x in _ms.__version__.split(".")[:2]) < (2, 8)
#: the "view of ..." part of the refusal: 2.8+ know the viewed tensor's shape, 2.7 only that it is another
VIEW_OF = r"got a view of (a tensor of shape \[32, 2, 16\]|another tensor)" if _MS27 else \
    r"got a view of a tensor of shape \[32, 2, 16\]"


@pytest.mark.skipif(not _MS27, reason="documents a MindSpore 2.7.x behaviour")
def test_mindspore_27_reshape_outputs_lose_inplace_writes():
    """Pins the MindSpore 2.7 behaviour require_write_lands relies on: its own in-place copy_ into a reshape
    output changes neither the output nor its base (2.8+ write through), the output has no storage info,
    and the tensor MindSpore's C++ side makes of it is at another address than its data_ptr() (the base's),
    while for an op's own output the two agree."""
    b = Tensor(np.zeros((4, 2), np.float32))
    r = b.reshape(8)
    r.copy_(Tensor(np.ones((8,), np.float32)))
    assert to_np(r).sum() == 0 and to_np(b).sum() == 0
    mod = _custom._fast_module()  # noqa: WPS437
    assert mod.view_info(b.reshape(8)) is False
    r = b.reshape(8)
    assert r.data_ptr() == b.data_ptr() and mod.converted_address(r) != r.data_ptr()
    o = b * 1
    assert mod.converted_address(o) == o.data_ptr()


VIEWS = {
    "reshape": lambda b: b.reshape(4, 8, 2, 16),
    "view": lambda b: b.view(4, 8, 2, 16),
    "reshape of a reshape": lambda b: b.reshape(32, 32).reshape(4, 8, 2, 16),
}


def _path(name):
    """Context: 'sim' (sim backend, ops.Custom) or 'cpu-custom' (cpu, fast path off)."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
        old = _backend.get_backend()
        if name == "sim":
            from ms_kvcache._backends import sim

            if not sim.available()[0]:
                pytest.skip("sim backend not built")
            ms_kvcache.set_backend("sim")
        else:
            ms_kvcache.set_backend("cpu")
        try:
            with fast_path(False):
                yield
        finally:
            ms_kvcache.set_backend(old)

    return ctx()


@pytest.mark.parametrize("path", ["sim", "cpu-custom"])
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("as_param", [True, False])
def test_reshape_view_cache_is_rejected_on_ops_custom(path, view, as_param, rng):
    """reshape_and_cache into base.reshape(...) used to return normally and write nothing (on MindSpore
    2.7.x until require_write_lands: the test was skipped there)."""
    k0, v0 = random_array(rng, (32, 2, 16), "float32"), random_array(rng, (32, 2, 16), "float32")
    mk = (lambda a, n: Parameter(Tensor(a.copy()), name=n)) if as_param else (lambda a, n: Tensor(a.copy()))
    kb, vb = mk(k0, "kb"), mk(v0, "vb")
    key, val = to_ms(random_array(rng, (3, 2, 16), "float32")), to_ms(random_array(rng, (3, 2, 16), "float32"))
    slots = Tensor(np.array([0, 9, 31], np.int32))
    vc = Tensor(np.zeros((4, 8, 2, 16), np.float32))
    with _path(path):
        with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'key_cache': expected a tensor that owns "
                                             r"its memory, " + VIEW_OF):
            ms_kvcache.reshape_and_cache(key, val, VIEWS[view](kb), vc, slots)
        with pytest.raises(ValueError, match="argument 'value_cache': expected a tensor that owns its memory"):
            ms_kvcache.reshape_and_cache(key, val, Tensor(np.zeros((4, 8, 2, 16), np.float32)), VIEWS[view](vb),
                                         slots)
    assert_bits_equal(to_np(kb), k0, "key base untouched")
    assert_bits_equal(to_np(vb), v0, "value base untouched")


@pytest.mark.parametrize("path", ["sim", "cpu-custom"])
def test_own_tensors_still_accepted_on_ops_custom(path, rng):
    """Not over-strict: caches that own their memory (Parameter, Tensor, Parameter built from a view,
    an op's output) are written."""
    key = to_ms(random_array(rng, (3, 2, 16), "float32"))
    slots = Tensor(np.array([0, 9, 31], np.int32))
    base = Tensor(np.zeros((32, 2, 16), np.float32))
    own = [Parameter(Tensor(np.zeros((4, 8, 2, 16), np.float32)), name="own_p"),
           Tensor(np.zeros((4, 8, 2, 16), np.float32)),
           Parameter(base.reshape(4, 8, 2, 16), name="from_view"),
           base.reshape(4, 8, 2, 16).contiguous() * 1]
    with _path(path):
        for c in own:
            ms_kvcache.reshape_and_cache(key, key, c, Tensor(np.zeros((4, 8, 2, 16), np.float32)), slots)
            got = to_np(c).reshape(32, 2, 16)
            assert_bits_equal(got[[0, 9, 31]], to_np(key), f"written into {type(c).__name__}")


@pytest.mark.parametrize("path", ["sim", "cpu-custom"])
def test_copy_blocks_list_element_view_rejected(path, rng):
    base0 = random_array(rng, (8 * 4, 16), "float16")
    base = Tensor(base0.copy())
    k = [Tensor(random_array(rng, (8, 4, 16), "float16")), base.reshape(8, 4, 16)]
    v = [Tensor(random_array(rng, (8, 4, 16), "float16")) for _ in range(2)]
    with _path(path):
        with pytest.raises(ValueError, match=r"copy_blocks: argument 'key_caches\[1\]': expected a tensor that owns"):
            ms_kvcache.copy_blocks(k, v, Tensor(np.array([[0, 1]], np.int32)))
    assert_bits_equal(to_np(base), base0, "untouched")


def test_fast_path_writes_through_reshape_views(rng):
    """The cpu fast path passes the view's memory to the kernel: the same reshape view is written into
    its base (no rejection there)."""
    if not _custom.fast_path_available("cpu")[0]:
        pytest.skip("fast path unavailable")
    kb = Parameter(Tensor(np.zeros((32, 2, 16), np.float32)), name="kb_fast")
    key = to_ms(random_array(rng, (3, 2, 16), "float32"))
    ms_kvcache.reshape_and_cache(key, key, kb.reshape(4, 8, 2, 16), Tensor(np.zeros((4, 8, 2, 16), np.float32)),
                                 Tensor(np.array([0, 9, 31], np.int32)))
    assert_bits_equal(to_np(kb)[[0, 9, 31]], to_np(key), "written through the view")
