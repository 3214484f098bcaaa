"""rerope_cached_keys: the AscendC kernel + op_host tiling run through the emulation ("sim").

Bit for bit against the numpy model of the kernel's double-float delta rotation (tests/_rope_sim_ref.py), for
every dtype x table dtype x style x layout (BSND, BNSD, rank-3 plane), every SoC and core order, partial
rotary and DataCopyPad rows; rerope(p -> p) is the identity; rerope(old -> new) is within the issue's
tolerance of a fresh rope at new of the cached values' pre-image; invalid slots / positions and table rows
without an inverse are skipped (never read, nothing written); then the public op with set_backend("sim")
against set_backend("cpu") (which computes the delta in fp64: the same bits) in PyNative and GRAPH_MODE.
"""
import numpy as np
import pytest

from _copy_sim_ref import (SOCS, assert_last_launch, cores_of, expect_tiling_error, launch, platform,
                           public_backend_or_skip, reset_last_launch, status)
from _rope_sim_ref import assert_same, delta_model, heads_of_slot, make_table, rand
from rope_ref import rope64, rope_f32_model

OP = "MskvReropeCachedKeys"
DTYPE_TABLES = [("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"),
                ("float32", "float32")]


class Rerope:
    def __init__(self, rng, n, heads=2, d=64, rd=None, dtype="bfloat16", table_dtype="float32", layout="BSND",
                 rank3=False, bs=8, nb=None, neox=True, bad=True, pdt="int64", sdt="int32"):
        self.dtype, self.layout, self.neox, self.rd = dtype, layout, neox, rd or d
        self.rank3 = rank3
        nb = nb or max(2, -(-n // bs) + 2)
        self.num_slots = nb * bs
        shape = (nb, bs, d) if rank3 else ((nb, bs, heads, d) if layout == "BSND" else (nb, heads, bs, d))
        self.cache = rand(rng, shape, dtype)
        self.before = self.cache.copy()
        self.max_position = 40
        self.table = make_table(self.max_position, self.rd, table_dtype)
        s = rng.permutation(self.num_slots)[:n].astype(np.int64)
        old = rng.integers(0, self.max_position, n)
        new = rng.integers(0, self.max_position, n)
        if n >= 8 and bad:
            s[1] = -1
            s[2] = self.num_slots + 5
            old[3] = self.max_position
            new[4] = -3
        if n >= 6:
            new[5] = old[5]  # identity entry
        self.slots = s.astype(np.int32 if sdt == "int32" else np.int64)
        self.old = old.astype(np.int32 if pdt == "int32" else np.int64)
        self.new = new.astype(np.int32 if pdt == "int32" else np.int64)

    def arrays(self):
        return [self.cache, self.slots, self.old, self.new, self.table, status()]

    def attrs(self):
        return {"is_neox_style": self.neox, "cache_layout": self.layout}

    def entries(self):
        """(index, slot, old, new) of the valid entries."""
        out = []
        for i, (s, o, n) in enumerate(zip(self.slots.astype(np.int64), self.old.astype(np.int64),
                                          self.new.astype(np.int64))):
            if 0 <= s < self.num_slots and 0 <= o < self.max_position and 0 <= n < self.max_position:
                out.append((i, int(s), int(o), int(n)))
        return out

    def expected(self):
        exp = self.before.copy()
        ent = self.entries()
        if not ent:
            return exp
        old = np.array([e[2] for e in ent])
        new = np.array([e[3] for e in ent])
        cd, sd, ok = delta_model(self.table, old, new, self.rd)
        for j, (_, s, _, _) in enumerate(ent):
            if not ok[j]:
                continue
            x = heads_of_slot(self.before, s, self.layout)
            heads_of_slot(exp, s, self.layout)[...] = rope_f32_model(x, cd[j][None], sd[j][None], self.rd, self.neox,
                                                                     self.dtype)
        return exp

    def run(self, soc="Ascend910B1", all_orders=False):
        return launch(OP, self.arrays(), self.attrs(), soc, all_orders=all_orders)

    def check(self, what=""):
        assert_same(self.cache, self.expected(), f"key_cache {what}")


@pytest.mark.parametrize("layout", ["BSND", "BNSD", "rank3"])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype,table_dtype", DTYPE_TABLES)
def test_dtype_table_style_layout(dtype, table_dtype, neox, layout):
    seed = DTYPE_TABLES.index((dtype, table_dtype)) * 6 + 2 * ["BSND", "BNSD", "rank3"].index(layout) + neox
    rng = np.random.default_rng(seed)
    c = Rerope(rng, 30, 3, 64, dtype=dtype, table_dtype=table_dtype, neox=neox, layout="BSND" if layout == "rank3"
               else layout, rank3=layout == "rank3", pdt=("int32", "int64")[seed % 2], sdt=("int64", "int32")[seed % 2])
    st = c.run()
    c.check(f"{dtype}/{table_dtype} {layout}")
    assert st["tiling_key"] % 10 == int(neox)


@pytest.mark.parametrize("soc", SOCS)
def test_every_soc_all_core_orders(soc):
    rng = np.random.default_rng(11)
    dtype = "float16" if soc == "Ascend310P3" else "bfloat16"
    c = Rerope(rng, cores_of(soc) + 9, 4, 128, 64, dtype=dtype, layout="BNSD" if soc == "Ascend910B1" else "BSND")
    st = c.run(soc, all_orders=True)
    c.check(soc)
    assert st["block_dim"] == cores_of(soc)
    assert max(st["ub_bytes_per_core"]) == int(st["tiling_fields"]["ubBytes"]) <= platform(soc)["ub_size"] - 1024


@pytest.mark.parametrize("d,rd,dtype", [(80, 80, "float16"), (128, 64, "bfloat16"), (256, 256, "float32"),
                                        (40, 24, "float16"), (64, 6, "float32")])
def test_head_sizes_partial_and_padded_rows(d, rd, dtype):
    rng = np.random.default_rng(d + rd)
    c = Rerope(rng, 25, 2, d, rd, dtype=dtype, layout="BNSD" if d == 40 else "BSND", neox=rd != 6)
    st = c.run("Ascend910_9391", all_orders=True)
    c.check(f"D={d} rd={rd}")
    pad = (d * np.dtype(c.cache.dtype).itemsize) % 32 or (rd * 4) % 32
    assert (st["tiling_key"] // 10000 == 1) == bool(pad)


def test_identity_and_skips():
    rng = np.random.default_rng(12)
    c = Rerope(rng, 40, 2, 64, dtype="float16", bad=False)
    c.new[:] = c.old
    c.run(all_orders=True)
    c.check("identity")
    # rerope(p -> p) leaves every element unchanged (up to the sign of zero)
    assert np.array_equal(c.cache.astype(np.float32), c.before.astype(np.float32))
    # invalid entries are skipped and nothing is read for them
    c2 = Rerope(rng, 40, 2, 64, dtype="float16", bad=False)
    c2.slots[:] = -1
    st = c2.run()
    assert st["gm_write_bytes"] == 0 and np.array_equal(c2.cache.view(np.uint16), c2.before.view(np.uint16))
    assert st["gm_read_bytes"] == c2.slots.nbytes


def test_table_row_without_inverse_is_skipped():
    rng = np.random.default_rng(13)
    c = Rerope(rng, 20, 2, 64, dtype="bfloat16", bad=False)
    c.table = c.table.copy()
    c.table[7] = 0  # cos^2 + sin^2 == 0
    c.old[:5] = 7
    c.run()
    c.check("zero table row")
    for i in range(5):
        s = int(c.slots[i])
        assert_same(heads_of_slot(c.cache, s, c.layout), heads_of_slot(c.before, s, c.layout), "skipped entry")


def test_rerope_equals_fresh_rope_at_new_position():
    # keys rotated for old, re-rotated to new: within 1 ulp of the pair magnitude of a fresh rope at new
    rng = np.random.default_rng(14)
    d, n, dtype = 64, 30, "float32"
    c = Rerope(rng, n, 1, d, dtype=dtype, rank3=True, bad=False)
    raw = rand(rng, (n, d), dtype)
    co, so = np.split(c.table[c.old].astype(np.float32), 2, axis=1)
    for i, s in enumerate(c.slots):
        c.cache.reshape(-1, d)[s] = rope_f32_model(raw[i], co[i], so[i], d, c.neox, dtype)
    c.before = c.cache.copy()
    c.run()
    cn, sn = np.split(c.table[c.new].astype(np.float32), 2, axis=1)
    fresh, _ = rope64(raw, cn, sn, d, c.neox)
    got = np.stack([c.cache.reshape(-1, d)[s] for s in c.slots]).astype(np.float64)
    np.testing.assert_allclose(got, fresh, atol=1e-5)


def test_tiling_rejects_inconsistent_inputs():
    rng = np.random.default_rng(15)
    c = Rerope(rng, 9, 2, 64, dtype="float16")
    a = c.arrays()
    bad = list(a)
    bad[3] = c.new[:5].copy()
    expect_tiling_error(OP, bad, c.attrs(), "Ascend910B1", "new_positions")
    bad = list(a)
    bad[4] = make_table(40, 66)
    expect_tiling_error(OP, bad, c.attrs(), "Ascend910B1", "rotary_dim")
    expect_tiling_error(OP, [c.cache, c.slots, c.old, c.new, make_table(40, 64, "bfloat16"), status()], c.attrs(),
                        "Ascend910B1", "cos_sin_cache")
    rng2 = np.random.default_rng(16)
    c2 = Rerope(rng2, 9, 2, 64, dtype="bfloat16")
    expect_tiling_error(OP, c2.arrays(), c2.attrs(), "Ascend310P3", "bfloat16", "Ascend310P")
    c3 = Rerope(rng2, 9, 2, 40, dtype="float16")
    expect_tiling_error(OP, c3.arrays(), c3.attrs(), "Ascend310P3", "DataCopyPad")


# ------------------------------------------------------------------------------------------- public op
@pytest.mark.parametrize("mode", ["pynative", "graph"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_public_op_sim_matches_cpu(mode, dtype):
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("rerope_cached_keys")
    rng = np.random.default_rng(17)
    c = Rerope(rng, 60, 4, 128, 64, dtype=dtype, layout="BNSD", bad=False)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.cache = Parameter(to_ms(c.before), name="key_cache")

        def construct(self, s, o, n, cs):
            mk.rerope_cached_keys(self.cache, s, o, n, cs, is_neox_style=True, cache_layout="BNSD")
            return s

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                args = (Tensor(c.slots), Tensor(c.old), Tensor(c.new), to_ms(c.table))
                net(*args) if mode == "graph" else net.construct(*args)
                results[backend] = to_np(net.cache)
                if backend == "sim":
                    assert_last_launch(OP, numEntries=60)
        finally:
            mk.set_backend("cpu")
    assert_same(results["sim"], c.expected(), "sim key_cache")
    # the cpu backend evaluates the delta in fp64, the kernel in double-float: both round the same value
    # once to fp32 (they could differ only when it lies within ~2^-40 of a rounding boundary)
    assert_same(results["sim"], results["cpu"], "sim vs cpu key_cache")
