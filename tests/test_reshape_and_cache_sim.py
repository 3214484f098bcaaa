"""reshape_and_cache: the AscendC kernel + op_host tiling run through the emulation ("sim").

Byte-exact against an independent numpy reference, for every dtype x layout x slot dtype, every
target SoC, uneven token splits, rows larger than UB, DataCopyPad rows (and their rejection on
Ascend310P), slot padding, all core orders, and the data-movement targets; then the public MindSpore
op with set_backend("sim") against set_backend("cpu") in PyNative and GRAPH_MODE.
"""
import numpy as np
import pytest

from _copy_sim_ref import (INDEX_DTYPES, KV_DTYPES, SOCS, assert_last_launch, assert_same_bytes, cores_of,
                           expect_tiling_error, launch, make_slots, platform, public_backend_or_skip, rand,
                           ref_reshape_and_cache, reset_last_launch, status, stable_seed)

OP = "MskvReshapeAndCache"


def _case(rng, T, H, D, layout, dtype, sdtype, bs=16, extra_rows=3, nb=None, flat_value=True, out_of_range=True):
    nb = nb or max(2, -(-T // bs) + 2)
    shape = (nb, bs, H, D) if layout == "BSND" else (nb, H, bs, D)
    key = rand(rng, (T + extra_rows, H, D), dtype)
    value = rand(rng, (T + extra_rows, H * D) if flat_value else (T + extra_rows, H, D), dtype)
    kc, vc = rand(rng, shape, dtype), rand(rng, shape, dtype)
    slots = make_slots(rng, T, nb * bs, sdtype, out_of_range=out_of_range)
    return key, value, kc, vc, slots


def _run_and_check(key, value, kc, vc, slots, layout, soc="Ascend910B1", all_orders=False):
    ek, ev = ref_reshape_and_cache(key, value, kc, vc, slots, layout)
    st = launch(OP, [key, value, kc, vc, slots, status()], {"cache_layout": layout}, soc, all_orders=all_orders)
    assert_same_bytes(kc, ek, f"key_cache ({soc}, {layout}, {kc.dtype})")
    assert_same_bytes(vc, ev, f"value_cache ({soc}, {layout}, {kc.dtype})")
    return st


def _min_gm_bytes(key, slots, num_slots, H, D, planes=2):
    s = np.asarray(slots, dtype=np.int64)
    valid = int(np.count_nonzero((s >= 0) & (s < num_slots)))
    return 2 * planes * valid * H * D * key.dtype.itemsize + slots.nbytes


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("dtype", KV_DTYPES)
@pytest.mark.parametrize("sdtype", INDEX_DTYPES)
def test_dtype_layout_slot_dtype(dtype, layout, sdtype, soc):
    """The full product op x dtype x layout x slot dtype x SoC (bfloat16 on Ascend310P: a tiling error)."""
    rng = np.random.default_rng(stable_seed(dtype, layout, sdtype))
    args = _case(rng, 49, 4, 32, layout, dtype, sdtype)
    if soc == "Ascend310P3" and dtype == "bfloat16":
        expect_tiling_error(OP, [*args, status()], {"cache_layout": layout}, soc, "bfloat16", "Ascend310P")
        return
    st = _run_and_check(*args, layout, soc)
    assert st["tiling_key"] == ({"BSND": 0, "BNSD": 1000}[layout] + 100 * (1 + KV_DTYPES.index(dtype))
                                + 10 * INDEX_DTYPES.index(sdtype))


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
def test_every_soc_all_core_orders(soc, layout):
    rng = np.random.default_rng(7)
    T = cores_of(soc) + 1  # one core takes two tokens, the others one
    st = _run_and_check(*_case(rng, T, 2, 64, layout, "float16", "int64"), layout, soc, all_orders=True)
    assert st["block_dim"] == st["cores_used"] == cores_of(soc)


@pytest.mark.parametrize("T", [1, 7, 41, 49, 1001, 4097])
def test_token_counts_uneven_split(T):
    soc = "Ascend910B3"  # 40 cores: fewer tokens than cores (1, 7) or counts that do not divide by 40
    assert T < 40 or T % 40 != 0
    rng = np.random.default_rng(T)
    key, value, kc, vc, slots = _case(rng, T, 1, 16, "BSND", "float16", "int32", bs=128)
    st = _run_and_check(key, value, kc, vc, slots, "BSND", soc)
    cores = cores_of(soc)
    assert st["block_dim"] == min(T, cores)
    f = st["tiling_fields"]
    former, flen, tlen = int(f["formerNum"]), int(f["formerLen"]), int(f["tailLen"])
    assert former * flen + (st["block_dim"] - former) * tlen == T and flen - tlen in (0, 1)


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
@pytest.mark.parametrize("layout,H,D", [("BSND", 64, 1024), ("BNSD", 2, 40960), ("BNSD", 200, 256)])
def test_rows_larger_than_ub(soc, layout, H, D):
    # float32 rows of 256 KiB / 160 KiB heads / 200 KiB rows: more than one UB buffer on every SoC.
    rng = np.random.default_rng(H)
    st = _run_and_check(*_case(rng, 5, H, D, layout, "float32", "int64", bs=4, extra_rows=0), layout, soc)
    f = st["tiling_fields"]
    assert int(f["rowsPerChunk"]) == 0
    assert max(st["ub_bytes_per_core"]) <= 2 * int(f["bufferBytes"]) <= platform(soc)["ub_size"]


@pytest.mark.parametrize("layout,H,D,dtype", [("BNSD", 4, 8, "float16"), ("BSND", 3, 20, "int8"),
                                              ("BNSD", 3, 5, "float32"), ("BSND", 1, 7, "bfloat16")])
def test_unaligned_rows_use_datacopypad(layout, H, D, dtype):
    rng = np.random.default_rng(D)
    st = _run_and_check(*_case(rng, 61, H, D, layout, dtype, "int32"), layout, "Ascend910_9391", all_orders=True)
    assert st["tiling_key"] % 10 == 1
    assert sum(st["datacopy_pad_calls_per_core"]) > 0 and sum(st["datacopy_calls_per_core"]) == 0


@pytest.mark.parametrize("layout,H,D", [("BNSD", 4, 8), ("BSND", 3, 5)])
def test_unaligned_rows_rejected_on_310p(layout, H, D):
    rng = np.random.default_rng(1)
    key, value, kc, vc, slots = _case(rng, 9, H, D, layout, "float16", "int32")
    expect_tiling_error(OP, [key, value, kc, vc, slots, status()], {"cache_layout": layout}, "Ascend310P3",
                        "not a multiple of 32 bytes", "DataCopyPad")


def test_bfloat16_rejected_on_310p():
    rng = np.random.default_rng(2)
    key, value, kc, vc, slots = _case(rng, 9, 2, 16, "BSND", "bfloat16", "int64")
    expect_tiling_error(OP, [key, value, kc, vc, slots, status()], {"cache_layout": "BSND"}, "Ascend310P3",
                        "bfloat16", "Ascend310P")


def test_slot_padding_out_of_range_and_last_slot():
    rng = np.random.default_rng(3)
    T, nb, bs, H, D = 40, 4, 16, 2, 16
    key, value, kc, vc, _ = _case(rng, T, H, D, "BNSD", "float16", "int64", bs=bs, nb=nb)
    slots = np.full(T, -1, dtype=np.int64)
    slots[1::4] = [-2, -(1 << 40), -1000, -7, -1, -3, -5, -9, -11, -13]
    slots[3] = nb * bs - 1          # last slot of the last block
    slots[5] = nb * bs              # first slot past the cache: skipped
    slots[7] = (1 << 62)            # far past the cache: skipped
    slots[9] = 0
    _run_and_check(key, value, kc, vc, slots, "BNSD", all_orders=True)
    # all padding: nothing written at all
    kc0, vc0 = kc.copy(), vc.copy()
    st = launch(OP, [key, value, kc, vc, np.full(T, -1, np.int32), status()], {"cache_layout": "BNSD"})
    assert_same_bytes(kc, kc0, "key_cache"), assert_same_bytes(vc, vc0, "value_cache")
    assert st["gm_write_bytes"] == 0


def test_zero_tokens_is_a_noop_launch():
    rng = np.random.default_rng(4)
    key, value, kc, vc, slots = _case(rng, 0, 2, 16, "BSND", "float32", "int64")
    kc0 = kc.copy()
    st = launch(OP, [key, value, kc, vc, slots, status()], {"cache_layout": "BSND"}, all_orders=True)
    assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0
    assert_same_bytes(kc, kc0, "key_cache")


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
def test_data_movement_minimum_and_all_cores_busy(soc, layout):
    # Llama-3-8B-like rows (8 KV heads x 128, bf16; fp16 on 310P), 48 <= T.
    rng = np.random.default_rng(5)
    dtype = "float16" if soc == "Ascend310P3" else "bfloat16"
    T, H, D = 301, 8, 128
    key, value, kc, vc, slots = _case(rng, T, H, D, layout, dtype, "int64", bs=128)
    st = _run_and_check(key, value, kc, vc, slots, layout, soc)
    total = st["gm_read_bytes"] + st["gm_write_bytes"]
    minimum = _min_gm_bytes(key, slots, kc.shape[0] * 128, H, D)
    assert total <= 1.05 * minimum, (total, minimum)
    assert st["cores_used"] == st["block_dim"] == cores_of(soc)


def test_tiling_rejects_inconsistent_inputs():
    rng = np.random.default_rng(22)
    key, value, kc, vc, slots = _case(rng, 9, 2, 16, "BSND", "float16", "int64", extra_rows=0)
    args = lambda **kw: [kw.get("key", key), kw.get("value", value), kw.get("kc", kc), kw.get("vc", vc),  # noqa: E731
                         kw.get("slots", slots), status()]
    expect_tiling_error(OP, args(key=key[:5]), {"cache_layout": "BSND"}, "Ascend910B1", "key", "at least")
    expect_tiling_error(OP, args(value=rand(rng, (9, 2, 8), "float16")), {"cache_layout": "BSND"}, "Ascend910B1",
                        "value", "elements per token")
    expect_tiling_error(OP, args(vc=kc[:1].copy()), {"cache_layout": "BSND"}, "Ascend910B1", "value_cache")
    expect_tiling_error(OP, args(), {"cache_layout": -1}, "Ascend910B1", "cache_layout: expected 0 (BSND), 1 (BNSD) or 2 (NZ), got -1")
    with pytest.raises(ValueError, match=r"reshape_and_cache: attribute 'cache_layout': expected one of \('BSND', 'BNSD', 'NZ'\) "
                                         r"or its int code \(BSND = 0, BNSD = 1, NZ = 2\), got 'NHD'"):
        expect_tiling_error(OP, args(), {"cache_layout": "NHD"}, "Ascend910B1", "cache_layout")


def test_offsets_beyond_2_31_elements():
    # int8 cache of 2^31 + 2^16 elements: a slot in the last block lands past 2^31 elements.
    H, D, bs = 1, 128, 128
    nb = (1 << 31) // (bs * H * D) + 4
    try:
        kc = np.zeros((nb, bs, H, D), dtype=np.int8)  # untouched pages stay unallocated
        vc = np.zeros((nb, bs, H, D), dtype=np.int8)
    except MemoryError:
        pytest.skip("not enough memory for two 2 GiB caches")
    rng = np.random.default_rng(6)
    key, value = rand(rng, (3, H, D), "int8"), rand(rng, (3, H, D), "int8")
    slots = np.array([nb * bs - 1, -1, (nb - 2) * bs + 5], dtype=np.int64)
    launch(OP, [key, value, kc, vc, slots, status()], {"cache_layout": "BSND"}, gm_copy="never")
    for t in (0, 2):
        b, o = divmod(int(slots[t]), bs)
        assert b * bs * H * D > (1 << 31)
        assert_same_bytes(kc[b, o], key[t], "key row"), assert_same_bytes(vc[b, o], value[t], "value row")
    assert not kc[:nb - 2].any() and not vc[: nb - 2].any()


def test_seeded_random_sample():
    rng = np.random.default_rng(20240611)
    for _ in range(16):
        soc = SOCS[rng.integers(len(SOCS))]
        layout = ("BSND", "BNSD")[rng.integers(2)]
        dtype = KV_DTYPES[rng.integers(4)]
        sdtype = INDEX_DTYPES[rng.integers(2)]
        H, D, bs = int(rng.integers(1, 9)), int(rng.choice([8, 16, 24, 64, 80, 128, 130])), int(rng.choice([1, 3, 16]))
        T = int(rng.integers(1, 300))
        case = _case(rng, T, H, D, layout, dtype, sdtype, bs=bs)
        seg = (D if layout == "BNSD" else H * D) * np.dtype(case[0].dtype).itemsize
        if soc == "Ascend310P3" and (dtype == "bfloat16" or seg % 32):
            expect_tiling_error(OP, list(case) + [status()], {"cache_layout": layout}, soc, "Ascend310P")
            continue
        _run_and_check(*case, layout, soc)


# ------------------------------------------------------------------------------------- public op
@pytest.mark.parametrize("mode", ["pynative", "graph"])
@pytest.mark.parametrize("layout,dtype", [("BSND", "bfloat16"), ("BNSD", "int8")])
def test_public_op_sim_matches_cpu(mode, layout, dtype):
    import mindspore as ms
    from mindspore import Parameter, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("reshape_and_cache")
    rng = np.random.default_rng(11)
    key, value, kc, vc, slots = _case(rng, 50, 2, 32, layout, dtype, "int32", flat_value=False, out_of_range=False)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(to_ms(kc), name="key_cache")
            self.vc = Parameter(to_ms(vc), name="value_cache")

        def construct(self, k, v, s):
            mk.reshape_and_cache(k, v, self.kc, self.vc, s, layout)
            return s

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                if mode == "graph":
                    net(to_ms(key), to_ms(value), ms.Tensor(slots))
                else:
                    mk.reshape_and_cache(to_ms(key), to_ms(value), net.kc, net.vc, ms.Tensor(slots), layout)
                results[backend] = (to_np(net.kc), to_np(net.vc))
                if backend == "sim":
                    assert_last_launch(OP, numTokens=50)
        finally:
            mk.set_backend("cpu")
    ek, ev = ref_reshape_and_cache(key, value, kc, vc, slots, layout)
    for backend, (k_out, v_out) in results.items():
        assert_same_bytes(k_out, ek, f"{backend} key_cache"), assert_same_bytes(v_out, ev, f"{backend} value_cache")
