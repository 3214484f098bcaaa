"""swap_blocks: caches of different block counts, every dtype x mapping dtype in PyNative, GRAPH_MODE and
@ms.jit, in-order rows, backend substitution hook, bad input."""
import numpy as np
import pytest
from mindspore import Tensor

from ms_kvcache import _backend, _custom
from ms_kvcache.ops.swap_blocks import swap_blocks

from conftest import MODES
from copy_util import (DTYPES, INDEX, assert_bits_equal, check, fast_path, params, random_array, to_ms, to_np)


def ref(src, dst, mapping):
    """Rows in order (a Python loop); out-of-range rows skipped. src may be dst (same array)."""
    dst = dst.copy()
    for s, d in np.asarray(mapping, dtype=np.int64).reshape(-1, 2):
        if 0 <= s < src.shape[0] and 0 <= d < dst.shape[0]:
            dst[d] = src[s] if src is not None else dst[s]
    return dst


def make_call(groups=1):
    """caches = (src0, dst0, src1, dst1, ...); inputs = (block_mapping,)."""

    def call(caches, block_mapping):
        for g in range(groups):
            swap_blocks(caches[2 * g], caches[2 * g + 1], block_mapping)

    return call


@pytest.mark.parametrize("idx", INDEX)
@pytest.mark.parametrize("mode", MODES)
def test_matrix(mode, idx, rng):
    """Device-like cache (7 blocks) -> host-like cache (4 blocks) and back, every dtype in one graph,
    first and last blocks, a dst named twice (last row wins)."""
    caches, expected = [], []
    for i, dtype in enumerate(DTYPES):
        shape = (16, 2, 8) if i % 2 else (2, 16, 8)
        src = random_array(rng, (7,) + shape, dtype)
        dst = random_array(rng, (4,) + shape, dtype)
        caches += [src, dst]
    bm = np.array([[6, 0], [0, 3], [2, 1], [5, 1]], dtype=idx)
    for g in range(len(DTYPES)):
        expected += [caches[2 * g], ref(caches[2 * g], caches[2 * g + 1], bm)]
    check(mode, make_call(len(DTYPES)), caches, [bm], expected, f"{mode} {idx}")


@pytest.mark.parametrize("mode", MODES)
def test_edges(mode, rng):
    """n = 0 rows; in graph modes out-of-range rows are skipped (src < 7, dst < 4)."""
    src, dst = random_array(rng, (7, 8, 4), "float32"), random_array(rng, (4, 8, 4), "float32")
    empty = np.zeros((0, 2), np.int32)
    check(mode, make_call(), [src, dst], [empty], [src, dst], f"{mode} n=0")
    if mode != "pynative":
        bm = np.array([[7, 0], [1, 4], [-3, 2], [3, 3], [1 << 35, 1]], np.int64)
        check(mode, make_call(), [src, dst], [bm], [src, ref(src, dst, bm)], f"{mode} out of range")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_streaming_threaded_path(mode, dtype, rng):
    """Calls copying >= ms_kvcache._cpu.copy_stream_threshold_bytes() (256 KiB): byte ranges of the blocks
    split over threads, non-temporal stores, blocks of an odd byte size (5 x 37 x 29 elements), caches of
    different block counts, the first and last blocks, a dst named twice (last row wins)."""
    from ms_kvcache import _cpu

    block = (5, 37, 29)
    src, dst = random_array(rng, (70,) + block, dtype), random_array(rng, (65,) + block, dtype)
    n = 60
    bm = np.stack([rng.choice(70, size=n), rng.permutation(65)[:n]], axis=1).astype(np.int64)
    bm[0] = (69, 64)
    bm[1] = (0, 0)
    bm[-1, 1] = bm[5, 1]
    assert n * src[0].nbytes >= _cpu.copy_stream_threshold_bytes()
    check(mode, make_call(), [src, dst], [bm], [src, ref(src, dst, bm)], f"{mode} {dtype}")


def test_same_tensor_in_order(rng):
    """src_cache is dst_cache: rows apply in order (block 0 -> 1, then the new 1 -> 2)."""
    c0 = random_array(rng, (4, 8, 16), "bfloat16")
    (c,) = params([c0])
    bm = np.array([[0, 1], [1, 2], [3, 0]], np.int64)
    swap_blocks(c, c, Tensor(bm))
    exp = c0.copy()
    for s, d in bm:
        exp[d] = exp[s]
    assert_bits_equal(to_np(c), exp, "in place on one cache")


def test_pynative_ops_custom_fallback(rng):
    with fast_path(False):
        src, dst = random_array(rng, (5, 4, 8), "int8"), random_array(rng, (3, 4, 8), "int8")
        bm = np.array([[4, 2], [0, 0]], np.int32)
        check("pynative", make_call(), [src, dst], [bm], [src, ref(src, dst, bm)], "fallback")


def test_backend_can_substitute_implementation(monkeypatch, rng):
    """A backend module defining swap_blocks (e.g. a runtime memcpy between device and host) receives
    the checked arguments instead of the generic kernel."""
    calls = []
    mod = _backend.backend_module("cpu")
    monkeypatch.setattr(mod, "swap_blocks", lambda s, d, m: calls.append((s, d, m.asnumpy().tolist())), raising=False)
    src, dst = params([random_array(rng, (3, 4), "float16"), random_array(rng, (2, 4), "float16")])
    before = to_np(dst)
    swap_blocks(src, dst, Tensor(np.array([[2, 1]], np.int64)))
    assert len(calls) == 1 and calls[0][0] is src and calls[0][1] is dst and calls[0][2] == [[2, 1]]
    assert_bits_equal(to_np(dst), before, "generic kernel not run")
    with pytest.raises(ValueError, match="expected src block ids in \\[0, 3\\)"):
        swap_blocks(src, dst, Tensor(np.array([[3, 1]], np.int64)))
    assert len(calls) == 1


def _bad_cases(rng):
    src, dst = params([random_array(rng, (5, 4, 8), "float16"), random_array(rng, (3, 4, 8), "float16")])
    bm = Tensor(np.array([[0, 1]], np.int32))
    return [
        ("src not a tensor", (None, dst, bm), TypeError, "argument 'src_cache': expected a mindspore.Tensor"),
        ("dtype mismatch", (src, params([np.zeros((3, 4, 8), np.float32)])[0], bm), TypeError, "argument 'dst_cache': expected dtype float16"),
        ("unsupported dtype", (Tensor(np.zeros((5, 4), np.int32)), Tensor(np.zeros((3, 4), np.int32)), bm), TypeError, "argument 'src_cache': expected dtype in"),
        ("block shape mismatch", (src, params([np.zeros((3, 8, 4), np.float16)])[0], bm), ValueError, "argument 'dst_cache': expected shape \\[num_blocks, 4, 8\\]"),
        ("rank 1", (Tensor(np.zeros(5, np.float16)), Tensor(np.zeros(3, np.float16)), bm), ValueError, "argument 'src_cache': expected rank"),
        ("mapping shape", (src, dst, Tensor(np.array([[0], [1]], np.int32))), ValueError, "argument 'block_mapping': expected shape \\[n, 2\\]"),
        ("mapping dtype", (src, dst, Tensor(np.array([[0, 1]], np.float16))), TypeError, "argument 'block_mapping': expected dtype in"),
        ("src id too large", (src, dst, Tensor(np.array([[0, 1], [5, 0]], np.int64))), ValueError, "expected src block ids in \\[0, 5\\), got 5 at row 1 \\(column 0\\)"),
        ("dst id too large", (src, dst, Tensor(np.array([[4, 3]], np.int64))), ValueError, "expected dst block ids in \\[0, 3\\), got 3 at row 0 \\(column 1\\)"),
        ("negative dst", (src, dst, Tensor(np.array([[4, -1]], np.int32))), ValueError, "expected dst block ids in \\[0, 3\\), got -1"),
        ("non-contiguous", (to_ms(random_array(rng, (8, 4, 5), "float16")).transpose(2, 1, 0), dst, bm), ValueError, "argument 'src_cache': expected a contiguous tensor"),
    ]


@pytest.mark.parametrize("i", range(11))
def test_bad_input(i, rng):
    name, args, exc, match = _bad_cases(rng)[i]
    dst = args[1]
    before = to_np(dst) if isinstance(dst, Tensor) else None
    with pytest.raises(exc, match=match):
        swap_blocks(*args)
    if before is not None:
        assert_bits_equal(to_np(dst), before, f"{name}: dst_cache untouched")


def test_parallel_path_same_tensor(rng):
    """One 128 KiB-block cache as src and dst (byte ranges split across threads, non-temporal stores: 896 KiB
    copied), rows in order."""
    c0 = random_array(rng, (8, 64, 4, 64), "float32")
    (c,) = params([c0])
    bm = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [3, 5], [7, 7], [6, 3]], np.int64)
    swap_blocks(c, c, Tensor(bm))
    exp = c0.copy()
    for s, d in bm:
        exp[d] = exp[s]
    assert_bits_equal(to_np(c), exp, "in place on one cache, parallel")


@pytest.mark.parametrize("fast", [True, False])
def test_views_as_dst(fast, rng):
    """The fast path writes through a view (here base[2], two blocks of [3, 4]) into the base tensor;
    ops.Custom would write into a copy, so without the fast path detectable views are rejected."""
    if fast and not _custom.fast_path_available()[0]:
        pytest.skip("fast path unavailable")
    base0 = random_array(rng, (4, 2, 3, 4), "float32")
    base = Tensor(base0.copy())
    src = Tensor(np.ones((1, 3, 4), np.float32))
    bm = Tensor(np.array([[0, 1]], np.int64))
    with fast_path(fast):
        if fast:
            swap_blocks(src, base[2], bm)
            exp = base0.copy()
            exp[2, 1] = 1.0
            assert_bits_equal(to_np(base), exp, "written through the view")
        else:
            with pytest.raises(ValueError, match="argument 'dst_cache': expected a tensor that owns its memory"):
                swap_blocks(src, base[2], bm)
            assert_bits_equal(to_np(base), base0, "untouched")


def _sim_available():
    from ms_kvcache._backends import sim

    return sim.available()[0]


@pytest.fixture
def sim_backend():
    if not _sim_available():
        pytest.skip("the sim backend (ms_kvcache._sim) is not built")
    import ms_kvcache

    old = _backend.get_backend()
    ms_kvcache.set_backend("sim")
    yield "sim"
    ms_kvcache.set_backend(old)


@pytest.mark.parametrize("mode", MODES)
def test_sim_backend_runs_the_host_memcpy(mode, sim_backend, rng):
    """swap_blocks has no AscendC kernel (a runtime memcpy on Ascend): under set_backend("sim") it runs
    the cpu backend's host kernel in every mode (was: RuntimeError "no AscendC kernel in this build")."""
    src = random_array(rng, (7, 16, 2, 8), "bfloat16")
    dst = random_array(rng, (4, 16, 2, 8), "bfloat16")
    bm = np.array([[6, 0], [0, 3], [2, 1], [5, 1]], np.int64)
    check(mode, make_call(), [src, dst], [bm], [src, ref(src, dst, bm)], f"sim {mode}")
    if mode != "pynative":  # out-of-range rows are skipped in graph mode, as on the cpu backend
        bm = np.array([[7, 0], [1, 4], [-3, 2], [3, 3]], np.int32)
        check(mode, make_call(), [src, dst], [bm], [src, ref(src, dst, bm)], f"sim {mode} out of range")


def test_sim_backend_checks_and_views(sim_backend, rng):
    """PyNative under sim: the eager checks still run, and the ops.Custom path (sim has no fast path)
    rejects a view as dst_cache instead of writing into a copy."""
    src, dst = params([random_array(rng, (5, 4, 8), "float16"), random_array(rng, (3, 4, 8), "float16")])
    before = to_np(dst)
    with pytest.raises(ValueError, match="expected dst block ids in \\[0, 3\\), got 3"):
        swap_blocks(src, dst, Tensor(np.array([[4, 3]], np.int64)))
    assert_bits_equal(to_np(dst), before, "untouched")
    base0 = random_array(rng, (4, 3, 4, 8), "float16")
    base = Tensor(base0.copy())
    with pytest.raises(ValueError, match="argument 'dst_cache': expected a tensor that owns its memory"):
        swap_blocks(src, base[1], Tensor(np.array([[0, 1]], np.int64)))
    assert_bits_equal(to_np(base), base0, "view base untouched")
