"""rerope_cached_keys: in-place re-rotation of cached keys from old to new positions."""
import os

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

import ms_kvcache
from conftest import NP_DTYPES, assert_bits_equal, ms_mode, to_ms, to_np
from rope_ref import MANT, NP, assert_close_rope, assert_ulp_le, available_isas, reset_isa, rope64, rope_f32_model, set_isa
from test_rope_reshape_and_cache import make_table, rand

pytestmark = pytest.mark.usefixtures("cpu_backend")


class ReropeCase:
    """A cache whose rows at ``slots`` hold keys rotated (by the kernels' own arithmetic, i.e. what
    rope_reshape_and_cache writes) for ``old`` positions; everything else is random."""

    def __init__(self, rng, dtype, head_size=128, rotary_dim=None, heads=4, n=40, num_blocks=12, block_size=8,
                 layout="BSND", neox=True, max_position=4096, same=False, plane=False, table_dtype="float32"):
        self.dtype, self.layout, self.neox = dtype, layout, neox
        self.hd, self.rd, self.heads, self.bs = head_size, rotary_dim or head_size, (1 if plane else heads), block_size
        self.plane = plane
        self.table = make_table(max_position, self.rd, table_dtype)
        self.keys = rand(rng, (n, self.heads, head_size), dtype)            # un-rotated keys
        self.old = rng.integers(0, max_position, size=n).astype(np.int64)
        self.old[0], self.old[1] = 0, max_position - 1
        self.new = self.old.copy() if same else rng.integers(0, max_position, size=n).astype(np.int64)
        if not same:
            self.new[2], self.new[3] = max_position - 1, 0
        nslots = num_blocks * block_size
        self.slots = rng.permutation(nslots - 1)[:n].astype(np.int32)
        self.slots[4], self.slots[5] = -1, nslots - 1
        self.cached = rope_f32_model(self.keys, *self.cs(self.old), self.rd, neox, dtype)
        if plane:
            shape = (num_blocks, block_size, head_size)
        elif layout == "BSND":
            shape = (num_blocks, block_size, heads, head_size)
        else:
            shape = (num_blocks, heads, block_size, head_size)
        self.cache = rand(rng, shape, dtype)
        for i, slot in enumerate(self.slots):
            self.cache_row_set(self.cache, slot, self.cached[i])

    def cs(self, pos):
        t = self.table[pos].astype(np.float32)
        return t[:, None, : self.rd // 2], t[:, None, self.rd // 2:]

    def cache_row_set(self, cache, slot, row):
        if slot < 0:
            return
        b, o = divmod(int(slot), self.bs)
        if self.plane:
            cache[b, o] = row[0]
        elif self.layout == "BSND":
            cache[b, o] = row
        else:
            cache[b, :, o] = row

    def cache_row(self, cache, slot):
        b, o = divmod(int(slot), self.bs)
        if self.plane:
            return cache[b, o][None]
        return cache[b, o] if self.layout == "BSND" else cache[b, :, o]

    def delta(self):
        """Delta rotation (float64) from the fp32 table rows, as documented."""
        co, so = [a.astype(np.float64) for a in self.cs(self.old)]
        cn, sn = [a.astype(np.float64) for a in self.cs(self.new)]
        n = co * co + so * so
        return (cn * co + sn * so) / n, (sn * co - cn * so) / n

    def run(self, **kw):
        cache = to_ms(self.cache)
        ms_kvcache.rerope_cached_keys(cache, Tensor(self.slots), Tensor(self.old), Tensor(self.new), to_ms(self.table),
                                      is_neox_style=self.neox, cache_layout=self.layout, **kw)
        return to_np(cache)

    def rows(self, cache):
        valid = self.slots >= 0
        return np.stack([self.cache_row(cache, s) for s in self.slots[valid]]), valid

    def expected_cache(self):
        cd, sd = self.delta()
        exp = rope_f32_model(self.cached, cd.astype(np.float32), sd.astype(np.float32), self.rd, self.neox, self.dtype)
        out = self.cache.copy()
        for i, slot in enumerate(self.slots):
            self.cache_row_set(out, slot, exp[i])
        return out


def pair_magnitude_ulps(actual, expected, dtype, rd, neox):
    """|actual - expected| in ulps of each rotated pair's magnitude (rotation moves rounding error
    between the two elements of a pair, so this is the natural unit for re-rotated values)."""
    a, e = actual.astype(np.float64)[..., :rd], expected.astype(np.float64)[..., :rd]
    if neox:
        m = np.sqrt(e[..., : rd // 2] ** 2 + e[..., rd // 2:] ** 2)
        m = np.concatenate([m, m], axis=-1)
    else:
        m = np.repeat(np.sqrt(e[..., 0::2] ** 2 + e[..., 1::2] ** 2), 2, axis=-1)
    ulp = np.exp2(np.floor(np.log2(np.maximum(m, 1e-30))) - MANT[dtype])
    return np.abs(a - e) / ulp


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("head_size,rotary_dim,layout", [(128, 128, "BSND"), (128, 64, "BNSD"), (80, 80, "BSND")])
def test_old_to_new(rng, dtype, neox, head_size, rotary_dim, layout):
    case = ReropeCase(rng, dtype, head_size, rotary_dim, layout=layout, neox=neox)
    got = case.run()
    # 1. bit-exact against the documented arithmetic; everything else in the cache unchanged
    assert_bits_equal(got, case.expected_cache(), "key_cache")
    rows, valid = case.rows(got)
    # 2. the numerics contract: within 1 ulp of the correctly rounded float64 R(new) R(old)^-1 cached
    cd, sd = case.delta()
    ref, scale = rope64(case.cached[valid], cd[valid], sd[valid], case.rd, neox)
    assert_close_rope(rows, ref, scale, dtype, "rerope vs float64")
    # 3. equals a fresh rope at the new positions (what rope_reshape_and_cache would have cached)
    fresh = rope_f32_model(case.keys, *case.cs(case.new), case.rd, neox, dtype)[valid]
    if dtype == "float32":
        assert np.abs(rows.astype(np.float64) - fresh).max() <= 1e-5
    else:
        # The cached key already carries <= 1/2 ulp rounding error per element; a rotation moves
        # part of one element's error onto its partner, so per-element ulps of a small partner can
        # be large. Measured in ulps of the pair's magnitude it is within 1 ulp.
        e = pair_magnitude_ulps(rows, fresh, dtype, case.rd, neox)
        assert e.max() <= 1.0, f"rerope vs fresh rope: {e.max()} ulps of the pair magnitude"
    assert_bits_equal(rows[..., case.rd:], case.cached[valid][..., case.rd:], "pass-through tail")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_identity(rng, dtype):
    case = ReropeCase(rng, dtype, 128, 128, same=True, neox=(dtype != "float16"))
    got = case.run()
    rows, valid = case.rows(got)
    assert_ulp_le(rows, case.cached[valid], dtype, 1, "rerope(p -> p)")
    # in fact exact: the delta is cos = 1, sin = 0 exactly (fp32 products are exact in fp64)
    assert np.array_equal(rows.astype(np.float64), case.cached[valid].astype(np.float64))


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_isa_paths_bit_identical(rng, neox):
    isas = available_isas()
    if len(isas) < 2:
        pytest.skip("only the portable path runs on this CPU")
    try:
        for dtype in ("float16", "bfloat16", "float32"):
            case = ReropeCase(rng, dtype, 80, 74, neox=neox)
            got = []
            for isa in isas:
                set_isa(isa)
                got.append(case.run())
            for isa, other in zip(isas[1:], got[1:]):
                assert_bits_equal(got[0], other, f"{dtype}: portable vs path {isa}")
            assert_bits_equal(got[-1], case.expected_cache(), f"{dtype} key_cache")
    finally:
        reset_isa()


def test_mla_plane_and_table_in_data_dtype(rng):
    case = ReropeCase(rng, "bfloat16", 64, 64, plane=True, neox=False, table_dtype="bfloat16")
    assert_bits_equal(case.run(), case.expected_cache(), "k_pe plane")


def test_large_parallel(rng):
    case = ReropeCase(rng, "bfloat16", 128, 128, heads=8, n=600, num_blocks=64, block_size=16)
    assert_bits_equal(case.run(), case.expected_cache(), "key_cache")


class ReropeCell(nn.Cell):
    def __init__(self, cache):
        super().__init__()
        self.key_cache = Parameter(cache, name="key_cache")

    def construct(self, slots, old, new, table):
        ms_kvcache.rerope_cached_keys(self.key_cache, slots, old, new, table)
        return ops.cast(self.key_cache, ms.float32)


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_modes(rng, mode):
    case = ReropeCase(rng, "float16", 64, 64)
    with ms_mode(mode):
        cell = ReropeCell(to_ms(case.cache))
        fn = cell if mode == "graph" else ms.jit(cell.construct)
        read = fn(Tensor(case.slots), Tensor(case.old), Tensor(case.new), to_ms(case.table))
    exp = case.expected_cache()
    assert_bits_equal(to_np(cell.key_cache), exp, "key_cache parameter")
    assert_bits_equal(to_np(read), exp.astype(np.float32), "key_cache read in graph")


def test_graph_skips_out_of_range(rng):
    case = ReropeCase(rng, "bfloat16", 64, 64, n=6, max_position=32)
    case.old[0], case.new[1], case.slots[2] = 32, -5, 10 ** 6
    with ms_mode("graph"):
        cell = ReropeCell(to_ms(case.cache))
        cell(Tensor(case.slots), Tensor(case.old), Tensor(case.new), to_ms(case.table))
    got = to_np(cell.key_cache)
    for i in (0, 1):  # left unchanged
        assert_bits_equal(case.cache_row(got, case.slots[i]), case.cached[i], f"entry {i}")
    keep = np.array([False, False, False, True, False, True])
    case.slots = np.where(keep, case.slots, -1).astype(np.int32)
    case.old[0], case.new[1] = 0, 0
    assert_bits_equal(got, case.expected_cache(), "key_cache")


@pytest.mark.parametrize("bad,exc,match", [
    ("positions_len", ValueError, r"argument 'new_positions': expected shape \[40\]"),
    ("positions_dtype", TypeError, r"argument 'new_positions': expected dtype int64 \(same as 'old_positions'\)"),
    ("old_range", ValueError, r"argument 'old_positions': expected positions in \[0, 4096\)"),
    ("new_range", ValueError, r"argument 'new_positions': expected positions in \[0, 4096\).*got 4096"),
    ("dup", ValueError, r"argument 'slot_mapping': expected distinct non-negative slots"),
    ("slot_range", ValueError, r"argument 'slot_mapping': expected every slot < num_blocks\*block_size = 96"),
    ("rotary_dim", ValueError, r"argument 'cos_sin_cache': expected rotary_dim \(shape\[1\]\) <= head_size = 128"),
    ("odd", ValueError, r"argument 'cos_sin_cache': expected an even rotary_dim"),
    ("table_dtype", TypeError, r"argument 'cos_sin_cache': expected dtype in \('float32', 'bfloat16'\)"),
    ("int_cache", TypeError, r"argument 'key_cache': expected dtype in \('float16', 'bfloat16', 'float32'\)"),
])
def test_bad_inputs(rng, bad, exc, match):
    case = ReropeCase(rng, "bfloat16", 128, 128)
    cache, slots, old, new, table = (to_ms(case.cache), Tensor(case.slots), Tensor(case.old), Tensor(case.new),
                                     to_ms(case.table))
    if bad == "positions_len":
        new = Tensor(case.new[:-1])
    elif bad == "positions_dtype":
        new = Tensor(case.new.astype(np.int32))
    elif bad == "old_range":
        old = Tensor(np.where(np.arange(40) == 7, -1, case.old))
    elif bad == "new_range":
        new = Tensor(np.where(np.arange(40) == 7, 4096, case.new))
    elif bad == "dup":
        s = case.slots.copy()
        s[9] = s[8]
        slots = Tensor(s)
    elif bad == "slot_range":
        s = case.slots.copy()
        s[0] = 96
        slots = Tensor(s)
    elif bad == "rotary_dim":
        table = to_ms(make_table(16, 130))
    elif bad == "odd":
        table = to_ms(np.ascontiguousarray(make_table(16, 128)[:, :127]))
    elif bad == "table_dtype":
        table = to_ms(make_table(16, 128, "float16"))
    elif bad == "int_cache":
        cache = Tensor(np.zeros((12, 8, 4, 128), np.int8))
    before = to_np(cache).copy()
    with pytest.raises(exc, match="rerope_cached_keys: " + match):
        ms_kvcache.rerope_cached_keys(cache, slots, old, new, table)
    assert_bits_equal(to_np(cache), before, "cache unchanged after a rejected call")


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MS_KVCACHE_BIG_TESTS") != "1",
                    reason="needs ~5 GiB of free memory: set MS_KVCACHE_BIG_TESTS=1")
def test_cache_over_2g_elements(rng):
    """64-bit offsets: re-rotate the last slot of a cache with more than 2**31 elements."""
    bs, d = 16, 128
    nb = (1 << 31) // (bs * d) + 1
    cache = ops.zeros((nb, bs, d), ms.float16)        # one-head plane, 2**31 + 2048 elements (4 GiB)
    table = make_table(64, d)
    row = rand(rng, (2, 1, d), "float16")
    c, s = table[[3, 5]][:, None, : d // 2], table[[3, 5]][:, None, d // 2:]
    cached = rope_f32_model(row, c, s, d, True, "float16")
    cache[nb - 1, bs - 1] = to_ms(cached[0, 0])
    cache[0, 0] = to_ms(cached[1, 0])
    slots = Tensor(np.array([nb * bs - 1, 0], np.int64))
    ms_kvcache.rerope_cached_keys(cache, slots, Tensor(np.array([3, 5])), Tensor(np.array([9, 9])), to_ms(table))
    c9, s9 = table[[9, 9]][:, None, : d // 2], table[[9, 9]][:, None, d // 2:]
    fresh = rope_f32_model(row, c9, s9, d, True, "float16")
    for got, exp in ((to_np(cache[nb - 1, bs - 1]), fresh[0, 0]), (to_np(cache[0, 0]), fresh[1, 0])):
        e = pair_magnitude_ulps(got[None], exp[None], "float16", d, True)
        assert e.max() <= 1.0
    assert not to_np(cache[nb - 1, bs - 2]).any()
