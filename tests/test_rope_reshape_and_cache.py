"""rope_reshape_and_cache and rope_reshape_and_cache_merged against float64 / fp32-model numpy
references: values, cache writes, every MindSpore mode, index edge cases, bad inputs."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

import ms_kvcache
from conftest import MS_DTYPES, NP_DTYPES, assert_bits_equal, ms_mode, to_ms, to_np
from rope_ref import assert_close_rope, available_isas, reset_isa, rope64, rope_f32_model, set_isa

pytestmark = pytest.mark.usefixtures("cpu_backend")

FLOATS = ("float16", "bfloat16", "float32")


def make_table(max_position, rotary_dim, dtype="float32", base=10000.0):
    """cos | sin table computed in float64 (independent of build_cos_sin_cache), rounded to dtype."""
    inv = base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    ang = np.outer(np.arange(max_position, dtype=np.float64), inv)
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32).astype(NP_DTYPES[dtype])


def rand(rng, shape, dtype):
    # |x| <= 1 for fp32 (the 1e-5 absolute contract), normal data for fp16/bf16
    if dtype == "float32":
        return rng.uniform(-1, 1, size=shape).astype(np.float32)
    return rng.standard_normal(size=shape).astype(np.float32).astype(NP_DTYPES[dtype])


class Case:
    """Random inputs for one call, plus the expected outputs and caches."""

    def __init__(self, rng, dtype, head_size=128, rotary_dim=None, num_heads=4, num_kv_heads=2, rows=9, tokens=7,
                 num_blocks=5, block_size=4, layout="BSND", neox=True, table_dtype="float32", max_position=64,
                 pos_dtype=np.int64, slot_dtype=np.int32, positions=None, slots=None):
        self.dtype, self.layout, self.neox = dtype, layout, neox
        self.hd, self.rd = head_size, rotary_dim or head_size
        self.hk, self.hq = num_kv_heads, num_heads
        self.q = rand(rng, (rows, num_heads, head_size), dtype)
        self.k = rand(rng, (rows, num_kv_heads, head_size), dtype)
        self.v = rand(rng, (rows, num_kv_heads, head_size), dtype)
        self.table = make_table(max_position, self.rd, table_dtype)
        if positions is None:
            positions = rng.integers(0, max_position, size=rows)
            positions[0], positions[-1] = 0, max_position - 1
        self.positions = np.asarray(positions, dtype=pos_dtype)
        nslots = num_blocks * block_size
        if slots is None:
            slots = rng.permutation(nslots - 1)[:tokens]
            if tokens > 2:
                slots[1] = -1                  # padding token
                slots[2] = nslots - 1          # last slot of the last block
        self.slots = np.asarray(slots, dtype=slot_dtype)
        shape = (num_blocks, block_size, num_kv_heads, head_size) if layout == "BSND" else \
                (num_blocks, num_kv_heads, block_size, head_size)
        self.key_cache = rand(rng, shape, dtype)
        self.value_cache = rand(rng, shape, dtype)
        self.block_size = block_size

    # ---- expectations
    def cos_sin(self):
        cs = self.table[self.positions].astype(np.float32)
        c, s = cs[:, None, : self.rd // 2], cs[:, None, self.rd // 2:]
        return c, s

    def expected_model(self, x):
        c, s = self.cos_sin()
        return rope_f32_model(x, c, s, self.rd, self.neox, self.dtype)

    def check_rotated(self, x, out, name):
        c, s = self.cos_sin()
        ref, scale = rope64(x, c, s, self.rd, self.neox)
        assert_close_rope(to_np(out) if not isinstance(out, np.ndarray) else out, ref, scale, self.dtype, name)
        assert_bits_equal(out if isinstance(out, np.ndarray) else to_np(out), self.expected_model(x), name + " (fp32 model)")

    def expected_caches(self):
        kc, vc = self.key_cache.copy(), self.value_cache.copy()
        k_rot = self.expected_model(self.k)
        for t, slot in enumerate(self.slots):
            if slot < 0:
                continue
            b, o = divmod(int(slot), self.block_size)
            if self.layout == "BSND":
                kc[b, o], vc[b, o] = k_rot[t], self.v[t]
            else:
                kc[b, :, o], vc[b, :, o] = k_rot[t], self.v[t]
        return kc, vc

    def tensors(self):
        return (Tensor(self.positions), to_ms(self.q), to_ms(self.k), to_ms(self.v), to_ms(self.table),
                to_ms(self.key_cache), to_ms(self.value_cache), Tensor(self.slots))


def run_case(case, **kw):
    p, q, k, v, cs, kc, vc, s = case.tensors()
    qo, ko = ms_kvcache.rope_reshape_and_cache(p, q, k, v, cs, kc, vc, s, is_neox_style=case.neox,
                                               cache_layout=case.layout, **kw)
    return qo, ko, kc, vc, (q, k)


def check_case(case, qo, ko, kc, vc, inputs=None):
    case.check_rotated(case.q, qo, "query_out")
    case.check_rotated(case.k, ko, "key_out")
    ekc, evc = case.expected_caches()
    assert_bits_equal(to_np(kc), ekc, "key_cache")
    assert_bits_equal(to_np(vc), evc, "value_cache")
    if inputs is not None:  # query / key are not modified
        assert_bits_equal(to_np(inputs[0]), case.q, "query input")
        assert_bits_equal(to_np(inputs[1]), case.k, "key input")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("head_size,rotary_dim", [(64, 64), (80, 80), (128, 128), (128, 64), (256, 256)])
def test_values(rng, dtype, neox, head_size, rotary_dim):
    layout = "BSND" if head_size != 80 else "BNSD"
    case = Case(rng, dtype, head_size, rotary_dim, num_heads=4, num_kv_heads=2, rows=9, tokens=7, layout=layout,
                neox=neox)
    qo, ko, kc, vc, inputs = run_case(case)
    assert qo.shape == (9, 4, head_size) and ko.shape == (9, 2, head_size)
    assert qo.dtype == MS_DTYPES[dtype] and ko.dtype == MS_DTYPES[dtype]
    check_case(case, qo, ko, kc, vc, inputs)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_table_in_data_dtype(rng, dtype):
    case = Case(rng, dtype, 128, 64, table_dtype=dtype, neox=True)
    check_case(case, *run_case(case)[:4])


@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
def test_large_batch_parallel_and_int32_positions(rng, layout):
    # enough bytes to use both threads; GQA 8:1; int32 positions, int64 slots; T' > T
    case = Case(rng, "bfloat16", 128, 128, num_heads=16, num_kv_heads=2, rows=300, tokens=260, num_blocks=40,
                block_size=16, layout=layout, pos_dtype=np.int32, slot_dtype=np.int64, max_position=4096)
    check_case(case, *run_case(case)[:4])


@pytest.mark.parametrize("dtype,layout,neox,rotary_dim", [("bfloat16", "BSND", True, 128), ("float16", "BNSD", False, 64)],
                         ids=["bf16-BSND-neox", "fp16-BNSD-gptj-partial"])
def test_streaming_stores_path(rng, dtype, layout, neox, rotary_dim):
    """Calls moving >= 8 MiB (MS_KVCACHE_STREAM_BYTES) build each token's rows in a buffer and write
    query_out, key_out and the cache rows with non-temporal stores: exact results, padding slots and
    the last slot included, nothing else in the caches changed."""
    case = Case(rng, dtype, 128, rotary_dim, num_heads=8, num_kv_heads=2, rows=1800, tokens=1750, num_blocks=116,
                block_size=16, layout=layout, neox=neox, max_position=4096)
    assert 1800 * 2 * (8 + 2) * 128 * 2 + 1750 * 2 * 2 * 128 * 2 > 8 << 20
    check_case(case, *run_case(case))


def test_flattened_views(rng):
    case = Case(rng, "float16", 64, 32, num_heads=6, num_kv_heads=3, neox=False)
    p, q, k, v, cs, kc, vc, s = case.tensors()
    qo, ko = ms_kvcache.rope_reshape_and_cache(p, q.reshape(9, 6 * 64), k.reshape(9, 3 * 64), v.reshape(9, 3 * 64),
                                               cs, kc, vc, s, is_neox_style=False)
    assert qo.shape == (9, 384) and ko.shape == (9, 192)
    check_case(case, qo.reshape(9, 6, 64), ko.reshape(9, 3, 64), kc, vc)


def test_no_tokens_written_and_zero_rows(rng):
    case = Case(rng, "bfloat16", 64, tokens=0, slots=np.zeros((0,), np.int32))
    check_case(case, *run_case(case)[:4])                      # T = 0: rotate only, caches untouched
    empty = Case(rng, "float32", 64, rows=0, tokens=0, slots=np.zeros((0,), np.int32),
                 positions=np.zeros((0,), np.int64))
    qo, ko, kc, vc, _ = run_case(empty)
    assert qo.shape == (0, 4, 64) and ko.shape == (0, 2, 64)
    assert_bits_equal(to_np(kc), empty.key_cache, "key_cache")


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_isa_paths_bit_identical(rng, neox):
    """The portable, AVX2/F16C and AVX-512 kernels give the same bits (every dtype; head_size 80 with
    rotary_dim 74 leaves 16-, 8-lane and scalar tails in both pairings), also for inf, NaN (payload
    included), fp32 subnormals and values that overflow fp16."""
    isas = available_isas()
    if len(isas) < 2:
        pytest.skip("only the portable path runs on this CPU")
    specials = np.array([np.inf, -np.inf, np.nan, 1e-40, -3e-39, 7e4, -1e5, 0.0, -0.0, 6.1e-5], np.float32)
    try:
        for dtype in FLOATS:
            case = Case(rng, dtype, 80, 74, rows=40, tokens=30, num_blocks=10, block_size=4, neox=neox)
            flat = case.q.reshape(-1)
            idx = rng.choice(flat.size, size=200, replace=False)
            with np.errstate(over="ignore"):  # 7e4 and 1e5 are inf in fp16, on purpose
                flat[idx] = np.resize(specials, idx.size).astype(NP_DTYPES[dtype])
            outs = []
            for isa in isas:
                set_isa(isa)
                qo, ko, kc, vc, _ = run_case(case)
                outs.append([to_np(x) for x in (qo, ko, kc, vc)])
            for isa, other in zip(isas[1:], outs[1:]):
                for a, b, n in zip(outs[0], other, ("query_out", "key_out", "key_cache", "value_cache")):
                    assert_bits_equal(a, b, f"{dtype} {n}: portable vs path {isa}")
            assert_bits_equal(outs[-1][1], case.expected_model(case.k), "key_out (fp32 model)")
            ekc, evc = case.expected_caches()
            assert_bits_equal(outs[-1][2], ekc, "key_cache")
    finally:
        reset_isa()


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_isa_paths_bit_identical_nan_inf_pairs(rng, neox, dtype):
    """Every ordered pair (x, y) of {+NaN, -NaN, +inf, -inf, +0, -0, 1.5, -2} in a rotated pair, at
    position 0 (sin = 0: inf * 0 makes the second product NaN too) and at other positions: all ISA
    paths give the portable path's bits, NaN signs included (the vector paths once returned the other
    product's NaN when both were NaN), and the non-NaN outputs equal the fp32 model."""
    isas = available_isas()
    if len(isas) < 2:
        pytest.skip("only the portable path runs on this CPU")
    neg_nan = np.array([0xffc00000], np.uint32).view(np.float32)[0]
    vals = np.array([np.nan, neg_nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0], np.float32)
    xs, ys = np.meshgrid(vals, vals, indexing="ij")
    xs, ys = xs.reshape(-1), ys.reshape(-1)                  # 64 ordered pairs
    hd = rd = 32                                             # 16 pairs per head: 4 heads hold the 64
    head = np.zeros((4, hd), np.float32)
    half = rd // 2
    for n in range(64):
        h, i = divmod(n, 16)
        if neox:
            head[h, i], head[h, half + i] = xs[n], ys[n]
        else:
            head[h, 2 * i], head[h, 2 * i + 1] = xs[n], ys[n]
    rows = 4
    positions = np.array([0, 1, 17, 0], np.int64)
    with np.errstate(invalid="ignore"):
        q = np.broadcast_to(head, (rows, 4, hd)).astype(NP_DTYPES[dtype])
    case = Case(rng, dtype, hd, rd, num_heads=4, num_kv_heads=4, rows=rows, tokens=rows, num_blocks=2, block_size=4,
                neox=neox, positions=positions, slots=np.arange(rows, dtype=np.int32))
    case.q, case.k = q.copy(), q[:, ::-1].copy()
    try:
        outs = []
        for isa in isas:
            set_isa(isa)
            qo, ko, kc, vc, _ = run_case(case)
            outs.append([to_np(x) for x in (qo, ko, kc)])
    finally:
        reset_isa()
    for isa, other in zip(isas[1:], outs[1:]):
        for a, b, n in zip(outs[0], other, ("query_out", "key_out", "key_cache")):
            assert_bits_equal(a, b, f"{dtype} {n}: portable vs path {isa}")
    with np.errstate(invalid="ignore", over="ignore"):   # inf * 0, inf - inf: NaN on purpose
        model = case.expected_model(case.q)
    got, exp = outs[0][0].astype(np.float32), model.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(exp))
    ok = ~np.isnan(exp)
    assert_bits_equal(outs[0][0][ok], model[ok], "non-NaN outputs (fp32 model)")


# ------------------------------------------------------------------ merged cache

@pytest.mark.parametrize("dtype,layout,neox", [("bfloat16", "BSND", True), ("float16", "BNSD", False),
                                               ("float32", "BSND", True)])
def test_merged(rng, dtype, layout, neox):
    case = Case(rng, dtype, 128, 64, layout=layout, neox=neox)
    p, q, k, v, cs, _, _, s = case.tensors()
    kv = to_ms(np.stack([case.key_cache, case.value_cache]))
    qo, ko = ms_kvcache.rope_reshape_and_cache_merged(p, q, k, v, cs, kv, s, is_neox_style=neox, cache_layout=layout)
    case.check_rotated(case.q, qo, "query_out")
    case.check_rotated(case.k, ko, "key_out")
    ekc, evc = case.expected_caches()
    assert_bits_equal(to_np(kv), np.stack([ekc, evc]), "kv_cache")


# ------------------------------------------------------------------ graph mode and @ms.jit

class RopeCell(nn.Cell):
    def __init__(self, key_cache, value_cache, neox, layout):
        super().__init__()
        self.key_cache = Parameter(key_cache, name="key_cache")
        self.value_cache = Parameter(value_cache, name="value_cache")
        self.neox, self.layout = neox, layout

    def construct(self, positions, query, key, value, cos_sin_cache, slot_mapping):
        qo, ko = ms_kvcache.rope_reshape_and_cache(positions, query, key, value, cos_sin_cache, self.key_cache,
                                                   self.value_cache, slot_mapping, is_neox_style=self.neox,
                                                   cache_layout=self.layout)
        # read the cache after the write in the same graph: must see the new rows (cast: the CPU
        # backend has no bf16 TensorMove; fp16/bf16 -> fp32 is exact)
        return qo, ko, ops.cast(self.key_cache, ms.float32), ops.cast(self.value_cache, ms.float32)


class MergedCell(nn.Cell):
    def __init__(self, kv_cache):
        super().__init__()
        self.kv_cache = Parameter(kv_cache, name="kv_cache")

    def construct(self, positions, query, key, value, cos_sin_cache, slot_mapping):
        ms_kvcache.rope_reshape_and_cache_merged(positions, query, key, value, cos_sin_cache, self.kv_cache,
                                                 slot_mapping)   # outputs unused: the write must still happen
        return ops.cast(self.kv_cache, ms.float32)


@pytest.mark.parametrize("mode", ["graph", "jit"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_graph_modes(rng, mode, dtype):
    case = Case(rng, dtype, 128, 64, layout="BNSD", neox=(dtype == "float32"))
    p, q, k, v, cs, kc, vc, s = case.tensors()
    with ms_mode(mode):
        cell = RopeCell(kc, vc, case.neox, case.layout)
        fn = cell if mode == "graph" else ms.jit(cell.construct)
        qo, ko, kc_read, vc_read = fn(p, q, k, v, cs, s)
        ekc, evc = case.expected_caches()
        case.check_rotated(case.q, qo, "query_out")
        case.check_rotated(case.k, ko, "key_out")
        assert_bits_equal(to_np(kc_read), ekc.astype(np.float32), "key_cache read in graph")
        assert_bits_equal(to_np(vc_read), evc.astype(np.float32), "value_cache read in graph")
        assert_bits_equal(to_np(cell.key_cache), ekc, "key_cache parameter")
        assert_bits_equal(to_np(cell.value_cache), evc, "value_cache parameter")


@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
def test_graph_repeated_slots_last_token_wins(rng, layout):
    """Graph mode cannot reject a repeated slot: on a call split over threads (> 256 KiB moved) the slot
    ends with the LAST token's key and value rows, as a sequential loop (and reshape_and_cache) does;
    the rotated outputs are unaffected."""
    case = Case(rng, "bfloat16", 128, 128, num_heads=16, num_kv_heads=2, rows=300, tokens=260, num_blocks=40,
                block_size=16, layout=layout, max_position=4096)
    valid = np.nonzero(case.slots >= 0)[0]
    src = rng.choice(valid, size=40, replace=False)
    dst = rng.choice(np.setdiff1d(np.arange(260), src), size=40, replace=False)
    case.slots[dst] = case.slots[src]       # 40 slots written twice, in either order
    assert len(np.unique(case.slots[case.slots >= 0])) < (case.slots >= 0).sum()
    p, q, k, v, cs, kc, vc, s = case.tensors()
    with ms_mode("graph"):
        cell = RopeCell(kc, vc, True, layout)
        qo, ko, _, _ = cell(p, q, k, v, cs, s)
    case.check_rotated(case.q, qo, "query_out")
    ekc, evc = case.expected_caches()       # sequential: later tokens overwrite
    assert_bits_equal(to_np(cell.key_cache), ekc, "key_cache")
    assert_bits_equal(to_np(cell.value_cache), evc, "value_cache")


@pytest.mark.parametrize("mode", ["graph", "jit"])
def test_graph_merged_unused_outputs(rng, mode):
    case = Case(rng, "float16", 64, 64)
    p, q, k, v, cs, _, _, s = case.tensors()
    with ms_mode(mode):
        cell = MergedCell(to_ms(np.stack([case.key_cache, case.value_cache])))
        fn = cell if mode == "graph" else ms.jit(cell.construct)
        out = fn(p, q, k, v, cs, s)
    ekc, evc = case.expected_caches()
    assert_bits_equal(to_np(out), np.stack([ekc, evc]).astype(np.float32), "kv_cache read in graph")
    assert_bits_equal(to_np(cell.kv_cache), np.stack([ekc, evc]), "kv_cache parameter")


def test_graph_out_of_range_positions_are_never_read(rng):
    """Graph mode cannot check index values: a bad position gives zero rows and no cache write; a
    bad slot is skipped. Nothing outside the table or the caches is touched."""
    maxp = 16
    positions = np.array([0, maxp, -1, 5, 2 ** 40, maxp - 1, 3], np.int64)
    slots = np.array([0, 1, 2, 3, 4, 5, 10 ** 6], np.int64)
    case = Case(rng, "bfloat16", 64, 64, rows=7, tokens=7, max_position=maxp, positions=positions, slots=slots)
    p, q, k, v, cs, kc, vc, s = case.tensors()
    with ms_mode("graph"):
        cell = RopeCell(kc, vc, True, "BSND")
        qo, ko, _, _ = cell(p, q, k, v, cs, s)
    bad = np.array([False, True, True, False, True, False, False])
    qo, ko = to_np(qo), to_np(ko)
    assert not qo[bad].astype(np.float32).any() and not ko[bad].astype(np.float32).any()
    good = ~bad
    sub = Case(rng, "bfloat16", 64, 64, rows=int(good.sum()), tokens=0, max_position=maxp,
               positions=positions[good], slots=np.zeros((0,), np.int64))
    sub.q, sub.k = case.q[good], case.k[good]
    assert_bits_equal(qo[good], sub.expected_model(sub.q), "good rows of query_out")
    # expected caches: only tokens 0, 3, 5 (valid position and slot) are written
    ekc, evc = case.key_cache.copy(), case.value_cache.copy()
    k_rot = np.zeros_like(case.k)
    k_rot[good] = sub.expected_model(sub.k)
    for t in (0, 3, 5):
        b, o = divmod(int(slots[t]), case.block_size)
        ekc[b, o], evc[b, o] = k_rot[t], case.v[t]
    assert_bits_equal(ko[good], k_rot[good], "good rows of key_out")
    assert_bits_equal(to_np(cell.key_cache), ekc, "key_cache")
    assert_bits_equal(to_np(cell.value_cache), evc, "value_cache")


# ------------------------------------------------------------------ bad inputs

def _args(rng, **kw):
    case = Case(rng, "float16", 64, 64, **kw)
    return list(case.tensors())


def _call(args, **kw):
    return ms_kvcache.rope_reshape_and_cache(*args, **kw)


@pytest.mark.parametrize("bad,exc,match", [
    ("odd_rotary_dim", ValueError, r"argument 'cos_sin_cache': expected an even rotary_dim"),
    ("rotary_dim_gt_head", ValueError, r"argument 'cos_sin_cache': expected rotary_dim \(shape\[1\]\) <= head_size = 64"),
    ("table_rank", ValueError, r"argument 'cos_sin_cache': expected rank 2"),
    ("table_dtype", TypeError, r"argument 'cos_sin_cache': expected dtype in \('float32', 'float16'\)"),
    ("key_heads", ValueError, r"argument 'key': expected num_kv_heads = 2"),
    ("value_heads", ValueError, r"argument 'value': expected 9 rows of 2 heads x 64"),
    ("query_head_size", ValueError, r"argument 'query': expected shape \[T', num_heads, 64\]"),
    ("query_rows", ValueError, r"argument 'query': expected 9 rows"),
    ("cache_dtype", TypeError, r"argument 'key_cache': expected dtype float16 \(same as 'query'\), got bfloat16"),
    ("int_data", TypeError, r"argument 'query': expected dtype in \('float16', 'bfloat16', 'float32'\), got int8"),
    ("cache_shape", ValueError, r"argument 'value_cache': expected shape"),
    ("positions_len", ValueError, r"argument 'positions': expected shape \[9\]"),
    ("positions_dtype", TypeError, r"argument 'positions': expected dtype in \('int32', 'int64'\), got float32"),
    ("position_high", ValueError, r"argument 'positions': expected positions in \[0, 64\).*got 64 at index 3"),
    ("position_negative", ValueError, r"argument 'positions': expected positions in \[0, 64\).*got -1 at index 0"),
    ("slot_high", ValueError, r"argument 'slot_mapping': expected every slot < num_blocks\*block_size = 20"),
    ("slot_dup", ValueError, r"argument 'slot_mapping': expected distinct non-negative slots"),
    ("slot_long", ValueError, r"argument 'slot_mapping': expected shape \[T\] with T <= 9"),
    ("neox_type", TypeError, r"argument 'is_neox_style': expected a bool"),
    ("layout", ValueError, r"argument 'cache_layout': expected one of"),
    ("not_tensor", TypeError, r"argument 'key': expected a mindspore.Tensor, got ndarray"),
])
def test_bad_inputs(rng, bad, exc, match):
    args = _args(rng)
    kw = {}
    p, q, k, v, cs, kc, vc, s = args
    if bad == "odd_rotary_dim":
        args[4] = to_ms(np.ascontiguousarray(make_table(64, 64)[:, :63]))
    elif bad == "rotary_dim_gt_head":
        args[4] = to_ms(make_table(64, 66))
    elif bad == "table_rank":
        args[4] = to_ms(make_table(64, 64).reshape(64, 2, 32))
    elif bad == "table_dtype":
        args[4] = to_ms(make_table(64, 64, "bfloat16"))
    elif bad == "key_heads":
        args[2] = to_ms(np.zeros((9, 3, 64), np.float16))
    elif bad == "value_heads":
        args[3] = to_ms(np.zeros((9, 1, 64), np.float16))
    elif bad == "query_head_size":
        args[1] = to_ms(np.zeros((9, 4, 32), np.float16))
    elif bad == "query_rows":
        args[1] = to_ms(np.zeros((8, 4, 64), np.float16))
    elif bad == "cache_dtype":
        args[5] = Tensor(np.zeros(kc.shape, np.float32), dtype=ms.bfloat16)
    elif bad == "int_data":
        args[1] = Tensor(np.zeros(q.shape, np.int8))
    elif bad == "cache_shape":
        args[6] = to_ms(np.zeros((5, 4, 2, 32), np.float16))
    elif bad == "positions_len":
        args[0] = Tensor(np.zeros((8,), np.int64))
    elif bad == "positions_dtype":
        args[0] = Tensor(np.zeros((9,), np.float32))
    elif bad == "position_high":
        args[0] = Tensor(np.array([0, 1, 2, 64, 4, 5, 6, 7, 8], np.int64))
    elif bad == "position_negative":
        args[0] = Tensor(np.array([-1, 1, 2, 3, 4, 5, 6, 7, 8], np.int32))
    elif bad == "slot_high":
        args[7] = Tensor(np.array([0, 20], np.int32))
    elif bad == "slot_dup":
        args[7] = Tensor(np.array([3, -1, 3], np.int32))
    elif bad == "slot_long":
        args[7] = Tensor(np.arange(10, dtype=np.int32))
    elif bad == "neox_type":
        kw["is_neox_style"] = 1
    elif bad == "layout":
        kw["cache_layout"] = "NHD"
    elif bad == "not_tensor":
        args[2] = case_np = np.zeros((9, 2, 64), np.float16)  # noqa: F841
    before = to_np(args[5]).copy() if bad not in ("cache_dtype",) else None
    with pytest.raises(exc, match=match):
        _call(args, **kw)
    if before is not None:
        assert_bits_equal(to_np(args[5]), before, "key_cache unchanged after a rejected call")


def test_bad_merged_cache_shape(rng):
    args = _args(rng)
    kv = to_ms(np.zeros((3, 5, 4, 2, 64), np.float16))
    with pytest.raises(ValueError, match=r"rope_reshape_and_cache_merged: argument 'kv_cache': expected shape "
                                         r"\[2, num_blocks, block_size, num_kv_heads, head_size\]"):
        ms_kvcache.rope_reshape_and_cache_merged(*args[:5], kv, args[7])


def test_graph_mode_static_errors_raise_at_compile_time(rng):
    case = Case(rng, "float16", 64, 64)
    p, q, k, v, cs, kc, vc, s = case.tensors()
    with ms_mode("graph"):
        cell = RopeCell(kc, vc, True, "BSND")
        with pytest.raises((TypeError, ValueError), match=r"argument 'cos_sin_cache'"):
            cell(p, q, k, v, to_ms(make_table(64, 66)), s)


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_backend_without_kernel_is_a_clear_error(rng, monkeypatch, mode):
    from ms_kvcache import _backend
    from ms_kvcache.ops import _rope_common
    case = Case(rng, "float16", 64, 64)
    p, q, k, v, cs, kc, vc, s = case.tensors()
    with ms_mode(mode):
        cell = RopeCell(kc, vc, True, "BSND")
        # as if set_backend("sim") had succeeded on a build whose sim backend had no RoPE-write kernels
        monkeypatch.setattr(_rope_common, "BACKENDS", ("cpu",))
        monkeypatch.setattr(_backend, "_current", "sim")
        with pytest.raises(NotImplementedError, match=r"rope_reshape_and_cache: backend 'sim' has no kernel"):
            if mode == "graph":
                cell(p, q, k, v, cs, s)
            else:
                ms_kvcache.rope_reshape_and_cache(p, q, k, v, cs, kc, vc, s)
