"""multi_layer_kv_transfer: the AscendC kernel + tiling through the emulation ("sim"), bit-exact against
the numpy reference of tests/_multi_layer_ref.py and, through the public op, against the cpu backend."""
import numpy as np
import pytest

from _copy_sim_ref import (SOCS, assert_last_launch, assert_same_bytes, cores_of, expect_tiling_error, launch,
                           sim_module, platform, public_backend_or_skip, reset_last_launch, stable_seed, status)
from _multi_layer_ref import (DCODE, DSA, DTYPES, FORMAT_LAYOUTS, MERGED, MLA, SEPARATE, Geometry, flat_caches,
                              pack_buffer, ref_gather, ref_scatter, unflat, unpack_buffer)
from conftest import random_array

OP = "MskvMultiLayerKvTransfer"


def buffer_shape(geo, T):
    if geo.fmt in (MERGED, SEPARATE):
        return (2, geo.L, T, geo.hidden[0])
    return (geo.L * T * sum(geo.hidden),)


def attrs(geo, direction, aiv_num=0):
    return {"kv_format": int(geo.fmt), "direction": direction, "cache_layout": geo.layout, "num_layers": geo.L,
            "aiv_num": aiv_num}


def slots_for(rng, geo, T, skip=0, idtype="int64", consecutive=False):
    if consecutive:  # a sequence's tokens: consecutive slots from a random block on
        start = int(rng.integers(0, geo.slots - T + 1))
        s = np.arange(start, start + T, dtype=np.int64)
    else:
        s = rng.permutation(geo.slots)[:T].astype(np.int64)
    if skip:
        idx = rng.choice(T, size=skip, replace=False)
        s[idx] = rng.choice([-1, -5], size=skip)
    return s.astype(idtype)


def d2h(geo, planes, slots, dtype, rng, soc="Ascend910B1", all_orders=False, aiv_num=0):
    """Gather through the emulation into a garbage buffer; returns (buffer, launch stats)."""
    T = len(slots)
    buf = random_array(rng, buffer_shape(geo, T), dtype)
    caches = flat_caches(geo, planes)
    before = [c.copy() for c in caches]
    st = launch(OP, [buf, slots, caches, status()], attrs(geo, "d2h", aiv_num), soc, all_orders=all_orders)
    assert_same_bytes(buf, pack_buffer(geo, ref_gather(geo, planes, slots)), f"d2h buffer ({soc})")
    for i, (c, b) in enumerate(zip(caches, before)):
        assert_same_bytes(c, b, f"cache {i} changed by d2h")
    return buf, st


def h2d(geo, planes, buf, slots, soc="Ascend910B1", all_orders=False, aiv_num=0):
    """Scatter through the emulation into copies of ``planes``; returns (new planes, stats)."""
    T = len(slots)
    caches = flat_caches(geo, [[x.copy() for x in layer] for layer in planes])
    st = launch(OP, [buf, slots, caches, status()], attrs(geo, "h2d", aiv_num), soc, all_orders=all_orders)
    got = unflat(geo, caches)
    exp = ref_scatter(geo, planes, unpack_buffer(geo, buf, T), slots)
    for l in range(geo.L):
        for p in range(geo.P):
            assert_same_bytes(got[l][p], exp[l][p], f"h2d layer {l} plane {p} ({soc})")
    return got, st


def _geo(fmt, layout, L=3, nb=9, bs=8, **kw):
    return Geometry(fmt, layout, num_layers=L, num_blocks=nb, block_size=bs, **kw)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt,layout", FORMAT_LAYOUTS, ids=lambda x: getattr(x, "name", x))
def test_every_format_dtype_layout_round_trip(fmt, layout, dtype):
    rng = np.random.default_rng(stable_seed(int(fmt), layout, dtype))
    geo = _geo(fmt, layout, heads=2, head_size=16, mla=(32, 16), dsa_index=16)
    planes = geo.random_planes(rng, dtype)
    slots = slots_for(rng, geo, 40, skip=5, idtype="int32" if dtype == "int8" else "int64")
    buf, st = d2h(geo, planes, slots, dtype, rng)
    bnsd = layout == "BNSD"
    assert st["tiling_key"] // 10 == 100 * bnsd + 10 * DCODE[dtype] + (dtype != "int8")
    # round trip into fresh caches: every gathered row lands back at its slot, the rest is untouched
    fresh = geo.random_planes(rng, dtype)
    got, _ = h2d(geo, fresh, buf, slots)
    ok = slots >= 0
    for l in range(geo.L):
        for p in range(geo.P):
            assert_same_bytes(geo.rows(got[l][p])[slots[ok]], geo.rows(planes[l][p])[slots[ok]], "round trip")


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("fmt,layout", [(SEPARATE, "BNSD"), (MERGED, "BSND"), (DSA, "BSND")],
                         ids=lambda x: getattr(x, "name", x))
def test_every_soc_and_core_order(soc, fmt, layout):
    rng = np.random.default_rng(stable_seed(soc, int(fmt), layout))
    dtype = "float16"
    geo = _geo(fmt, layout, L=4, nb=20, bs=16, heads=2, head_size=16, mla=(64, 32), dsa_index=16)
    planes = geo.random_planes(rng, dtype)
    slots = slots_for(rng, geo, 100, skip=7)
    buf, st = d2h(geo, planes, slots, dtype, rng, soc, all_orders=True)
    assert st["cores_used"] == st["block_dim"] == cores_of(soc)  # 400 (layer, token) items
    h2d(geo, geo.random_planes(rng, dtype), buf, slots, soc, all_orders=True)


@pytest.mark.parametrize("T", [0, 1, 2, 47, 300])
def test_token_counts_and_many_blocks(T):
    rng = np.random.default_rng(T + 11)
    geo = _geo(SEPARATE, "BSND", L=2, nb=40, bs=8, heads=1, head_size=16)
    planes = geo.random_planes(rng, "bfloat16")
    slots = slots_for(rng, geo, T, skip=min(T, 3))
    buf, st = d2h(geo, planes, slots, "bfloat16", rng, all_orders=T > 0)
    if T == 0:
        assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0
    else:
        assert st["cores_used"] == min(2 * 2 * T, 48)  # fewer (layer, token) items than cores: split by plane too
        assert int(st["tiling_fields"]["planeItems"]) == int(2 * T < 48)
    h2d(geo, geo.random_planes(rng, "bfloat16"), buf, slots, all_orders=T > 0)


def test_consecutive_slots_spanning_blocks_fewer_copies():
    """A sequence's tokens (consecutive slots over many blocks) move with one copy per run, not per token."""
    rng = np.random.default_rng(5)
    geo = _geo(MLA, "BSND", L=2, nb=64, bs=16, mla=(512, 64))
    planes = geo.random_planes(rng, "bfloat16")
    slots = slots_for(rng, geo, 700, consecutive=True)
    buf, st = d2h(geo, planes, slots, "bfloat16", rng, aiv_num=4)
    copies = sum(st["datacopy_calls_per_core"]) + sum(st["datacopy_pad_calls_per_core"])
    assert copies < 700 * 2 * 2 // 4  # far fewer than one copy per token, plane and layer
    h2d(geo, geo.random_planes(rng, "bfloat16"), buf, slots, aiv_num=4)


def test_layers_61_one_token_all_cores_and_mla_dsa_sizes():
    rng = np.random.default_rng(61)
    geo = _geo(DSA, "BSND", L=61, nb=4, bs=4, mla=(512, 64), dsa_index=128)
    planes = geo.random_planes(rng, "bfloat16")
    slots = np.array([6], np.int64)
    buf, st = d2h(geo, planes, slots, "bfloat16", rng)
    assert st["cores_used"] == 48  # 3 * 61 (plane, layer, token) items: split by plane and layer too
    h2d(geo, geo.random_planes(rng, "bfloat16"), buf, slots)
    geo1 = _geo(MLA, "BSND", L=1, nb=4, bs=4, mla=(512, 64))
    p1 = geo1.random_planes(rng, "bfloat16")
    s1 = slots_for(rng, geo1, 16, skip=2)
    buf1, st1 = d2h(geo1, p1, s1, "bfloat16", rng, all_orders=True)
    assert st1["cores_used"] == 32 and st1["tiling_key"] % 10 == 0  # 2 planes x 16; 1024 B / 128 B rows: no pad


def test_aiv_num_caps_cores():
    rng = np.random.default_rng(7)
    geo = _geo(MERGED, "BNSD", L=3, nb=12, bs=8, heads=2, head_size=16)
    planes = geo.random_planes(rng, "float32")
    slots = slots_for(rng, geo, 64, skip=4)
    for aiv in (1, 5, 48, 100):
        buf, st = d2h(geo, planes, slots, "float32", rng, aiv_num=aiv)
        assert st["cores_used"] == st["block_dim"] == min(aiv, 48)
        assert int(st["tiling_fields"]["usedCoreNum"]) == min(aiv, 48)
        h2d(geo, geo.random_planes(rng, "float32"), buf, slots, aiv_num=aiv)


@pytest.mark.parametrize("fmt,layout,hd", [(SEPARATE, "BSND", (3, 5)), (MERGED, "BNSD", (3, 5)),
                                           (MLA, "BSND", (7, 3)), (DSA, "BSND", (5, 3))],
                         ids=["sep-bsnd", "merged-bnsd", "mla", "dsa"])
def test_rows_not_32_byte_multiples_pad_and_310p(fmt, layout, hd):
    rng = np.random.default_rng(stable_seed(int(fmt), layout, hd))
    if fmt in (MLA, DSA):
        geo = _geo(fmt, layout, L=2, nb=6, bs=4, mla=hd, dsa_index=11)
    else:
        geo = _geo(fmt, layout, L=2, nb=6, bs=4, heads=hd[0], head_size=hd[1])
    for dtype in ("int8", "bfloat16", "float32"):
        planes = geo.random_planes(rng, dtype)
        slots = slots_for(rng, geo, 19, skip=3)
        buf, st = d2h(geo, planes, slots, dtype, rng, all_orders=True)
        assert st["tiling_key"] % 10 == 1
        assert st["datacopy_pad_calls_per_core"] and sum(st["datacopy_pad_calls_per_core"]) > 0
        h2d(geo, geo.random_planes(rng, dtype), buf, slots, all_orders=True)
    planes = geo.random_planes(rng, "float16")
    slots = slots_for(rng, geo, 5)
    buf = np.zeros(buffer_shape(geo, 5), np.float16)
    expect_tiling_error(OP, [buf, slots, flat_caches(geo, planes), status()], attrs(geo, "d2h"), "Ascend310P3",
                        "not a multiple of 32 bytes")


def test_rows_larger_than_ub():
    rng = np.random.default_rng(8)
    # BSND rows of 8 heads x 4096 fp32 = 128 KiB > one UB buffer: pieces; BNSD heads of 16 KiB: groups of heads
    for layout in ("BSND", "BNSD"):
        geo = _geo(SEPARATE, layout, L=2, nb=3, bs=2, heads=8, head_size=4096)
        planes = geo.random_planes(rng, "float32")
        slots = slots_for(rng, geo, 4, skip=1)
        buf, st = d2h(geo, planes, slots, "float32", rng)
        f = st["tiling_fields"]
        assert f["tokensPerInnerLoop"].startswith("[0")
        h2d(geo, geo.random_planes(rng, "float32"), buf, slots)


def test_tiling_fields_and_data_movement():
    rng = np.random.default_rng(9)
    geo = _geo(SEPARATE, "BSND", L=4, nb=80, bs=16, heads=8, head_size=128)  # Llama-like rows, bf16
    planes = geo.random_planes(rng, "bfloat16")
    T = 600
    slots = slots_for(rng, geo, T)
    buf, st = d2h(geo, planes, slots, "bfloat16", rng)
    f = st["tiling_fields"]
    ub = int(platform("Ascend910B1")["ub_size"])
    row = 8 * 128 * 2
    loop = int(f["perLoopBuffSize"])
    assert int(f["numLayers"]) == 4 and int(f["numTokens"]) == T and int(f["numPlanes"]) == 2
    assert int(f["tensorsPerLayer"]) == 2 and int(f["direction"]) == 0 and int(f["zeroBuffSize"]) == 4096
    per_core = 4 * T // 48  # (layer, token) items of a core (every plane)
    assert int(f["planeItems"]) == 0
    assert int(f["usedCoreNum"]) == 48 and int(f["formerLen"]) == per_core and int(f["tailLen"]) == per_core
    rows = (ub - 256 - 1024 - 4096) // 2 // row
    assert f["tokensPerInnerLoop"] == str([min(rows, per_core)] * 2 + [0] * 4)
    assert int(f["maxTokensPerLoop"]) == min(rows, per_core)
    assert loop == min(rows, per_core) * row and 2 * loop + 4096 <= ub
    assert f["bufOffset"] == str([0, 4 * T * 1024, 0, 0, 0, 0])
    minimum = 2 * 2 * 4 * T * row + slots.nbytes
    total = st["gm_read_bytes"] + st["gm_write_bytes"]
    assert total <= 1.05 * minimum, total / minimum
    assert max(st["ub_bytes_per_core"]) <= ub


def test_tiling_rejects_bad_shapes_cleanly():
    rng = np.random.default_rng(10)
    geo = _geo(SEPARATE, "BSND", L=2, nb=4, bs=4, heads=1, head_size=16)
    planes = geo.random_planes(rng, "float16")
    caches = flat_caches(geo, planes)
    slots = slots_for(rng, geo, 5)
    good = np.zeros(buffer_shape(geo, 5), np.float16)
    expect_tiling_error(OP, [np.ascontiguousarray(good[:, :, :4]), slots, caches, status()], attrs(geo, "d2h"), "Ascend910B1", "buffer")
    expect_tiling_error(OP, [good, slots, caches[:3], status()], attrs(geo, "d2h"), "Ascend910B1", "kv_caches")
    mixed = caches[:3] + [caches[3].astype(np.float32)]
    expect_tiling_error(OP, [good, slots, mixed, status()], attrs(geo, "d2h"), "Ascend910B1", "dtype")
    a = attrs(geo, "d2h")
    a["cache_layout"] = "BNSD"
    g2 = _geo(MLA, "BSND", L=2, nb=4, bs=4)
    expect_tiling_error(OP, [np.zeros(buffer_shape(g2, 5), np.float16), slots, flat_caches(g2, g2.random_planes(
        rng, "float16")), status()], dict(attrs(g2, "d2h"), cache_layout="BNSD"), "Ascend910B1", "BSND")
    # an int code the OpDef does not define is a tiling error; a name that is no direction is refused before
    expect_tiling_error(OP, [good, slots, caches, status()], dict(attrs(geo, "d2h"), direction=3), "Ascend910B1",
                        "direction: expected 1 (h2d) or 2 (d2h), got 3")
    with pytest.raises(ValueError, match=r"multi_layer_kv_transfer: attribute 'direction': expected one of "
                                         r"\('d2h', 'h2d'\) or its int code \(h2d = 1, d2h = 2\), got 'up'"):
        launch(OP, [good, slots, caches, status()], dict(attrs(geo, "d2h"), direction="up"))
    expect_tiling_error(OP, [good, slots, caches, status()], dict(attrs(geo, "d2h"), aiv_num=-1), "Ascend910B1",
                        "aiv_num")
    # zero-sized caches / rows: a no-op launch
    g0 = _geo(SEPARATE, "BSND", L=2, nb=0, bs=4, heads=1, head_size=16)
    st = launch(OP, [np.zeros((2, 2, 0, 16), np.float16), np.zeros(0, np.int64), flat_caches(
        g0, g0.random_planes(rng, "float16")), status()], attrs(g0, "h2d"))
    assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_op_sim_matches_cpu(mode):
    from mindspore import Parameter, ParameterTuple, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("multi_layer_kv_transfer")
    rng = np.random.default_rng(stable_seed(mode, "public"))
    geo = _geo(DSA, "BSND", L=3, nb=8, bs=8, mla=(64, 32), dsa_index=16)
    dtype = "bfloat16"
    planes = geo.random_planes(rng, dtype)
    slots = slots_for(rng, geo, 30, skip=3)
    flat = flat_caches(geo, planes)
    T = len(slots)

    class Net(nn.Cell):
        def __init__(self, arrays):
            super().__init__()
            self.kv = ParameterTuple(Parameter(to_ms(c, dtype), name=f"kv{i}") for i, c in enumerate(arrays))

        def construct(self, buf, s):
            mk.multi_layer_kv_transfer(buf, self.kv, s, kv_format="DSA_KV", direction="d2h")
            return buf

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net(flat)
                buf = to_ms(np.zeros(buffer_shape(geo, T), np.float32), dtype)
                if mode == "graph":
                    buf = Parameter(buf, name="buf")  # the d2h target: a Parameter in a graph
                    out = net(buf, Tensor(slots))
                else:
                    mk.multi_layer_kv_transfer(buf, list(net.kv), Tensor(slots), kv_format="DSA_KV", direction="d2h")
                    out = buf
                results[backend] = to_np(out)
                if backend == "sim":
                    assert_last_launch(OP, numLayers=3, numTokens=T, numPlanes=3)
                # h2d back into fresh Parameters
                fresh = flat_caches(geo, geo.random_planes(rng, dtype))
                net2 = Net(fresh)
                if mode == "graph":
                    class Back(nn.Cell):
                        def __init__(self, inner):
                            super().__init__()
                            self.kv = inner.kv

                        def construct(self, b, s):
                            mk.multi_layer_kv_transfer(b, self.kv, s, kv_format="DSA_KV", direction="h2d")
                            return s
                    Back(net2)(to_ms(results[backend], dtype), Tensor(slots))
                else:
                    mk.multi_layer_kv_transfer(to_ms(results[backend], dtype), list(net2.kv), Tensor(slots),
                                               kv_format="DSA_KV", direction="h2d")
                got = unflat(geo, [to_np(p) for p in net2.kv])
                exp = ref_scatter(geo, unflat(geo, fresh), unpack_buffer(geo, results[backend], T), slots)
                for l in range(geo.L):
                    for p in range(geo.P):
                        assert_same_bytes(got[l][p], exp[l][p], f"{backend} h2d layer {l} plane {p}")
        finally:
            mk.set_backend("cpu")
    expected = pack_buffer(geo, ref_gather(geo, planes, slots))
    for backend, out in results.items():
        assert_same_bytes(out, expected, f"{backend} d2h buffer")


def test_public_op_bad_input_on_sim_raises_clear_errors():
    """On the sim backend the public op rejects bad input before any launch, as on cpu."""
    from mindspore import Tensor

    from conftest import to_ms

    mk = public_backend_or_skip("multi_layer_kv_transfer")
    rng = np.random.default_rng(31)
    geo = _geo(SEPARATE, "BSND", L=2, nb=4, bs=4, heads=1, head_size=16)
    planes = geo.random_planes(rng, "float16")
    caches = [tuple(to_ms(x) for x in layer) for layer in planes]
    slots = Tensor(np.array([1, 5, -1], np.int64))
    mk.set_backend("sim")
    try:
        with pytest.raises(ValueError, match="argument 'buffer'"):
            mk.multi_layer_kv_transfer(to_ms(np.zeros((2, 2, 4, 16), np.float16)), caches, slots,
                                       kv_format="SEPARATE_KV", direction="d2h")
        with pytest.raises(ValueError, match="argument 'buffer'"):  # layer count mismatch
            mk.multi_layer_kv_transfer(to_ms(np.zeros((2, 3, 3, 16), np.float16)), caches, slots,
                                       kv_format="SEPARATE_KV", direction="d2h")
        mixed = [caches[0], (caches[1][0], to_ms(planes[1][1].astype(np.float32)))]
        with pytest.raises(TypeError, match="dtype"):
            mk.multi_layer_kv_transfer(to_ms(np.zeros((2, 2, 3, 16), np.float16)), mixed, slots,
                                       kv_format="SEPARATE_KV", direction="d2h")
        with pytest.raises(ValueError, match="slot_mapping"):
            mk.multi_layer_kv_transfer(to_ms(np.zeros((2, 2, 3, 16), np.float16)), caches,
                                       Tensor(np.array([1, 16, 2], np.int64)), kv_format="SEPARATE_KV",
                                       direction="h2d")
    finally:
        mk.set_backend("cpu")


def test_cache_over_2_pow_31_elements_64bit_offsets():
    """MLA kv_c cache of 2^31 + 32 Ki int8 elements (lazily zeroed, used in place: gm_copy="never"):
    the last slot is written (h2d) and read back (d2h) through 64-bit offsets."""
    nb, hid = 65537, 32768
    geo = _geo(MLA, "BSND", L=1, nb=nb, bs=1, mla=(hid, 32))
    kv_c = np.zeros((nb, 1, hid), np.int8)  # calloc: pages materialise only where written
    k_pe = np.zeros((nb, 1, 32), np.int8)
    assert kv_c.size > 2**31
    slots = np.array([nb - 1, -1, 0], np.int64)
    rng = np.random.default_rng(33)
    rows_c = rng.integers(-128, 128, size=(3, hid), dtype=np.int8)
    rows_pe = rng.integers(-128, 128, size=(3, 32), dtype=np.int8)
    buf = np.concatenate([rows_c.reshape(-1), rows_pe.reshape(-1)])
    launch(OP, [buf, slots, [kv_c, k_pe], status()], attrs(geo, "h2d"), gm_copy="never")
    assert_same_bytes(kv_c[nb - 1, 0], rows_c[0], "last slot (byte offset ~2^31)")
    assert_same_bytes(kv_c[0, 0], rows_c[2], "slot 0")
    assert_same_bytes(k_pe[nb - 1, 0], rows_pe[0], "k_pe last slot")
    out = np.full_like(buf, 7)
    launch(OP, [out, slots, [kv_c, k_pe], status()], attrs(geo, "d2h"), gm_copy="never")
    exp = buf.copy()
    exp[hid:2 * hid] = 0
    exp[3 * hid + 32:3 * hid + 64] = 0
    assert_same_bytes(out, exp, "d2h of the last slot")
    assert np.count_nonzero(kv_c[1:nb - 1]) == 0 and kv_c.nbytes > 2**31


def test_slots_past_the_cache_zero_in_d2h_skipped_in_h2d():
    """Graph-mode input (PyNative rejects it): a slot >= num_blocks * block_size is treated like -1."""
    rng = np.random.default_rng(35)
    geo = _geo(MERGED, "BNSD", L=2, nb=5, bs=4, heads=2, head_size=16)
    planes = geo.random_planes(rng, "float16")
    slots = np.array([3, 20, 7, 1 << 40, -1, 19], np.int64)  # 20 slots: 20 and 2^40 are past the end
    clipped = np.where((slots >= 0) & (slots < geo.slots), slots, -1)
    buf = random_array(rng, buffer_shape(geo, 6), "float16")
    launch(OP, [buf, slots, flat_caches(geo, planes), status()], attrs(geo, "d2h"), all_orders=True)
    assert_same_bytes(buf, pack_buffer(geo, ref_gather(geo, planes, clipped)), "d2h")
    fresh = geo.random_planes(rng, "float16")
    caches = flat_caches(geo, [[x.copy() for x in layer] for layer in fresh])
    launch(OP, [buf, slots, caches, status()], attrs(geo, "h2d"), all_orders=True)
    exp = ref_scatter(geo, fresh, unpack_buffer(geo, buf, 6), clipped)
    got = unflat(geo, caches)
    for l in range(geo.L):
        for p in range(geo.P):
            assert_same_bytes(got[l][p], exp[l][p], f"h2d layer {l} plane {p}")


def test_cache_without_slots_d2h_writes_zero_rows():
    """num_blocks = 0: h2d is a no-op launch; d2h still zeroes every buffer row (every slot is skipped)."""
    rng = np.random.default_rng(36)
    g0 = _geo(SEPARATE, "BNSD", L=2, nb=0, bs=4, heads=2, head_size=16)
    caches = flat_caches(g0, g0.random_planes(rng, "float32"))
    buf = random_array(rng, buffer_shape(g0, 3), "float32")
    slots = np.array([-1, -1, 2], np.int64)  # 2 is past the end of an empty cache
    st = launch(OP, [buf, slots, caches, status()], attrs(g0, "d2h"), all_orders=True)
    assert st["cores_used"] >= 1 and not buf.any()
    st = launch(OP, [buf, slots, caches, status()], attrs(g0, "h2d"))
    assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_aiv_num_caps_cores(mode):
    """The public ops' keyword aiv_num reaches the kernel: at most that many cores are used (PyNative and
    GRAPH_MODE), the rows are right; a bad value is a ValueError naming 'aiv_num'."""
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode

    mk = public_backend_or_skip("multi_layer_kv_transfer")
    sim = sim_module()
    nb, bs, H, D, T = 8, 16, 2, 16, 100
    rng = np.random.default_rng(21)
    buf = rng.standard_normal((2, 1, T, H * D)).astype(np.float32)
    kc = Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name="aiv_k")
    vc = Parameter(Tensor(np.zeros((nb, bs, H, D), np.float32)), name="aiv_v")
    slots = Tensor(np.arange(T, dtype=np.int32))

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.k, self.v = kc, vc

        def construct(self, b, s):
            mk.multi_layer_kv_transfer(b, [(self.k, self.v)], s, kv_format="SEPARATE_KV", direction="h2d", aiv_num=3)
            return s

    mk.set_backend("sim")
    try:
        if mode == "graph":
            with ms_mode(ms.GRAPH_MODE):
                Net()(Tensor(buf), slots)
        else:
            mk.multi_layer_kv_transfer(Tensor(buf), [(kc, vc)], slots, kv_format="SEPARATE_KV", direction="h2d",
                                       aiv_num=3)
        got = kc.asnumpy()
        st = sim.last_launch_stats()
        assert st["op"] == "MskvMultiLayerKvTransfer" and st["cores_used"] == 3 <= st["block_dim"] <= 3, st
        np.testing.assert_array_equal(got.reshape(-1, H * D)[:T], buf[0, 0])
        for bad in (-1, 1.5, True, "2"):
            with pytest.raises(ValueError, match="argument 'aiv_num'"):
                mk.multi_layer_kv_transfer(Tensor(buf), [(kc, vc)], slots, kv_format="SEPARATE_KV", direction="h2d",
                                           aiv_num=bad)
    finally:
        mk.set_backend("cpu")
