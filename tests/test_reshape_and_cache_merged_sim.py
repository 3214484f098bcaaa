"""reshape_and_cache_merged: the AscendC kernel + tiling through the emulation ("sim"), byte-exact
against a numpy reference (keys into kv_cache[0], values into kv_cache[1]) and, for the public op,
against the cpu backend."""
import numpy as np
import pytest

from _copy_sim_ref import (INDEX_DTYPES, KV_DTYPES, SOCS, assert_last_launch, assert_same_bytes, cores_of,
                           expect_tiling_error, launch, make_slots, public_backend_or_skip, rand,
                           ref_reshape_and_cache_merged, reset_last_launch, status, stable_seed)

OP = "MskvReshapeAndCacheMerged"


def _case(rng, T, H, D, layout, dtype, sdtype, bs=16, out_of_range=True):
    nb = max(2, -(-T // bs) + 2)
    shape = (2, nb, bs, H, D) if layout == "BSND" else (2, nb, H, bs, D)
    key, value = rand(rng, (T + 2, H, D), dtype), rand(rng, (T + 2, H * D), dtype)
    kv = rand(rng, shape, dtype)
    return key, value, kv, make_slots(rng, T, nb * bs, sdtype, out_of_range=out_of_range)


def _run_and_check(key, value, kv, slots, layout, soc="Ascend910B1", all_orders=False):
    expected = ref_reshape_and_cache_merged(key, value, kv, slots, layout)
    st = launch(OP, [key, value, kv, slots, status()], {"cache_layout": layout}, soc, all_orders=all_orders)
    assert_same_bytes(kv, expected, f"kv_cache ({soc}, {layout}, {kv.dtype})")
    return st


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("dtype", KV_DTYPES)
@pytest.mark.parametrize("sdtype", INDEX_DTYPES)
def test_dtype_layout_slot_dtype(dtype, layout, sdtype, soc):
    """The full product op x dtype x layout x slot dtype x SoC (bfloat16 on Ascend310P: a tiling error)."""
    rng = np.random.default_rng(stable_seed(dtype, layout, sdtype, 1))
    args = _case(rng, 48, 2, 64, layout, dtype, sdtype)
    if soc == "Ascend310P3" and dtype == "bfloat16":
        expect_tiling_error(OP, [*args, status()], {"cache_layout": layout}, soc, "bfloat16", "Ascend310P")
        return
    _run_and_check(*args, layout, soc)


@pytest.mark.parametrize("soc", SOCS)
def test_every_soc_all_core_orders(soc):
    rng = np.random.default_rng(8)
    st = _run_and_check(*_case(rng, 2 * cores_of(soc) + 3, 4, 16, "BNSD", "float16", "int32"), "BNSD", soc,
                        all_orders=True)
    assert st["cores_used"] == cores_of(soc)


@pytest.mark.parametrize("T", [1, 7, 48, 49, 1000, 4097])
def test_token_counts(T):
    rng = np.random.default_rng(T + 1)
    _run_and_check(*_case(rng, T, 1, 32, "BSND", "int8", "int64", bs=64), "BSND", "Ascend910B3")


def test_rows_larger_than_ub_and_unaligned():
    rng = np.random.default_rng(9)
    st = _run_and_check(*_case(rng, 3, 1, 70000, "BSND", "float32", "int64", bs=2), "BSND")
    assert int(st["tiling_fields"]["pieceElems"]) > 0
    st = _run_and_check(*_case(rng, 33, 3, 6, "BNSD", "bfloat16", "int32"), "BNSD", "Ascend910_9391", all_orders=True)
    assert st["tiling_key"] % 10 == 1
    key, value, kv, slots = _case(rng, 33, 3, 6, "BNSD", "float16", "int32")
    expect_tiling_error(OP, [key, value, kv, slots, status()], {"cache_layout": "BNSD"}, "Ascend310P3", "DataCopyPad")


def test_padding_only_and_zero_tokens():
    rng = np.random.default_rng(10)
    key, value, kv, _ = _case(rng, 20, 2, 16, "BSND", "float16", "int64")
    kv0 = kv.copy()
    st = launch(OP, [key, value, kv, np.full(20, -1, np.int64), status()], {"cache_layout": "BSND"})
    assert st["gm_write_bytes"] == 0
    assert_same_bytes(kv, kv0, "kv_cache after an all-padding call")
    key, value, kv, slots = _case(rng, 0, 2, 16, "BSND", "float16", "int64")
    kv0 = kv.copy()
    st = launch(OP, [key, value, kv, slots, status()], {"cache_layout": "BSND"}, all_orders=True)
    assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0
    assert_same_bytes(kv, kv0, "kv_cache after T = 0")


def test_seeded_random_sample():
    rng = np.random.default_rng(777)
    for _ in range(10):
        soc, layout = SOCS[rng.integers(len(SOCS))], ("BSND", "BNSD")[rng.integers(2)]
        dtype, sdtype = KV_DTYPES[rng.integers(4)], INDEX_DTYPES[rng.integers(2)]
        H, D, bs, T = int(rng.integers(1, 6)), int(rng.choice([16, 32, 48, 100, 128])), int(rng.choice([2, 16])), \
            int(rng.integers(1, 200))
        case = _case(rng, T, H, D, layout, dtype, sdtype, bs=bs)
        seg = (D if layout == "BNSD" else H * D) * case[0].dtype.itemsize
        if soc == "Ascend310P3" and (dtype == "bfloat16" or seg % 32):
            expect_tiling_error(OP, list(case) + [status()], {"cache_layout": layout}, soc, "Ascend310P")
            continue
        _run_and_check(*case, layout, soc)


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_op_sim_matches_cpu(mode):
    import mindspore as ms
    from mindspore import Parameter, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("reshape_and_cache_merged")
    rng = np.random.default_rng(12)
    key, value, kv, slots = _case(rng, 40, 2, 32, "BNSD", "float16", "int64", out_of_range=False)
    value = value.reshape(value.shape[0], 2, 32)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kv = Parameter(to_ms(kv), name="kv_cache")

        def construct(self, k, v, s):
            mk.reshape_and_cache_merged(k, v, self.kv, s, "BNSD")
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
                    mk.reshape_and_cache_merged(to_ms(key), to_ms(value), net.kv, ms.Tensor(slots), "BNSD")
                results[backend] = to_np(net.kv)
                if backend == "sim":
                    assert_last_launch(OP, numTokens=40)
        finally:
            mk.set_backend("cpu")
    expected = ref_reshape_and_cache_merged(key, value, kv, slots, "BNSD")
    for backend, out in results.items():
        assert_same_bytes(out, expected, f"{backend} kv_cache")
