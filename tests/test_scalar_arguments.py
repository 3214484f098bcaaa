"""Non-tensor arguments of the public ops (cpu backend): numpy bools / numbers are accepted like Python
ones (config arrays give numpy scalars); wrong types raise TypeError naming the argument, wrong values
ValueError; dtype arguments take mindspore, numpy and str dtypes."""
import mindspore as ms
import ml_dtypes
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

import ms_kvcache as mk
from conftest import assert_bits_equal, ms_mode, random_array, to_np

NB, BS, HQ, HK, D, T = 4, 8, 4, 2, 16, 5


@pytest.fixture(autouse=True)
def _cpu(cpu_backend):
    yield


def _rope_call(op, rng, neox):
    """Run ``op`` once on fresh random float32 data; returns every output and cache as numpy arrays."""
    pos = Tensor(rng.permutation(32)[:T].astype(np.int64))
    slots = Tensor(rng.permutation(NB * BS)[:T].astype(np.int64))
    cs = mk.build_cos_sin_cache(D, 32)
    f = lambda *s: Tensor(random_array(rng, s, "float32"))  # noqa: E731
    if op == "rope_reshape_and_cache":
        kc, vc = Parameter(f(NB, BS, HK, D), name="kc"), Parameter(f(NB, BS, HK, D), name="vc")
        out = mk.rope_reshape_and_cache(pos, f(T, HQ, D), f(T, HK, D), f(T, HK, D), cs, kc, vc, slots,
                                        is_neox_style=neox)
        return [*out, kc, vc]
    if op == "rope_reshape_and_cache_merged":
        kv = Parameter(f(2, NB, BS, HK, D), name="kv")
        out = mk.rope_reshape_and_cache_merged(pos, f(T, HQ, D), f(T, HK, D), f(T, HK, D), cs, kv, slots,
                                               is_neox_style=neox)
        return [*out, kv]
    if op == "rope_concat_and_cache_mla":
        cc, kc = Parameter(f(NB, BS, 32), name="cc"), Parameter(f(NB, BS, D), name="kpc")
        out = mk.rope_concat_and_cache_mla(pos, f(T, HQ, D), f(T, D), f(T, 32), cs, cc, kc, slots,
                                           is_neox_style=neox)
        return [*out, cc, kc]
    kc = Parameter(f(NB, BS, HK, D), name="kc")
    mk.rerope_cached_keys(kc, slots, pos, Tensor(rng.permutation(32)[:T].astype(np.int64)), cs,
                          is_neox_style=neox)
    return [kc]


ROPE_OPS = ["rope_reshape_and_cache", "rope_reshape_and_cache_merged", "rope_concat_and_cache_mla",
            "rerope_cached_keys"]


@pytest.mark.parametrize("op", ROPE_OPS)
@pytest.mark.parametrize("value", [True, False])
def test_numpy_bool_is_neox_style(op, value):
    """np.bool_(v) gives bit-identical results to v, and True / False differ (so the flag is read)."""
    seed = 1234
    want = [to_np(x) for x in _rope_call(op, np.random.default_rng(seed), value)]
    got = [to_np(x) for x in _rope_call(op, np.random.default_rng(seed), np.bool_(value))]
    other = [to_np(x) for x in _rope_call(op, np.random.default_rng(seed), not value)]
    for i, (g, w) in enumerate(zip(got, want)):
        assert_bits_equal(g, w, f"{op} output/cache {i}")
    assert any(not np.array_equal(w, o) for w, o in zip(want, other)), "is_neox_style had no effect"


@pytest.mark.parametrize("op", ROPE_OPS)
@pytest.mark.parametrize("bad", [1, 0, "True", None, np.int64(1)])
def test_non_bool_is_neox_style(op, bad):
    with pytest.raises(TypeError, match=f"{op}: argument 'is_neox_style': expected a bool .*got "):
        _rope_call(op, np.random.default_rng(0), bad)


class _RopeCell(nn.Cell):
    def __init__(self, kc, vc, neox):
        super().__init__()
        self.kc, self.vc, self.neox = kc, vc, neox

    def construct(self, pos, q, k, v, cs, slots):
        return mk.rope_reshape_and_cache(pos, q, k, v, cs, self.kc, self.vc, slots, is_neox_style=self.neox)


@pytest.mark.parametrize("value", [True, False])
def test_numpy_bool_is_neox_style_graph(rng, value):
    """A numpy bool held by a GRAPH_MODE Cell gives the PyNative result of the Python bool."""
    pos = Tensor(rng.permutation(32)[:T].astype(np.int64))
    slots = Tensor(rng.permutation(NB * BS)[:T].astype(np.int64))
    cs = mk.build_cos_sin_cache(D, 32)
    q, k, v = (Tensor(random_array(rng, s, "float32")) for s in ((T, HQ, D), (T, HK, D), (T, HK, D)))
    kc0, vc0 = random_array(rng, (NB, BS, HK, D), "float32"), random_array(rng, (NB, BS, HK, D), "float32")
    kc, vc = Parameter(Tensor(kc0.copy()), name="kc_e"), Parameter(Tensor(vc0.copy()), name="vc_e")
    want_q, want_k = mk.rope_reshape_and_cache(pos, q, k, v, cs, kc, vc, slots, is_neox_style=value)
    with ms_mode("graph"):
        cell = _RopeCell(Parameter(Tensor(kc0.copy()), name="kc_g"), Parameter(Tensor(vc0.copy()), name="vc_g"),
                         np.bool_(value))
        got_q, got_k = cell(pos, q, k, v, cs, slots)
    assert_bits_equal(to_np(got_q), to_np(want_q), "query_out")
    assert_bits_equal(to_np(got_k), to_np(want_k), "key_out")
    assert_bits_equal(to_np(cell.kc), to_np(kc), "key_cache")


# ------------------------------------------------------------------------------------ rope_concat_and_cache_mla
def _mla_args(rng, table_dim=D):
    f = lambda *s: Tensor(random_array(rng, s, "float32"))  # noqa: E731
    pos = Tensor(np.arange(T, dtype=np.int64))
    slots = Tensor(np.arange(T, dtype=np.int64))
    return [pos, f(T, HQ, D), f(T, D), f(T, 32), mk.build_cos_sin_cache(table_dim, 32),
            Parameter(f(NB, BS, 32), name="cc"), Parameter(f(NB, BS, D), name="kpc"), slots]


@pytest.mark.parametrize("eps,exc,match", [
    ("1e-6", TypeError, r"argument 'epsilon': expected a float, got str '1e-6'"),
    (None, TypeError, r"argument 'epsilon': expected a float, got NoneType None"),
    (True, TypeError, r"argument 'epsilon': expected a float, got bool True"),
    (-1e-6, ValueError, r"argument 'epsilon': expected a finite float >= 0, got -1e-06"),
    (float("inf"), ValueError, r"argument 'epsilon': expected a finite float >= 0, got inf"),
])
def test_mla_epsilon_type_and_value(rng, eps, exc, match):
    args = _mla_args(rng)
    before = [to_np(args[5]), to_np(args[6])]
    with pytest.raises(exc, match="rope_concat_and_cache_mla: " + match):
        mk.rope_concat_and_cache_mla(*args, kv_c_norm_weight=Tensor(np.ones(32, np.float32)), epsilon=eps)
    assert_bits_equal(to_np(args[5]), before[0], "kv_c_cache untouched")
    assert_bits_equal(to_np(args[6]), before[1], "k_pe_cache untouched")


def test_mla_numpy_epsilon(rng):
    """A numpy float epsilon (from a config array) is the same epsilon as the Python float."""
    w = Tensor(random_array(rng, (32,), "float32"))
    seed = 77
    want = mk.rope_concat_and_cache_mla(*_mla_args(np.random.default_rng(seed)), kv_c_norm_weight=w, epsilon=0.25)
    got = mk.rope_concat_and_cache_mla(*_mla_args(np.random.default_rng(seed)), kv_c_norm_weight=w,
                                       epsilon=np.float32(0.25))
    assert_bits_equal(to_np(got[2]), to_np(want[2]), "kv_c_out")


def test_mla_table_wider_than_rope_dim(rng):
    """MLA has no head_size: the message names rope_dim of k_pe / k_pe_cache."""
    args = _mla_args(rng, table_dim=D + 2)
    with pytest.raises(ValueError, match=r"rope_concat_and_cache_mla: argument 'cos_sin_cache': expected rotary_dim "
                                         r"\(shape\[1\]\) <= rope_dim \(last dim of 'k_pe' and 'k_pe_cache'\) = 16, "
                                         r"got 18") as info:
        mk.rope_concat_and_cache_mla(*args)
    assert "head_size" not in str(info.value)


# --------------------------------------------------------------------------------------------- build_cos_sin_cache
@pytest.mark.parametrize("dtype,want", [
    (ms.float32, ms.float32), (np.float32, ms.float32), (np.dtype("float16"), ms.float16), ("float32", ms.float32),
    ("Float16", ms.float16), ("bfloat16", ms.bfloat16), (ml_dtypes.bfloat16, ms.bfloat16),
    (np.dtype(ml_dtypes.bfloat16), ms.bfloat16),
])
def test_cos_sin_dtype_spellings(dtype, want):
    got = mk.build_cos_sin_cache(8, 16, dtype=dtype)
    ref = mk.build_cos_sin_cache(8, 16, dtype=want)
    assert got.dtype == want
    assert_bits_equal(to_np(got), to_np(ref), str(dtype))


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(base="1e4"), TypeError, r"argument 'base': expected a number \(int or float\), got str '1e4'"),
    (dict(base=None), TypeError, r"argument 'base': expected a number"),
    (dict(rotary_dim=8.0), TypeError, r"argument 'rotary_dim': expected an int, got float 8.0"),
    (dict(rotary_dim="8"), TypeError, r"argument 'rotary_dim': expected an int, got str '8'"),
    (dict(rotary_dim=True), TypeError, r"argument 'rotary_dim': expected an int, got bool True"),
    (dict(max_position=16.0), TypeError, r"argument 'max_position': expected an int, got float 16.0"),
    (dict(rope_scaling={"rope_type": "linear", "factor": "2"}), TypeError,
     r"argument 'rope_scaling\['factor'\]': expected a number"),
    (dict(dtype=5), TypeError, r"argument 'dtype': expected a mindspore dtype, numpy dtype or dtype name, got int 5"),
    (dict(dtype=ms.int32), ValueError, r"argument 'dtype': expected float32, float16 or bfloat16"),
    (dict(dtype="int8"), ValueError, r"argument 'dtype': expected float32, float16 or bfloat16"),
    (dict(dtype=np.float64), ValueError, r"argument 'dtype': expected float32, float16 or bfloat16"),
    (dict(base=float("nan")), ValueError, r"argument 'base': expected a finite number > 0"),
    (dict(rotary_dim=7), ValueError, r"argument 'rotary_dim': expected an even number"),
    (dict(max_position=0), ValueError, r"argument 'max_position': expected an int >= 1"),
])
def test_cos_sin_argument_errors(kwargs, exc, match):
    args = dict(rotary_dim=8, max_position=16)
    args.update(kwargs)
    with pytest.raises(exc, match="build_cos_sin_cache: " + match):
        mk.build_cos_sin_cache(**args)


def test_cos_sin_numpy_numbers():
    ref = mk.build_cos_sin_cache(8, 16, base=500000.0)
    got = mk.build_cos_sin_cache(np.int64(8), np.int32(16), base=np.float32(500000.0))
    assert_bits_equal(to_np(got), to_np(ref), "numpy scalars")


# ----------------------------------------------------------------------------------------------- alloc_host_buffer
@pytest.mark.parametrize("bad", ["no", "", 1, 0, None])
def test_alloc_host_buffer_pinned_type(bad):
    with pytest.raises(TypeError, match=r"alloc_host_buffer: argument 'pinned': expected a bool"):
        mk.alloc_host_buffer((4,), "float32", pinned=bad)


@pytest.mark.parametrize("pinned", [np.bool_(False), False])
def test_alloc_host_buffer_pinned_numpy_bool(pinned):
    buf = mk.alloc_host_buffer((3, 5), np.float16, pinned=pinned)
    assert buf.shape == (3, 5) and buf.dtype == ms.float16
    assert not to_np(buf).any()
