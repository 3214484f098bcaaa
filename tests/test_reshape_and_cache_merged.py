"""reshape_and_cache_merged: numpy reference, every dtype x layout x slot dtype in PyNative, GRAPH_MODE and
@ms.jit, edge cases, bad input."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_kvcache
from ms_kvcache._formats import ND_CACHE_LAYOUTS as ND_LAYOUTS  # NZ: tests/test_nz_layout.py
from ms_kvcache.ops.reshape_and_cache_merged import reshape_and_cache_merged

from conftest import MODES
from copy_util import DTYPES, INDEX, assert_bits_equal, check, fast_path, random_array, random_slots, to_ms, to_np


def merged_shape(layout, nb, bs, h, d):
    return (2, nb, bs, h, d) if layout == "BSND" else (2, nb, h, bs, d)


def ref(kv, key, value, slots, layout):
    """Python loop over tokens into plane 0 (key) and plane 1 (value); invalid slots skipped."""
    kv = kv.copy()
    nb = kv.shape[1]
    bs = kv.shape[2] if layout == "BSND" else kv.shape[3]
    h, d = (kv.shape[3], kv.shape[4]) if layout == "BSND" else (kv.shape[2], kv.shape[4])
    for t, s in enumerate(np.asarray(slots, dtype=np.int64)):
        if s < 0 or s >= nb * bs:
            continue
        b, o = divmod(int(s), bs)
        for p, x in enumerate((key, value)):
            if layout == "BSND":
                kv[p, b, o] = x[t].reshape(h, d)
            else:
                kv[p, b, :, o] = x[t].reshape(h, d)
    return kv


def make_call(layout, groups=1):
    def call(caches, *inputs):
        for g in range(groups):
            reshape_and_cache_merged(inputs[2 * g], inputs[2 * g + 1], caches[g], inputs[-1], layout)

    return call


def case(rng, dtype, layout, nb=3, bs=8, h=2, d=40, tokens=7, extra_rows=2, flat=False):
    kv = random_array(rng, merged_shape(layout, nb, bs, h, d), dtype)
    shape = (tokens + extra_rows, h * d) if flat else (tokens + extra_rows, h, d)
    return kv, random_array(rng, shape, dtype), random_array(rng, shape, dtype)


@pytest.mark.parametrize("sdt", INDEX)
@pytest.mark.parametrize("layout", ND_LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
def test_matrix(mode, layout, sdt, rng):
    slots = random_slots(rng, 7, 24, sdt, pad=2, must_include=(23,))
    caches, inputs, expected = [], [], []
    for dtype in DTYPES:
        kv, k, v = case(rng, dtype, layout, flat=dtype == "bfloat16")
        caches.append(kv)
        inputs += [k, v]
        expected.append(ref(kv, k, v, slots, layout))
    check(mode, make_call(layout, len(DTYPES)), caches, inputs + [slots], expected, f"{mode} {layout} {sdt}")


@pytest.mark.parametrize("mode", MODES)
def test_zero_one_and_bad_slots(mode, rng):
    """T = 0, T = 1 (last slot), and (graph modes) out-of-range / repeated slots skipped or last-wins."""
    for tokens, slots in ((0, []), (1, [23]), (5, [24, 2, 2, 99, -1])):
        if tokens == 5 and mode == "pynative":
            continue
        kv, k, v = case(rng, "int8", "BNSD", tokens=tokens)
        s = np.array(slots, dtype=np.int32)
        check(mode, make_call("BNSD"), [kv], [k, v, s], [ref(kv, k, v, s, "BNSD")], f"{mode} T={tokens}")


def test_pynative_ops_custom_fallback(rng):
    with fast_path(False):
        for layout in ND_LAYOUTS:
            slots = random_slots(rng, 6, 24, "int64", pad=1, must_include=(0,))
            kv, k, v = case(rng, "float16", layout)
            check("pynative", make_call(layout), [kv], [k, v, slots], [ref(kv, k, v, slots, layout)], layout)


def _args(rng, **over):
    a = dict(key=to_ms(random_array(rng, (4, 2, 8), "float32")), value=to_ms(random_array(rng, (4, 2, 8), "float32")),
             kv_cache=Parameter(to_ms(random_array(rng, (2, 3, 4, 2, 8), "float32")), name="kv_bad"),
             slot_mapping=Tensor(np.array([0, 5, -1], np.int64)), cache_layout="BSND")
    a.update(over)
    return a


BAD = [
    ("kv_cache not a tensor", dict(kv_cache=[1, 2]), TypeError, "argument 'kv_cache': expected a mindspore.Tensor"),
    ("dtype mismatch", dict(kv_cache=Parameter(Tensor(np.zeros((2, 3, 4, 2, 8), np.float16)), name="x")), TypeError, "argument 'kv_cache': expected dtype float32"),
    ("slot dtype", dict(slot_mapping=Tensor(np.array([1], np.int16))), TypeError, "argument 'slot_mapping'"),
    ("layout", dict(cache_layout="bsnd"), ValueError, "argument 'cache_layout'"),
    ("rank", dict(kv_cache=Parameter(Tensor(np.zeros((3, 4, 2, 8), np.float32)), name="x")), ValueError, "argument 'kv_cache': expected rank 5"),
    ("not 2 planes", dict(kv_cache=Parameter(Tensor(np.zeros((3, 3, 4, 2, 8), np.float32)), name="x")), ValueError, "argument 'kv_cache': expected shape \\[2, num_blocks"),
    ("head_size mismatch", dict(key=Tensor(np.zeros((4, 2, 16), np.float32))), ValueError, "argument 'key': expected shape \\[T', 2, 8\\]"),
    ("BNSD geometry", dict(cache_layout="BNSD"), ValueError, "argument 'key': expected shape \\[T', 4, 8\\]"),
    ("slots longer than value", dict(value=Tensor(np.zeros((2, 2, 8), np.float32))), ValueError, "argument 'value': expected at least len\\(slot_mapping\\) = 3 rows, got 2"),
    ("slot too large", dict(slot_mapping=Tensor(np.array([12], np.int32))), ValueError, "num_blocks\\*block_size = 12, got 12"),
    ("duplicate", dict(slot_mapping=Tensor(np.array([-1, 4, 4], np.int64))), ValueError, "slot 4 at indices \\[1, 2\\]"),
]


@pytest.mark.parametrize("name,over,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, over, exc, match, rng):
    a = _args(rng, **over)
    before = to_np(a["kv_cache"]) if isinstance(a["kv_cache"], Tensor) else None
    with pytest.raises(exc, match=match):
        reshape_and_cache_merged(**a)
    if before is not None:
        assert_bits_equal(to_np(a["kv_cache"]), before, "kv_cache untouched")


def test_bad_input_noncontiguous(rng):
    a = _args(rng, kv_cache=to_ms(random_array(rng, (2, 3, 2, 4, 8), "float32")).swapaxes(2, 3))
    with pytest.raises(ValueError, match="argument 'kv_cache': expected a contiguous tensor"):
        reshape_and_cache_merged(**a)
