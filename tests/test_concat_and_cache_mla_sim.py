"""concat_and_cache_mla: the AscendC kernel + tiling through the emulation ("sim"), byte-exact
against a numpy reference (kv_c -> kv_c_cache, k_pe -> k_pe_cache at each slot) and, for the public
op, against the cpu backend."""
import numpy as np
import pytest

from _copy_sim_ref import (INDEX_DTYPES, KV_DTYPES, SOCS, assert_last_launch, assert_same_bytes, cores_of,
                           expect_tiling_error, launch, make_slots, public_backend_or_skip, rand,
                           ref_concat_and_cache_mla, reset_last_launch, status, stable_seed)

OP = "MskvConcatAndCacheMla"


def _case(rng, T, R, P, dtype, sdtype, bs=16, pe_rank=3, out_of_range=True):
    nb = max(2, -(-T // bs) + 2)
    kv_c = rand(rng, (T + 1, R), dtype)
    k_pe = rand(rng, (T + 1, 1, P) if pe_rank == 3 else (T + 1, P), dtype)
    kvcc, kpec = rand(rng, (nb, bs, R), dtype), rand(rng, (nb, bs, P), dtype)
    return kv_c, k_pe, kvcc, kpec, make_slots(rng, T, nb * bs, sdtype, out_of_range=out_of_range)


def _run_and_check(kv_c, k_pe, kvcc, kpec, slots, soc="Ascend910B1", all_orders=False):
    e1, e2 = ref_concat_and_cache_mla(kv_c, k_pe, kvcc, kpec, slots)
    st = launch(OP, [kv_c, k_pe, kvcc, kpec, slots, status()], None, soc, all_orders=all_orders)
    assert_same_bytes(kvcc, e1, f"kv_c_cache ({soc}, {kvcc.dtype})")
    assert_same_bytes(kpec, e2, f"k_pe_cache ({soc}, {kvcc.dtype})")
    return st


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("dtype", KV_DTYPES)
@pytest.mark.parametrize("sdtype", INDEX_DTYPES)
def test_dtype_slot_dtype_deepseek_shapes(dtype, sdtype, soc):
    """The full product op x dtype x slot dtype x SoC (bfloat16 on Ascend310P: a tiling error)."""
    rng = np.random.default_rng(stable_seed(dtype, sdtype, 2))
    args = _case(rng, 49, 512, 64, dtype, sdtype, bs=64, pe_rank=2 + (dtype == "int8"))
    if soc == "Ascend310P3" and dtype == "bfloat16":
        expect_tiling_error(OP, [*args, status()], None, soc, "bfloat16", "Ascend310P")
        return
    st = _run_and_check(*args, soc)
    assert st["tiling_key"] == 100 * (1 + KV_DTYPES.index(dtype)) + 10 * INDEX_DTYPES.index(sdtype)


@pytest.mark.parametrize("soc", SOCS)
def test_every_soc_all_core_orders(soc):
    rng = np.random.default_rng(13)
    st = _run_and_check(*_case(rng, cores_of(soc) + 5, 512, 64, "float16", "int64"), soc, all_orders=True)
    assert st["cores_used"] == cores_of(soc)


@pytest.mark.parametrize("T", [1, 7, 48, 49, 1000, 4097])
def test_token_counts(T):
    rng = np.random.default_rng(T + 2)
    _run_and_check(*_case(rng, T, 32, 16, "float16", "int32", bs=64), "Ascend910B3")


def test_rows_larger_than_ub():
    rng = np.random.default_rng(14)
    st = _run_and_check(*_case(rng, 6, 40000, 64, "float32", "int64", bs=4), "Ascend910B1", all_orders=True)
    f = st["tiling_fields"]
    assert int(f["rowsPerChunk"]) == 0 and int(f["kvPieceElems"]) > 0 and int(f["peSegsPerChunk"]) == 1


def test_unaligned_rope_dim_pad_and_310p():
    rng = np.random.default_rng(15)
    st = _run_and_check(*_case(rng, 37, 512, 3, "int8", "int64"), "Ascend910B1", all_orders=True)
    assert st["tiling_key"] % 10 == 1
    case = _case(rng, 37, 512, 3, "int8", "int64")
    expect_tiling_error(OP, list(case) + [status()], None, "Ascend310P3", "not a multiple of 32 bytes")
    case = _case(rng, 5, 512, 64, "bfloat16", "int64")
    expect_tiling_error(OP, list(case) + [status()], None, "Ascend310P3", "bfloat16")


def test_padding_and_data_movement():
    rng = np.random.default_rng(16)
    T = 4096
    case = _case(rng, T, 512, 64, "bfloat16", "int64", bs=64)
    st = _run_and_check(*case)
    s = case[4].astype(np.int64)
    valid = int(np.count_nonzero((s >= 0) & (s < case[2].shape[0] * 64)))
    minimum = 2 * valid * (512 + 64) * 2 + s.nbytes
    assert st["gm_read_bytes"] + st["gm_write_bytes"] <= 1.05 * minimum
    assert st["cores_used"] == cores_of("Ascend910B1")


def test_seeded_random_sample():
    rng = np.random.default_rng(778)
    for _ in range(10):
        soc, dtype, sdtype = SOCS[rng.integers(len(SOCS))], KV_DTYPES[rng.integers(4)], INDEX_DTYPES[rng.integers(2)]
        R, P = int(rng.choice([64, 128, 256, 512, 520])), int(rng.choice([8, 16, 32, 64]))
        case = _case(rng, int(rng.integers(1, 300)), R, P, dtype, sdtype, bs=int(rng.choice([1, 16, 64])),
                     pe_rank=int(rng.integers(2, 4)))
        item = case[0].dtype.itemsize
        if soc == "Ascend310P3" and (dtype == "bfloat16" or (R * item) % 32 or (P * item) % 32):
            expect_tiling_error(OP, list(case) + [status()], None, soc, "Ascend310P")
            continue
        _run_and_check(*case, soc)


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_op_sim_matches_cpu(mode):
    import mindspore as ms
    from mindspore import Parameter, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("concat_and_cache_mla")
    rng = np.random.default_rng(17)
    kv_c, k_pe, kvcc, kpec, slots = _case(rng, 30, 512, 64, "bfloat16", "int64", out_of_range=False)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.a = Parameter(to_ms(kvcc), name="kv_c_cache")
            self.b = Parameter(to_ms(kpec), name="k_pe_cache")

        def construct(self, x, y, s):
            mk.concat_and_cache_mla(x, y, self.a, self.b, s)
            return s

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                if mode == "graph":
                    net(to_ms(kv_c), to_ms(k_pe), ms.Tensor(slots))
                else:
                    mk.concat_and_cache_mla(to_ms(kv_c), to_ms(k_pe), net.a, net.b, ms.Tensor(slots))
                results[backend] = (to_np(net.a), to_np(net.b))
                if backend == "sim":
                    assert_last_launch(OP, numTokens=30)
        finally:
            mk.set_backend("cpu")
    e1, e2 = ref_concat_and_cache_mla(kv_c, k_pe, kvcc, kpec, slots)
    for backend, (a, b) in results.items():
        assert_same_bytes(a, e1, f"{backend} kv_c_cache"), assert_same_bytes(b, e2, f"{backend} k_pe_cache")
