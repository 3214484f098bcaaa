"""rope_concat_and_cache_mla: the AscendC kernel + op_host tiling run through the emulation ("sim").

q_pe / k_pe bit for bit against the fp32 rotation model; kv_c_out without RMSNorm a bit-exact copy; with
RMSNorm bit for bit against the numpy model of the kernel's fp32 arithmetic (tests/_rope_sim_ref.py) and
within the issue's tolerance of a float64 RMSNorm. DeepSeek shapes (kv_lora_rank 512 + rope 64, 16 and
128 query heads) with and without the norm on every SoC, every dtype / table / weight dtype / style,
out-of-range positions (zero rotated rows, kv_c_out still written, nothing cached), slot padding, T' > T,
DataCopyPad rows and their rejection on Ascend310P, eps = 0 with an all-zero row; then the public op
with set_backend("sim") against set_backend("cpu") in PyNative and GRAPH_MODE.
"""
import numpy as np
import pytest

from _copy_sim_ref import (SOCS, assert_last_launch, cores_of, expect_tiling_error, launch, platform,
                           public_backend_or_skip, reset_last_launch)
from _rope_sim_ref import (assert_same, make_table, positions_with_edges, rand, rms64, rms_model, rotate_model,
                           slots_with_edges, write_rows)
from rope_ref import NP, assert_ulp_le, ordered, round64

OP = "MskvRopeConcatAndCacheMla"
DCODE = {"float16": 1, "bfloat16": 2, "float32": 3}


class Mla:
    def __init__(self, rng, rows, tokens, hq=16, rope=64, rd=None, rank=512, dtype="bfloat16", table_dtype="float32",
                 weight_dtype="float32", norm=True, eps=1e-6, bs=16, nb=None, neox=False, bad=True, flat_k=True):
        self.dtype, self.neox, self.eps, self.rd = dtype, neox, eps, rd or rope
        self.q = rand(rng, (rows, hq, rope), dtype)
        self.k = rand(rng, (rows, rope) if flat_k else (rows, 1, rope), dtype)
        self.kv = rand(rng, (rows, rank), dtype)
        self.max_position = 48
        self.table = make_table(self.max_position, self.rd, table_dtype)
        self.positions = positions_with_edges(rng, rows, self.max_position, "int32", bad=bad)
        nb = nb or max(2, -(-tokens // bs) + 2)
        self.slots = slots_with_edges(rng, tokens, nb * bs, "int64", out_of_range=bad)
        self.kvc = rand(rng, (nb, bs, rank), dtype)
        self.kpc = rand(rng, (nb, bs, rope), dtype)
        self.w = (rng.uniform(0.5, 1.5, rank)).astype(np.float32).astype(NP[weight_dtype]) if norm else None
        self.q_out, self.k_out, self.kv_out = np.zeros_like(self.q), np.zeros_like(self.k), np.zeros_like(self.kv)

    def arrays(self):
        return [self.positions, self.q, self.k, self.kv, self.table, self.kvc, self.kpc, self.slots, self.w,
                self.q_out, self.k_out, self.kv_out]

    def attrs(self):
        return {"is_neox_style": self.neox, "epsilon": self.eps}

    def valid(self):
        p = np.asarray(self.positions, dtype=np.int64)
        return (p >= 0) & (p < self.max_position)

    def expected(self):
        valid = self.valid()
        rows = np.where(valid, np.asarray(self.positions, dtype=np.int64), 0)
        q = rotate_model(self.q, self.table, rows, self.rd, self.neox, self.dtype)
        k = rotate_model(self.k.reshape(len(rows), -1), self.table, rows, self.rd, self.neox, self.dtype)
        q[~valid], k[~valid] = 0, 0
        kv = self.kv.copy() if self.w is None else rms_model(self.kv, self.w, self.eps, self.dtype)
        t = len(self.slots)
        return q, k.reshape(self.k.shape), kv, write_rows(self.kvc, kv[:t], self.slots, valid[:t]), \
            write_rows(self.kpc, k[:t], self.slots, valid[:t])

    def run(self, soc="Ascend910B1", all_orders=False):
        a = self.arrays()
        st = launch(OP, a, self.attrs(), soc, all_orders=all_orders)
        self.kvc_out, self.kpc_out = a[5], a[6]
        return st

    def check(self, what=""):
        q, k, kv, kvc, kpc = self.expected()
        assert_same(self.q_out, q, f"q_pe_out {what}")
        assert_same(self.k_out, k, f"k_pe_out {what}")
        assert_same(self.kv_out, kv, f"kv_c_out {what}")
        assert_same(self.kvc_out, kvc, f"kv_c_cache {what}")
        assert_same(self.kpc_out, kpc, f"k_pe_cache {what}")
        if self.w is not None:  # the model against float64: 1 ulp (fp16 / bf16), 1e-5 relative (fp32)
            ref = rms64(self.kv, self.w, self.eps)
            if self.dtype == "float32":
                np.testing.assert_allclose(self.kv_out.astype(np.float64), ref, rtol=1e-5, atol=1e-6)
            else:
                d = np.abs(ordered(self.kv_out, self.dtype) - ordered(round64(ref, self.dtype), self.dtype))
                assert d.max() <= 1, f"kv_c_out {what}: {d.max()} ulp from the float64 RMSNorm"


CASES = [("bfloat16", "float32", "float32", False), ("bfloat16", "bfloat16", "bfloat16", True),
         ("float16", "float16", "float32", False), ("float16", "float32", "float16", True),
         ("float32", "float32", "float32", False), ("float32", "float32", "float32", True)]


@pytest.mark.parametrize("norm", [True, False], ids=["norm", "no-norm"])
@pytest.mark.parametrize("dtype,table_dtype,weight_dtype,neox", CASES)
def test_dtypes_tables_weights_styles(dtype, table_dtype, weight_dtype, neox, norm):
    seed = CASES.index((dtype, table_dtype, weight_dtype, neox)) * 2 + norm
    rng = np.random.default_rng(seed)
    c = Mla(rng, 23, 19, hq=4, dtype=dtype, table_dtype=table_dtype, weight_dtype=weight_dtype, norm=norm, neox=neox,
            flat_k=seed % 2 == 0)
    st = c.run()
    c.check(f"{dtype}/{table_dtype}/{weight_dtype}")
    assert max(st["ub_bytes_per_core"]) == int(st["tiling_fields"]["ubBytes"])
    wcode = 0 if not norm else (1 if weight_dtype == "float32" else 2)
    assert st["tiling_key"] == wcode * 1000 + DCODE[dtype] * 100 + (table_dtype != "float32") * 10 + int(neox)


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("norm", [True, False], ids=["norm", "no-norm"])
def test_deepseek_shapes_every_soc(soc, norm):
    # kv_lora_rank 512 + rope 64 (DeepSeek-V2/V3), 16 query heads, T' = cores + 3
    rng = np.random.default_rng(cores_of(soc) + norm)
    dtype = "float16" if soc == "Ascend310P3" else "bfloat16"
    c = Mla(rng, cores_of(soc) + 3, cores_of(soc), hq=16, dtype=dtype, norm=norm)
    st = c.run(soc, all_orders=soc in ("Ascend910B3", "Ascend310P3"))
    c.check(soc)
    assert st["block_dim"] == cores_of(soc)
    assert max(st["ub_bytes_per_core"]) == int(st["tiling_fields"]["ubBytes"]) <= platform(soc)["ub_size"] - 1024


def test_128_query_heads():
    # DeepSeek-V3: 128 q_pe heads of 64 (16 KiB a bf16 token)
    rng = np.random.default_rng(3)
    c = Mla(rng, 50, 45, hq=128, dtype="bfloat16")
    c.run("Ascend910B1")
    c.check("128 heads")


@pytest.mark.parametrize("rows", [1, 7, 49, 1000])
def test_token_counts(rows):
    rng = np.random.default_rng(rows)
    c = Mla(rng, rows, max(1, rows - 2), hq=2, rope=32, rank=64, dtype="float16")
    st = c.run("Ascend910B3")
    c.check(f"T'={rows}")
    assert st["block_dim"] == min(rows, cores_of("Ascend910B3"))


def test_invalid_positions_still_write_kv_c_out():
    rng = np.random.default_rng(5)
    c = Mla(rng, 12, 12, hq=2, dtype="bfloat16", norm=True)
    p = np.asarray(c.positions, dtype=np.int64)
    p[[0, 5, 11]] = [-1, c.max_position, 1 << 20]
    c.positions = p.astype(np.int32)
    c.run(all_orders=True)
    c.check("invalid positions")
    assert not c.q_out[[0, 5, 11]].any() and c.kv_out[[0, 5, 11]].any()


@pytest.mark.parametrize("rope,rd,rank,dtype", [(40, 24, 100, "float16"), (64, 64, 520, "bfloat16"),
                                                (64, 2, 512, "float32")])
def test_unaligned_rows_use_datacopypad(rope, rd, rank, dtype):
    rng = np.random.default_rng(rank)
    c = Mla(rng, 17, 15, hq=3, rope=rope, rd=rd, rank=rank, dtype=dtype,
            weight_dtype=dtype if rank == 520 else "float32", neox=rd == 24)
    st = c.run("Ascend910_9391", all_orders=True)
    c.check(f"R={rope} rd={rd} L={rank}")
    assert st["tiling_key"] // 10000 == 1 and sum(st["datacopy_pad_calls_per_core"]) > 0


@pytest.mark.parametrize("rope,rank", [(40, 512), (64, 100)])
def test_unaligned_rows_rejected_on_310p(rope, rank):
    rng = np.random.default_rng(1)
    c = Mla(rng, 9, 7, hq=2, rope=rope, rank=rank, dtype="float16")
    expect_tiling_error(OP, c.arrays(), c.attrs(), "Ascend310P3", "DataCopyPad", "Ascend310P")


def test_bfloat16_rejected_on_310p():
    rng = np.random.default_rng(2)
    c = Mla(rng, 9, 7, hq=2, dtype="bfloat16")
    expect_tiling_error(OP, c.arrays(), c.attrs(), "Ascend310P3", "bfloat16", "Ascend310P")


def test_empty_weight_means_no_norm():
    # MindSpore's cpu / sim backends pass an empty float32 [0] tensor for kv_c_norm_weight=None
    rng = np.random.default_rng(6)
    c = Mla(rng, 9, 7, hq=2, dtype="float16", norm=False)
    c.w = np.zeros(0, np.float32)
    st = c.run()
    c.w = None
    c.check("empty weight")
    assert st["tiling_key"] // 1000 % 10 == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_eps_zero_and_zero_row():
    # mean + eps == 0: the cpu backend's 1 / sqrt(0) = inf, so the row becomes 0 * inf = NaN; the kernel
    # never issues the (undefined) Sqrt of 0 and gives the same NaN row
    rng = np.random.default_rng(7)
    c = Mla(rng, 9, 7, hq=2, dtype="bfloat16", eps=0.0)
    c.kv[3] = 0
    c.run()
    assert np.isnan(c.kv_out[3].astype(np.float32)).all()
    q, k, kv, _, _ = c.expected()
    ok = np.arange(9) != 3
    assert_same(c.kv_out[ok], kv[ok], "other rows")


def test_tiling_rejects_inconsistent_inputs():
    rng = np.random.default_rng(8)
    c = Mla(rng, 9, 7, hq=2, dtype="float16")
    a = c.arrays()
    bad = list(a)
    bad[8] = np.ones(100, np.float32)
    expect_tiling_error(OP, bad, c.attrs(), "Ascend910B1", "kv_c_norm_weight", "[512]")
    bad = list(a)
    bad[2] = rand(rng, (9, 2, 64), "float16")
    expect_tiling_error(OP, bad, c.attrs(), "Ascend910B1", "k_pe")
    bad = list(a)
    bad[3] = rand(rng, (8, 512), "float16")
    expect_tiling_error(OP, bad, c.attrs(), "Ascend910B1", "kv_c", "[9, 512]")
    expect_tiling_error(OP, a, {"is_neox_style": False, "epsilon": -1.0}, "Ascend910B1", "epsilon")


# ------------------------------------------------------------------------------------------- public op
@pytest.mark.parametrize("mode", ["pynative", "graph"])
@pytest.mark.parametrize("norm,dtype", [(True, "bfloat16"), (False, "bfloat16"), (True, "float32")],
                         ids=["norm-bf16", "no-norm-bf16", "norm-fp32"])
def test_public_op_sim_matches_cpu(mode, norm, dtype):
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("rope_concat_and_cache_mla")
    rng = np.random.default_rng(9)
    c = Mla(rng, 21, 17, hq=16, dtype=dtype, norm=norm, bad=False)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kvc = Parameter(to_ms(c.kvc), name="kv_c_cache")
            self.kpc = Parameter(to_ms(c.kpc), name="k_pe_cache")

        def construct(self, p, q, k, kv, cs, s, w):
            return mk.rope_concat_and_cache_mla(p, q, k, kv, cs, self.kvc, self.kpc, s, is_neox_style=False,
                                                kv_c_norm_weight=w, epsilon=1e-6)

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                args = (Tensor(c.positions), to_ms(c.q), to_ms(c.k), to_ms(c.kv), to_ms(c.table), Tensor(c.slots),
                        None if c.w is None else to_ms(c.w))
                outs = net(*args) if mode == "graph" else net.construct(*args)
                results[backend] = [to_np(x) for x in outs] + [to_np(net.kvc), to_np(net.kpc)]
                if backend == "sim":
                    assert_last_launch(OP, numRows=21, hasNorm=int(norm))
        finally:
            mk.set_backend("cpu")
    q, k, kv, kvc, kpc = c.expected()
    for backend, (qo, ko, kvo, kvco, kpco) in results.items():
        assert_same(qo, q, f"{backend} q_pe_out")
        assert_same(ko, k, f"{backend} k_pe_out")
        assert_same(kpco, kpc, f"{backend} k_pe_cache")
        if backend == "sim" or not norm or dtype == "float32":
            assert_same(kvo, kv, f"{backend} kv_c_out")
            assert_same(kvco, kvc, f"{backend} kv_c_cache")
    if norm and dtype == "float32":  # double-float scale: the cpu backend's fp64 value, the same bits
        assert_same(results["sim"][2], results["cpu"][2], "kv_c_out sim vs cpu")
    elif norm:  # fp32 scale; the cpu backend sums the squares in fp64: within 1 ulp (rarely 1 ulp off)
        assert_ulp_le(results["sim"][2], results["cpu"][2], dtype, 1, "kv_c_out sim vs cpu")
        assert_ulp_le(results["sim"][3], results["cpu"][3], dtype, 1, "kv_c_cache sim vs cpu")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_rmsnorm_sim_vs_cpu_statistics(dtype):
    # many rows through both backends: fp32 data bit for bit (double-float scale); fp16 / bf16 within
    # 1 ulp, and differing elements rare (the fp32 scale vs the cpu backend's fp64 sum)
    mk = public_backend_or_skip("rope_concat_and_cache_mla")
    from mindspore import Tensor

    from conftest import to_ms, to_np

    rng = np.random.default_rng(10)
    c = Mla(rng, 400, 0, hq=1, rope=32, dtype=dtype, norm=True, bad=False)
    outs = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        try:
            o = mk.rope_concat_and_cache_mla(Tensor(c.positions), to_ms(c.q), to_ms(c.k), to_ms(c.kv), to_ms(c.table),
                                             to_ms(c.kvc), to_ms(c.kpc), Tensor(c.slots),
                                             kv_c_norm_weight=to_ms(c.w))
            outs[backend] = to_np(o[2])
        finally:
            mk.set_backend("cpu")
    if dtype == "float32":
        assert_same(outs["sim"], outs["cpu"], "kv_c_out")
    else:
        assert_ulp_le(outs["sim"], outs["cpu"], dtype, 1, "kv_c_out")
        assert np.count_nonzero(outs["sim"].view(np.uint16) != outs["cpu"].view(np.uint16)) <= outs["sim"].size // 1000
