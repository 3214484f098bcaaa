"""concat_and_cache_mla_quant (the quantizing write of concat_and_cache_mla): the AscendC kernel + op_host
tiling run through the emulation ("sim").

Exact int8 codes and scales against the numpy model of docs/quantization.md that the cpu tests use
(tests/test_kv_quant.py), static per tensor / per channel with offsets and dynamic per-token scales (one per
token and plane), float16 / bfloat16 / float32, int32 / int64 slots, DeepSeek sizes (512 / 64) and odd ones,
one empty plane, on Atlas A2 / A3 and Ascend310P3 (static, sizes multiples of 32); slots -1 and out of
range, padding rows, untouched scale-cache rows, zero tokens; tiling errors; the public op on
set_backend("sim") against the cpu backend, PyNative and GRAPH_MODE.
"""
import numpy as np
import pytest

from _copy_sim_ref import (assert_last_launch, expect_sim_graph_trap, expect_tiling_error, launch, make_slots, public_backend_or_skip,
                           reset_last_launch, status, stable_seed)
from test_kv_quant import place, quant_dynamic, quant_rows
from test_reshape_and_cache_quant_sim import _rows

OP = "MskvConcatAndCacheMlaQuant"
E = np.zeros((0,), np.float32)


def run_case(soc, dtype, gran, sdtype="int32", T=13, L=64, R=32, nb=3, bs=8, k_pe_3d=False):
    rng = np.random.default_rng(stable_seed(soc, dtype, gran, sdtype, T, L, R))
    kv_c = _rows(rng, T + 2, 1, L, dtype).reshape(T + 2, L)
    k_pe = _rows(rng, T + 2, 1, R, dtype)
    if not k_pe_3d:
        k_pe = k_pe.reshape(T + 2, R)
    cc = rng.integers(-128, 128, size=(nb, bs, L), dtype=np.int8)
    pc = rng.integers(-128, 128, size=(nb, bs, R), dtype=np.int8)
    slots = make_slots(rng, T, nb * bs, sdtype)
    s64 = np.asarray(slots, np.int64)
    sl = np.where((s64 >= 0) & (s64 < nb * bs), s64, -1)
    c32, p32 = np.asarray(kv_c[:T], np.float32), np.asarray(k_pe[:T], np.float32).reshape(T, R)
    csc = psc = None
    if gran == "dynamic":
        csc = rng.uniform(5, 6, (nb, bs, 1)).astype(np.float32)
        psc = rng.uniform(5, 6, (nb, bs, 1)).astype(np.float32)
        (qc, sc_), (qp, sp) = quant_dynamic(c32, "int8"), quant_dynamic(p32, "int8")
        want_sc = (place(csc, sc_, sl, "BSND"), place(psc, sp, sl, "BSND"))
        sc_in = [E, E, E, E, csc, psc]
    else:
        u = lambda shape: rng.uniform(0.004, 0.03, size=shape).astype(np.float32)  # noqa: E731
        if gran == "tensor":
            cs, ps, co, po = u(()), u((1,)), None, None
        else:
            cs, ps = u((L,)), u((R,))
            co, po = rng.uniform(-3, 3, (L,)).astype(np.float32), rng.uniform(-3, 3, (R,)).astype(np.float32)
        qc, qp = quant_rows(c32, "int8", cs, co), quant_rows(p32, "int8", ps, po)
        want_sc = None
        sc_in = [cs, ps, E if co is None else co, E if po is None else po, E, E]
    ec, ep = place(cc, qc, sl, "BSND"), place(pc, qp, sl, "BSND")
    st = launch(OP, [kv_c, k_pe, cc, pc, slots] + sc_in + [status()],
                {"quant_mode": "dynamic" if gran == "dynamic" else "static"}, soc)
    np.testing.assert_array_equal(cc, ec, err_msg=f"kv_c_cache {soc} {dtype} {gran}")
    np.testing.assert_array_equal(pc, ep, err_msg=f"k_pe_cache {soc} {dtype} {gran}")
    if want_sc is not None:
        np.testing.assert_array_equal(csc.view(np.uint32), want_sc[0].view(np.uint32))
        np.testing.assert_array_equal(psc.view(np.uint32), want_sc[1].view(np.uint32))
    return st


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("gran", ["tensor", "channel_offset", "dynamic"])
def test_codes_a2(gran, dtype):
    sd = "int64" if dtype == "float32" else "int32"
    st = run_case("Ascend910B1", dtype, gran, sd)
    assert st["tiling_key"] == ((1000 if gran == "dynamic" else 0) + 100 * {"float16": 1, "bfloat16": 2,
                                                                              "float32": 3}[dtype] + 10 * (sd == "int64"))


@pytest.mark.parametrize("gran", ["tensor", "channel_offset", "dynamic"])
def test_deepseek_sizes_a3_odd_sizes_and_an_empty_plane(gran):
    run_case("Ascend910_9391", "bfloat16", gran, "int64", T=60, L=512, R=64, nb=8, bs=16, k_pe_3d=True)
    run_case("Ascend910B1", "float16", gran, L=40, R=3)
    if gran == "tensor":  # (a per-channel scale of an empty plane would be the [0] "absent" stand-in)
        run_case("Ascend910B1", "float16", gran, L=0, R=12)


@pytest.mark.parametrize("gran", ["tensor", "channel_offset"])
def test_codes_310p(gran):
    run_case("Ascend310P3", "float16", gran, "int64", L=512, R=64)
    run_case("Ascend310P3", "float32", gran, "int32")


def test_zero_tokens_and_tiling_errors():
    cc = np.ones((2, 4, 32), np.int8)
    sc = np.full((2, 4, 1), 7, np.float32)
    x = np.zeros((0, 32), np.float16)
    st = launch(OP, [x, x, cc, cc.copy(), np.zeros(0, np.int32), E, E, E, E, sc, sc.copy(), status()],
                {"quant_mode": "dynamic"}, "Ascend910B1")
    assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0 and (cc == 1).all() and (sc == 7).all()
    x = np.zeros((3, 32), np.float16)
    args = [x, x, cc, cc.copy(), np.zeros(3, np.int32), E, E, E, E, sc, sc.copy(), status()]
    expect_tiling_error(OP, args, {"quant_mode": "dynamic"}, "Ascend310P3", "dynamic scales on Ascend310P")
    one = np.ones((), np.float32)
    x12 = np.zeros((3, 12), np.float16)
    expect_tiling_error(OP, [x12, x, np.zeros((2, 4, 12), np.int8), cc, np.zeros(3, np.int32), one, one, E, E, E, E,
                             status()], {}, "Ascend310P3", "Ascend310P", "DataCopyPad")
    expect_tiling_error(OP, [x, x, cc, cc.copy(), np.zeros(3, np.int32), np.ones((5,), np.float32), one, E, E, E, E,
                             status()], {}, "Ascend910B1", "kv_c_scale", "per channel")


def test_gm_traffic_is_the_minimum():
    """DeepSeek rows, dynamic: GM bytes = the float rows read once + codes and scales written once + slots."""
    T, L, R = 64, 512, 64
    st = run_case("Ascend910B1", "bfloat16", "dynamic", "int64", T=T, L=L, R=R, nb=8, bs=16)
    w = st["gm_write_bytes"]
    n_valid = w // (L + R + 8)
    assert w == n_valid * (L + R + 8)
    assert st["gm_read_bytes"] + w <= 1.05 * (n_valid * (L + R) * 2 + w + T * 8)


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_public_op_sim_matches_cpu(mode):
    """concat_and_cache_mla with dynamic scale caches on set_backend("sim") gives the cpu backend's bytes."""
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("concat_and_cache_mla")
    rng = np.random.default_rng(23)
    T, L, R, nb, bs = 9, 64, 32, 3, 8
    kv_c = _rows(rng, T + 1, 1, L, "bfloat16").reshape(T + 1, L)
    k_pe = _rows(rng, T + 1, 1, R, "bfloat16").reshape(T + 1, R)
    slots = make_slots(rng, T, nb * bs, "int32", out_of_range=False)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.cc = Parameter(Tensor(np.zeros((nb, bs, L), np.int8)), name="cc")
            self.pc = Parameter(Tensor(np.zeros((nb, bs, R), np.int8)), name="pc")
            self.csc = Parameter(Tensor(np.ones((nb, bs, 1), np.float32)), name="csc")
            self.psc = Parameter(Tensor(np.ones((nb, bs, 1), np.float32)), name="psc")

        def construct(self, a, b, s):
            mk.concat_and_cache_mla(a, b, self.cc, self.pc, s, kv_c_scale_cache=self.csc, k_pe_scale_cache=self.psc)
            return s

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                ins = (to_ms(kv_c), to_ms(k_pe), ms.Tensor(slots))
                if mode == "graph":
                    net(*ins)
                else:
                    net.construct(*ins)
                results[backend] = [to_np(p) for p in (net.cc, net.pc, net.csc, net.psc)]
                if backend == "sim":
                    assert_last_launch(OP, numTokens=T)
        finally:
            mk.set_backend("cpu")
    for a, b in zip(results["cpu"], results["sim"]):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    assert (results["sim"][0] != 0).any()


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
@pytest.mark.parametrize("idx,at,bad", [(5, 40, np.nan), (6, 0, 0.0), (7, 3, np.inf)])
def test_bad_static_values_trap_before_any_write(soc, idx, at, bad):
    """A per-channel kv_c_scale with a NaN, a per-tensor k_pe_scale of 0, an infinite kv_c_offset: the kernel traps
    (rule TRAP) before any core writes; no cache byte changes."""
    from _copy_sim_ref import sim_module

    sim = sim_module()
    rng = np.random.default_rng(stable_seed(soc, idx, at))
    T, L, R = 7, 64, 32
    kv_c, k_pe = _rows(rng, T, 1, L, "float16").reshape(T, L), _rows(rng, T, 1, R, "float16").reshape(T, R)
    cc = rng.integers(-128, 128, size=(2, 8, L), dtype=np.int8)
    pc = rng.integers(-128, 128, size=(2, 8, R), dtype=np.int8)
    u = lambda shape: rng.uniform(0.004, 0.03, shape).astype(np.float32)  # noqa: E731
    args = [kv_c, k_pe, cc, pc, make_slots(rng, T, 16, "int32", out_of_range=False), u((L,)), u(()),
            np.zeros((L,), np.float32), np.zeros((), np.float32), E, E, status()]
    args[idx].reshape(-1)[at] = bad
    before = cc.copy(), pc.copy()
    with pytest.raises(sim.EmulationError) as ei:
        launch(OP, args, {}, soc, gm_copy="never")
    assert ei.value.rule == "TRAP", str(ei.value)
    np.testing.assert_array_equal(cc, before[0])
    np.testing.assert_array_equal(pc, before[1])


def test_row_too_large_for_ub_names_the_public_op_and_argument():
    """A kv_c row too long for UB: TilingRejectedError naming concat_and_cache_mla, the argument 'kv_c' and the
    longest kv_lora_rank that fits (which passes the tiling)."""
    import re

    from mindspore import Tensor

    from ms_kvcache import sim

    mk = public_backend_or_skip("concat_and_cache_mla")
    soc = sim.get_soc()
    L, R = 16384, 64
    s = Tensor(np.float32(0.1))
    mk.set_backend("sim")
    try:
        with pytest.raises(sim.TilingRejectedError) as ei:
            mk.concat_and_cache_mla(Tensor(np.zeros((2, L), np.float16)), Tensor(np.zeros((2, R), np.float16)),
                                    Tensor(np.zeros((1, 4, L), np.int8)), Tensor(np.zeros((1, 4, R), np.int8)),
                                    Tensor(np.array([0, 1], np.int32)), kv_c_scale=s, k_pe_scale=s)
    finally:
        mk.set_backend("cpu")
    msg = str(ei.value)
    m = re.match(rf"concat_and_cache_mla: the AscendC tiling for {soc} rejects this call: kv_c: expected a row of "
                 rf"kv_lora_rank <= (\d+) elements .*, got {L} \(\d+ bytes needed\)", msg)
    assert m and ei.value.op == "concat_and_cache_mla", msg
    fit = int(m.group(1))
    ins = [((2, fit), "float16"), ((2, R), "float16"), ((1, 4, fit), "int8"), ((1, 4, R), "int8"), ((2,), "int32"),
           ((), "float32"), ((), "float32"), None, None, None, None]
    sim.check_tiling(OP, ins, {}, soc)
    ins[0], ins[2] = ((2, fit + 32), "float16"), ((1, 4, fit + 32), "int8")
    with pytest.raises(sim.TilingRejectedError, match="kv_c: expected a row"):
        sim.check_tiling(OP, ins, {}, soc)


def test_bad_static_value_graph_mode_on_sim_names_the_cause():
    """GRAPH_MODE on set_backend("sim"): a per-channel kv_c_scale with a negative value at flat index 21 makes the
    kernel trap; the RuntimeError reports rule TRAP, then the cause found on the host from the same inputs
    (public argument name, value, flat index); the caches keep their bytes."""
    from mindspore import Parameter, Tensor, nn

    mk = public_backend_or_skip("concat_and_cache_mla")
    rng = np.random.default_rng(31)
    T, L, R, nb, bs = 6, 64, 32, 2, 8
    cc0 = rng.integers(-128, 128, size=(nb, bs, L), dtype=np.int8)
    pc0 = rng.integers(-128, 128, size=(nb, bs, R), dtype=np.int8)
    cs = rng.uniform(0.004, 0.03, (L,)).astype(np.float32)
    cs[21] = -0.5
    ps = np.float32(0.02)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.cc = Parameter(Tensor(cc0), name="cc_cause")
            self.pc = Parameter(Tensor(pc0), name="pc_cause")

        def construct(self, a, b, s, x1, x2):
            mk.concat_and_cache_mla(a, b, self.cc, self.pc, s, kv_c_scale=x1, k_pe_scale=x2)
            return s

    expect_sim_graph_trap(
        mk, Net, lambda net: net(Tensor(_rows(rng, T, 1, L, "float16").reshape(T, L)),
                                 Tensor(_rows(rng, T, 1, R, "float16").reshape(T, R)),
                                 Tensor(make_slots(rng, T, nb * bs, "int32", out_of_range=False)), Tensor(cs),
                                 Tensor(ps)).asnumpy(),
        "; cause: argument 'kv_c_scale': expected finite values > 0, got -0.5 at flat index 21",
        lambda net: [(net.cc, cc0), (net.pc, pc0)])
