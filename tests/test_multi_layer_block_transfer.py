"""multi_layer_block_transfer: numpy references, round trips, staging vs zero-copy, bad input, graph modes
(cpu backend)."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn

import ms_kvcache as mk
from conftest import assert_bits_equal, ms_mode, random_array, to_ms, to_np
from _multi_layer_ref import (DSA, DTYPES, MERGED, MLA, SEPARATE, Geometry, host_block_shape, ref_block_gather,
                              ref_block_scatter)

OP = mk.multi_layer_block_transfer

LAYOUTS = [(MERGED, "BNSD"), (MERGED, "BSND"), (SEPARATE, "BNSD"), (SEPARATE, "BSND"), (MLA, "BSND"),
           (DSA, "BSND")]


@pytest.fixture(autouse=True)
def _cpu(cpu_backend):
    yield


def staging_for(geo, blocks, dtype):
    """A staging buffer holding ``blocks`` blocks of every plane (odd shape: any shape is accepted)."""
    n = blocks * geo.bs * geo.L * sum(geo.hidden)
    return to_ms(np.zeros((n + 3,), np.float32).astype(np.float32), dtype) if dtype == "bfloat16" else \
        Tensor(np.zeros((n + 3,), np.dtype(dtype)))


def host_zeros(geo, n, dtype):
    return [to_ms(np.zeros(host_block_shape(geo, p, n), np.float32), dtype) if dtype == "bfloat16" else
            Tensor(np.zeros(host_block_shape(geo, p, n), np.dtype(dtype))) for p in range(geo.P)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt,layout", LAYOUTS, ids=lambda x: getattr(x, "name", x))
def test_round_trip_and_staging_vs_numpy(rng, fmt, layout, dtype):
    geo = Geometry(fmt, layout, num_layers=3, num_blocks=7, block_size=4, heads=2, head_size=16)
    planes = geo.random_planes(rng, dtype)
    caches = geo.to_ms(planes, dtype)
    ids = np.array([5, 0, 6, 2], np.int64)
    n = len(ids)
    # d2h, zero-copy and staged (a staging buffer of 1 block: 4 chunks), against numpy
    host = host_zeros(geo, n, dtype)
    OP(caches, host, Tensor(ids), direction="d2h", cache_layout=layout)
    expected = ref_block_gather(geo, planes, ids)
    for p in range(geo.P):
        assert_bits_equal(to_np(host[p]), expected[p], f"d2h plane {p}")
    host_staged = host_zeros(geo, n, dtype)
    OP(caches, host_staged, Tensor(ids), direction="d2h", cache_layout=layout, staging=staging_for(geo, 1, dtype))
    for p in range(geo.P):
        assert_bits_equal(to_np(host_staged[p]), to_np(host[p]), f"staged d2h plane {p}")
    # h2d into fresh caches (random data), zero-copy and staged (3 blocks: chunks of 3 + 1)
    fresh = geo.random_planes(rng, dtype)
    ref = ref_block_scatter(geo, fresh, [to_np(h) for h in host], ids)
    for staging in (None, staging_for(geo, 3, dtype)):
        fresh_ms = geo.to_ms(fresh, dtype)
        OP(fresh_ms, host, Tensor(ids), direction="h2d", cache_layout=layout, staging=staging)
        got = geo.from_ms(fresh_ms)
        for l in range(geo.L):
            for p in range(geo.P):
                assert_bits_equal(got[l][p], ref[l][p], f"h2d staging={staging is not None} l{l} p{p}")
                # round trip: the device blocks equal the originals, bit for bit
                rows = geo.rows(got[l][p]).reshape(geo.nb, geo.bs, -1)[ids]
                orig = geo.rows(planes[l][p]).reshape(geo.nb, geo.bs, -1)[ids]
                assert_bits_equal(rows, orig, "round trip")


def test_independent_host_blocks_h2d(rng):
    """h2d of random host blocks (not produced by d2h), int32 ids, BNSD."""
    geo = Geometry(SEPARATE, "BNSD", num_layers=2, num_blocks=6, block_size=8, heads=4, head_size=8)
    ids = np.array([3, 1, 4], np.int32)
    host_np = [random_array(rng, host_block_shape(geo, p, 3), "float16") for p in range(2)]
    planes = geo.random_planes(rng, "float16")
    caches = geo.to_ms(planes, "float16")
    OP(caches, [Tensor(h) for h in host_np], Tensor(ids), direction="h2d")  # BNSD is the default
    ref = ref_block_scatter(geo, planes, host_np, ids)
    for l, layer in enumerate(geo.from_ms(caches)):
        for p in range(2):
            assert_bits_equal(layer[p], ref[l][p], f"l{l} p{p}")


def test_hundreds_of_blocks_multithreaded(rng):
    """300 blocks, 4.9 MB: multi-threaded, streaming stores; h2d with a 64-block staging buffer."""
    geo = Geometry(SEPARATE, "BNSD", num_layers=8, num_blocks=400, block_size=8, heads=2, head_size=32)
    planes = geo.random_planes(rng, "float16")
    caches = geo.to_ms(planes, "float16")
    ids = rng.permutation(400)[:300].astype(np.int64)
    host = host_zeros(geo, 300, "float16")
    OP(caches, host, Tensor(ids), direction="d2h")
    expected = ref_block_gather(geo, planes, ids)
    for p in range(2):
        assert_bits_equal(to_np(host[p]), expected[p], f"d2h plane {p}")
    fresh = [[np.zeros_like(x) for x in layer] for layer in planes]
    fresh_ms = geo.to_ms(fresh, "float16")
    OP(fresh_ms, host, Tensor(ids), direction="h2d", staging=staging_for(geo, 64, "float16"))
    ref = ref_block_scatter(geo, fresh, expected, ids)
    for l, layer in enumerate(geo.from_ms(fresh_ms)):
        for p in range(2):
            assert_bits_equal(layer[p], ref[l][p], f"h2d l{l} p{p}")


@pytest.mark.parametrize("fmt", [MLA, DSA], ids=["mla_512_64", "dsa_512_64_128"])
def test_deepseek_61_layers(rng, fmt):
    geo = Geometry(fmt, "BSND", num_layers=61, num_blocks=3, block_size=2, mla=(512, 64), dsa_index=128)
    planes = geo.random_planes(rng, "bfloat16")
    caches = geo.to_ms(planes, "bfloat16")
    ids = np.array([2, 0], np.int64)
    host = host_zeros(geo, 2, "bfloat16")
    OP(caches, host, Tensor(ids), direction="d2h")  # kv_format inferred from 2/3 rank-4 host planes
    expected = ref_block_gather(geo, planes, ids)
    for p in range(geo.P):
        assert_bits_equal(to_np(host[p]), expected[p], f"plane {p}")
    fresh = [[np.zeros_like(x) for x in layer] for layer in planes]
    fresh_ms = geo.to_ms(fresh, "bfloat16")
    OP(fresh_ms, host, Tensor(ids), direction="h2d", kv_format=fmt, staging=staging_for(geo, 1, "bfloat16"))
    ref = ref_block_scatter(geo, fresh, expected, ids)
    got = geo.from_ms(fresh_ms)
    for l in (0, 31, 60):
        for p in range(geo.P):
            assert_bits_equal(got[l][p], ref[l][p], f"l{l} p{p}")


def test_zero_blocks(rng):
    geo = Geometry(SEPARATE, "BNSD", num_layers=2, num_blocks=2, block_size=4)
    planes = geo.random_planes(rng, "float32")
    caches = geo.to_ms(planes, "float32")
    host = host_zeros(geo, 0, "float32")
    OP(caches, host, Tensor(np.zeros(0, np.int64)), direction="h2d")
    OP(caches, host, Tensor(np.zeros(0, np.int64)), direction="d2h", staging=staging_for(geo, 1, "float32"))
    for l, layer in enumerate(geo.from_ms(caches)):
        for p in range(2):
            assert_bits_equal(layer[p], planes[l][p], "untouched")


def test_flat_caches_and_list_host_blocks(rng):
    geo = Geometry(MLA, "BSND", num_layers=3, num_blocks=3, block_size=4)
    planes = geo.random_planes(rng, "int8")
    flat = [x for layer in geo.to_ms(planes, "int8") for x in layer]
    ids = np.array([1], np.int64)
    host = host_zeros(geo, 1, "int8")
    OP(flat, list(host), Tensor(ids), direction="d2h", kv_format="MLA_KV")
    expected = ref_block_gather(geo, planes, ids)
    for p in range(2):
        assert_bits_equal(to_np(host[p]), expected[p], f"plane {p}")


@pytest.mark.parametrize("spelling", ["mla", "Mla", "mla_kv", 3])
def test_short_format_names(rng, spelling):
    """kv_format takes the demo's short names (any case) and the int value as well as "MLA_KV"."""
    geo = Geometry(MLA, "BSND", num_layers=2, num_blocks=3, block_size=4)
    planes = geo.random_planes(rng, "float32")
    ids = np.array([2, 0], np.int64)
    host = host_zeros(geo, 2, "float32")
    OP(geo.to_ms(planes, "float32"), host, Tensor(ids), direction="d2h", kv_format=spelling)
    expected = ref_block_gather(geo, planes, ids)
    for p in range(2):
        assert_bits_equal(to_np(host[p]), expected[p], f"plane {p}")


def test_bad_format_lists_spellings(rng):
    geo = Geometry(SEPARATE, "BNSD", num_layers=1, num_blocks=3, block_size=4)
    caches = geo.to_ms(geo.random_planes(rng, "float32"), "float32")
    with pytest.raises(ValueError, match=r"argument 'kv_format': expected .*'separate' / 'SEPARATE_KV'.*"
                                         r"'dsa' / 'DSA_KV'.*got 'separated'"):
        OP(caches, host_zeros(geo, 1, "float32"), Tensor(np.array([0], np.int64)), direction="d2h",
           kv_format="separated")


# -------------------------------------------------------------------------------------------------- bad input
def _setup(rng, L=2, nb=4, dtype="float16"):
    geo = Geometry(SEPARATE, "BNSD", num_layers=L, num_blocks=nb, block_size=4)
    return geo, geo.to_ms(geo.random_planes(rng, dtype), dtype)


@pytest.mark.parametrize("ids,direction,match", [
    ([0, 4], "h2d", r"expected block ids in \[0, 4\), got 4"),
    ([-1, 2], "d2h", r"expected block ids in \[0, 4\), got -1"),
    ([1, 1], "h2d", "distinct ids"),
])
def test_block_ids_out_of_range_or_repeated(rng, ids, direction, match):
    geo, caches = _setup(rng)
    with pytest.raises(ValueError, match=match):
        OP(caches, host_zeros(geo, 2, "float16"), Tensor(np.array(ids, np.int64)), direction=direction)


def test_repeated_ids_allowed_for_d2h(rng):
    geo, caches = _setup(rng)
    host = host_zeros(geo, 2, "float16")
    OP(caches, host, Tensor(np.array([3, 3], np.int64)), direction="d2h")
    h = to_np(host[0])
    assert_bits_equal(h[0], h[1], "same block twice")


def test_host_shape_mismatches(rng):
    geo, caches = _setup(rng)
    ids = Tensor(np.array([0, 1], np.int64))
    bad_n = host_zeros(geo, 3, "float16")
    with pytest.raises(ValueError, match=r"'host_blocks\[0\]': expected the key_cache host blocks"):
        OP(caches, bad_n, ids, direction="h2d")
    other = Geometry(SEPARATE, "BNSD", num_layers=3, num_blocks=4, block_size=4)  # host for 3 layers
    with pytest.raises(ValueError, match=r"num_layers = 2\), got \(2, 4, 3, 2, 16\)"):
        OP(caches, host_zeros(other, 2, "float16"), ids, direction="d2h")
    with pytest.raises(ValueError, match="expected 2 planes"):
        OP(caches, host_zeros(geo, 2, "float16")[:1] * 3, ids, direction="d2h", kv_format=SEPARATE)


def test_layer_count_mismatch_and_mixed_dtypes(rng):
    geo, caches = _setup(rng, L=3)
    ids = Tensor(np.array([0], np.int64))
    two_layer = Geometry(SEPARATE, "BNSD", num_layers=2, num_blocks=4, block_size=4)
    with pytest.raises(ValueError, match="num_layers = 3"):
        OP(caches, host_zeros(two_layer, 1, "float16"), ids, direction="h2d")
    caches[2] = (Tensor(to_np(caches[2][0]).astype(np.float32)), caches[2][1])
    with pytest.raises(TypeError, match=r"'kv_caches\[2\]\[0\]': expected dtype float16"):
        OP(caches, host_zeros(geo, 1, "float16"), ids, direction="h2d")


def test_dtype_mismatches(rng):
    geo, caches = _setup(rng)
    ids = Tensor(np.array([0], np.int64))
    with pytest.raises(TypeError, match=r"'host_blocks\[0\]': expected dtype float16"):
        OP(caches, host_zeros(geo, 1, "float32"), ids, direction="h2d")
    with pytest.raises(TypeError, match="'staging': expected dtype float16"):
        OP(caches, host_zeros(geo, 1, "float16"), ids, direction="h2d", staging=staging_for(geo, 1, "float32"))
    with pytest.raises(TypeError, match="'block_ids': expected dtype"):
        OP(caches, host_zeros(geo, 1, "float16"), Tensor(np.array([0.0], np.float32)), direction="h2d")


def test_staging_too_small(rng):
    geo, caches = _setup(rng)
    small = Tensor(np.zeros(geo.bs * geo.L * sum(geo.hidden) - 1, np.float16))
    with pytest.raises(ValueError, match="'staging': expected at least one block"):
        OP(caches, host_zeros(geo, 1, "float16"), Tensor(np.array([0], np.int64)), direction="d2h", staging=small)


@pytest.mark.parametrize("kw,exc,match", [
    (dict(direction="sideways"), ValueError, "argument 'direction'"),
    (dict(direction="h2d", kv_format=11), ValueError, "argument 'kv_format'"),
    (dict(direction="h2d", cache_layout="HND"), ValueError, "argument 'cache_layout'"),
    (dict(direction="h2d", kv_format=MERGED), TypeError, "MERGED_KV"),
    (dict(direction="h2d", kv_format=DSA), ValueError, "expected 3 planes"),
])
def test_bad_attrs(rng, kw, exc, match):
    geo, caches = _setup(rng)
    with pytest.raises(exc, match=match):
        OP(caches, host_zeros(geo, 1, "float16"), Tensor(np.array([0], np.int64)), **kw)


def test_mla_bnsd_rejected(rng):
    geo = Geometry(MLA, "BSND", num_layers=1, num_blocks=2, block_size=4)
    caches = geo.to_ms(geo.random_planes(rng, "float16"), "float16")
    with pytest.raises(ValueError, match="expected 'BSND' for MLA_KV"):
        OP(caches, host_zeros(geo, 1, "float16"), Tensor(np.array([0], np.int64)), direction="d2h",
           cache_layout="BNSD")


# ------------------------------------------------------------------------------------------------- graph modes
class BlockCell(nn.Cell):
    def __init__(self, geo, planes, dtype, staged):
        super().__init__()
        self.fmt, self.layout, self.staged = geo.fmt, geo.layout, staged
        # a persistent device staging buffer, as a Parameter
        self.staging = Parameter(staging_for(geo, 1, dtype), name="staging") if staged else None
        tensors = geo.to_ms(planes, dtype)
        if geo.fmt == MERGED:
            self.params = ParameterTuple([Parameter(t, name=f"kv{l}") for l, t in enumerate(tensors)])
            self.layers = tuple(self.params)
        else:
            self.params = ParameterTuple([Parameter(x, name=f"c{l}_{p}") for l, layer in enumerate(tensors)
                                          for p, x in enumerate(layer)])
            self.layers = tuple(tuple(self.params[l * geo.P + p] for p in range(geo.P)) for l in range(geo.L))

    def construct(self, host_in, ids_in, ids_out, *host_out):
        # load blocks, read a cache, then offload other blocks (must see the loaded data). Host blocks that
        # are written must be Parameters, each its own graph input (a Tensor argument is refused at compile
        # time; MindSpore 2.10 cannot write into an element of a tuple graph input, "Parameter[i] has no
        # default param"); reading from a tuple of Tensors works.
        if self.staged:
            mk.multi_layer_block_transfer(self.layers, host_in, ids_in, direction="h2d", staging=self.staging,
                                          kv_format=self.fmt, cache_layout=self.layout)
        else:
            mk.multi_layer_block_transfer(self.layers, host_in, ids_in, direction="h2d", kv_format=self.fmt,
                                          cache_layout=self.layout)
        after = self.params[0] * 1
        mk.multi_layer_block_transfer(self.layers, host_out, ids_out, direction="d2h", cache_layout=self.layout)
        return after


@pytest.mark.parametrize("mode", ["graph", "jit"])
@pytest.mark.parametrize("fmt,layout,staged", [(SEPARATE, "BNSD", False), (MERGED, "BSND", True),
                                               (DSA, "BSND", True)], ids=["separate", "merged_staged", "dsa_staged"])
def test_graph_modes(rng, mode, fmt, layout, staged):
    geo = Geometry(fmt, layout, num_layers=3, num_blocks=5, block_size=4)
    dtype = "float16"
    planes = geo.random_planes(rng, dtype)
    ids_in, ids_out = np.array([4, 1], np.int64), np.array([1, 3, 4], np.int64)
    host_in_np = [random_array(rng, host_block_shape(geo, p, 2), dtype) for p in range(geo.P)]
    with ms_mode(mode):
        net = BlockCell(geo, planes, dtype, staged)
        ptrs = [p.data_ptr() for p in net.params]
        if mode == "jit":
            net.construct = ms.jit(net.construct)
        host_out = tuple(Parameter(x, name=f"host_out{p}") for p, x in enumerate(host_zeros(geo, 3, dtype)))
        after = net(tuple(Tensor(h) for h in host_in_np), Tensor(ids_in), Tensor(ids_out), *host_out)
        assert [p.data_ptr() for p in net.params] == ptrs
    ref = ref_block_scatter(geo, planes, host_in_np, ids_in)
    first = np.stack(ref[0]) if fmt == MERGED else ref[0][0]
    assert_bits_equal(to_np(after), first, "read after h2d sees the write")
    expected = ref_block_gather(geo, ref, ids_out)
    for p in range(geo.P):
        assert_bits_equal(to_np(host_out[p]), expected[p], f"{mode}: d2h after h2d plane {p}")


class BadHostCell(nn.Cell):
    def __init__(self, caches):
        super().__init__()
        self.c = ParameterTuple([Parameter(x, name=f"c{i}") for i, x in enumerate(caches)])

    def construct(self, k, v, ids):
        mk.multi_layer_block_transfer(self.c, (k, v), ids, direction="h2d", kv_format=SEPARATE)
        return ids


def test_graph_mode_static_errors(rng):
    geo, caches = _setup(rng)
    flat = [x for layer in caches for x in layer]
    other = Geometry(SEPARATE, "BNSD", num_layers=2, num_blocks=4, block_size=8)
    with ms_mode("graph"):
        net = BadHostCell(flat)
        k, v = host_zeros(other, 1, "float16")
        with pytest.raises(ValueError, match=r"'host_blocks\[0\]': expected"):
            net(k, v, Tensor(np.array([0], np.int64)))


@pytest.mark.parametrize("staging_blocks", [1, 2, 5])
def test_staging_pieces_smaller_than_a_block(rng, staging_blocks):
    """61 layers x (512 + 64) x bf16 is 70 KiB per token: staging buffers of 1, 2 and 5 blocks (the smallest
    accepted and odd sizes) give results identical to zero-copy both ways (the cpu backend checks the
    buffer and uses it as scratch; the sim/Ascend kernels move the blocks through it)."""
    geo = Geometry(MLA, "BSND", num_layers=61, num_blocks=4, block_size=64, mla=(512, 64))
    planes = geo.random_planes(rng, "bfloat16")
    caches = geo.to_ms(planes, "bfloat16")
    ids = np.array([3, 0, 2], np.int64)
    direct, staged = host_zeros(geo, 3, "bfloat16"), host_zeros(geo, 3, "bfloat16")
    OP(caches, direct, Tensor(ids), direction="d2h")
    OP(caches, staged, Tensor(ids), direction="d2h", staging=staging_for(geo, staging_blocks, "bfloat16"))
    expected = ref_block_gather(geo, planes, ids)
    for p in range(2):
        assert_bits_equal(to_np(direct[p]), expected[p], f"direct plane {p}")
        assert_bits_equal(to_np(staged[p]), expected[p], f"staged plane {p}")
    fresh = [[np.zeros_like(x) for x in layer] for layer in planes]
    fresh_ms = geo.to_ms(fresh, "bfloat16")
    OP(fresh_ms, staged, Tensor(ids), direction="h2d", staging=staging_for(geo, staging_blocks, "bfloat16"))
    ref = ref_block_scatter(geo, fresh, expected, ids)
    got = geo.from_ms(fresh_ms)
    for l in (0, 60):
        for p in range(2):
            assert_bits_equal(got[l][p], ref[l][p], f"staged h2d l{l} p{p}")


class OutOfRangeBlocks(nn.Cell):
    def __init__(self, k, v, staging):
        super().__init__()
        self.k, self.v = Parameter(k, name="k"), Parameter(v, name="v")
        self.staging = Parameter(staging, name="staging") if staging is not None else None

    def construct(self, hk, hv, ids_out, host_in, ids_in):
        if self.staging is None:
            mk.multi_layer_block_transfer(((self.k, self.v),), (hk, hv), ids_out, direction="d2h")
            mk.multi_layer_block_transfer(((self.k, self.v),), host_in, ids_in, direction="h2d")
        else:
            mk.multi_layer_block_transfer(((self.k, self.v),), (hk, hv), ids_out, direction="d2h",
                                          staging=self.staging)
            mk.multi_layer_block_transfer(((self.k, self.v),), host_in, ids_in, direction="h2d",
                                          staging=self.staging)
        return self.k * 1


@pytest.mark.parametrize("head_size", [16, 512], ids=["short_rows", "2KiB_rows"])
@pytest.mark.parametrize("staged", [False, True], ids=["zero_copy", "staged"])
def test_graph_mode_out_of_range_block_ids(rng, staged, head_size):
    """Graph mode cannot check id values: d2h gives zero host blocks for them, h2d skips them (both d2h
    work splits: per (block, token rows) for short rows, per (block, layer) for rows >= 2 KiB)."""
    geo = Geometry(SEPARATE, "BNSD", num_layers=1, num_blocks=3, block_size=4, heads=1, head_size=head_size)
    planes = geo.random_planes(rng, "float32")
    ids_out = np.array([2, 7, -1], np.int64)
    ids_in = np.array([1 << 40, 0], np.int64)
    host_in = [random_array(rng, host_block_shape(geo, p, 2), "float32") for p in range(2)]
    with ms_mode("graph"):
        net = OutOfRangeBlocks(Tensor(planes[0][0]), Tensor(planes[0][1]),
                               staging_for(geo, 1, "float32") if staged else None)
        hk, hv = (Parameter(Tensor(np.full(host_block_shape(geo, p, 3), 9.0, np.float32)), name=f"h{p}")
                  for p in range(2))
        k = net(hk, hv, Tensor(ids_out), tuple(Tensor(h) for h in host_in), Tensor(ids_in))
    expected = ref_block_gather(geo, planes, [2, 0, 0])
    for p, h in enumerate((hk, hv)):
        got = to_np(h)
        assert_bits_equal(got[0], expected[p][0], "valid block")
        assert not got[1:].any(), "out-of-range ids give zero host blocks"
    ref = ref_block_scatter(geo, planes, [h[1:] for h in host_in], [0])
    assert_bits_equal(to_np(k), ref[0][0], "only block 0 loaded")


@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
def test_long_rows_d2h_per_layer_split(rng, layout):
    """Rows of >= 2 KiB (4 heads x 128 x fp32) take the (block, layer) d2h split; > 4 MiB: streaming."""
    geo = Geometry(SEPARATE, layout, num_layers=3, num_blocks=40, block_size=16, heads=4, head_size=128)
    planes = geo.random_planes(rng, "float32")
    caches = geo.to_ms(planes, "float32")
    ids = rng.permutation(40)[:30].astype(np.int64)
    for staging in (None, staging_for(geo, 2, "float32")):
        host = host_zeros(geo, 30, "float32")
        OP(caches, host, Tensor(ids), direction="d2h", cache_layout=layout, staging=staging)
        expected = ref_block_gather(geo, planes, ids)
        for p in range(2):
            assert_bits_equal(to_np(host[p]), expected[p], f"staging={staging is not None} plane {p}")


@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
@pytest.mark.parametrize("num_blocks", [3, 90])
def test_h2d_partial_tiles(rng, layout, num_blocks):
    """The cpu h2d path moves tiles of 16 token rows x 8 layers: block_size 40 (16 + 16 + 8 rows) and 11
    layers (8 + 3) leave partial tiles on both axes; 90 blocks (> 4 MiB) take the multi-threaded streaming
    path, 3 blocks the plain one. Against numpy, with an invalid-free random id order."""
    geo = Geometry(SEPARATE, layout, num_layers=11, num_blocks=num_blocks + 2, block_size=40, heads=3, head_size=64)
    planes = geo.random_planes(rng, "float16")
    ids = rng.permutation(num_blocks + 2)[:num_blocks].astype(np.int64)
    host = [Tensor(rng.standard_normal((num_blocks, 40, 11, 3, 64)).astype(np.float16)) for _ in range(2)]
    host_np = [to_np(h) for h in host]
    for staging in (None, staging_for(geo, 1, "float16")):
        fresh = [[x.copy() for x in layer] for layer in planes]
        fresh_ms = geo.to_ms(fresh, "float16")
        OP(fresh_ms, host, Tensor(ids), direction="h2d", cache_layout=layout, staging=staging)
        ref = ref_block_scatter(geo, fresh, host_np, ids)
        for l, layer in enumerate(geo.from_ms(fresh_ms)):
            for p in range(2):
                assert_bits_equal(layer[p], ref[l][p], f"staging={staging is not None} l{l} p{p}")


def test_square_caches_need_an_explicit_layout(rng):
    """num_kv_heads == block_size: BSND caches (reshape_and_cache's default) read with this op's BNSD
    default would be transposed without a shape error, so the default refuses; with cache_layout given,
    each layout moves the right rows (breaker-2 W3)."""
    kc0 = random_array(rng, (4, 16, 16, 32), "float32")   # BSND, H == block_size == 16
    vc0 = random_array(rng, (4, 16, 16, 32), "float32")
    caches = [(Parameter(Tensor(kc0.copy()), name="sqk"), Parameter(Tensor(vc0.copy()), name="sqv"))]
    hb = (Tensor(np.zeros((1, 16, 1, 16, 32), np.float32)), Tensor(np.zeros((1, 16, 1, 16, 32), np.float32)))
    ids = Tensor(np.array([2], np.int64))
    with pytest.raises(ValueError, match=r"argument 'cache_layout': .*num_kv_heads == block_size = 16.*"
                                         r"pass cache_layout='BSND'"):
        mk.multi_layer_block_transfer(caches, hb, ids, direction="d2h")
    assert not to_np(hb[0]).any()

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.k, self.v = caches[0]

        def construct(self, h0, h1, i):
            mk.multi_layer_block_transfer([(self.k, self.v)], (h0, h1), i, direction="d2h")
            return i

    with ms_mode(ms.GRAPH_MODE), pytest.raises(ValueError, match="num_kv_heads == block_size"):
        Net()(hb[0], hb[1], ids)
    mk.multi_layer_block_transfer(caches, hb, ids, direction="d2h", cache_layout="BSND")
    assert_bits_equal(to_np(hb[0])[0, :, 0], kc0[2], "BSND block -> host rows")
    assert_bits_equal(to_np(hb[1])[0, :, 0], vc0[2], "BSND block -> host rows")
    mk.multi_layer_block_transfer(caches, hb, ids, direction="d2h", cache_layout="BNSD")
    assert_bits_equal(to_np(hb[0])[0, :, 0], kc0[2].transpose(1, 0, 2), "BNSD block -> host rows")
