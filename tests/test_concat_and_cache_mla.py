"""concat_and_cache_mla: numpy reference, every dtype x slot dtype (x k_pe rank) in PyNative, GRAPH_MODE and
@ms.jit, edge cases, bad input."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor

from ms_kvcache.ops.concat_and_cache_mla import concat_and_cache_mla

from conftest import MODES
from copy_util import DTYPES, INDEX, assert_bits_equal, check, fast_path, random_array, random_slots, to_ms, to_np


def ref(cc, pc, kv_c, k_pe, slots):
    cc, pc = cc.copy(), pc.copy()
    nb, bs = cc.shape[:2]
    for t, s in enumerate(np.asarray(slots, dtype=np.int64)):
        if s < 0 or s >= nb * bs:
            continue
        b, o = divmod(int(s), bs)
        cc[b, o] = kv_c[t]
        pc[b, o] = k_pe[t].reshape(-1)
    return cc, pc


def make_call(groups=1):
    def call(caches, *inputs):
        for g in range(groups):
            concat_and_cache_mla(inputs[2 * g], inputs[2 * g + 1], caches[2 * g], caches[2 * g + 1], inputs[-1])

    return call


def case(rng, dtype, nb=4, bs=16, rank=96, rope=32, tokens=9, extra_rows=3, pe3=False):
    cc = random_array(rng, (nb, bs, rank), dtype)
    pc = random_array(rng, (nb, bs, rope), dtype)
    kv_c = random_array(rng, (tokens + extra_rows, rank), dtype)
    k_pe = random_array(rng, (tokens + extra_rows, 1, rope) if pe3 else (tokens + extra_rows, rope), dtype)
    return cc, pc, kv_c, k_pe


@pytest.mark.parametrize("sdt", INDEX)
@pytest.mark.parametrize("mode", MODES)
def test_matrix(mode, sdt, rng):
    """All dtypes in one graph, k_pe as [T', rope] and [T', 1, rope], T' > T, negative and last slots."""
    slots = random_slots(rng, 9, 64, sdt, pad=3, must_include=(63,))
    caches, inputs, expected = [], [], []
    for i, dtype in enumerate(DTYPES):
        cc, pc, kv_c, k_pe = case(rng, dtype, pe3=i % 2 == 1)
        caches += [cc, pc]
        inputs += [kv_c, k_pe]
        expected += list(ref(cc, pc, kv_c, k_pe, slots))
    check(mode, make_call(len(DTYPES)), caches, inputs + [slots], expected, f"{mode} {sdt}")


@pytest.mark.parametrize("mode", MODES)
def test_deepseek_shapes_and_edges(mode, rng):
    """DeepSeek V3 sizes (kv_lora_rank 512, rope 64, bf16); T = 0, T = 1, and in graph modes out-of-range
    and repeated slots (skipped / last token wins)."""
    cases = [(0, []), (1, [31])] + ([] if mode == "pynative" else [(4, [32, 5, 5, 1 << 40])])
    for tokens, slots in cases:
        cc, pc, kv_c, k_pe = case(rng, "bfloat16", nb=2, bs=16, rank=512, rope=64, tokens=tokens, extra_rows=1)
        s = np.array(slots, dtype=np.int64)
        check(mode, make_call(), [cc, pc], [kv_c, k_pe, s], list(ref(cc, pc, kv_c, k_pe, s)), f"{mode} T={tokens}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_streaming_threaded_path(mode, dtype, rng):
    """Calls writing >= ms_kvcache._cpu.copy_stream_threshold_bytes() (256 KiB): tokens split over threads,
    rows written with non-temporal stores; odd row sizes (kv_lora_rank 509, rope 67: rows that are not a
    multiple of 16 bytes, and 67-byte int8 rope rows below the 128-byte streaming minimum), slot -1
    padding, the last slot, T' > T; in graph modes also repeated slots (last token wins)."""
    from ms_kvcache import _cpu

    nb, bs, rank, rope, tokens = 24, 32, 509, 67, 700
    cc, pc, kv_c, k_pe = case(rng, dtype, nb=nb, bs=bs, rank=rank, rope=rope, tokens=tokens, extra_rows=5,
                              pe3=dtype in ("bfloat16", "int8"))
    assert tokens * (rank + rope) * cc.itemsize >= _cpu.copy_stream_threshold_bytes() > 32 * (rank + rope) * 4
    slots = random_slots(rng, tokens, nb * bs, "int64", pad=9, must_include=(nb * bs - 1,))
    if mode != "pynative":
        dup_from = rng.choice(np.nonzero(slots >= 0)[0], size=40, replace=False)
        slots[rng.choice(tokens, size=40, replace=False)] = slots[dup_from]
    check(mode, make_call(), [cc, pc], [kv_c, k_pe, slots], list(ref(cc, pc, kv_c, k_pe, slots)), f"{mode} {dtype}")


def test_pynative_ops_custom_fallback(rng):
    with fast_path(False):
        slots = random_slots(rng, 9, 64, "int32", pad=2, must_include=(63,))
        cc, pc, kv_c, k_pe = case(rng, "int8", pe3=True)
        check("pynative", make_call(), [cc, pc], [kv_c, k_pe, slots], list(ref(cc, pc, kv_c, k_pe, slots)), "fallback")


def _args(rng, **over):
    a = dict(kv_c=to_ms(random_array(rng, (3, 16), "float16")), k_pe=to_ms(random_array(rng, (3, 1, 8), "float16")),
             kv_c_cache=Parameter(to_ms(random_array(rng, (2, 4, 16), "float16")), name="cc_bad"),
             k_pe_cache=Parameter(to_ms(random_array(rng, (2, 4, 8), "float16")), name="pc_bad"),
             slot_mapping=Tensor(np.array([7, -1], np.int32)))
    a.update(over)
    return a


BAD = [
    ("k_pe not a tensor", dict(k_pe=None), TypeError, "argument 'k_pe': expected a mindspore.Tensor, got NoneType"),
    ("dtype mismatch", dict(k_pe=Tensor(np.zeros((3, 8), np.float32))), TypeError, "argument 'k_pe': expected dtype float16"),
    ("cache dtype", dict(k_pe_cache=Parameter(Tensor(np.zeros((2, 4, 8), np.int8)), name="x")), TypeError, "argument 'k_pe_cache'"),
    ("slot dtype", dict(slot_mapping=Tensor(np.array([1.0], np.float16))), TypeError, "argument 'slot_mapping'"),
    ("kv_c rank", dict(kv_c=Tensor(np.zeros((3, 1, 16), np.float16))), ValueError, "argument 'kv_c': expected rank 2"),
    ("cache rank", dict(kv_c_cache=Parameter(Tensor(np.zeros((8, 16), np.float16)), name="x")), ValueError, "argument 'kv_c_cache': expected rank 3"),
    ("kv_lora_rank mismatch", dict(kv_c=Tensor(np.zeros((3, 12), np.float16))), ValueError, "argument 'kv_c': expected shape \\[T', 16\\]"),
    ("rope_dim mismatch", dict(k_pe=Tensor(np.zeros((3, 2, 8), np.float16))), ValueError, "argument 'k_pe': expected shape \\[T', 8\\] or \\[T', 1, 8\\]"),
    ("block geometry mismatch", dict(k_pe_cache=Parameter(Tensor(np.zeros((2, 8, 8), np.float16)), name="x")), ValueError, "argument 'k_pe_cache': expected shape \\[2, 4, rope_dim\\]"),
    ("slots longer than k_pe", dict(slot_mapping=Tensor(np.arange(4, dtype=np.int32))), ValueError, "argument 'kv_c': expected at least len\\(slot_mapping\\) = 4 rows"),
    ("slot too large", dict(slot_mapping=Tensor(np.array([8], np.int64))), ValueError, "num_blocks\\*block_size = 8, got 8 at index 0"),
    ("duplicate", dict(slot_mapping=Tensor(np.array([2, 2], np.int32))), ValueError, "slot 2 at indices \\[0, 1\\]"),
]


@pytest.mark.parametrize("name,over,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, over, exc, match, rng):
    a = _args(rng, **over)
    before = [to_np(a["kv_c_cache"]), to_np(a["k_pe_cache"])]
    with pytest.raises(exc, match=match):
        concat_and_cache_mla(**a)
    assert_bits_equal(to_np(a["kv_c_cache"]), before[0], "kv_c_cache untouched")
    assert_bits_equal(to_np(a["k_pe_cache"]), before[1], "k_pe_cache untouched")


def test_bad_input_noncontiguous(rng):
    a = _args(rng, k_pe_cache=to_ms(random_array(rng, (4, 2, 8), "float16")).transpose(1, 0, 2))
    with pytest.raises(ValueError, match="argument 'k_pe_cache': expected a contiguous tensor"):
        concat_and_cache_mla(**a)
