"""multi_layer_kv_transfer / transfer_buffer_shape: numpy references, round trips, edge cases, bad input,
graph modes (cpu backend)."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

import ms_kvcache as mk
from conftest import assert_bits_equal, ms_mode, random_array, to_ms, to_np
from _multi_layer_ref import (DSA, DTYPES, FORMAT_LAYOUTS, MERGED, MLA, SEPARATE, Geometry, pack_buffer,
                              ref_gather, ref_scatter, unpack_buffer)

OP = mk.multi_layer_kv_transfer


@pytest.fixture(autouse=True)
def _cpu(cpu_backend):
    yield


def make_slots(rng, num_slots, num_tokens, skip=0):
    """Distinct random slots spread over the cache, ``skip`` of them replaced by negative values."""
    slots = rng.permutation(num_slots)[:num_tokens].astype(np.int64)
    if skip:
        idx = rng.choice(num_tokens, size=skip, replace=False)
        slots[idx] = rng.choice([-1, -7], size=skip)
    return slots


def run(geo, dtype, buf_np, caches, slots, direction, slot_dtype=np.int64):
    buf = to_ms(buf_np, dtype)
    OP(buf, caches, Tensor(np.asarray(slots, slot_dtype)), kv_format=geo.fmt, direction=direction,
       cache_layout=geo.layout)
    return buf


def hidden_arg(geo):
    return geo.hidden[0] if geo.fmt in (MERGED, SEPARATE) else tuple(geo.hidden)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt,layout", FORMAT_LAYOUTS, ids=lambda x: getattr(x, "name", x))
def test_round_trip_each_direction_vs_numpy(rng, fmt, layout, dtype):
    geo = Geometry(fmt, layout, num_layers=3, num_blocks=9, block_size=8, heads=2, head_size=16)
    planes = geo.random_planes(rng, dtype)
    caches = geo.to_ms(planes, dtype)
    T = 40  # spans most of the 9 blocks
    slots = make_slots(rng, geo.slots, T, skip=5)
    shape = mk.transfer_buffer_shape(fmt, geo.L, T, hidden_arg(geo))
    # d2h into a buffer full of garbage: every row must be overwritten (zeros for skipped slots)
    garbage = random_array(rng, shape, dtype)
    buf = run(geo, dtype, garbage, caches, slots, "d2h")
    expected = ref_gather(geo, planes, slots)
    assert_bits_equal(to_np(buf), pack_buffer(geo, expected), "d2h buffer")
    # the caches are untouched by d2h
    for l, layer in enumerate(geo.from_ms(caches)):
        for p in range(geo.P):
            assert_bits_equal(layer[p], planes[l][p], f"cache l{l} p{p} after d2h")
    # h2d into fresh caches (other random data): rows at slots replaced, everything else kept
    fresh = geo.random_planes(rng, dtype)
    fresh_ms = geo.to_ms(fresh, dtype)
    OP(buf, fresh_ms, Tensor(slots), kv_format=fmt, direction="h2d", cache_layout=layout)
    got = geo.from_ms(fresh_ms)
    ref = ref_scatter(geo, fresh, unpack_buffer(geo, to_np(buf), T), slots)
    for l in range(geo.L):
        for p in range(geo.P):
            assert_bits_equal(got[l][p], ref[l][p], f"h2d l{l} p{p}")
            # round trip: the transferred rows equal the original cache rows, bit for bit
            ok = slots >= 0
            assert_bits_equal(geo.rows(got[l][p])[slots[ok]], geo.rows(planes[l][p])[slots[ok]], "round trip")


@pytest.mark.parametrize("fmt,layout", [(SEPARATE, "BNSD"), (MLA, "BSND")], ids=["separate", "mla"])
def test_independent_buffer_h2d_vs_numpy(rng, fmt, layout):
    """h2d of a random buffer (not produced by d2h) against the numpy scatter."""
    geo = Geometry(fmt, layout, num_layers=2, num_blocks=5, block_size=4)
    T = 12
    slots = make_slots(rng, geo.slots, T, skip=3)
    buf_np = random_array(rng, mk.transfer_buffer_shape(fmt, geo.L, T, hidden_arg(geo)), "float16")
    planes = geo.random_planes(rng, "float16")
    caches = geo.to_ms(planes, "float16")
    run(geo, "float16", buf_np, caches, slots, "h2d", slot_dtype=np.int32)
    ref = ref_scatter(geo, planes, unpack_buffer(geo, buf_np, T), slots)
    got = geo.from_ms(caches)
    for l in range(geo.L):
        for p in range(geo.P):
            assert_bits_equal(got[l][p], ref[l][p], f"l{l} p{p}")


@pytest.mark.parametrize("T", [0, 1])
@pytest.mark.parametrize("fmt,layout", [(MERGED, "BNSD"), (DSA, "BSND")], ids=["merged", "dsa"])
def test_zero_and_one_token(rng, fmt, layout, T):
    geo = Geometry(fmt, layout, num_layers=2, num_blocks=3, block_size=4)
    planes = geo.random_planes(rng, "bfloat16")
    caches = geo.to_ms(planes, "bfloat16")
    slots = np.array([geo.slots - 1][:T], np.int64)  # the last slot
    shape = mk.transfer_buffer_shape(fmt, geo.L, T, hidden_arg(geo))
    buf = run(geo, "bfloat16", random_array(rng, shape, "bfloat16"), caches, slots, "d2h")
    assert_bits_equal(to_np(buf), pack_buffer(geo, ref_gather(geo, planes, slots)), "d2h")
    fresh = geo.random_planes(rng, "bfloat16")
    fresh_ms = geo.to_ms(fresh, "bfloat16")
    OP(buf, fresh_ms, Tensor(slots), kv_format=fmt, direction="h2d", cache_layout=layout)
    ref = ref_scatter(geo, fresh, unpack_buffer(geo, to_np(buf), T), slots)
    for l, layer in enumerate(geo.from_ms(fresh_ms)):
        for p in range(geo.P):
            assert_bits_equal(layer[p], ref[l][p], "h2d")


def test_all_slots_skipped_both_directions(rng):
    geo = Geometry(SEPARATE, "BSND", num_layers=2, num_blocks=2, block_size=4)
    planes = geo.random_planes(rng, "float32")
    caches = geo.to_ms(planes, "float32")
    slots = np.array([-1, -1, -3], np.int64)
    shape = mk.transfer_buffer_shape(SEPARATE, 2, 3, geo.hidden[0])
    buf = run(geo, "float32", np.full(shape, 7.0, np.float32), caches, slots, "d2h")
    assert_bits_equal(to_np(buf), np.zeros(shape, np.float32), "skipped rows are zeros")
    OP(Tensor(np.full(shape, 5.0, np.float32)), caches, Tensor(slots), kv_format=SEPARATE, direction="h2d")
    for l, layer in enumerate(geo.from_ms(caches)):
        for p in range(2):
            assert_bits_equal(layer[p], planes[l][p], "h2d skips every token")


@pytest.mark.parametrize("fmt", [MLA, DSA], ids=["mla_512_64", "dsa_512_64_128"])
def test_deepseek_61_layers(rng, fmt):
    """L = 61 with DeepSeek-V3 plane sizes (512 + 64, DSA indexer 128), few slots so it stays fast."""
    geo = Geometry(fmt, "BSND", num_layers=61, num_blocks=2, block_size=4, mla=(512, 64), dsa_index=128)
    planes = geo.random_planes(rng, "bfloat16")
    caches = geo.to_ms(planes, "bfloat16")
    slots = np.array([5, -1, 0, 7, 2], np.int64)
    shape = mk.transfer_buffer_shape(fmt, 61, 5, tuple(geo.hidden))
    assert shape == (61 * 5 * sum(geo.hidden),)
    buf = run(geo, "bfloat16", np.zeros(shape, np.float32), caches, slots, "d2h")
    assert_bits_equal(to_np(buf), pack_buffer(geo, ref_gather(geo, planes, slots)), "d2h")
    fresh = [[np.zeros_like(x) for x in layer] for layer in planes]
    fresh_ms = geo.to_ms(fresh, "bfloat16")
    OP(buf, fresh_ms, Tensor(slots), kv_format=fmt, direction="h2d")
    ref = ref_scatter(geo, fresh, unpack_buffer(geo, to_np(buf), 5), slots)
    got = geo.from_ms(fresh_ms)
    for l in (0, 30, 60):
        for p in range(geo.P):
            assert_bits_equal(got[l][p], ref[l][p], f"l{l} p{p}")


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_single_layer_many_tokens_parallel(rng, direction):
    """L = 1, every slot of a BNSD cache big enough for the multi-threaded, streaming-store path (>= 4 MiB)."""
    geo = Geometry(SEPARATE, "BNSD", num_layers=1, num_blocks=160, block_size=16, heads=4, head_size=64)
    planes = geo.random_planes(rng, "float32")
    caches = geo.to_ms(planes, "float32")
    slots = rng.permutation(geo.slots).astype(np.int64)
    slots[7] = -1
    shape = mk.transfer_buffer_shape(SEPARATE, 1, len(slots), 256)
    buf_np = random_array(rng, shape, "float32")
    buf = run(geo, "float32", buf_np, caches, slots, direction)
    if direction == "d2h":
        assert_bits_equal(to_np(buf), pack_buffer(geo, ref_gather(geo, planes, slots)), "d2h")
    else:
        ref = ref_scatter(geo, planes, unpack_buffer(geo, buf_np, len(slots)), slots)
        for p, got in enumerate(geo.from_ms(caches)[0]):
            assert_bits_equal(got, ref[0][p], f"h2d plane {p}")


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("fmt,num_blocks", [(SEPARATE, 6), (SEPARATE, 700), (MLA, 9)], ids=["small", "streaming", "mla"])
def test_consecutive_slot_runs(rng, fmt, num_blocks, direction):
    """Realistic slot mappings (a sequence's tokens fill blocks in order): runs of consecutive slots are
    copied as one piece; runs broken by skipped slots, block changes, chunk ends and the last slot."""
    geo = Geometry(fmt, "BSND", num_layers=2, num_blocks=num_blocks, block_size=16, heads=2, head_size=64)
    blocks = rng.permutation(geo.nb)
    slots = (blocks[:, None] * geo.bs + np.arange(geo.bs)).reshape(-1).astype(np.int64)
    slots[[3, 40, 41]] = -1  # every block is used, so one run ends at the last slot
    planes = geo.random_planes(rng, "float16")
    caches = geo.to_ms(planes, "float16")
    T = len(slots)
    buf_np = random_array(rng, mk.transfer_buffer_shape(fmt, 2, T, hidden_arg(geo)), "float16")
    buf = run(geo, "float16", buf_np, caches, slots, direction)
    if direction == "d2h":
        assert_bits_equal(to_np(buf), pack_buffer(geo, ref_gather(geo, planes, slots)), "d2h")
    else:
        ref = ref_scatter(geo, planes, unpack_buffer(geo, buf_np, T), slots)
        for l, layer in enumerate(geo.from_ms(caches)):
            for p in range(geo.P):
                assert_bits_equal(layer[p], ref[l][p], f"h2d l{l} p{p}")


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_streaming_path_odd_unaligned_rows(rng, direction):
    """> 4 MiB with 200-byte rows (not 16-byte aligned): the streaming copy's head/tail handling."""
    geo = Geometry(SEPARATE, "BSND", num_layers=4, num_blocks=375, block_size=8, heads=1, head_size=100)
    planes = geo.random_planes(rng, "float16")
    caches = geo.to_ms(planes, "float16")
    slots = rng.permutation(geo.slots).astype(np.int64)
    shape = mk.transfer_buffer_shape(SEPARATE, 4, len(slots), 100)
    buf_np = random_array(rng, shape, "float16")
    buf = run(geo, "float16", buf_np, caches, slots, direction)
    if direction == "d2h":
        assert_bits_equal(to_np(buf), pack_buffer(geo, ref_gather(geo, planes, slots)), "d2h")
    else:
        ref = ref_scatter(geo, planes, unpack_buffer(geo, buf_np, len(slots)), slots)
        for l, layer in enumerate(geo.from_ms(caches)):
            for p in range(2):
                assert_bits_equal(layer[p], ref[l][p], f"h2d l{l} p{p}")


def test_flat_and_nested_caches_agree(rng):
    geo = Geometry(DSA, "BSND", num_layers=3, num_blocks=3, block_size=4)
    planes = geo.random_planes(rng, "float16")
    nested = geo.to_ms(planes, "float16")
    flat = [x for layer in nested for x in layer]
    slots = make_slots(rng, geo.slots, 7, skip=1)
    shape = mk.transfer_buffer_shape(DSA, 3, 7, tuple(geo.hidden))
    a = run(geo, "float16", np.zeros(shape, np.float16), nested, slots, "d2h")
    b = run(geo, "float16", np.zeros(shape, np.float16), flat, slots, "d2h")
    assert_bits_equal(to_np(a), to_np(b), "flat vs nested")
    assert_bits_equal(to_np(a), pack_buffer(geo, ref_gather(geo, planes, slots)), "d2h")


def test_caches_over_2g_elements_64bit_offsets():
    """A MERGED int8 cache of 2 * (2^31 + 131072) elements (4.3 GB virtual; numpy's calloc leaves the
    untouched pages unallocated): slots and the V plane offset are beyond 2^31."""
    nb, bs, H, D = 16385, 128, 8, 128
    arr = np.zeros((2, nb, bs, H, D), np.int8)  # lazily committed
    cache = Tensor.from_numpy(arr)
    assert cache.data_ptr() == arr.ctypes.data
    slots = np.array([nb * bs - 1, 3, (nb - 1) * bs + 5], np.int64)
    rows = np.arange(2 * 3 * H * D, dtype=np.int64).astype(np.int8).reshape(2, 1, 3, H * D)
    OP(Tensor(rows), [cache], Tensor(slots), kv_format=MERGED, direction="h2d")
    mk.synchronize()  # we read through the numpy alias
    flat = arr.reshape(2, nb * bs, H * D)
    for i, s in enumerate(slots):
        assert_bits_equal(flat[0, s], rows[0, 0, i], "K row")
        assert_bits_equal(flat[1, s], rows[1, 0, i], "V row")
    out = Tensor(np.zeros((2, 1, 3, H * D), np.int8))
    OP(out, [cache], Tensor(slots[::-1].copy()), kv_format=MERGED, direction="d2h")
    assert_bits_equal(to_np(out), rows[:, :, ::-1], "d2h beyond 2^31")
    del cache


# --------------------------------------------------------------------------------------- transfer_buffer_shape
def test_transfer_buffer_shape_values():
    assert mk.transfer_buffer_shape(MERGED, 32, 1024, 1024) == (2, 32, 1024, 1024)
    assert mk.transfer_buffer_shape("SEPARATE_KV", 2, 0, (64, 64)) == (2, 2, 0, 64)
    assert mk.transfer_buffer_shape(3, 61, 10, (512, 64)) == (61 * 10 * 576,)
    assert mk.transfer_buffer_shape(DSA, 61, 2, [512, 64, 128]) == (61 * 2 * 704,)


@pytest.mark.parametrize("spelling,fmt", [
    ("separate", SEPARATE), ("Separate", SEPARATE), ("SEPARATE_KV", SEPARATE), ("separate_kv", SEPARATE),
    ("merged", MERGED), ("MERGED", MERGED), ("mla", MLA), ("MLA_KV", MLA), ("dsa", DSA), ("Dsa_Kv", DSA),
    (mk.KVCacheFormat.MLA_KV, MLA), (int(DSA), DSA),
])
def test_kv_format_spellings(spelling, fmt):
    """Every documented spelling of kv_format (the demo's short names included) names the same format."""
    hidden = {MERGED: 64, SEPARATE: 64, MLA: (512, 64), DSA: (512, 64, 128)}[fmt]
    assert mk.transfer_buffer_shape(spelling, 2, 3, hidden) == mk.transfer_buffer_shape(fmt, 2, 3, hidden)


@pytest.mark.parametrize("bad", ["sep", "NOPE", "", 0, 5, True, 2.0, None])
def test_kv_format_error_lists_every_spelling(bad):
    with pytest.raises(ValueError, match="argument 'kv_format'") as info:
        mk.transfer_buffer_shape(bad, 2, 3, 64)
    msg = str(info.value)
    for f in mk.KVCacheFormat:
        short = f.name.lower()[:-len("_kv")]
        assert f.name in msg and f"'{short}'" in msg and str(int(f)) in msg, (f, msg)
    assert "any case" in msg and repr(bad) in msg


def test_multi_layer_kv_transfer_short_format_name(rng):
    """kv_format="separate" (the demo's --kv-format spelling) moves the same rows as SEPARATE_KV."""
    geo, caches = _sep(rng, dtype="float32")
    slots = Tensor(np.array([0, 5, 9], np.int64))
    shape = mk.transfer_buffer_shape("separate", 2, 3, 32)
    got, ref = Tensor(np.zeros(shape, np.float32)), Tensor(np.zeros(shape, np.float32))
    OP(got, caches, slots, kv_format="separate", direction="d2h")
    OP(ref, caches, slots, kv_format=SEPARATE, direction="d2h")
    assert np.abs(to_np(ref)).sum() > 0
    assert_bits_equal(to_np(got), to_np(ref), "separate vs SEPARATE_KV")


@pytest.mark.parametrize("args,match", [
    ((9, 2, 3, 64), "kv_format"),
    (("NOPE", 2, 3, 64), "kv_format"),
    ((MERGED, 0, 3, 64), "num_layers"),
    ((MERGED, 2, -1, 64), "num_tokens"),
    ((MERGED, 2, 3, 0), "hidden_sizes"),
    ((SEPARATE, 2, 3, (64, 32)), "hidden_sizes"),
    ((MLA, 2, 3, 512), "kv_lora_rank"),
    ((DSA, 2, 3, (512, 64)), "index_head_dim"),
])
def test_transfer_buffer_shape_errors(args, match):
    with pytest.raises(ValueError, match=match):
        mk.transfer_buffer_shape(*args)


# -------------------------------------------------------------------------------------------------- bad input
def _sep(rng, L=2, dtype="float16", nb=3, bs=4):
    geo = Geometry(SEPARATE, "BSND", num_layers=L, num_blocks=nb, block_size=bs)
    return geo, geo.to_ms(geo.random_planes(rng, dtype), dtype)


def test_bad_buffer_shape(rng):
    geo, caches = _sep(rng)
    buf = Tensor(np.zeros((2, 2, 3, 31), np.float16))
    with pytest.raises(ValueError, match=r"argument 'buffer': expected shape \(2, 2, 3, 32\)"):
        OP(buf, caches, Tensor(np.array([0, 1, 2])), kv_format=SEPARATE, direction="d2h")


def test_layer_count_mismatch(rng):
    geo, caches = _sep(rng, L=3)
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 3, 32), np.float16))  # built for 2 layers
    with pytest.raises(ValueError, match="argument 'buffer'.*num_layers=3"):
        OP(buf, caches, Tensor(np.array([0, 1, 2])), kv_format=SEPARATE, direction="h2d")


def test_mixed_dtypes_across_layers(rng):
    geo, caches = _sep(rng)
    caches[1] = (caches[1][0], Tensor(to_np(caches[1][1]).astype(np.float32)))
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 1, 32), np.float16))
    with pytest.raises(TypeError, match=r"'kv_caches\[1\]\[1\]': expected dtype float16"):
        OP(buf, caches, Tensor(np.array([0])), kv_format=SEPARATE, direction="d2h")


def test_buffer_dtype_mismatch(rng):
    geo, caches = _sep(rng)
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 1, 32), np.float32))
    with pytest.raises(TypeError, match="argument 'buffer': expected dtype float16"):
        OP(buf, caches, Tensor(np.array([0])), kv_format=SEPARATE, direction="d2h")


def test_mixed_shapes_across_layers(rng):
    geo, caches = _sep(rng)
    caches[1] = (caches[1][0], Tensor(np.zeros((3, 4, 2, 8), np.float16)))
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 1, 32), np.float16))
    with pytest.raises(ValueError, match=r"'kv_caches\[1\]\[1\]': expected shape \(3, 4, 2, 16\)"):
        OP(buf, caches, Tensor(np.array([0])), kv_format=SEPARATE, direction="d2h")


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_slot_out_of_range(rng, direction):
    geo, caches = _sep(rng)
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 2, 32), np.float16))
    with pytest.raises(ValueError, match=r"'slot_mapping': expected every slot < num_blocks\*block_size = 12, got 12"):
        OP(buf, caches, Tensor(np.array([0, 12])), kv_format=SEPARATE, direction=direction)


def test_duplicate_slots_rejected_for_h2d_only(rng):
    geo, caches = _sep(rng)
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 2, 32), np.float16))
    with pytest.raises(ValueError, match="distinct"):
        OP(buf, caches, Tensor(np.array([3, 3])), kv_format=SEPARATE, direction="h2d")
    OP(buf, caches, Tensor(np.array([3, 3])), kv_format=SEPARATE, direction="d2h")  # reads may repeat
    b = to_np(buf)
    assert_bits_equal(b[:, :, 0], b[:, :, 1], "duplicate reads")


@pytest.mark.parametrize("kw,exc,match", [
    (dict(kv_format=SEPARATE, direction="up"), ValueError, "argument 'direction'"),
    (dict(kv_format=7, direction="d2h"), ValueError, "argument 'kv_format'"),
    (dict(kv_format=SEPARATE, direction="d2h", cache_layout="NHD"), ValueError, "argument 'cache_layout'"),
    (dict(kv_format=MLA, direction="d2h"), ValueError, "kv_lora_rank|MLA"),
    (dict(kv_format=MERGED, direction="d2h"), TypeError, "MERGED_KV"),
])
def test_bad_attrs_and_format_mismatch(rng, kw, exc, match):
    geo, caches = _sep(rng)
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 1, 32), np.float16))
    with pytest.raises(exc, match=match):
        OP(buf, caches, Tensor(np.array([0])), **kw)


def test_bad_types(rng):
    geo, caches = _sep(rng)
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(SEPARATE, 2, 1, 32), np.float16))
    with pytest.raises(TypeError, match="argument 'slot_mapping'"):
        OP(buf, caches, np.array([0]), kv_format=SEPARATE, direction="d2h")
    with pytest.raises(TypeError, match="argument 'slot_mapping': expected dtype"):
        OP(buf, caches, Tensor(np.array([0.0], np.float32)), kv_format=SEPARATE, direction="d2h")
    with pytest.raises(ValueError, match=r"'kv_caches\[0\]': expected a tuple of 2 tensors"):
        OP(buf, [caches[0][:1], caches[1]], Tensor(np.array([0])), kv_format=SEPARATE, direction="d2h")
    with pytest.raises(ValueError, match="at least one layer"):
        OP(buf, [], Tensor(np.array([0])), kv_format=SEPARATE, direction="d2h")
    with pytest.raises(TypeError, match="argument 'kv_caches'"):
        OP(buf, caches[0][0], Tensor(np.array([0])), kv_format=SEPARATE, direction="d2h")


def test_mla_bnsd_rejected(rng):
    geo = Geometry(MLA, "BSND", num_layers=1, num_blocks=2, block_size=4)
    caches = geo.to_ms(geo.random_planes(rng, "float16"), "float16")
    buf = Tensor(np.zeros(mk.transfer_buffer_shape(MLA, 1, 1, tuple(geo.hidden)), np.float16))
    with pytest.raises(ValueError, match="expected 'BSND' for MLA_KV"):
        OP(buf, caches, Tensor(np.array([0])), kv_format=MLA, direction="d2h", cache_layout="BNSD")


# ------------------------------------------------------------------------------------------------- graph modes
class TransferCell(nn.Cell):
    """Per-layer caches as Parameters (ParameterTuple attributes), the way a model holds them."""

    def __init__(self, geo, planes, dtype, flat=False, reads=True):
        super().__init__()
        self.fmt, self.layout, self.flat, self.reads = geo.fmt, geo.layout, flat, reads
        tensors = geo.to_ms(planes, dtype)
        if geo.fmt == MERGED:
            self.params = ParameterTuple([Parameter(t, name=f"kv{l}") for l, t in enumerate(tensors)])
            self.layers = tuple(self.params)
        else:
            self.params = ParameterTuple([Parameter(x, name=f"c{l}_{p}") for l, layer in enumerate(tensors)
                                          for p, x in enumerate(layer)])
            P = geo.P
            self.layers = tuple(tuple(self.params[l * P + p] for p in range(P)) for l in range(geo.L))

    def construct(self, buf_in, buf_out, slots):
        # one graph: read a cache (old value), load buf_in (h2d), read again (new value), then offload the
        # updated caches (d2h must see the h2d write). The reads `x * 1` become TensorMove copies of that
        # one cache (graph outputs never alias a Parameter); TensorMove has no bf16 CPU kernel, hence reads.
        before = self.params[0] * 1 if self.reads else slots
        caches = self.params if self.flat else self.layers
        mk.multi_layer_kv_transfer(buf_in, caches, slots, kv_format=self.fmt, direction="h2d",
                                   cache_layout=self.layout)
        after = self.params[0] * 1 if self.reads else slots
        mk.multi_layer_kv_transfer(buf_out, caches, slots, kv_format=self.fmt, direction="d2h",
                                   cache_layout=self.layout)
        return before, after


@pytest.mark.parametrize("mode", ["graph", "jit", "pynative"])
@pytest.mark.parametrize("fmt,layout,flat", [(SEPARATE, "BNSD", False), (MERGED, "BSND", False),
                                             (MLA, "BSND", True), (DSA, "BSND", False)],
                         ids=["separate", "merged", "mla_flat", "dsa"])
def test_graph_modes_inplace_and_ordered(rng, mode, fmt, layout, flat):
    geo = Geometry(fmt, layout, num_layers=3, num_blocks=4, block_size=4)
    dtype = "float16"
    planes = geo.random_planes(rng, dtype)
    T = 6
    slots = make_slots(rng, geo.slots, T, skip=1)
    shape = mk.transfer_buffer_shape(fmt, geo.L, T, hidden_arg(geo))
    buf_in_np = random_array(rng, shape, dtype)
    with ms_mode(mode):
        net = TransferCell(geo, planes, dtype, flat=flat)
        ptrs = [p.data_ptr() for p in net.params]
        if mode == "jit":
            net.construct = ms.jit(net.construct)
        # the d2h target is written: in a graph it must be a Parameter (a Tensor argument is refused)
        buf_in, buf_out = to_ms(buf_in_np, dtype), Parameter(Tensor(np.zeros(shape, np.float16)), name="buf_out")
        before, after = net(buf_in, buf_out, Tensor(slots))
        # no cache was copied: the Parameters keep their memory and hold the h2d rows
        assert [p.data_ptr() for p in net.params] == ptrs
        ref = ref_scatter(geo, planes, unpack_buffer(geo, buf_in_np, T), slots)
        got = [[to_np(net.params[l])[p] for p in range(2)] for l in range(geo.L)] if fmt == MERGED else \
            [[to_np(net.params[l * geo.P + p]) for p in range(geo.P)] for l in range(geo.L)]
        for l in range(geo.L):
            for p in range(geo.P):
                assert_bits_equal(got[l][p], ref[l][p], f"{mode}: h2d l{l} p{p}")
        first = np.stack(planes[0]) if fmt == MERGED else planes[0][0]
        first_new = np.stack(ref[0]) if fmt == MERGED else ref[0][0]
        assert_bits_equal(to_np(before), first, f"{mode}: read before the h2d sees old values")
        assert_bits_equal(to_np(after), first_new, f"{mode}: read after the h2d sees the write")
        # d2h after h2d: the written rows come back (zeros for the skipped slot)
        assert_bits_equal(to_np(buf_out), pack_buffer(geo, ref_gather(geo, ref, slots)), f"{mode}: d2h")


class AssignThenOffload(nn.Cell):
    def __init__(self, k, v):
        super().__init__()
        self.k = Parameter(k, name="k")
        self.v = Parameter(v, name="v")

    def construct(self, new_k, buf, slots):
        ops.assign(self.k, new_k)  # a built-in write...
        mk.multi_layer_kv_transfer(buf, ((self.k, self.v),), slots, kv_format=SEPARATE, direction="d2h")
        return buf  # ...must be visible to the d2h


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_d2h_sees_earlier_builtin_write(rng, mode):
    geo = Geometry(SEPARATE, "BSND", num_layers=1, num_blocks=2, block_size=4)
    planes = geo.random_planes(rng, "float32")
    new_k = random_array(rng, planes[0][0].shape, "float32")
    slots = np.array([1, 6, -1], np.int64)
    shape = mk.transfer_buffer_shape(SEPARATE, 1, 3, geo.hidden[0])
    with ms_mode(mode):
        net = AssignThenOffload(Tensor(planes[0][0]), Tensor(planes[0][1]))
        if mode == "jit":
            net.construct = ms.jit(net.construct)
        buf = Parameter(Tensor(np.full(shape, 3.0, np.float32)), name="buf")
        net(Tensor(new_k), buf, Tensor(slots))
        expected = ref_gather(geo, [[new_k, planes[0][1]]], slots)
        assert_bits_equal(to_np(buf), pack_buffer(geo, expected), "d2h after assign")


class BadBufferCell(nn.Cell):
    def __init__(self, caches):
        super().__init__()
        self.c = ParameterTuple([Parameter(x, name=f"c{i}") for i, x in enumerate(caches)])

    def construct(self, buf, slots):
        mk.multi_layer_kv_transfer(buf, self.c, slots, kv_format=SEPARATE, direction="d2h")
        return buf


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_mode_static_errors(rng, mode):
    geo, caches = _sep(rng)
    flat = [x for layer in caches for x in layer]
    with ms_mode(mode):
        net = BadBufferCell(flat)
        if mode == "jit":
            net.construct = ms.jit(net.construct)
        with pytest.raises(ValueError, match="argument 'buffer': expected shape"):
            net(Tensor(np.zeros((2, 2, 3, 31), np.float16)), Tensor(np.array([0, 1, 2])))
        with pytest.raises(TypeError, match="argument 'buffer': expected dtype float16"):
            net(Tensor(np.zeros((2, 2, 3, 32), np.float32)), Tensor(np.array([0, 1, 2])))


class OutOfRangeCell(nn.Cell):
    def __init__(self, k, v):
        super().__init__()
        self.k, self.v = Parameter(k, name="k"), Parameter(v, name="v")

    def construct(self, buf, slots):
        mk.multi_layer_kv_transfer(buf, ((self.k, self.v),), slots, kv_format=SEPARATE, direction="h2d")
        return self.k * 1


def test_graph_mode_out_of_range_slots_are_skipped(rng):
    """Graph mode cannot check slot values; the kernel skips them and never writes outside a cache."""
    geo = Geometry(SEPARATE, "BSND", num_layers=1, num_blocks=2, block_size=4)
    planes = geo.random_planes(rng, "float32")
    slots = np.array([2, 8, 1 << 40], np.int64)
    shape = mk.transfer_buffer_shape(SEPARATE, 1, 3, geo.hidden[0])
    buf_np = random_array(rng, shape, "float32")
    with ms_mode("graph"):
        net = OutOfRangeCell(Tensor(planes[0][0]), Tensor(planes[0][1]))
        k = net(Tensor(buf_np), Tensor(slots))
    ref = ref_scatter(geo, planes, unpack_buffer(geo, buf_np, 3), np.array([2, -1, -1]))
    assert_bits_equal(to_np(k), ref[0][0], "only slot 2 written")


def test_deepseek_61_layers_graph(rng):
    geo = Geometry(DSA, "BSND", num_layers=61, num_blocks=2, block_size=2, mla=(32, 8), dsa_index=16)
    planes = geo.random_planes(rng, "bfloat16")
    slots = np.array([3, 0, -1], np.int64)
    shape = mk.transfer_buffer_shape(DSA, 61, 3, tuple(geo.hidden))
    buf_np = random_array(rng, shape, "bfloat16")
    with ms_mode("graph"):
        net = TransferCell(geo, planes, "bfloat16", reads=False)
        buf_out = Parameter(Tensor(np.zeros(shape, np.float32), ms.bfloat16), name="buf_out")
        net(to_ms(buf_np), buf_out, Tensor(slots))
    ref = ref_scatter(geo, planes, unpack_buffer(geo, buf_np, 3), slots)
    assert_bits_equal(to_np(buf_out), pack_buffer(geo, ref_gather(geo, ref, slots)), "61-layer DSA graph")
    assert_bits_equal(to_np(net.params[60 * 3 + 2]), ref[60][2], "last layer indexer cache")


@pytest.mark.parametrize("aiv_num", [1, 2, 3])
def test_aiv_num_attribute_caps_threads_same_result(rng, aiv_num):
    """The op's aiv_num attribute (cores on Ascend, threads on cpu; not in the public signature yet)."""
    import sys

    mod = sys.modules["ms_kvcache.ops.multi_layer_kv_transfer"]  # the module (the package exports the function)

    geo = Geometry(SEPARATE, "BNSD", num_layers=3, num_blocks=64, block_size=16, heads=2, head_size=64)
    planes = geo.random_planes(rng, "float32")
    flat = [x for layer in geo.to_ms(planes, "float32") for x in layer]
    slots = rng.permutation(geo.slots).astype(np.int64)
    shape = mk.transfer_buffer_shape(SEPARATE, 3, len(slots), 128)
    buf = Tensor(np.zeros(shape, np.float32))
    prim = mod._Prim("cpu", (len(flat),), int(SEPARATE), "d2h", "BNSD", 3, aiv_num)
    prim.require_parameters = False  # a PyNative call of the primitive itself (as _custom.eager_op makes)
    prim(buf, Tensor(slots), *flat)
    assert_bits_equal(to_np(buf), pack_buffer(geo, ref_gather(geo, planes, slots)), f"aiv_num={aiv_num}")


def test_jit_function_caches_from_closure_and_tuple_argument(rng):
    """@ms.jit functions: Parameters the function refers to (closure/global) are written in place by h2d;
    a tuple of Tensors given as an argument can be read (d2h). (Writing into an element of a tuple
    argument fails in MindSpore 2.10 with "Parameter[i] has no default param".)"""
    geo = Geometry(SEPARATE, "BSND", num_layers=2, num_blocks=2, block_size=4)
    planes = geo.random_planes(rng, "float32")
    params = tuple((Parameter(Tensor(k), name=f"jk{l}"), Parameter(Tensor(v), name=f"jv{l}"))
                   for l, (k, v) in enumerate(planes))
    slots = np.array([6, -1, 1], np.int64)
    shape = mk.transfer_buffer_shape(SEPARATE, 2, 3, geo.hidden[0])
    buf_np = random_array(rng, shape, "float32")

    @ms.jit
    def load(buf, slot_mapping):
        mk.multi_layer_kv_transfer(buf, params, slot_mapping, kv_format=SEPARATE, direction="h2d")
        return slot_mapping

    @ms.jit
    def offload(buf, caches, slot_mapping):
        mk.multi_layer_kv_transfer(buf, caches, slot_mapping, kv_format=SEPARATE, direction="d2h")
        return slot_mapping

    load(Tensor(buf_np), Tensor(slots))
    ref = ref_scatter(geo, planes, unpack_buffer(geo, buf_np, 3), slots)
    for l in range(2):
        for p in range(2):
            assert_bits_equal(to_np(params[l][p]), ref[l][p], f"closure h2d l{l} p{p}")
    out = Parameter(Tensor(np.full(shape, 4.0, np.float32)), name="jout")  # written: a Parameter argument
    offload(out, tuple((Tensor(ref[l][0]), Tensor(ref[l][1])) for l in range(2)), Tensor(slots))
    assert_bits_equal(to_np(out), pack_buffer(geo, ref_gather(geo, ref, slots)), "tuple-argument d2h")
