"""reshape_and_cache: numpy reference, every dtype x layout x slot dtype in PyNative, GRAPH_MODE and
@ms.jit, edge cases, no-copy, ordering in MindSpore's asynchronous PyNative pipeline, bad input."""
import os

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor, ops

import ms_kvcache
from ms_kvcache._formats import ND_CACHE_LAYOUTS as ND_LAYOUTS  # NZ: tests/test_nz_layout.py
from ms_kvcache import _custom
from ms_kvcache.ops.reshape_and_cache import reshape_and_cache

from conftest import MODES
from copy_util import (DTYPES, INDEX, assert_bits_equal, check, fast_path, ms_mode, params, random_array,
                       random_slots, run, to_ms, to_np)

OP = "reshape_and_cache"


def cache_shape(layout, nb, bs, h, d):
    return (nb, bs, h, d) if layout == "BSND" else (nb, h, bs, d)


def ref(kc, vc, key, value, slots, layout):
    """Independent reference: a Python loop over tokens; slot < 0 or >= num_slots skipped, later tokens
    overwrite earlier ones (graph-mode semantics of duplicates)."""
    kc, vc = kc.copy(), vc.copy()
    nb, bs = kc.shape[0], (kc.shape[1] if layout == "BSND" else kc.shape[2])
    h, d = (kc.shape[2], kc.shape[3]) if layout == "BSND" else (kc.shape[1], kc.shape[3])
    for t, s in enumerate(np.asarray(slots, dtype=np.int64)):
        if s < 0 or s >= nb * bs:
            continue
        b, o = divmod(int(s), bs)
        for cache, x in ((kc, key), (vc, value)):
            row = x[t].reshape(h, d)
            if layout == "BSND":
                cache[b, o] = row
            else:
                cache[b, :, o] = row
    return kc, vc


def make_call(layout, groups=1):
    """Graph-parsable call: one reshape_and_cache per dtype group, inputs (k0, v0, k1, v1, ..., slots)."""

    def call(caches, *inputs):
        for g in range(groups):
            reshape_and_cache(inputs[2 * g], inputs[2 * g + 1], caches[2 * g], caches[2 * g + 1], inputs[-1],
                              layout)

    return call


def case(rng, dtype, layout, nb=5, bs=16, h=3, d=24, tokens=11, extra_rows=3, flat=False, slots=None):
    kc = random_array(rng, cache_shape(layout, nb, bs, h, d), dtype)
    vc = random_array(rng, cache_shape(layout, nb, bs, h, d), dtype)
    shape = (tokens + extra_rows, h * d) if flat else (tokens + extra_rows, h, d)
    return kc, vc, random_array(rng, shape, dtype), random_array(rng, shape, dtype)


@pytest.mark.parametrize("sdt", INDEX)
@pytest.mark.parametrize("layout", ND_LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
def test_matrix(mode, layout, sdt, rng):
    """All four dtypes in one graph: T' > T (padding rows), negative slots, the last slot of the last block,
    the [T', H*D] key view (int8 group), caches read back in the same graph."""
    nb, bs = 5, 16
    slots = random_slots(rng, 11, nb * bs, sdt, pad=3, must_include=(nb * bs - 1, 0))
    caches, inputs, expected = [], [], []
    for dtype in DTYPES:
        kc, vc, k, v = case(rng, dtype, layout, nb, bs, flat=dtype == "int8")
        caches += [kc, vc]
        inputs += [k, v]
        expected += list(ref(kc, vc, k, v, slots, layout))
    check(mode, make_call(layout, len(DTYPES)), caches, inputs + [slots], expected, f"{mode} {layout} {sdt}")


@pytest.mark.parametrize("mode", MODES)
def test_zero_and_one_token(mode, rng):
    for tokens in (0, 1):
        kc, vc, k, v = case(rng, "float16", "BSND", tokens=tokens, extra_rows=2)
        slots = np.array([79][:tokens], dtype=np.int64)  # T = 1: the last slot of the last block
        check(mode, make_call("BSND"), [kc, vc], [k, v, slots], ref(kc, vc, k, v, slots, "BSND"), f"T={tokens}")


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_mode_skips_bad_slots(mode, rng):
    """Graph mode cannot raise on values: slots >= num_blocks*block_size are skipped (never written),
    a repeated slot ends with the last token's row."""
    kc, vc, k, v = case(rng, "float32", "BNSD", tokens=6, extra_rows=0)
    slots = np.array([80, 3, 10**9, 3, -1, 79], dtype=np.int64)  # 80 = num_slots
    check(mode, make_call("BNSD"), [kc, vc], [k, v, slots], ref(kc, vc, k, v, slots, "BNSD"), mode)


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_write_kept_without_reads(mode, rng):
    """side_effect_mem: the write happens although neither the op's return nor the caches are used."""
    kc, vc, k, v = case(rng, "bfloat16", "BSND", tokens=4)
    slots = np.array([1, 50, -1, 77], dtype=np.int32)
    after, _, same = run(mode, make_call("BSND"), [kc, vc], [k, v, slots], read_back=False)
    assert same
    for a, e in zip(after, ref(kc, vc, k, v, slots, "BSND")):
        assert_bits_equal(a, e, mode)


def test_pynative_ops_custom_fallback(rng):
    """PyNative through ops.Custom (the path used when the fast-path module is unavailable)."""
    with fast_path(False):
        assert not _custom.fast_path_available()[0]
        for layout in ND_LAYOUTS:
            slots = random_slots(rng, 9, 80, "int32", pad=2, must_include=(79,))
            kc, vc, k, v = case(rng, "bfloat16", layout)
            check("pynative", make_call(layout), [kc, vc], [k, v, slots], ref(kc, vc, k, v, slots, layout), layout)


def test_fast_path_is_active():
    """This build must have the PyNative fast path (a missing module silently costs 3-100x per call)."""
    if os.environ.get("MS_KVCACHE_PYNATIVE_FAST") == "0":
        pytest.skip("fast path disabled by MS_KVCACHE_PYNATIVE_FAST=0")
    ok, why = _custom.fast_path_available("cpu")
    assert ok, (f"PyNative fast path unavailable: {why}. Install MindSpore before building ms_kvcache (README), "
                f"or set MS_KVCACHE_PYNATIVE_FAST=0 to run on ops.Custom only.")


def test_noncontiguous_key_value(rng):
    """key/value may be strided views (copied to contiguous before launch); caches may not."""
    kc, vc, _, _ = case(rng, "float32", "BSND")
    big = random_array(rng, (3, 8, 24), "float32")  # [H, T', D] -> transpose to [T', H, D] view
    k = to_ms(big).transpose(1, 0, 2)
    v = to_ms(big * 2).transpose(1, 0, 2)
    assert not k.is_contiguous()
    slots = np.array([5, 70, -1, 33], dtype=np.int32)
    caches = params([kc, vc])
    reshape_and_cache(k, v, caches[0], caches[1], Tensor(slots))
    ek, ev = ref(kc, vc, big.transpose(1, 0, 2), (big * 2).transpose(1, 0, 2), slots, "BSND")
    assert_bits_equal(to_np(caches[0]), ek, "key_cache")
    assert_bits_equal(to_np(caches[1]), ev, "value_cache")


def test_async_pipeline_ordering(rng):
    """PyNative is asynchronous: inputs produced by pending ops, caches read by later ops, several rounds.
    Every read must see every earlier write and no later one."""
    nb, bs, h, d = 4, 8, 2, 16
    kc0 = random_array(rng, (nb, bs, h, d), "float32")
    kc, vc = params([kc0, kc0.copy()])
    exp_k = kc0.copy()
    base = to_ms(random_array(rng, (2, h, d), "float32"))
    big = to_ms(random_array(rng, (256, 256), "float32"))
    reads = []
    for r in range(6):
        for _ in range(3):  # keep the pipeline busy so the write is really queued behind other work
            big = ops.matmul(big, big) * 1e-3
        key = ops.add(base, float(r))  # produced asynchronously
        slots = Tensor(np.array([r, 31 - r], np.int32))
        reshape_and_cache(key, key, kc, vc, slots)
        reads.append(ops.mul(kc, 1.0))  # read after the write
        for t, s in enumerate((r, 31 - r)):
            exp_k[s // bs, s % bs] = to_np(base)[t] + r
        reads[-1] = (reads[-1], exp_k.copy())
    for i, (got, exp) in enumerate(reads):
        np.testing.assert_array_equal(got.asnumpy(), exp, err_msg=f"round {i}")


def test_strict_kernel_rechecks_values_at_launch(rng):
    """The fast path's kernel re-checks slot values at launch: an invalid slot fails the op, writes
    nothing, and MindSpore raises at the next sync (the eager check passed on other data)."""
    _cpu_pyboost = pytest.importorskip("ms_kvcache._cpu_pyboost")
    from ms_kvcache import _cpu
    from ms_kvcache.ops.reshape_and_cache import SPEC

    kc0 = random_array(rng, (2, 4, 1, 8), "float16")
    kc, vc = params([kc0, kc0.copy()])
    kern = _cpu_pyboost.kernel(_cpu.__file__, SPEC.op_type, SPEC.name, {"cache_layout": "BSND", "mskv_strict": True})
    k = to_ms(random_array(rng, (2, 1, 8), "float16"))
    _cpu_pyboost.run(kern, k, k, kc, vc, Tensor(np.array([1, 1], np.int32)))
    with pytest.raises(RuntimeError, match="distinct non-negative slots"):
        kc.asnumpy()
    _cpu_pyboost.run(kern, k, k, kc, vc, Tensor(np.array([0, 8], np.int32)))
    with pytest.raises(RuntimeError, match="num_blocks\\*block_size = 8"):
        kc.asnumpy()
    assert_bits_equal(to_np(kc), kc0, "nothing written")
    # MindSpore recovers; the op works again
    reshape_and_cache(k, k, kc, vc, Tensor(np.array([7, 0], np.int64)))
    assert_bits_equal(to_np(kc)[1, 3], to_np(k)[0], "row written after recovery")


@pytest.mark.parametrize("fast", [True, False])
def test_no_copy_writes_land_in_the_callers_memory(fast, rng):
    """In place, no copy (structural, not timed): 256 MiB caches sharing memory with numpy arrays
    (Tensor.from_numpy) keep their data pointers and the rows appear in those arrays, on the fast path and
    through ops.Custom; a copy of the cache would leave the arrays untouched. The per-call cost against
    the cache size is a benchmark: ``python scripts/bench_copy.py --ops no_copy``."""
    if fast and not _custom.fast_path_available()[0]:
        pytest.skip(f"fast path unavailable: {_custom.fast_path_available()[1]}")
    h, d, bs, nb = 8, 128, 16, 8192
    host_k, host_v = np.zeros((nb, bs, h, d), np.int8), np.zeros((nb, bs, h, d), np.int8)
    kc, vc = Tensor.from_numpy(host_k), Tensor.from_numpy(host_v)
    ptrs = (kc.data_ptr(), vc.data_ptr())
    assert ptrs == (host_k.ctypes.data, host_v.ctypes.data)
    key, value = random_array(rng, (2, h, d), "int8"), random_array(rng, (2, h, d), "int8")
    slots = np.array([nb * bs - 1, 3], np.int32)
    with fast_path(fast):
        reshape_and_cache(to_ms(key), to_ms(value), kc, vc, Tensor(slots))
    ms_kvcache.synchronize()
    assert (kc.data_ptr(), vc.data_ptr()) == ptrs
    assert_bits_equal(host_k[nb - 1, bs - 1], key[0], "last slot, key")
    assert_bits_equal(host_v[0, 3], value[1], "slot 3, value")
    assert np.count_nonzero(host_k) == np.count_nonzero(key), "nothing else written"


# ----------------------------------------------------------------------------- bad input
def _args(rng, **over):
    a = dict(key=to_ms(random_array(rng, (4, 2, 8), "float16")), value=to_ms(random_array(rng, (4, 2, 8), "float16")),
             key_cache=Parameter(to_ms(random_array(rng, (3, 4, 2, 8), "float16")), name="kc_bad"),
             value_cache=Parameter(to_ms(random_array(rng, (3, 4, 2, 8), "float16")), name="vc_bad"),
             slot_mapping=Tensor(np.array([0, 5, -1], np.int32)), cache_layout="BSND")
    a.update(over)
    return a


BAD = [
    ("key not a tensor", dict(key=np.zeros((4, 2, 8), np.float16)), TypeError, "argument 'key': expected a mindspore.Tensor"),
    ("dtype mismatch", dict(value=Tensor(np.zeros((4, 2, 8), np.float32))), TypeError, "argument 'value': expected dtype float16"),
    ("unsupported dtype", dict(key=Tensor(np.zeros((4, 2, 8), np.float64))), TypeError, "argument 'key': expected dtype in"),
    ("slot dtype", dict(slot_mapping=Tensor(np.array([0.0], np.float32))), TypeError, "argument 'slot_mapping': expected dtype in \\('int32', 'int64'\\)"),
    ("cache dtype", dict(value_cache=Parameter(Tensor(np.zeros((3, 4, 2, 8), np.int8)), name="x")), TypeError, "argument 'value_cache'"),
    ("unknown layout", dict(cache_layout="NHD"), ValueError, "argument 'cache_layout': expected one of \\('BSND', 'BNSD', 'NZ'\\), got 'NHD'"),
    ("cache rank", dict(key_cache=Parameter(Tensor(np.zeros((3, 4, 16), np.float16)), name="x")), ValueError, "argument 'key_cache': expected rank 4, got rank 3"),
    ("key rank", dict(key=Tensor(np.zeros((4,), np.float16))), ValueError, "argument 'key': expected rank 2 or 3"),
    ("head mismatch", dict(key=Tensor(np.zeros((4, 4, 8), np.float16))), ValueError, "argument 'key': expected shape \\[T', 2, 8\\]"),
    ("flat size mismatch", dict(value=Tensor(np.zeros((4, 15), np.float16))), ValueError, "argument 'value': expected shape \\[T', 16\\]"),
    ("cache shapes differ", dict(value_cache=Parameter(Tensor(np.zeros((2, 4, 2, 8), np.float16)), name="x")), ValueError, "argument 'value_cache': expected shape \\(3, 4, 2, 8\\)"),
    ("slots longer than key", dict(slot_mapping=Tensor(np.arange(5, dtype=np.int32))), ValueError, "argument 'key': expected at least len\\(slot_mapping\\) = 5 rows, got 4"),
    ("slot rank", dict(slot_mapping=Tensor(np.zeros((2, 1), np.int32))), ValueError, "argument 'slot_mapping': expected rank 1"),
    ("slot too large", dict(slot_mapping=Tensor(np.array([0, 12], np.int64))), ValueError, "expected every slot < num_blocks\\*block_size = 12, got 12 at index 1"),
    ("duplicate slot", dict(slot_mapping=Tensor(np.array([3, -1, 7, 3], np.int32))), ValueError, "expected distinct non-negative slots, got slot 3 at indices \\[0, 3\\]"),
]


@pytest.mark.parametrize("name,over,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, over, exc, match, rng):
    a = _args(rng, **over)
    before = [to_np(a["key_cache"]), to_np(a["value_cache"])]
    with pytest.raises(exc, match=match):
        reshape_and_cache(**a)
    assert_bits_equal(to_np(a["key_cache"]), before[0], "key_cache untouched")
    assert_bits_equal(to_np(a["value_cache"]), before[1], "value_cache untouched")


def test_bad_input_noncontiguous_cache(rng):
    a = _args(rng)
    a["key_cache"] = to_ms(random_array(rng, (3, 2, 4, 8), "float16")).transpose(0, 2, 1, 3)
    with pytest.raises(ValueError, match="argument 'key_cache': expected a contiguous tensor"):
        reshape_and_cache(**a)


def test_bad_slot_value_in_op_output(rng):
    """slot_mapping produced by a (pending) MindSpore op: the check waits for it and still raises."""
    a = _args(rng, slot_mapping=ops.add(Tensor(np.array([0, 11], np.int32)), 1))
    with pytest.raises(ValueError, match="got 12 at index 1"):
        reshape_and_cache(**a)


def test_graph_mode_static_errors_raise_at_compile(rng):
    class Bad(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(Tensor(np.zeros((3, 4, 2, 8), np.float16)), name="gkc")
            self.vc = Parameter(Tensor(np.zeros((3, 4, 2, 8), np.float16)), name="gvc")

        def construct(self, k, s):
            reshape_and_cache(k, k, self.kc, self.vc, s)
            return s

    with ms_mode("graph"), pytest.raises(ValueError, match="argument 'key': expected shape \\[T', 2, 8\\]"):
        Bad()(Tensor(np.zeros((2, 3, 8), np.float16)), Tensor(np.array([0, 1], np.int32)))


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_parallel_path_and_repeated_slots(mode, rng):
    """Calls above the parallel threshold (256 KiB moved) split tokens over threads by slot ownership:
    results stay exact, and in graph mode a repeated slot still ends with the LAST token's row."""
    nb, bs, h, d = 60, 16, 4, 64  # rows of 512 B (float16); 700 tokens -> ~700 KiB moved
    tokens = 700
    kc, vc, k, v = case(rng, "float16", "BNSD", nb=nb, bs=bs, h=h, d=d, tokens=tokens, extra_rows=5)
    slots = random_slots(rng, tokens, nb * bs, "int64", pad=20, must_include=(nb * bs - 1,))
    if mode == "graph":
        dup_from = rng.choice(np.nonzero(slots >= 0)[0], size=50, replace=False)
        slots[rng.choice(tokens, size=50, replace=False)] = slots[dup_from]  # 50 repeated slots
    check(mode, make_call("BNSD"), [kc, vc], [k, v, slots], ref(kc, vc, k, v, slots, "BNSD"), mode)


@pytest.mark.parametrize("dtype,layout,h,d,tokens", [("bfloat16", "BNSD", 8, 128, 2100), ("float16", "BSND", 3, 40, 18000),
                                                  ("int8", "BSND", 3, 40, 36000)])
def test_streaming_stores_path(dtype, layout, h, d, tokens, rng):
    """Calls moving >= 8 MiB (streaming starts at 256 KiB) write rows with non-temporal stores (aligned
    rows) or memcpy (unaligned rows: odd slots of int8 120-byte rows), with 48-byte tails (float16
    240-byte rows): exact results, nothing else changed."""
    bs = 64
    nb = tokens // bs + 3
    kc, vc, k, v = case(rng, dtype, layout, nb=nb, bs=bs, h=h, d=d, tokens=tokens, extra_rows=1)
    slots = random_slots(rng, tokens, nb * bs, "int64", pad=50, must_include=(nb * bs - 1,))
    caches = params([kc, vc])
    reshape_and_cache(to_ms(k), to_ms(v), caches[0], caches[1], Tensor(slots), layout)
    ok = slots >= 0
    for cache, x, name in ((kc, k, "key_cache"), (vc, v, "value_cache")):
        exp = cache.copy()
        if layout == "BSND":
            exp.reshape(nb * bs, h, d)[slots[ok]] = x[:tokens][ok]
        else:
            b, o = slots[ok] // bs, slots[ok] % bs
            exp[b, :, o] = x[:tokens][ok]
        assert_bits_equal(to_np(caches[0] if name == "key_cache" else caches[1]), exp, name)
