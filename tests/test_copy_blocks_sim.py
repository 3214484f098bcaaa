"""copy_blocks: the AscendC kernel + tiling through the emulation ("sim"), byte-exact against a
numpy reference (pairs applied in order to every layer's key and value cache, as the cpu backend)
and, for the public op, against the cpu backend."""
import numpy as np
import pytest

from _copy_sim_ref import (INDEX_DTYPES, KV_DTYPES, SOCS, assert_last_launch, assert_same_bytes, cores_of,
                           expect_tiling_error, launch, public_backend_or_skip, rand, ref_copy_blocks,
                           reset_last_launch, status, stable_seed)

OP = "MskvCopyBlocks"


def _case(rng, L, n, block_shape, dtype, idtype, nb=None, chained=True, invalid=True):
    nb = nb or 2 * n + 3
    kcs = [rand(rng, (nb,) + tuple(block_shape), dtype) for _ in range(L)]
    vcs = [rand(rng, (nb,) + tuple(block_shape), dtype) for _ in range(L)]
    bm = rng.integers(0, nb, size=(n, 2)).astype(np.int64)
    if chained and n >= 3:
        bm[1, 0] = bm[0, 1]          # a -> b then b -> c
        bm[-1, 1] = bm[0, 1]         # b written twice: the last pair wins
    if invalid and n >= 5:
        bm[2, 0], bm[3, 1], bm[4] = -1, nb, (nb + 7, -3)  # skipped, never written
    return kcs, vcs, bm.astype(idtype)


def _run_and_check(kcs, vcs, bm, soc="Ascend910B1", all_orders=False):
    ek, ev = ref_copy_blocks(kcs, vcs, bm)
    st = launch(OP, [kcs, vcs, bm, status()], None, soc, all_orders=all_orders)
    for i, (a, e) in enumerate(zip(kcs + vcs, ek + ev)):
        assert_same_bytes(a, e, f"cache {i} ({soc}, {a.dtype})")
    return st


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("dtype", KV_DTYPES)
@pytest.mark.parametrize("idtype", INDEX_DTYPES)
def test_dtype_index_dtype(dtype, idtype, soc):
    """The full product op x dtype x index dtype x SoC (bfloat16 on Ascend310P: a tiling error)."""
    rng = np.random.default_rng(stable_seed(dtype, idtype, 3))
    kcs, vcs, bm = _case(rng, 2, 9, (16, 2, 32), dtype, idtype)
    if soc == "Ascend310P3" and dtype == "bfloat16":
        expect_tiling_error(OP, [kcs, vcs, bm, status()], None, soc, "bfloat16", "Ascend310P")
        return
    st = _run_and_check(kcs, vcs, bm, soc)
    assert st["tiling_key"] == 100 * (1 + KV_DTYPES.index(dtype)) + 10 * INDEX_DTYPES.index(idtype)


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("L", [1, 3, 30])
def test_every_soc_layers_all_core_orders(soc, L):
    # 32 KiB blocks (16 tokens x 8 heads x 128, fp16): with 2L < cores caches, each block is split into
    # >= 1 KiB pieces so that every core gets work.
    rng = np.random.default_rng(L)
    st = _run_and_check(*_case(rng, L, 7, (16, 8, 128), "float16", "int64"), soc, all_orders=True)
    assert st["cores_used"] == st["block_dim"] == cores_of(soc)


@pytest.mark.parametrize("n", [0, 1, 2, 49])
def test_pair_counts(n):
    # small 512-byte blocks: not split (pieces >= 1 KiB), so fewer units than cores
    rng = np.random.default_rng(n + 3)
    st = _run_and_check(*_case(rng, 2, n, (8, 4, 16), "int8", "int32"), "Ascend910B3", all_orders=True)
    if n == 0:
        assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0


def test_blocks_larger_than_ub_and_3d_mla_caches():
    rng = np.random.default_rng(18)
    st = _run_and_check(*_case(rng, 1, 5, (128, 8, 64), "float32", "int64"), "Ascend910B1")  # 256 KiB blocks
    assert int(st["tiling_fields"]["chunkElems"]) < int(st["tiling_fields"]["blockElems"])
    _run_and_check(*_case(rng, 2, 6, (64, 576), "bfloat16", "int64"), "Ascend910_9391", all_orders=True)


def test_unaligned_blocks_pad_and_310p():
    rng = np.random.default_rng(19)
    st = _run_and_check(*_case(rng, 2, 6, (3, 5), "int8", "int64"), "Ascend910B1", all_orders=True)
    assert st["tiling_key"] % 10 == 1
    kcs, vcs, bm = _case(rng, 2, 6, (3, 5), "int8", "int64")
    expect_tiling_error(OP, [kcs, vcs, bm, status()], None, "Ascend310P3", "not a multiple of 32 bytes")
    kcs, vcs, bm = _case(rng, 1, 2, (16, 16), "bfloat16", "int64")
    expect_tiling_error(OP, [kcs, vcs, bm, status()], None, "Ascend310P3", "bfloat16")


def test_only_mapped_blocks_change_and_data_movement():
    rng = np.random.default_rng(20)
    kcs, vcs, bm = _case(rng, 4, 12, (16, 8, 128), "bfloat16", "int64", nb=40, chained=False, invalid=False)
    before = [c.copy() for c in kcs + vcs]
    st = _run_and_check(kcs, vcs, bm)
    untouched = sorted(set(range(40)) - set(int(d) for d in bm[:, 1]))
    for c, b in zip(kcs + vcs, before):
        assert_same_bytes(c[untouched], b[untouched], "blocks outside block_mapping")
    block_bytes = 16 * 8 * 128 * 2
    copies = int(np.count_nonzero(bm[:, 0] != bm[:, 1]))
    minimum = 2 * 8 * copies * block_bytes + bm.nbytes
    assert st["gm_read_bytes"] + st["gm_write_bytes"] <= 1.05 * minimum
    assert st["cores_used"] == cores_of("Ascend910B1")


def test_seeded_random_sample_with_repeats_and_chains():
    rng = np.random.default_rng(779)
    for _ in range(10):
        soc, dtype, idtype = SOCS[rng.integers(len(SOCS))], KV_DTYPES[rng.integers(4)], INDEX_DTYPES[rng.integers(2)]
        block = [(16, 8, 128), (4, 2, 16), (64, 576), (3, 5)][rng.integers(4)]
        L, n, nb = int(rng.integers(1, 5)), int(rng.integers(1, 120)), int(rng.integers(2, 20))
        kcs, vcs, _ = _case(rng, L, 0, block, dtype, idtype, nb=nb)
        bm = rng.integers(-1, nb + 1, size=(n, 2)).astype(idtype)  # repeats, chains, ids out of range
        if soc == "Ascend310P3" and (dtype == "bfloat16" or (np.prod(block) * kcs[0].dtype.itemsize) % 32):
            expect_tiling_error(OP, [kcs, vcs, bm, status()], None, soc, "Ascend310P")
            continue
        _run_and_check(kcs, vcs, bm, soc, all_orders=True)


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_op_sim_matches_cpu(mode):
    from mindspore import Parameter, ParameterTuple, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("copy_blocks")
    rng = np.random.default_rng(21)
    kcs, vcs, bm = _case(rng, 3, 6, (16, 2, 32), "float16", "int64", invalid=False)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.k = ParameterTuple(Parameter(to_ms(c), name=f"k{i}") for i, c in enumerate(kcs))
            self.v = ParameterTuple(Parameter(to_ms(c), name=f"v{i}") for i, c in enumerate(vcs))

        def construct(self, m):
            mk.copy_blocks(self.k, self.v, m)
            return m

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                if mode == "graph":
                    net(Tensor(bm))
                else:
                    mk.copy_blocks(list(net.k), list(net.v), Tensor(bm))
                results[backend] = [to_np(p) for p in list(net.k) + list(net.v)]
                if backend == "sim":
                    assert_last_launch(OP, numPairs=6, numLayers=3)
        finally:
            mk.set_backend("cpu")
    ek, ev = ref_copy_blocks(kcs, vcs, bm)
    for backend, outs in results.items():
        for i, (a, e) in enumerate(zip(outs, ek + ev)):
            assert_same_bytes(a, e, f"{backend} cache {i}")
