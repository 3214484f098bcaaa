"""rope_reshape_and_cache and rope_reshape_and_cache_merged: the AscendC kernels + op_host tiling run
through the emulation ("sim").

Bit for bit against the numpy fp32 model of the rotation (tests/_rope_sim_ref.py) and a float64 reference
(issue tolerances), for every dtype x table dtype x style x layout, every target SoC and core order,
uneven token splits, partial rotary, head sizes 64/80/128/256, GQA, rows that need DataCopyPad (and their
rejection on Ascend310P), tokens that do not fit UB, positions 0 / max-1 / out of range, slot -1 and
out-of-range slots, T' > T, the data-movement minimum; then the public MindSpore ops with
set_backend("sim") against set_backend("cpu") in PyNative and GRAPH_MODE.
"""
import numpy as np
import pytest

from _copy_sim_ref import (SOCS, assert_last_launch, cores_of, expect_tiling_error, launch, platform,
                           public_backend_or_skip, reset_last_launch)
from _rope_sim_ref import (assert_same, make_table, positions_with_edges, rand, rotate_model, slots_with_edges,
                           write_rows)
from rope_ref import assert_close_rope, rope64, split

OP = "MskvRopeReshapeAndCache"
OP_MERGED = "MskvRopeReshapeAndCacheMerged"
DTYPE_TABLES = [("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"),
                ("float32", "float32")]
DCODE = {"float16": 1, "bfloat16": 2, "float32": 3}


class Gqa:
    """One call's inputs (numpy) and its expected outputs / caches."""

    def __init__(self, rng, rows, tokens, hq, hk, d, rd=None, dtype="float16", table_dtype="float32", layout="BSND",
                 bs=16, nb=None, pdt="int64", sdt="int32", max_position=64, bad=True, merged=False, flat=False,
                 neox=True):
        self.rd = rd or d
        self.dtype, self.layout, self.neox, self.merged = dtype, layout, neox, merged
        self.q = rand(rng, (rows, hq * d) if flat else (rows, hq, d), dtype)
        self.k = rand(rng, (rows, hk, d), dtype)
        self.v = rand(rng, (rows, hk * d) if flat else (rows, hk, d), dtype)
        self.table = make_table(max_position, self.rd, table_dtype)
        self.max_position = max_position
        self.positions = positions_with_edges(rng, rows, max_position, pdt, bad=bad)
        nb = nb or max(2, -(-tokens // bs) + 2)
        self.slots = slots_with_edges(rng, tokens, nb * bs, sdt, out_of_range=bad)
        shape = (nb, bs, hk, d) if layout == "BSND" else (nb, hk, bs, d)
        self.kc, self.vc = rand(rng, shape, dtype), rand(rng, shape, dtype)
        self.q_out, self.k_out = np.zeros_like(self.q), np.zeros_like(self.k)

    def arrays(self):
        caches = [np.stack([self.kc, self.vc])] if self.merged else [self.kc, self.vc]
        return [self.positions, self.q, self.k, self.v, self.table, *caches, self.slots, self.q_out, self.k_out]

    def attrs(self):
        return {"is_neox_style": self.neox, "cache_layout": self.layout}

    def valid(self):
        p = np.asarray(self.positions, dtype=np.int64)
        return (p >= 0) & (p < self.max_position)

    def expected(self):
        valid = self.valid()
        rows = np.where(valid, np.asarray(self.positions, dtype=np.int64), 0)
        q = rotate_model(self.q.reshape(self.q.shape[0], -1, self.k.shape[2]), self.table, rows, self.rd, self.neox,
                         self.dtype)
        k = rotate_model(self.k, self.table, rows, self.rd, self.neox, self.dtype)
        q[~valid], k[~valid] = 0, 0
        t = len(self.slots)
        kc = write_rows(self.kc, k[:t], self.slots, valid[:t], self.layout)
        vc = write_rows(self.vc, self.v[:t], self.slots, valid[:t], self.layout)
        return q.reshape(self.q.shape), k, kc, vc

    def run(self, soc="Ascend910B1", all_orders=False, **kw):
        arrays = self.arrays()
        st = launch(OP_MERGED if self.merged else OP, arrays, self.attrs(), soc, all_orders=all_orders, **kw)
        if self.merged:
            self.kc_out, self.vc_out = arrays[5][0], arrays[5][1]
        else:
            self.kc_out, self.vc_out = arrays[5], arrays[6]
        return st

    def check(self, what=""):
        q, k, kc, vc = self.expected()
        assert_same(self.q_out, q, f"query_out {what}")
        assert_same(self.k_out, k, f"key_out {what}")
        assert_same(self.kc_out, kc, f"key_cache {what}")
        assert_same(self.vc_out, vc, f"value_cache {what}")
        # the fp32 model itself against float64 (issue tolerances), valid rows only
        valid = self.valid()
        c, s = split(self.table[np.asarray(self.positions, dtype=np.int64)[valid]].astype(np.float32), self.rd)
        ref, scale = rope64(self.k[valid], c[:, None, :], s[:, None, :], self.rd, self.neox)
        assert_close_rope(self.k_out[valid], ref, scale, self.dtype, f"key_out vs float64 {what}")


def _min_gm_bytes(c):
    """Bytes an ideal kernel moves: q, k read and written for all rows, v read and both caches written for
    the cached tokens, one table row per row, the positions and the slots read."""
    esz = c.q.dtype.itemsize
    rows = c.q.shape[0]
    hq_d, hk_d = c.q[0].size, c.k[0].size
    valid = c.valid()
    s = np.asarray(c.slots, dtype=np.int64)
    nslots = np.prod(c.kc.shape[:1]) * (c.kc.shape[1] if c.layout == "BSND" else c.kc.shape[2])
    written = int(np.count_nonzero((s >= 0) & (s < nslots) & valid[: len(s)]))
    b = 2 * rows * (hq_d + hk_d) * esz + 3 * written * hk_d * esz + rows * c.table[0].nbytes
    return b + c.positions.nbytes + c.slots[valid[: len(s)]].nbytes


# ------------------------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype,table_dtype", DTYPE_TABLES)
def test_dtype_table_style_layout(dtype, table_dtype, neox, layout):
    seed = DTYPE_TABLES.index((dtype, table_dtype)) * 4 + 2 * neox + (layout == "BNSD")
    rng = np.random.default_rng(seed)
    c = Gqa(rng, 11, 9, 4, 2, 64, dtype=dtype, table_dtype=table_dtype, layout=layout, neox=neox,
            pdt=("int32", "int64")[seed % 2], sdt=("int64", "int32")[seed // 2 % 2], flat=seed % 3 == 0)
    st = c.run()
    c.check(f"{dtype}/{table_dtype} {layout} neox={neox}")
    assert st["tiling_key"] == ((layout == "BNSD") * 1000 + DCODE[dtype] * 100 + (table_dtype != "float32") * 10
                                + int(neox))


@pytest.mark.parametrize("soc", SOCS)
def test_every_soc_all_core_orders(soc):
    rng = np.random.default_rng(7)
    rows = cores_of(soc) + 1  # one core takes two rows, the others one
    dtype = "float16" if soc == "Ascend310P3" else "bfloat16"
    c = Gqa(rng, rows, rows - 2, 4, 2, 128, 64, dtype=dtype, layout="BNSD" if soc == "Ascend910B3" else "BSND",
            neox=soc != "Ascend910_9391")
    st = c.run(soc, all_orders=True)
    c.check(soc)
    assert st["block_dim"] == st["cores_used"] == cores_of(soc)


@pytest.mark.parametrize("rows", [1, 7, 49, 1000])
def test_token_counts_uneven_split(rows):
    soc = "Ascend910B3"  # 40 cores: none of these counts divides evenly
    rng = np.random.default_rng(rows)
    c = Gqa(rng, rows, max(1, rows - 3), 2, 1, 32, dtype="float16", bs=64)
    st = c.run(soc)
    c.check(f"T'={rows}")
    f = st["tiling_fields"]
    former, flen, tlen = int(f["formerNum"]), int(f["formerLen"]), int(f["tailLen"])
    assert st["block_dim"] == min(rows, cores_of(soc))
    assert former * flen + (st["block_dim"] - former) * tlen == rows and flen - tlen in (0, 1)


@pytest.mark.parametrize("d,rd,dtype,neox,layout", [
    (64, 64, "bfloat16", False, "BSND"), (80, 80, "float16", True, "BNSD"), (80, 40, "float32", False, "BSND"),
    (128, 128, "float16", True, "BSND"), (128, 64, "bfloat16", True, "BNSD"), (256, 256, "float32", True, "BNSD"),
    (256, 128, "float16", False, "BSND")])
def test_head_sizes_partial_rotary_gqa(d, rd, dtype, neox, layout):
    rng = np.random.default_rng(d + rd)
    c = Gqa(rng, 13, 10, 8, 2, d, rd, dtype=dtype, neox=neox, layout=layout, table_dtype="float32")
    c.run("Ascend910B1")
    c.check(f"D={d} rd={rd}")
    if rd < d:  # the pass-through columns are the input's bits
        assert_same(c.q_out[c.valid()][..., rd:], c.q[c.valid()][..., rd:], "pass-through columns")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pass_through_keeps_non_finite_bits():
    rng = np.random.default_rng(3)
    c = Gqa(rng, 9, 7, 2, 2, 64, 32, dtype="bfloat16", bad=False)
    c.q[:, :, 40] = np.inf
    c.q[:, :, 41] = np.nan
    c.k[:, :, 63] = -np.inf
    c.run()
    c.check("non-finite pass-through")


@pytest.mark.parametrize("d,rd,dtype,table_dtype", [(40, 24, "float16", "float32"), (24, 24, "bfloat16", "bfloat16"),
                                                    (64, 6, "float32", "float32"), (36, 36, "float32", "float32")])
def test_unaligned_rows_use_datacopypad(d, rd, dtype, table_dtype):
    rng = np.random.default_rng(d)
    c = Gqa(rng, 21, 17, 4, 2, d, rd, dtype=dtype, table_dtype=table_dtype, layout="BNSD" if d == 40 else "BSND",
            neox=rd != 6)
    st = c.run("Ascend910_9391", all_orders=True)
    c.check(f"D={d} rd={rd}")
    assert st["tiling_key"] // 10000 == 1
    assert sum(st["datacopy_pad_calls_per_core"]) > 0


@pytest.mark.parametrize("d,rd,words", [(40, 40, ("head rows", "80 bytes")),
                                        (64, 6, ("cos_sin_cache rows", "24 bytes"))])
def test_unaligned_rows_rejected_on_310p(d, rd, words):
    rng = np.random.default_rng(1)
    c = Gqa(rng, 9, 7, 2, 2, d, rd, dtype="float16", table_dtype="float32")
    expect_tiling_error(OP, c.arrays(), c.attrs(), "Ascend310P3", "DataCopyPad", "Ascend310P", *words)


def test_bfloat16_rejected_on_310p():
    rng = np.random.default_rng(2)
    c = Gqa(rng, 9, 7, 2, 2, 64, dtype="bfloat16")
    expect_tiling_error(OP, c.arrays(), c.attrs(), "Ascend310P3", "bfloat16", "Ascend310P")


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_tokens_larger_than_ub_go_by_head_groups(soc):
    # fp32 query of 48 heads x 512: 96 KiB a token in, as much out and twice in fp32 work: head groups
    rng = np.random.default_rng(4)
    c = Gqa(rng, 5, 4, 48, 4, 512, 128, dtype="float32", layout="BNSD", bs=4)
    st = c.run(soc, all_orders=True)
    c.check("head groups")
    f = st["tiling_fields"]
    assert int(f["batch"]) == 1 and int(f["headsPerChunk"]) < 48
    assert max(st["ub_bytes_per_core"]) == int(f["ubBytes"]) <= platform(soc)["ub_size"] - 1024


def test_positions_slots_and_padding_rows():
    rng = np.random.default_rng(5)
    c = Gqa(rng, 40, 30, 4, 2, 64, 32, dtype="bfloat16", bs=8, nb=6, neox=False)
    p = np.asarray(c.positions, dtype=np.int64)
    p[[7, 9, 11]] = [-(1 << 40), c.max_position, c.max_position - 1]
    c.positions = p
    s = np.asarray(c.slots, dtype=np.int64)
    s[[10, 12]] = [-(1 << 35), 6 * 8]  # far negative, first slot past the cache
    s[14] = 0
    c.slots = s.astype(np.int64)
    c.run(all_orders=True)
    c.check("edges")
    assert not c.q_out[[2, 4, 7, 9]].any() and not c.k_out[[2, 4, 7, 9]].any()  # invalid positions: zero rows
    assert c.q_out[30:].any()  # rows T..T'-1 are rotated (not cached)


def test_all_padding_writes_no_cache_and_reads_no_value():
    rng = np.random.default_rng(6)
    c = Gqa(rng, 20, 20, 2, 2, 64, dtype="float16", bad=False)
    c.slots = np.full(20, -1, np.int32)
    st = c.run()
    c.check("all padding")
    assert st["gm_write_bytes"] == c.q_out.nbytes + c.k_out.nbytes
    assert st["gm_read_bytes"] == (c.q.nbytes + c.k.nbytes + 20 * c.table[0].nbytes + c.positions.nbytes
                                   + c.slots.nbytes)


def test_zero_rows_is_a_noop_launch():
    rng = np.random.default_rng(8)
    c = Gqa(rng, 0, 0, 2, 2, 64, dtype="float32")
    kc0 = c.kc.copy()
    st = c.run(all_orders=True)
    assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0
    assert_same(c.kc_out, kc0, "key_cache")


@pytest.mark.parametrize("soc,layout", [("Ascend910B1", "BSND"), ("Ascend910B3", "BNSD"), ("Ascend310P3", "BSND")])
def test_data_movement_minimum_and_all_cores_busy(soc, layout):
    # Llama-3-like rows (4 query heads per kv head, D = 128), T' >= cores
    rng = np.random.default_rng(9)
    dtype = "float16" if soc == "Ascend310P3" else "bfloat16"
    c = Gqa(rng, 2 * cores_of(soc) + 5, 2 * cores_of(soc), 8, 2, 128, dtype=dtype, layout=layout, bs=32)
    st = c.run(soc)
    c.check(soc)
    total = st["gm_read_bytes"] + st["gm_write_bytes"]
    minimum = _min_gm_bytes(c)
    assert minimum <= total <= 1.05 * minimum, (total, minimum)
    assert st["cores_used"] == st["block_dim"] == cores_of(soc)
    # the tiling's UB plan is exactly what the kernel allocates, within the SoC's UB minus the reserve
    assert max(st["ub_bytes_per_core"]) == int(st["tiling_fields"]["ubBytes"]) <= platform(soc)["ub_size"] - 1024


def test_tiling_rejects_inconsistent_inputs():
    rng = np.random.default_rng(10)
    c = Gqa(rng, 9, 7, 4, 2, 64, dtype="float16")

    def args(**kw):
        a = c.arrays()
        for i, name in enumerate(["positions", "query", "key", "value", "table", "kc", "vc", "slots"]):
            if name in kw:
                a[i] = kw[name]
        return a

    attrs = c.attrs()
    expect_tiling_error(OP, args(table=make_table(64, 66)), attrs, "Ascend910B1", "rotary_dim")
    expect_tiling_error(OP, args(table=make_table(64, 64, "bfloat16")), attrs, "Ascend910B1", "cos_sin_cache",
                        "bfloat16")
    expect_tiling_error(OP, args(key=rand(rng, (9, 3, 64), "float16")), attrs, "Ascend910B1", "num_kv_heads")
    expect_tiling_error(OP, args(slots=np.zeros(10, np.int32)), attrs, "Ascend910B1", "slot_mapping", "T <= 9")
    expect_tiling_error(OP, args(positions=np.zeros(8, np.int64)), attrs, "Ascend910B1", "query", "8 rows")
    # cache_layout is an Int attribute (AttrSpec.codes): an undefined code is a tiling error, a name that is
    # no layout is refused before the emulation
    expect_tiling_error(OP, c.arrays(), {"is_neox_style": True, "cache_layout": 3}, "Ascend910B1",
                        "cache_layout: expected 0 (BSND), 1 (BNSD) or 2 (NZ), got 3")
    with pytest.raises(ValueError, match="attribute 'cache_layout': expected one of"):
        expect_tiling_error(OP, c.arrays(), {"is_neox_style": True, "cache_layout": "NHD"}, "Ascend910B1", "x")


def test_seeded_random_sample():
    rng = np.random.default_rng(20240612)
    for _ in range(10):
        soc = SOCS[rng.integers(len(SOCS))]
        dtype, table_dtype = DTYPE_TABLES[rng.integers(len(DTYPE_TABLES))]
        hk = int(rng.integers(1, 4))
        d = int(rng.choice([16, 32, 48, 64, 96, 128]))
        rd = int(rng.choice([x for x in (2, 8, 16, 32, 48, 64, 96, 128) if x <= d]))
        rows = int(rng.integers(1, 120))
        c = Gqa(rng, rows, int(rng.integers(0, rows + 1)), hk * int(rng.integers(1, 5)), hk, d, rd, dtype=dtype,
                table_dtype=table_dtype, layout=("BSND", "BNSD")[rng.integers(2)], bs=int(rng.choice([1, 5, 16])),
                neox=bool(rng.integers(2)), merged=bool(rng.integers(2)), pdt=("int32", "int64")[rng.integers(2)])
        esz = np.dtype(c.q.dtype).itemsize
        pad = (d * esz) % 32 or (rd * c.table.dtype.itemsize) % 32
        if soc == "Ascend310P3" and (dtype == "bfloat16" or pad):
            expect_tiling_error(OP_MERGED if c.merged else OP, c.arrays(), c.attrs(), soc, "Ascend310P")
            continue
        c.run(soc)
        c.check(f"sample {soc} {dtype}/{table_dtype} D={d} rd={rd}")


# ------------------------------------------------------------------------------------------- merged cache
@pytest.mark.parametrize("dtype,layout,neox", [("float16", "BSND", True), ("bfloat16", "BNSD", False),
                                               ("float32", "BNSD", True)])
def test_merged_cache(dtype, layout, neox):
    rng = np.random.default_rng(11)
    c = Gqa(rng, 30, 25, 8, 4, 64, 32, dtype=dtype, layout=layout, neox=neox, merged=True)
    st = c.run("Ascend910B1", all_orders=True)
    c.check("merged")
    assert st["tiling_key"] % 10 == int(neox)


# ------------------------------------------------------------------------------------------- public ops
@pytest.mark.parametrize("mode", ["pynative", "graph"])
@pytest.mark.parametrize("merged", [False, True], ids=["separate", "merged"])
def test_public_op_sim_matches_cpu(mode, merged):
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    name = "rope_reshape_and_cache_merged" if merged else "rope_reshape_and_cache"
    mk = public_backend_or_skip(name)
    rng = np.random.default_rng(12)
    layout = "BNSD" if merged else "BSND"
    c = Gqa(rng, 21, 17, 8, 2, 128, 64, dtype="bfloat16", layout=layout, neox=not merged, bad=False, merged=merged)
    fn = getattr(mk, name)
    caches = [np.stack([c.kc, c.vc])] if merged else [c.kc, c.vc]

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.c0 = Parameter(to_ms(caches[0]), name="cache0")
            self.c1 = Parameter(to_ms(caches[-1]), name="cache1")

        def construct(self, p, q, k, v, cs, s):
            if merged:
                return fn(p, q, k, v, cs, self.c0, s, is_neox_style=c.neox, cache_layout=layout)
            return fn(p, q, k, v, cs, self.c0, self.c1, s, is_neox_style=c.neox, cache_layout=layout)

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                args = (Tensor(c.positions), to_ms(c.q), to_ms(c.k), to_ms(c.v), to_ms(c.table), Tensor(c.slots))
                if mode == "graph":
                    qo, ko = net(*args)
                else:
                    qo, ko = net.construct(*args)
                caches = [net.c0] if merged else [net.c0, net.c1]
                results[backend] = [to_np(qo), to_np(ko)] + [to_np(x) for x in caches]
                if backend == "sim":
                    assert_last_launch(OP_MERGED if merged else OP, numRows=21, numWrite=17)
        finally:
            mk.set_backend("cpu")
    q, k, kc, vc = c.expected()
    expect = [q, k] + ([np.stack([kc, vc])] if merged else [kc, vc])
    for backend, got in results.items():
        for g, e, what in zip(got, expect, ["query_out", "key_out", "cache0", "cache1"]):
            assert_same(g, e, f"{backend} {what}")
