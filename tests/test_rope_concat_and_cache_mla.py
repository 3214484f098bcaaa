"""rope_concat_and_cache_mla (DeepSeek MLA, kv_lora_rank 512 + rope 64) against numpy references."""
import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

import ms_kvcache
from conftest import NP_DTYPES, assert_bits_equal, ms_mode, to_ms, to_np
from rope_ref import NP, assert_close_rope, ordered, round64, rope64, rope_f32_model
from test_rope_reshape_and_cache import make_table, rand

pytestmark = pytest.mark.usefixtures("cpu_backend")


def rms_norm_model(x, w, eps, dtype):
    """The kernel's documented RMSNorm arithmetic: sum of squares in fp64 over 8 lanes (lane
    j % 8, sequential within a lane, lanes combined pairwise), inv = fp32(1 / sqrt(sum / n + eps)),
    out = fp32(fp32(x * inv) * w), rounded to dtype."""
    x32 = x.astype(np.float32)
    n = x32.shape[-1]
    acc = np.zeros(x32.shape[:-1] + (8,), np.float64)
    for j in range(0, n, 8):
        chunk = x32[..., j:j + 8].astype(np.float64)
        acc[..., : chunk.shape[-1]] += chunk * chunk
    a = acc
    total = ((a[..., 0] + a[..., 1]) + (a[..., 2] + a[..., 3])) + ((a[..., 4] + a[..., 5]) + (a[..., 6] + a[..., 7]))
    inv = (1.0 / np.sqrt(total / n + float(np.float32(eps)))).astype(np.float32)
    out = (x32 * inv[..., None]) * w.astype(np.float32)
    return out.astype(NP[dtype])


class MlaCase:
    def __init__(self, rng, dtype, rank=512, rope_dim=64, num_heads=8, rows=7, tokens=6, num_blocks=4,
                 block_size=8, neox=False, norm=None, max_position=128, k_pe_3d=False):
        self.dtype, self.neox, self.rd = dtype, neox, rope_dim
        self.q_pe = rand(rng, (rows, num_heads, rope_dim), dtype)
        self.k_pe = rand(rng, (rows, 1, rope_dim) if k_pe_3d else (rows, rope_dim), dtype)
        kv_c = rand(rng, (rows, rank), dtype).astype(np.float32) * 3
        kv_c[1] *= 1e-3   # mean square ~ epsilon: the epsilon term matters for this row
        self.kv_c = kv_c.astype(NP_DTYPES[dtype])
        self.table = make_table(max_position, rope_dim)
        self.positions = rng.integers(0, max_position, size=rows).astype(np.int64)
        self.positions[0], self.positions[1] = 0, max_position - 1
        nslots = num_blocks * block_size
        self.slots = rng.permutation(nslots - 1)[:tokens].astype(np.int64)
        self.slots[2], self.slots[3] = -1, nslots - 1
        self.block_size = block_size
        self.kv_c_cache = rand(rng, (num_blocks, block_size, rank), dtype)
        self.k_pe_cache = rand(rng, (num_blocks, block_size, rope_dim), dtype)
        self.weight = None
        if norm is not None:  # weight dtype
            self.weight = rng.uniform(0.5, 1.5, size=(rank,)).astype(np.float32).astype(NP_DTYPES[norm])
        self.eps = 1e-6

    def cos_sin(self, lead):
        cs = self.table[self.positions]
        c, s = cs[:, : self.rd // 2], cs[:, self.rd // 2:]
        shape = (len(self.positions),) + (1,) * lead + (self.rd // 2,)
        return c.reshape(shape), s.reshape(shape)

    def check(self, q_out, k_out, c_out, kv_c_cache, k_pe_cache):
        for x, out, name in ((self.q_pe, q_out, "q_pe_out"), (self.k_pe, k_out, "k_pe_out")):
            c, s = self.cos_sin(x.ndim - 2)
            ref, scale = rope64(x, c, s, self.rd, self.neox)
            assert_close_rope(to_np(out), ref, scale, self.dtype, name)
            assert_bits_equal(to_np(out), rope_f32_model(x, c, s, self.rd, self.neox, self.dtype), name)
        kv = self.kv_c.astype(np.float64)
        if self.weight is None:
            exp_c = self.kv_c
            assert_bits_equal(to_np(c_out), exp_c, "kv_c_out (copy)")
        else:
            eps32 = float(np.float32(self.eps))
            ref = kv / np.sqrt(np.mean(kv * kv, axis=-1, keepdims=True) + eps32) * self.weight.astype(np.float64)
            got = to_np(c_out)
            if self.dtype == "float32":
                assert np.abs(got - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
            else:
                d = np.abs(ordered(got, self.dtype) - ordered(round64(ref, self.dtype), self.dtype))
                assert d.max() <= 1, f"RMSNorm: {(d > 1).sum()} elements beyond 1 ulp"
            assert_bits_equal(got, rms_norm_model(self.kv_c, self.weight, self.eps, self.dtype), "kv_c_out model")
            exp_c = got
        k_rot = to_np(k_out).reshape(len(self.positions), self.rd)
        ekv, ekp = self.kv_c_cache.copy(), self.k_pe_cache.copy()
        for t, slot in enumerate(self.slots):
            if slot >= 0:
                b, o = divmod(int(slot), self.block_size)
                ekv[b, o], ekp[b, o] = exp_c[t], k_rot[t]
        assert_bits_equal(to_np(kv_c_cache), ekv, "kv_c_cache")
        assert_bits_equal(to_np(k_pe_cache), ekp, "k_pe_cache")

    def tensors(self):
        return (Tensor(self.positions), to_ms(self.q_pe), to_ms(self.k_pe), to_ms(self.kv_c), to_ms(self.table),
                to_ms(self.kv_c_cache), to_ms(self.k_pe_cache), Tensor(self.slots))

    def weight_tensor(self):
        return None if self.weight is None else to_ms(self.weight)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("norm", [None, "float32", "same"], ids=["no_norm", "norm_w32", "norm_wdtype"])
@pytest.mark.parametrize("neox", [False, True], ids=["gptj", "neox"])
def test_values(rng, dtype, norm, neox):
    case = MlaCase(rng, dtype, neox=neox, norm=None if norm is None else (dtype if norm == "same" else norm),
                   k_pe_3d=(norm == "same"))
    args = case.tensors()
    outs = ms_kvcache.rope_concat_and_cache_mla(*args, is_neox_style=neox, kv_c_norm_weight=case.weight_tensor(),
                                                epsilon=case.eps)
    assert outs[0].shape == case.q_pe.shape and outs[1].shape == case.k_pe.shape and outs[2].shape == case.kv_c.shape
    case.check(*outs, args[5], args[6])
    assert_bits_equal(to_np(args[3]), case.kv_c, "kv_c input unchanged")


def test_large_parallel(rng):
    case = MlaCase(rng, "bfloat16", num_heads=16, rows=200, tokens=180, num_blocks=16, block_size=16, norm="bfloat16")
    args = case.tensors()
    outs = ms_kvcache.rope_concat_and_cache_mla(*args, kv_c_norm_weight=case.weight_tensor())
    case.check(*outs, args[5], args[6])


@pytest.mark.parametrize("norm", [None, "float32"], ids=["no_norm", "norm"])
def test_streaming_stores_path(rng, norm):
    """>= 8 MiB moved: q_pe_out, k_pe_out, kv_c_out and both cache planes written with non-temporal
    stores from a per-token buffer (kv_c_out straight from kv_c without the norm): exact results."""
    case = MlaCase(rng, "bfloat16", num_heads=16, rows=1600, tokens=1560, num_blocks=110, block_size=16, norm=norm,
                   max_position=4096)
    assert 1600 * 2 * (16 * 64 + 64 + 512) * 2 > 8 << 20
    args = case.tensors()
    outs = ms_kvcache.rope_concat_and_cache_mla(*args, kv_c_norm_weight=case.weight_tensor())
    case.check(*outs, args[5], args[6])


class MlaCell(nn.Cell):
    def __init__(self, kv_c_cache, k_pe_cache, weight):
        super().__init__()
        self.kv_c_cache = Parameter(kv_c_cache, name="kv_c_cache")
        self.k_pe_cache = Parameter(k_pe_cache, name="k_pe_cache")
        self.weight = weight

    def construct(self, positions, q_pe, k_pe, kv_c, cos_sin_cache, slot_mapping):
        q, k, c = ms_kvcache.rope_concat_and_cache_mla(positions, q_pe, k_pe, kv_c, cos_sin_cache, self.kv_c_cache,
                                                       self.k_pe_cache, slot_mapping, kv_c_norm_weight=self.weight,
                                                       epsilon=1e-6)
        return q, k, c, ops.cast(self.kv_c_cache, ms.float32)


@pytest.mark.parametrize("mode", ["graph", "jit"])
@pytest.mark.parametrize("norm", [False, True], ids=["no_norm", "norm"])
def test_graph_modes(rng, mode, norm):
    case = MlaCase(rng, "bfloat16", norm="float32" if norm else None)
    p, q, k, c, cs, kvc, kpc, s = case.tensors()
    with ms_mode(mode):
        cell = MlaCell(kvc, kpc, case.weight_tensor())
        fn = cell if mode == "graph" else ms.jit(cell.construct)
        qo, ko, co, kvc_read = fn(p, q, k, c, cs, s)
    case.check(qo, ko, co, cell.kv_c_cache, cell.k_pe_cache)
    assert_bits_equal(to_np(kvc_read), to_np(cell.kv_c_cache).astype(np.float32), "kv_c_cache read in graph")


@pytest.mark.parametrize("norm", [False, True], ids=["no_norm", "norm"])
def test_graph_repeated_slots_last_token_wins(rng, norm):
    """Graph mode, a call split over threads with 30 slots written twice: both planes end with the
    LAST token's rows (kv_c_out / rotated k_pe of that token), never a mix."""
    case = MlaCase(rng, "bfloat16", num_heads=16, rows=200, tokens=180, num_blocks=16, block_size=16,
                   norm="float32" if norm else None)
    valid = np.nonzero(case.slots >= 0)[0]
    src = rng.choice(valid, size=30, replace=False)
    dst = rng.choice(np.setdiff1d(np.arange(180), src), size=30, replace=False)
    case.slots[dst] = case.slots[src]
    p, q, k, c, cs, kvc, kpc, s = case.tensors()
    with ms_mode("graph"):
        cell = MlaCell(kvc, kpc, case.weight_tensor())
        qo, ko, co, _ = cell(p, q, k, c, cs, s)
    case.check(qo, ko, co, cell.kv_c_cache, cell.k_pe_cache)   # expected caches: sequential, later wins


@pytest.mark.parametrize("bad,exc,match", [
    ("rope_dim", ValueError, r"argument 'k_pe': expected shape \[T', 64\] or \[T', 1, 64\]"),
    ("kv_c_rank", ValueError, r"argument 'kv_c': expected shape \[7, 512\]"),
    ("planes", ValueError, r"argument 'k_pe_cache': expected shape \[4, 8, rope_dim\]"),
    ("q_heads", ValueError, r"argument 'q_pe': expected shape \[T', num_heads, 64\]"),
    ("weight_shape", ValueError, r"argument 'kv_c_norm_weight': expected shape \[512\]"),
    ("weight_dtype", TypeError, r"argument 'kv_c_norm_weight': expected dtype in \('float32', 'float16'\)"),
    ("epsilon", ValueError, r"argument 'epsilon': expected a finite float >= 0"),
    ("table_wide", ValueError, r"argument 'cos_sin_cache': expected rotary_dim \(shape\[1\]\) <= rope_dim \(last dim of "
     r"'k_pe' and 'k_pe_cache'\) = 64, got 66"),
    ("cache_dtype", TypeError, r"argument 'k_pe_cache': expected dtype float16 \(same as 'q_pe'\), got float32"),
    ("position", ValueError, r"argument 'positions': expected positions in \[0, 128\)"),
    ("slot", ValueError, r"argument 'slot_mapping': expected every slot < num_blocks\*block_size = 32"),
])
def test_bad_inputs(rng, bad, exc, match):
    case = MlaCase(rng, "float16", norm="float32")
    args = list(case.tensors())
    kw = {"kv_c_norm_weight": case.weight_tensor()}
    if bad == "rope_dim":
        args[2] = to_ms(np.zeros((7, 32), np.float16))
    elif bad == "kv_c_rank":
        args[3] = to_ms(np.zeros((7, 256), np.float16))
    elif bad == "planes":
        args[6] = to_ms(np.zeros((4, 16, 64), np.float16))
    elif bad == "q_heads":
        args[1] = to_ms(np.zeros((7, 8, 32), np.float16))
    elif bad == "weight_shape":
        kw["kv_c_norm_weight"] = to_ms(np.ones((256,), np.float32))
    elif bad == "weight_dtype":
        kw["kv_c_norm_weight"] = Tensor(np.ones((512,), np.float32), dtype=ms.bfloat16)
    elif bad == "epsilon":
        kw["epsilon"] = -1.0
    elif bad == "table_wide":
        args[4] = to_ms(make_table(128, 66))
    elif bad == "cache_dtype":
        args[6] = Tensor(np.zeros((4, 8, 64), np.float32))
    elif bad == "position":
        args[0] = Tensor(np.full((7,), 128, np.int64))
    elif bad == "slot":
        args[7] = Tensor(np.array([32], np.int64))
    with pytest.raises(exc, match="rope_concat_and_cache_mla: " + match):
        ms_kvcache.rope_concat_and_cache_mla(*args, **kw)
