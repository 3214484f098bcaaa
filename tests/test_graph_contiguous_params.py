"""GRAPH_MODE / @ms.jit refuse, at compile time, a written Parameter that is not contiguous (a view given with
``Parameter.set_data``), as PyNative refuses such a cache: MindSpore runs the graph on a contiguous copy of it
(the Cell-attribute case, checked below: the Parameter silently becomes that copy), so the write would not reach
the memory the view shows. Contiguous Parameters of the same graph are not affected."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn

import ms_kvcache as mk
from conftest import ms_mode

K_SHAPE = (4, 16, 2, 8)   # [num_blocks, block_size, num_kv_heads, head_size]


def strided_parameter(name):
    """A Parameter over a transposed view of a base tensor: shape K_SHAPE, not contiguous."""
    base = Tensor(np.zeros((K_SHAPE[1], K_SHAPE[0], *K_SHAPE[2:]), np.float16))
    p = Parameter(Tensor(np.zeros((1,), np.float16)), name=name)
    p.set_data(base.transpose(1, 0, 2, 3))
    assert not p.is_contiguous() and tuple(p.shape) == K_SHAPE
    return p, base


def kv(rng, n=3):
    return Tensor(rng.standard_normal((n, 2, 8)).astype(np.float16))


class Writer(nn.Cell):
    def __init__(self, kc, vc):
        super().__init__()
        self.kc, self.vc = kc, vc

    def construct(self, k, v, slots):
        mk.reshape_and_cache(k, v, self.kc, self.vc, slots)
        return slots


# key_cache and value_cache have one shape and dtype: the graph cannot tell which one the view is, both are named
MESSAGE = (r"reshape_and_cache: argument 'key_cache' / 'value_cache': expected a contiguous Parameter, got Parameter "
           r"'kc' \(shape \(4, 16, 2, 8\), Float16\) with strides \(16, 64, 8, 1\) \(one of these arguments")


def test_graph_mode_cell_attribute_view_is_refused(rng):
    kc, base = strided_parameter("kc")
    vc = Parameter(Tensor(np.zeros(K_SHAPE, np.float16)), name="vc")
    with ms_mode("graph"):
        net = Writer(kc, vc)
        with pytest.raises(ValueError, match=MESSAGE):
            net(kv(rng), kv(rng), Tensor(np.array([0, 1, 17], np.int64)))
    assert not kc.is_contiguous(), "the refused compile left the view as it was"
    assert not base.asnumpy().any() and not vc.asnumpy().any(), "nothing written"


def test_jit_parameter_argument_view_is_refused(rng):
    kc, _ = strided_parameter("kc")
    vc = Parameter(Tensor(np.zeros(K_SHAPE, np.float16)), name="vc")

    @ms.jit
    def write(k, kcache, vcache, slots):
        mk.reshape_and_cache(k, k, kcache, vcache, slots)
        return slots

    with pytest.raises(ValueError, match=MESSAGE):
        write(kv(rng), kc, vc, Tensor(np.array([0, 5], np.int64)))


KC_GLOBAL, _BASE_GLOBAL = strided_parameter("kc")
VC_GLOBAL = Parameter(Tensor(np.zeros(K_SHAPE, np.float16)), name="vc")


def test_jit_global_parameter_view_is_refused(rng):
    @ms.jit
    def write(k, slots):
        mk.reshape_and_cache(k, k, KC_GLOBAL, VC_GLOBAL, slots)
        return slots

    with pytest.raises(ValueError, match=MESSAGE):
        write(kv(rng), Tensor(np.array([2], np.int64)))


def test_list_of_caches_with_one_view_is_refused(rng):
    good = [Parameter(Tensor(np.zeros(K_SHAPE, np.float16)), name=f"k{i}") for i in range(2)]
    bad, _ = strided_parameter("v1")
    vals = ParameterTuple([Parameter(Tensor(np.zeros(K_SHAPE, np.float16)), name="v0"), bad])

    class Copier(nn.Cell):
        def __init__(self):
            super().__init__()
            self.k, self.v = ParameterTuple(good), vals

        def construct(self, mapping):
            mk.copy_blocks(self.k, self.v, mapping)
            return mapping

    with ms_mode("graph"):
        # four written caches of one shape and dtype: the message names them all and the Parameter
        with pytest.raises(ValueError, match=r"copy_blocks: argument 'key_caches\[0\]' / 'key_caches\[1\]' / "
                                             r"'value_caches\[0\]' / 'value_caches\[1\]': expected a contiguous "
                                             r"Parameter, got Parameter 'v1' .* \(one of these arguments"):
            Copier()(Tensor(np.array([[0, 1]], np.int64)))


def test_contiguous_parameters_still_compile_and_write(rng):
    """No false refusal: a graph whose written Parameters are contiguous runs, with an unrelated non-contiguous
    Parameter of another shape in the same Cell; the rows land in the caches (numpy reference)."""
    kc = Parameter(Tensor(np.zeros(K_SHAPE, np.float16)), name="kc")
    vc = Parameter(Tensor(np.zeros(K_SHAPE, np.float16)), name="vc")
    other = Parameter(Tensor(np.zeros((1,), np.float32)), name="other")
    other.set_data(Tensor(np.zeros((3, 5), np.float32)).transpose(1, 0))
    k, v = kv(rng), kv(rng)
    slots = np.array([0, 17, 63], np.int64)
    with ms_mode("graph"):
        net = Writer(kc, vc)
        net.other = other
        net(k, v, Tensor(slots))
        mk.synchronize()
    ref_k = np.zeros(K_SHAPE, np.float16)
    ref_v = np.zeros(K_SHAPE, np.float16)
    for t, s in enumerate(slots):
        ref_k[s // 16, s % 16] = k.asnumpy()[t]
        ref_v[s // 16, s % 16] = v.asnumpy()[t]
    np.testing.assert_array_equal(kc.asnumpy(), ref_k)
    np.testing.assert_array_equal(vc.asnumpy(), ref_v)


def test_pynative_refuses_the_same_view(rng):
    """The PyNative rule the graph now matches."""
    kc, _ = strided_parameter("kc")
    vc = Parameter(Tensor(np.zeros(K_SHAPE, np.float16)), name="vc")
    with pytest.raises(ValueError, match=r"reshape_and_cache: argument 'key_cache': expected a contiguous"):
        mk.reshape_and_cache(kv(rng), kv(rng), kc, vc, Tensor(np.array([0, 1, 2], np.int64)))
