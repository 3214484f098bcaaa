"""multi_layer_block_transfer: the AscendC kernel + tiling through the emulation ("sim"), bit-exact against
the numpy reference of tests/_multi_layer_ref.py (direct and staging modes) and, through the public op,
against the cpu backend."""
import numpy as np
import pytest

from _copy_sim_ref import (SOCS, assert_last_launch, assert_same_bytes, cores_of, expect_tiling_error, launch,
                           platform, public_backend_or_skip, reset_last_launch, stable_seed, status)
from _multi_layer_ref import (DCODE, DSA, DTYPES, FORMAT_LAYOUTS, MERGED, MLA, SEPARATE, Geometry, flat_caches,
                              host_block_shape, ref_block_gather, ref_block_scatter, unflat)
from conftest import random_array

OP = "MskvMultiLayerBlockTransfer"


def attrs(geo, direction, aiv_num=0):
    return {"kv_format": int(geo.fmt), "direction": direction, "cache_layout": geo.layout, "num_layers": geo.L,
            "aiv_num": aiv_num}


def per_block(geo):
    return geo.bs * geo.L * sum(geo.hidden)


def staging_array(geo, dtype, blocks):
    """A staging buffer of ``blocks`` blocks of every plane (None: direct mode)."""
    if blocks is None:
        return None
    return np.zeros(blocks * per_block(geo), random_array(np.random.default_rng(0), (1,), dtype).dtype)


def d2h(geo, planes, ids, dtype, rng, soc="Ascend910B1", all_orders=False, aiv_num=0, staging=None):
    n = len(ids)
    host = [random_array(rng, host_block_shape(geo, p, n), dtype) for p in range(geo.P)]  # garbage
    caches = flat_caches(geo, planes)
    before = [c.copy() for c in caches]
    st = launch(OP, [ids, staging_array(geo, dtype, staging), host, caches, status()], attrs(geo, "d2h", aiv_num), soc,
                all_orders=all_orders)
    exp = ref_block_gather(geo, planes, np.clip(ids, 0, geo.nb - 1)) if n else [h.copy() for h in host]
    for p in range(geo.P):  # ids outside [0, nb) give zero host blocks
        bad = (ids < 0) | (ids >= geo.nb)
        exp[p][bad] = 0
        assert_same_bytes(host[p], exp[p], f"d2h host plane {p} ({soc}, staging={staging})")
    for i, (c, b) in enumerate(zip(caches, before)):
        assert_same_bytes(c, b, f"cache {i} changed by d2h")
    return host, st


def h2d(geo, planes, host, ids, soc="Ascend910B1", all_orders=False, aiv_num=0, staging=None):
    dtype = str(host[0].dtype)
    caches = flat_caches(geo, [[x.copy() for x in layer] for layer in planes])
    st = launch(OP, [ids, staging_array(geo, dtype, staging), host, caches, status()], attrs(geo, "h2d", aiv_num), soc,
                all_orders=all_orders)
    ok = (ids >= 0) & (ids < geo.nb)
    exp = ref_block_scatter(geo, planes, [h[ok] for h in host], ids[ok]) if ok.any() else planes
    got = unflat(geo, caches)
    for l in range(geo.L):
        for p in range(geo.P):
            assert_same_bytes(got[l][p], exp[l][p], f"h2d layer {l} plane {p} ({soc}, staging={staging})")
    return got, st


def _geo(fmt, layout, L=3, nb=10, bs=8, **kw):
    return Geometry(fmt, layout, num_layers=L, num_blocks=nb, block_size=bs, **kw)


def _ids(rng, geo, n, idtype="int64"):
    return rng.permutation(geo.nb)[:n].astype(idtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt,layout", FORMAT_LAYOUTS, ids=lambda x: getattr(x, "name", x))
def test_every_format_dtype_layout_round_trip_both_modes(fmt, layout, dtype):
    rng = np.random.default_rng(stable_seed(int(fmt), layout, dtype, "block"))
    geo = _geo(fmt, layout, heads=2, head_size=16, mla=(32, 16), dsa_index=16)
    planes = geo.random_planes(rng, dtype)
    ids = _ids(rng, geo, 6, "int32" if dtype == "int8" else "int64")
    host, st = d2h(geo, planes, ids, dtype, rng)
    assert st["tiling_key"] // 10 == 100 * (layout == "BNSD") + 10 * DCODE[dtype] + (dtype != "int8")
    host_s, _ = d2h(geo, planes, ids, dtype, rng, staging=2)
    for a, b in zip(host, host_s):
        assert_same_bytes(a, b, "staging d2h == direct d2h")
    fresh = geo.random_planes(rng, dtype)
    got, _ = h2d(geo, fresh, host, ids)
    got_s, _ = h2d(geo, fresh, host, ids, staging=1)
    for l in range(geo.L):
        for p in range(geo.P):
            assert_same_bytes(got_s[l][p], got[l][p], "staging h2d == direct h2d")
            rows_got = geo.rows(got[l][p]).reshape(geo.nb, geo.bs, -1)[ids.astype(np.int64)]
            rows_src = geo.rows(planes[l][p]).reshape(geo.nb, geo.bs, -1)[ids.astype(np.int64)]
            assert_same_bytes(rows_got, rows_src, "round trip")


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("staging", [None, 3])
def test_every_soc_and_core_order(soc, staging):
    rng = np.random.default_rng(stable_seed(soc, staging))
    geo = _geo(SEPARATE, "BNSD", L=5, nb=24, bs=16, heads=2, head_size=16)
    planes = geo.random_planes(rng, "float16")
    ids = _ids(rng, geo, 12)
    host, st = d2h(geo, planes, ids, "float16", rng, soc, all_orders=True, staging=staging)
    expected_cores = cores_of(soc) if staging is None else min(cores_of(soc), 3 * 16)
    assert st["cores_used"] == expected_cores  # 192 (block, token) units; staging: a slice holds a token's layers
    h2d(geo, geo.random_planes(rng, "float16"), host, ids, soc, all_orders=True, staging=staging)


def test_invalid_ids_zero_in_d2h_skipped_in_h2d():
    rng = np.random.default_rng(12)
    geo = _geo(MLA, "BSND", L=4, nb=8, bs=4, mla=(64, 32))
    planes = geo.random_planes(rng, "bfloat16")
    ids = np.array([3, -1, 7, 8, 0, 100], np.int64)  # graph-mode input: -1, 8, 100 are outside [0, 8)
    for staging in (None, 1):
        host, _ = d2h(geo, planes, ids, "bfloat16", rng, all_orders=True, staging=staging)
        h2d(geo, geo.random_planes(rng, "bfloat16"), host, ids, all_orders=True, staging=staging)


@pytest.mark.parametrize("n", [0, 1, 300])
def test_block_counts(n):
    rng = np.random.default_rng(n + 5)
    geo = _geo(MERGED, "BSND", L=2, nb=max(n, 1) + 2, bs=4, heads=1, head_size=16)
    planes = geo.random_planes(rng, "float32")
    ids = _ids(rng, geo, n)
    host, st = d2h(geo, planes, ids, "float32", rng)
    if n == 0:
        assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0
    else:
        assert st["cores_used"] == min(8 * n, 48)  # n * 4 tokens x 2 layers (split by layer: fewer tokens than cores)
    h2d(geo, geo.random_planes(rng, "float32"), host, ids, staging=4 if n else None)


def test_layers_61_mla_dsa_all_cores():
    rng = np.random.default_rng(61)
    geo = _geo(DSA, "BSND", L=61, nb=3, bs=4, mla=(512, 64), dsa_index=128)
    planes = geo.random_planes(rng, "bfloat16")
    ids = np.array([2], np.int64)
    host, st = d2h(geo, planes, ids, "bfloat16", rng)
    assert st["cores_used"] == 48  # one block of 4 tokens, 61 layers: split into layer groups too
    assert int(st["tiling_fields"]["layerGroups"]) == 13 and int(st["tiling_fields"]["layersPerGroup"]) == 5
    h2d(geo, geo.random_planes(rng, "bfloat16"), host, ids)
    g1 = _geo(MLA, "BSND", L=1, nb=60, bs=8, mla=(512, 64))
    p1 = g1.random_planes(rng, "bfloat16")
    host1, st1 = d2h(g1, p1, _ids(rng, g1, 50), "bfloat16", rng)
    assert st1["cores_used"] == 48


def test_aiv_num_caps_cores():
    rng = np.random.default_rng(13)
    geo = _geo(SEPARATE, "BSND", L=4, nb=20, bs=8, heads=2, head_size=16)
    planes = geo.random_planes(rng, "int8")
    ids = _ids(rng, geo, 15)
    for aiv in (1, 7, 48, 64):
        host, st = d2h(geo, planes, ids, "int8", rng, aiv_num=aiv)
        assert st["cores_used"] == st["block_dim"] == min(aiv, 48)
        h2d(geo, geo.random_planes(rng, "int8"), host, ids, aiv_num=aiv, staging=8)


@pytest.mark.parametrize("fmt,layout", [(SEPARATE, "BSND"), (MERGED, "BNSD"), (MLA, "BSND"), (DSA, "BSND")],
                         ids=["sep-bsnd", "merged-bnsd", "mla", "dsa"])
def test_rows_not_32_byte_multiples_pad_and_310p(fmt, layout):
    rng = np.random.default_rng(stable_seed(int(fmt), layout, "pad"))
    if fmt in (MLA, DSA):
        geo = _geo(fmt, layout, L=3, nb=6, bs=5, mla=(7, 3), dsa_index=11)
    else:
        geo = _geo(fmt, layout, L=3, nb=6, bs=5, heads=3, head_size=5)
    for dtype in ("int8", "bfloat16"):
        planes = geo.random_planes(rng, dtype)
        ids = _ids(rng, geo, 4)
        host, st = d2h(geo, planes, ids, dtype, rng, all_orders=True)
        assert st["tiling_key"] % 10 == 1 and sum(st["datacopy_pad_calls_per_core"]) > 0
        h2d(geo, geo.random_planes(rng, dtype), host, ids, all_orders=True, staging=2)
    planes = geo.random_planes(rng, "float16")
    host = [np.zeros(host_block_shape(geo, p, 2), np.float16) for p in range(geo.P)]
    expect_tiling_error(OP, [_ids(rng, geo, 2), None, host, flat_caches(geo, planes), status()], attrs(geo, "d2h"),
                        "Ascend310P3", "not a multiple of 32 bytes")


def test_rows_larger_than_ub():
    rng = np.random.default_rng(14)
    for layout in ("BSND", "BNSD"):
        geo = _geo(SEPARATE, layout, L=2, nb=3, bs=2, heads=8, head_size=4096)
        planes = geo.random_planes(rng, "float32")
        ids = np.array([2, 0], np.int64)
        host, st = d2h(geo, planes, ids, "float32", rng)
        assert st["tiling_fields"]["tokensPerInnerLoop"].startswith("[0")
        h2d(geo, geo.random_planes(rng, "float32"), host, ids)


def test_tiling_fields_and_data_movement():
    rng = np.random.default_rng(15)
    geo = _geo(SEPARATE, "BNSD", L=8, nb=14, bs=128, heads=8, head_size=128)  # Llama-like, bf16, 32 KiB rows/block
    planes = geo.random_planes(rng, "bfloat16")
    ids = _ids(rng, geo, 12)
    host, st = d2h(geo, planes, ids, "bfloat16", rng)
    f = st["tiling_fields"]
    ub = int(platform("Ascend910B1")["ub_size"])
    row = 8 * 8 * 128 * 2  # one token of all 8 layers of a plane: one UB row, one host run
    rows = (ub - 256 - 1024 - 4096) // 2 // row
    assert int(f["numLayers"]) == 8 and int(f["numIds"]) == 12 and int(f["numBlocks"]) == 14
    assert int(f["usedCoreNum"]) == 48 and int(f["formerLen"]) == 12 * 128 // 48 and int(f["staging"]) == 0
    assert int(f["layerGroups"]) == 1 and int(f["layersPerGroup"]) == 8
    assert f["tokensPerInnerLoop"] == str([rows, rows, 0, 0, 0, 0])
    assert int(f["perLoopBuffSize"]) == rows * row and int(f["zeroBuffSize"]) == 4096
    minimum = 2 * 2 * 8 * 12 * 128 * row + ids.nbytes
    total = st["gm_read_bytes"] + st["gm_write_bytes"]
    assert total <= 1.05 * minimum, total / minimum
    assert max(st["ub_bytes_per_core"]) <= ub
    _, st2 = h2d(geo, geo.random_planes(rng, "bfloat16"), host, ids, staging=4)
    f2 = st2["tiling_fields"]
    assert int(f2["staging"]) == 1 and int(f2["usedCoreNum"]) == 48  # 4 blocks of staging: room for 512 tokens
    slice_elems = 4 * per_block(geo) // 48
    assert int(f2["stagingSliceElems"]) == slice_elems
    assert int(f2["stagingTokens"]) == slice_elems // (8 * sum(geo.hidden))


def test_tiling_rejects_bad_shapes_cleanly():
    rng = np.random.default_rng(16)
    geo = _geo(SEPARATE, "BNSD", L=2, nb=6, bs=4, heads=2, head_size=16)
    planes = geo.random_planes(rng, "float16")
    caches = flat_caches(geo, planes)
    ids = _ids(rng, geo, 3)
    host = [np.zeros(host_block_shape(geo, p, 3), np.float16) for p in range(2)]
    a = attrs(geo, "h2d")
    expect_tiling_error(OP, [ids, None, [host[0], np.zeros((3, 4, 2, 2, 8), np.float16)], caches, status()], a,
                        "Ascend910B1", "host_blocks[1]")
    expect_tiling_error(OP, [ids, None, host[:1], caches, status()], a, "Ascend910B1", "planes")
    expect_tiling_error(OP, [ids, None, host, caches[:3], status()], a, "Ascend910B1", "kv_caches")
    expect_tiling_error(OP, [ids, None, host, caches[:3] + [caches[3].astype(np.float32)], status()], a,
                        "Ascend910B1", "dtype")
    expect_tiling_error(OP, [ids, np.zeros(10, np.float16), host, caches, status()], a, "Ascend910B1", "staging")
    expect_tiling_error(OP, [ids.astype(np.float32), None, host, caches, status()], a, "Ascend910B1")
    expect_tiling_error(OP, [ids, None, host, caches, status()], dict(a, num_layers=3), "Ascend910B1", "kv_caches")


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_op_sim_matches_cpu(mode):
    from mindspore import Parameter, ParameterTuple, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("multi_layer_block_transfer")
    rng = np.random.default_rng(stable_seed(mode, "block public"))
    dtype = "float16"
    geo = _geo(SEPARATE, "BNSD", L=3, nb=10, bs=4, heads=2, head_size=16)
    planes = geo.random_planes(rng, dtype)
    ids = _ids(rng, geo, 4)
    src = [random_array(rng, host_block_shape(geo, p, 4), dtype) for p in range(2)]

    class Net(nn.Cell):
        def __init__(self, arrays):
            super().__init__()
            self.kv = ParameterTuple(Parameter(to_ms(c), name=f"kv{i}") for i, c in enumerate(arrays))

        def construct(self, k, v, b, staging):
            mk.multi_layer_block_transfer(self.kv, (k, v), b, direction="h2d", staging=staging)
            return b

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                for staged in (False, True):
                    net = Net(flat_caches(geo, planes))
                    staging = Tensor(np.zeros(2 * per_block(geo), np.float16)) if staged else None
                    if staged and mode == "graph":  # written scratch: a Parameter in a graph
                        staging = Parameter(staging, name="staging")
                    if mode == "graph":
                        if staged:
                            net(Tensor(src[0]), Tensor(src[1]), Tensor(ids), staging)
                        else:
                            class Direct(nn.Cell):
                                def __init__(self, inner):
                                    super().__init__()
                                    self.kv = inner.kv

                                def construct(self, k, v, b):
                                    mk.multi_layer_block_transfer(self.kv, (k, v), b, direction="h2d")
                                    return b
                            Direct(net)(Tensor(src[0]), Tensor(src[1]), Tensor(ids))
                    else:
                        mk.multi_layer_block_transfer(list(net.kv), (Tensor(src[0]), Tensor(src[1])), Tensor(ids),
                                                      direction="h2d", staging=staging)
                    results[(backend, staged)] = unflat(geo, [to_np(p) for p in net.kv])
                    if backend == "sim":
                        assert_last_launch(OP, numLayers=3, numIds=4, staging=int(staged))
        finally:
            mk.set_backend("cpu")
    exp = ref_block_scatter(geo, planes, src, ids)
    for key, got in results.items():
        for l in range(geo.L):
            for p in range(geo.P):
                assert_same_bytes(got[l][p], exp[l][p], f"{key} layer {l} plane {p}")


def test_few_blocks_split_by_tokens():
    """n * L < cores: the work is split by token (every layer of a token together), so every core works, in
    both modes; a core's tokens of a block are one contiguous host range."""
    rng = np.random.default_rng(17)
    geo = _geo(MERGED, "BNSD", L=2, nb=5, bs=64, heads=2, head_size=16)
    planes = geo.random_planes(rng, "float16")
    ids = np.array([3, -1], np.int64)
    host, st = d2h(geo, planes, ids, "float16", rng, all_orders=True)
    f = st["tiling_fields"]
    assert int(f["layerGroups"]) == 1 and int(f["layersPerGroup"]) == 2
    assert st["cores_used"] == 48 and int(f["formerLen"]) == 3  # 128 (block, token) units
    h2d(geo, geo.random_planes(rng, "float16"), host, ids, all_orders=True)
    _, st2 = h2d(geo, geo.random_planes(rng, "float16"), host, ids, staging=1, all_orders=True)
    assert st2["cores_used"] == 48 and int(st2["tiling_fields"]["stagingTokens"]) == 1


def test_public_op_bad_input_on_sim_raises_clear_errors():
    from mindspore import Tensor

    from conftest import to_ms

    mk = public_backend_or_skip("multi_layer_block_transfer")
    rng = np.random.default_rng(32)
    geo = _geo(SEPARATE, "BNSD", L=2, nb=4, bs=4, heads=1, head_size=16)
    caches = [tuple(to_ms(x) for x in layer) for layer in geo.random_planes(rng, "float16")]
    host = [to_ms(np.zeros(host_block_shape(geo, p, 2), np.float16)) for p in range(2)]
    mk.set_backend("sim")
    try:
        with pytest.raises(ValueError, match="block_ids"):
            mk.multi_layer_block_transfer(caches, host, Tensor(np.array([1, 4], np.int64)), direction="h2d")
        with pytest.raises(ValueError, match="host_blocks"):
            mk.multi_layer_block_transfer(caches[:1], host, Tensor(np.array([1, 2], np.int64)), direction="d2h")
        with pytest.raises(ValueError, match="staging"):
            mk.multi_layer_block_transfer(caches, host, Tensor(np.array([1, 2], np.int64)), direction="h2d",
                                          staging=Tensor(np.zeros(8, np.float16)))
    finally:
        mk.set_backend("cpu")


def test_cache_over_2_pow_31_elements_64bit_offsets():
    """A BSND cache of 2^31 + 16 Ki int8 elements (lazily zeroed, in place): the last block moves both ways."""
    nb = 65537
    geo = _geo(SEPARATE, "BSND", L=1, nb=nb, bs=128, heads=1, head_size=256)
    k = np.zeros((nb, 128, 1, 256), np.int8)
    v = np.zeros((nb, 128, 1, 256), np.int8)
    assert k.size > 2**31
    rng = np.random.default_rng(34)
    host = [rng.integers(-128, 128, size=host_block_shape(geo, p, 1), dtype=np.int8) for p in range(2)]
    ids = np.array([nb - 1], np.int64)
    launch(OP, [ids, None, host, [k, v], status()], attrs(geo, "h2d"), gm_copy="never")
    assert_same_bytes(k[nb - 1], host[0][0, :, 0], "last block of key_cache")
    assert_same_bytes(v[nb - 1], host[1][0, :, 0], "last block of value_cache")
    out = [np.zeros_like(h) for h in host]
    launch(OP, [ids, None, out, [k, v], status()], attrs(geo, "d2h"), gm_copy="never")
    for p in range(2):
        assert_same_bytes(out[p], host[p], f"d2h plane {p}")


def test_cache_without_blocks_d2h_writes_zero_blocks():
    rng = np.random.default_rng(37)
    geo = _geo(MLA, "BSND", L=2, nb=0, bs=4, mla=(16, 8))
    caches = flat_caches(geo, geo.random_planes(rng, "float16"))
    host = [random_array(rng, host_block_shape(geo, p, 2), "float16") for p in range(2)]
    ids = np.array([0, -1], np.int64)
    for staging in (None, 2):
        launch(OP, [ids, staging_array(geo, "float16", staging), host, caches, status()], attrs(geo, "d2h"),
               all_orders=True)
        assert not any(h.any() for h in host)
        host = [random_array(rng, host_block_shape(geo, p, 2), "float16") for p in range(2)]
    st = launch(OP, [ids, None, host, caches, status()], attrs(geo, "h2d"))
    assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0
