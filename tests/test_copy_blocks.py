"""copy_blocks: L layers in one launch (L = 1, 2, 12, 40) in PyNative, GRAPH_MODE (ParameterTuple attributes)
and @ms.jit, every dtype x mapping dtype, in-order semantics of overlapping pairs, bad input."""
import mindspore as ms
import numpy as np
import pytest
from mindspore import ParameterTuple, Tensor, nn, ops

from ms_kvcache.ops.copy_blocks import copy_blocks

from conftest import MODES
from copy_util import (DTYPES, INDEX, assert_bits_equal, check, fast_path, ms_mode, params, random_array, to_ms,
                       to_np)


def ref(caches, mapping):
    """Pairs applied in order to every cache (a Python loop); out-of-range rows skipped."""
    out = [c.copy() for c in caches]
    for s, d in np.asarray(mapping, dtype=np.int64).reshape(-1, 2):
        for c in out:
            if 0 <= s < c.shape[0] and 0 <= d < c.shape[0]:
                c[d] = c[s]
    return out


def make_call(layers, groups=1):
    """caches = group 0 keys (L), group 0 values (L), group 1 keys, ...; inputs = (block_mapping,)."""

    def call(caches, block_mapping):
        for g in range(groups):
            base = 2 * layers * g
            copy_blocks(caches[base:base + layers], caches[base + layers:base + 2 * layers], block_mapping)

    return call


def mapping(rng, nb, n, dtype):
    """n rows with distinct dst blocks, src blocks anywhere (copy-on-write style)."""
    dst = rng.choice(nb, size=n, replace=False)
    src = rng.integers(0, nb, size=n)
    return np.stack([src, dst], axis=1).astype(dtype)


@pytest.mark.parametrize("layers", [1, 2, 12])
@pytest.mark.parametrize("mode", MODES)
def test_layers(mode, layers, rng):
    dtype = {1: "float16", 2: "bfloat16", 12: "int8"}[layers]
    shape = {1: (6, 16, 2, 8), 2: (6, 2, 16, 8), 12: (6, 16, 24)}[layers]
    caches = [random_array(rng, shape, dtype) for _ in range(2 * layers)]
    bm = mapping(rng, 6, 3, "int64")
    check(mode, make_call(layers), caches, [bm], ref(caches, bm), f"{mode} L={layers}")


@pytest.mark.parametrize("idx", INDEX)
@pytest.mark.parametrize("mode", MODES)
def test_dtypes(mode, idx, rng):
    """Every cache dtype (one copy_blocks per dtype, L = 2, in one graph), int32 and int64 mappings,
    including the last block."""
    caches = []
    for dtype in DTYPES:
        caches += [random_array(rng, (5, 8, 3, 16), dtype) for _ in range(4)]
    bm = np.array([[4, 0], [1, 4], [2, 3]], dtype=idx)
    check(mode, make_call(2, len(DTYPES)), caches, [bm], ref(caches, bm), f"{mode} {idx}")


@pytest.mark.parametrize("mode", MODES)
def test_overlapping_pairs_in_order(mode, rng):
    """A dst that is a later src (chain), a swap written as two rows, a dst named twice, src == dst:
    the result equals a sequential loop over the rows."""
    caches = [random_array(rng, (6, 4, 2, 32), "float32") for _ in range(4)]
    bm = np.array([[0, 1], [1, 2], [2, 3], [4, 5], [5, 4], [0, 5], [3, 5], [2, 2]], dtype=np.int64)
    check(mode, make_call(2), caches, [bm], ref(caches, bm), mode)


@pytest.mark.parametrize("mode", MODES)
def test_empty_mapping_and_zero_layers(mode, rng):
    caches = [random_array(rng, (3, 4, 8), "float16") for _ in range(2)]
    bm = np.zeros((0, 2), np.int64)
    check(mode, make_call(1), caches, [bm], caches, f"{mode} n=0")
    if mode == "pynative":
        copy_blocks([], (), Tensor(np.array([[0, 1]], np.int64)))  # L = 0: nothing to do


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_mode_skips_out_of_range_rows(mode, rng):
    caches = [random_array(rng, (4, 8, 16), "bfloat16") for _ in range(2)]
    bm = np.array([[0, 4], [1, 2], [-1, 0], [3, 1], [7, 7]], dtype=np.int32)
    check(mode, make_call(1), caches, [bm], ref(caches, bm), mode)


class KVLayers(nn.Cell):
    """The documented graph-mode pattern: per-layer caches as ParameterTuple attributes."""

    def __init__(self, keys, values):
        super().__init__()
        self.key_caches = ParameterTuple(keys)
        self.value_caches = ParameterTuple(values)

    def construct(self, block_mapping, block):
        copy_blocks(self.key_caches, self.value_caches, block_mapping)
        return ops.cast(self.value_caches[-1][block], ms.float32)  # read after the write, same graph


def test_many_layers_parameter_tuple(rng):
    """L = 40 (81 primitive inputs) in GRAPH_MODE through ParameterTuple attributes and in PyNative."""
    layers = 40
    keys = [random_array(rng, (4, 8, 2, 8), "float16") for _ in range(layers)]
    values = [random_array(rng, (4, 8, 2, 8), "float16") for _ in range(layers)]
    bm = np.array([[3, 0], [0, 2]], np.int64)
    exp = ref(keys + values, bm)
    kp, vp = params(keys), params(values)
    with ms_mode("graph"):
        read = KVLayers(kp, vp)(Tensor(bm), Tensor(2))
    np.testing.assert_array_equal(read.asnumpy(), exp[-1][2].astype(np.float32))
    for i, p in enumerate(kp + vp):
        assert_bits_equal(to_np(p), exp[i], f"graph cache {i}")
    kp, vp = params(keys), params(values)
    copy_blocks(kp, tuple(vp), Tensor(bm))
    for i, p in enumerate(kp + vp):
        assert_bits_equal(to_np(p), exp[i], f"pynative cache {i}")


def test_pynative_ops_custom_fallback(rng):
    with fast_path(False):
        for layers in (1, 3):
            caches = [random_array(rng, (5, 4, 16), "float32") for _ in range(2 * layers)]
            bm = np.array([[0, 1], [1, 2], [4, 0]], np.int32)
            check("pynative", make_call(layers), caches, [bm], ref(caches, bm), f"fallback L={layers}")


# ----------------------------------------------------------------------------- bad input
def _caches(rng, n=2, shape=(4, 8, 16), dtype="float16"):
    return params([random_array(rng, shape, dtype) for _ in range(n)])


def _bad_cases(rng):
    k, v = _caches(rng), _caches(rng)
    bm = Tensor(np.array([[0, 1]], np.int64))
    f32 = params([np.zeros((4, 8, 16), np.float32)])[0]
    return [
        ("keys not a list", (k[0], v, bm), TypeError, "argument 'key_caches': expected a list or tuple"),
        ("element not a tensor", (k, [v[0], np.zeros((4, 8, 16), np.float16)], bm), TypeError, "argument 'value_caches\\[1\\]': expected a mindspore.Tensor"),
        ("mapping not a tensor", (k, v, [[0, 1]]), TypeError, "argument 'block_mapping': expected a mindspore.Tensor"),
        ("lengths differ", (k, v[:1], bm), ValueError, "argument 'value_caches': expected 2 caches"),
        ("dtype differs", (k, [v[0], f32], bm), TypeError, "argument 'value_caches\\[1\\]': expected dtype float16 \\(same as 'key_caches\\[0\\]'\\), got float32"),
        ("unsupported dtype", ([Tensor(np.zeros((4, 2), np.float64))], [Tensor(np.zeros((4, 2), np.float64))], bm), TypeError, "argument 'key_caches\\[0\\]': expected dtype in"),
        ("shape differs", ([k[0], _caches(rng, 1, (4, 8, 8))[0]], v, bm), ValueError, "argument 'key_caches\\[1\\]': expected shape \\(4, 8, 16\\)"),
        ("rank 1", ([Tensor(np.zeros(4, np.float16))], [Tensor(np.zeros(4, np.float16))], bm), ValueError, "argument 'key_caches\\[0\\]': expected rank in"),
        ("mapping shape", (k, v, Tensor(np.array([[0, 1, 2]], np.int64))), ValueError, "argument 'block_mapping': expected shape \\[n, 2\\]"),
        ("mapping rank", (k, v, Tensor(np.array([0, 1], np.int64))), ValueError, "argument 'block_mapping': expected rank 2"),
        ("mapping dtype", (k, v, Tensor(np.array([[0, 1]], np.float32))), TypeError, "argument 'block_mapping': expected dtype in"),
        ("dst out of range", (k, v, Tensor(np.array([[0, 1], [2, 4]], np.int64))), ValueError, "expected dst block ids in \\[0, 4\\), got 4 at row 1 \\(column 1\\)"),
        ("negative src", (k, v, Tensor(np.array([[-1, 1]], np.int32))), ValueError, "expected src block ids in \\[0, 4\\), got -1 at row 0"),
        ("same tensor twice", (k, [v[0], k[1]], bm), ValueError, "argument 'value_caches\\[1\\]': expected a distinct cache tensor.*'key_caches\\[1\\]'"),
        ("non-contiguous", (k, [v[0], to_ms(random_array(rng, (16, 8, 4), "float16")).transpose(2, 1, 0)], bm), ValueError, "argument 'value_caches\\[1\\]': expected a contiguous tensor"),
    ]


@pytest.mark.parametrize("i", range(15))
def test_bad_input(i, rng):
    name, args, exc, match = _bad_cases(rng)[i]
    before = [to_np(c) for c in list(args[0]) + list(args[1]) if isinstance(c, Tensor) and isinstance(args[0], list)]
    with pytest.raises(exc, match=match):
        copy_blocks(*args)
    after = [to_np(c) for c in list(args[0]) + list(args[1]) if isinstance(c, Tensor) and isinstance(args[0], list)]
    for b, a in zip(before, after):
        assert_bits_equal(a, b, f"{name}: cache untouched")


def test_graph_mode_static_error(rng):
    keys, values = _caches(rng), _caches(rng, shape=(4, 8, 8))
    with ms_mode("graph"), pytest.raises(ValueError, match="argument 'value_caches\\[0\\]': expected shape"):
        KVLayers(keys, values)(Tensor(np.array([[0, 1]], np.int64)), Tensor(0))


@pytest.mark.parametrize("mode", ["pynative", "jit"])
def test_parallel_path_chains(mode, rng):
    """Blocks of 64 KiB split into byte ranges across threads (L = 1: two planes): chains, swaps and
    repeated dst still give the sequential result."""
    caches = [random_array(rng, (12, 32, 4, 128), "float32") for _ in range(2)]  # 64 KiB blocks
    bm = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [5, 6], [6, 5], [7, 8], [9, 8], [11, 11], [4, 10]], np.int64)
    check(mode, make_call(1), caches, [bm], ref(caches, bm), mode)


def test_streaming_stores_path(rng):
    """10 MiB per call: block copies with non-temporal stores (from 256 KiB on), chains still in order."""
    caches = [random_array(rng, (40, 64, 4, 128), "float16") for _ in range(4)]  # 64 KiB blocks, 2.5 MiB caches
    n = 40
    bm = np.stack([rng.integers(0, 40, n), rng.integers(0, 40, n)], axis=1).astype(np.int64)  # overlaps likely
    check("pynative", make_call(2), caches, [bm], ref(caches, bm), "streaming")
