"""reshape_and_cache_quant (the quantizing writes of reshape_and_cache / reshape_and_cache_merged): the
AscendC kernel + op_host tiling run through the emulation ("sim").

Exact int8 codes and scales against the numpy model of docs/quantization.md that the cpu tests use
(tests/test_kv_quant.py: quant_rows, quant_dynamic, place): static per tensor / per head / per channel with
offsets and dynamic per-token scales, BSND / BNSD, separate and merged caches, float16 / bfloat16 / float32,
int32 / int64 slots, on Atlas A2 (Ascend910B1), A3 (Ascend910_9391) and Ascend310P3 (no bfloat16, no
DataCopyPad: aligned rows only); slots -1 and out of range, padding rows, untouched scale-cache rows, odd
head sizes, zero tokens, rounding of exact halves, saturation, NaN; tiling errors (float8 caches, 310P
rules); GM traffic; and the public ops on set_backend("sim") against the cpu backend, PyNative and
GRAPH_MODE.
"""
import numpy as np
import pytest

from _copy_sim_ref import (assert_last_launch, cores_of, expect_sim_graph_trap, expect_tiling_error, launch, make_slots,
                           public_backend_or_skip, reset_last_launch, status, stable_seed)
from test_kv_quant import place, quant_dynamic, quant_rows

OP = "MskvReshapeAndCacheQuant"
NP = {"float16": np.float16, "float32": np.float32}
E = np.zeros((0,), np.float32)  # an absent optional input


def _np_dtype(dtype):
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return NP[dtype]


def _rows(rng, n, h, d, dtype):
    return rng.standard_normal((n, h, d)).astype(np.float32).astype(_np_dtype(dtype))


def _scales(rng, gran, h, d):
    """(k_scale, v_scale, k_offset, v_offset) of one granularity (None = absent)."""
    u = lambda shape: rng.uniform(0.004, 0.03, size=shape).astype(np.float32)  # noqa: E731
    if gran == "tensor":
        return u(()), u((1,)), None, None
    if gran == "head":
        return u((h,)), u((h,)), None, None
    return u((h, d)), u((h, d)), rng.uniform(-3, 3, (h, d)).astype(np.float32), \
        rng.uniform(-3, 3, (h, d)).astype(np.float32)


def _bc(s, h):
    return None if s is None else (s.reshape(h, 1) if s.shape == (h,) else s)


def _cache_shape(layout, nb, bs, h, d):
    return (nb, bs, h, d) if layout == "BSND" else (nb, h, bs, d)


def _sc_shape(layout, nb, bs, h):
    return (nb, bs, h, 1) if layout == "BSND" else (nb, h, bs, 1)


def run_case(soc, layout, dtype, gran, sdtype="int32", T=13, H=2, D=32, nb=3, bs=8, merged=False, seed=0,
             key=None, value=None, scales=None, slots=None):
    """One launch; returns (key_cache, value_cache, k_scale_cache, v_scale_cache, expected ..., stats)."""
    rng = np.random.default_rng(stable_seed(soc, layout, dtype, gran, sdtype, T, H, D, merged, seed))
    extra = 3
    key = _rows(rng, T + extra, H, D, dtype) if key is None else key
    value = _rows(rng, T + extra, H, D, dtype) if value is None else value
    shape = _cache_shape(layout, nb, bs, H, D)
    kc = rng.integers(-128, 128, size=shape, dtype=np.int8)
    vc = rng.integers(-128, 128, size=shape, dtype=np.int8)
    if slots is None:
        slots = make_slots(rng, T, nb * bs, sdtype)
    dynamic = gran == "dynamic"
    if dynamic:
        ksc = rng.uniform(5, 6, _sc_shape(layout, nb, bs, H)).astype(np.float32)  # sentinels: rows not written
        vsc = rng.uniform(5, 6, _sc_shape(layout, nb, bs, H)).astype(np.float32)
        ks = vs = ko = vo = None
    else:
        ks, vs, ko, vo = _scales(rng, gran, H, D) if scales is None else scales
        ksc = vsc = None
    s64 = np.asarray(slots, np.int64)
    sl = np.where((s64 >= 0) & (s64 < nb * bs), s64, -1)  # out of range: never written
    k32, v32 = np.asarray(key[:T], np.float32), np.asarray(value[:T], np.float32)
    if dynamic:
        (qk, sk), (qv, sv) = quant_dynamic(k32, "int8"), quant_dynamic(v32, "int8")
        e_ksc, e_vsc = place(ksc, sk, sl, layout), place(vsc, sv, sl, layout)
    else:
        qk = quant_rows(k32, "int8", _bc(ks, H), _bc(ko, H))
        qv = quant_rows(v32, "int8", _bc(vs, H), _bc(vo, H))
        e_ksc = e_vsc = None
    ek, ev = place(kc, qk, sl, layout), place(vc, qv, sl, layout)
    opt = lambda a: E if a is None else a  # noqa: E731
    attrs = {"cache_layout": layout, "kv_format": 1 if merged else 2, "quant_mode": "dynamic" if dynamic else "static"}
    if merged:
        kv = np.stack([kc, vc])
        args = [key, value, kv, np.zeros((0,), np.int8), slots]
    else:
        args = [key, value, kc, vc, slots]
    args += [opt(ks), opt(vs), opt(ko), opt(vo), opt(ksc), opt(vsc), status()]
    st = launch(OP, args, attrs, soc)
    if merged:
        kc, vc = kv[0], kv[1]
    assert_quant_caches((kc, vc, ksc, vsc), (ek, ev, e_ksc, e_vsc), f"({soc} {layout} {dtype} {gran})")
    return st


def assert_quant_caches(got, want, what):
    """key_cache, value_cache, k_scale_cache, v_scale_cache equal the expected codes / scales (bit for bit;
    an expected None is not checked)."""
    names = ("key_cache", "value_cache", "k_scale_cache", "v_scale_cache")
    for g, w, n in zip(got, want, names):
        if w is None:
            continue
        if g.dtype == np.int8:
            bad = np.argwhere(g != w)
            assert bad.size == 0, f"{n} {what}: {len(bad)} codes differ, first at " \
                                  f"{tuple(bad[0])}: {g[tuple(bad[0])]} vs {w[tuple(bad[0])]}"
        else:
            np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32), err_msg=f"{n} {what}")


# ------------------------------------------------------------------------------------------ codes
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("gran", ["tensor", "head", "channel_offset", "dynamic"])
def test_codes_a2(gran, dtype, layout):
    """Atlas A2: every mode x data dtype x layout; int64 slots for the float32 rows; the tiling key."""
    sd = "int64" if dtype == "float32" else "int32"
    st = run_case("Ascend910B1", layout, dtype, gran, sd)
    want = ((10000 if gran == "dynamic" else 0) + (1000 if layout == "BNSD" else 0)
            + 100 * {"float16": 1, "bfloat16": 2, "float32": 3}[dtype] + 10 * (sd == "int64"))
    assert st["tiling_key"] == want


@pytest.mark.parametrize("gran", ["tensor", "channel_offset", "dynamic"])
@pytest.mark.parametrize("merged", [False, True])
def test_codes_a3_and_merged(merged, gran):
    """Atlas A3 (Ascend910_9391), separate and MERGED_KV caches (the V plane behind the K plane)."""
    for layout in ("BSND", "BNSD"):
        run_case("Ascend910_9391", layout, "bfloat16", gran, "int64", merged=merged, T=50, H=3, nb=8)


@pytest.mark.parametrize("gran", ["tensor", "head", "channel_offset", "dynamic"])
def test_codes_310p(gran):
    """Ascend310P3: float16 / float32, head_size a multiple of 32; dynamic BSND with 8 heads (the scale row a
    multiple of 32 bytes); merged caches too."""
    for layout in ("BSND", "BNSD"):
        if gran == "dynamic" and layout == "BNSD":
            continue
        run_case("Ascend310P3", layout, "float16", gran, "int64", H=8 if gran == "dynamic" else 2)
        run_case("Ascend310P3", layout, "float32", gran, "int32", H=8, merged=True)


@pytest.mark.parametrize("D", [1, 3, 12, 33, 80])
def test_odd_head_sizes(D):
    """Heads whose codes are not a multiple of 32 bytes (DataCopyPad on A2): per channel and dynamic, both
    layouts; the dynamic scale rows of 3 heads (12 bytes) too."""
    for layout in ("BSND", "BNSD"):
        run_case("Ascend910B1", layout, "float16", "channel_offset", D=D, H=3, T=9)
        run_case("Ascend910B1", layout, "bfloat16", "dynamic", D=D, H=3, T=9)


def test_many_heads_and_more_tokens_than_cores():
    """70 heads (scale rows beyond one 64-float repeat), T > cores, the last slot, slot 0, slots -1 / -7."""
    nb, bs = 4, 16
    perm = np.random.default_rng(3).permutation(np.arange(1, nb * bs - 1))
    slots = np.full(60, -1, np.int64)
    slots[:50] = perm[:50]
    slots[0], slots[1], slots[5] = nb * bs - 1, 0, -7
    for layout in ("BSND", "BNSD"):
        run_case("Ascend910B1", layout, "float16", "dynamic", H=70, D=16, nb=nb, bs=bs, T=60, slots=slots)
        run_case("Ascend910B1", layout, "float16", "head", H=70, D=16, nb=nb, bs=bs, T=60, slots=slots)


def test_rounding_saturation_and_special_values():
    """Exact halves round to even (x / s = k + 0.5 exactly), values beyond the int8 range saturate (inf
    included), NaN gives code 0 (static); a dynamic all-zero head gets scale 0 and codes 0, and an inf gives
    scale inf and codes 0, as on the cpu backend."""
    H, D = 2, 32
    halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -127.5, 3.25, -3.75, 1000.0, -1000.0, np.inf,
                       -np.inf, np.nan, -0.0], np.float32)
    row = np.resize(halves, H * D).reshape(1, H, D)
    key = np.repeat(row, 4, 0).astype(np.float32)
    scales = (np.array(1.0, np.float32), np.array([0.5], np.float32), None, None)
    run_case("Ascend910B1", "BSND", "float32", "tensor", T=4, key=key, value=key, scales=scales,
             slots=np.array([0, 1, 2, 3], np.int32))
    run_case("Ascend310P3", "BSND", "float32", "tensor", T=4, key=key, value=key, scales=scales,
             slots=np.array([0, 1, 2, 3], np.int32))
    dyn = np.random.default_rng(1).standard_normal((4, H, D)).astype(np.float16)
    dyn[0, 0] = 0
    dyn[1, 1] = np.float16(-0.0)
    dyn[2, 0, 5] = np.inf
    dyn[3, 1] = np.float16(6e-8)  # subnormal half: max / 127 still > 0
    run_case("Ascend910B1", "BNSD", "float16", "dynamic", T=4, key=dyn, value=dyn[::-1].copy(),
             slots=np.array([3, 9, 0, 17], np.int64))


def test_nan_in_a_dynamic_row_differs_from_cpu():
    """Documented difference (docs/quantization.md): a NaN element j of a dynamically quantized head drops
    its max-tree lane (the elements i with i % 8 == j % 8) from that head's max in the AscendC kernel (the
    emulation's vector Max propagates NaN, the scalar combine skips NaN lanes); the cpu kernel skips only
    the NaN. The NaN's code is 0 on both; the other head is exact."""
    from ms_kvcache import sim

    H, D, nb, bs = 2, 32, 2, 4
    x = np.random.default_rng(2).standard_normal((1, H, D)).astype(np.float32)
    x[0, 0, 3] = np.nan
    x[0, 0, 11] = 9.0  # the head's true max, in the NaN's lane
    kc = np.zeros((nb, bs, H, D), np.int8)
    vc = kc.copy()
    ksc = np.zeros((nb, bs, H, 1), np.float32)
    vsc = ksc.copy()
    sim.launch(OP, [x, x, kc, vc, np.array([2], np.int32), E, E, E, E, ksc, vsc, status()],
               attrs={"quant_mode": "dynamic"}, soc="Ascend910B1")
    lanes = np.arange(D) % 8 != 3
    s = np.float32(np.abs(x[0, 0, lanes]).max()) / np.float32(127)
    assert ksc[0, 2, 0, 0] == s and s < np.float32(9.0) / np.float32(127)  # the cpu kernel: 9 / 127
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(kc[0, 2, 0], quant_rows(x[0, 0], "int8", s))
    q, s1 = quant_dynamic(x[:, 1:], "int8")
    np.testing.assert_array_equal(kc[0, 2, 1], q[0, 0])
    assert ksc[0, 2, 1, 0] == s1[0, 0, 0]


def test_zero_tokens_and_empty_rows_launch_nothing():
    for T, D in ((0, 32), (5, 0)):
        kc = np.ones((2, 4, 2, D), np.int8)
        ksc = np.full((2, 4, 2, 1), 7, np.float32)
        st = launch(OP, [np.zeros((T, 2, D), np.float16)] * 2 + [kc, kc.copy(), np.zeros(T, np.int32), E, E, E, E,
                    ksc, ksc.copy(), status()], {"quant_mode": "dynamic"}, "Ascend910B1")
        assert st["block_dim"] == 1 and st["gm_write_bytes"] == 0
        assert (kc == 1).all() and (ksc == 7).all()


# ------------------------------------------------------------------------------------------ errors
def _args(D=32, H=2, cache=np.int8, dyn=False, layout="BSND", dtype=np.float16):
    shape = _cache_shape(layout, 2, 4, H, D)
    kc = np.zeros(shape, cache)
    x = np.zeros((3, H, D), dtype)
    if dyn:
        sc = np.zeros(_sc_shape(layout, 2, 4, H), np.float32)
        return [x, x, kc, kc.copy(), np.zeros(3, np.int32), E, E, E, E, sc, sc.copy(), status()]
    return [x, x, kc, kc.copy(), np.zeros(3, np.int32), np.ones((), np.float32), np.ones((), np.float32), E, E, E, E,
            status()]


def gqa_quant_tiling_errors(op, args, k_scale_at, unaligned_d):
    """The tiling errors of a GQA quantizing write (reshape_and_cache_quant, rope_reshape_and_cache_quant; `args`
    builds its inputs, k_scale at index `k_scale_at`): 310P: unaligned heads, dynamic BNSD and dynamic BSND with a
    scale row that is not a multiple of 32 bytes name the SoC; everywhere: a missing scale, a wrong scale shape."""
    expect_tiling_error(op, args(D=unaligned_d), {}, "Ascend310P3", f"head_size {unaligned_d}", "Ascend310P")
    expect_tiling_error(op, args(dyn=True, layout="BNSD", H=8), {"quant_mode": "dynamic", "cache_layout": "BNSD"},
                        "Ascend310P3", "dynamic scales on Ascend310P")
    expect_tiling_error(op, args(dyn=True, H=3), {"quant_mode": "dynamic"}, "Ascend310P3", "Ascend310P")
    a = args()
    a[k_scale_at] = E
    expect_tiling_error(op, a, {}, "Ascend910B1", "k_scale", "expected a float32 scale")
    a = args()
    a[k_scale_at + 1] = np.ones((3,), np.float32)
    expect_tiling_error(op, a, {}, "Ascend910B1", "v_scale", "per channel")


def test_tiling_errors():
    """gqa_quant_tiling_errors; and a scale cache of the wrong shape."""
    gqa_quant_tiling_errors(OP, _args, 5, 12)
    a = _args(dyn=True)
    a[9] = np.zeros((2, 4, 3, 1), np.float32)
    expect_tiling_error(OP, a, {"quant_mode": "dynamic"}, "Ascend910B1", "k_scale_cache", "expected shape")


def test_float8_cache_tiling_error_names_the_soc():
    """float8 caches: the OpDef has no float8 row on these SoCs (no AscendC Cast to fp8 there), and the host
    tiling itself refuses one naming the SoC (run with the dtype-row check out of the way)."""
    from ms_kvcache import sim

    ins = [((3, 2, 32), "float16")] * 2 + [((2, 4, 2, 32), "float8_e4m3fn")] * 2 + \
        [((3,), "int32"), ((), "float32"), ((), "float32"), None, None, None, None]
    with pytest.raises(sim.EmulationError, match="float8_e4m3fn|OPDEF_DTYPE_ROW"):
        sim.tiling(OP, ins, {}, "Ascend910B1")


# ------------------------------------------------------------------------------------------ traffic
@pytest.mark.parametrize("gran", ["tensor", "dynamic"])
def test_gm_traffic_within_5_percent_of_the_minimum(gran):
    """GM bytes moved <= 1.05x the minimum: the float rows of the written tokens read once, their codes (and,
    dynamic, scales) written once, the slots read once (static per-tensor scales: 8 bytes per core)."""
    soc, T, H, D = "Ascend910B1", 96, 8, 128
    st = run_case(soc, "BSND", "bfloat16", gran, "int64", T=T, H=H, D=D, nb=4, bs=32)
    slots_bytes = T * 8
    # every valid token: K and V rows read (bf16), codes written; the run's own slot count
    valid = st["fields_valid_tokens"] if "fields_valid_tokens" in st else None
    total = st["gm_read_bytes"] + st["gm_write_bytes"]
    w = st["gm_write_bytes"]
    per_token_w = 2 * H * D + (2 * H * 4 if gran == "dynamic" else 0)
    n_valid = w // per_token_w
    assert w == n_valid * per_token_w
    minimum = n_valid * (2 * H * D * 2) + w + slots_bytes + (8 * st["cores_used"] if gran == "tensor" else 0)
    assert total <= 1.05 * minimum, (total, minimum, valid)
    assert st["cores_used"] == min(T, cores_of(soc))


# ------------------------------------------------------------------------------------------ public ops
@pytest.mark.parametrize("mode", ["pynative", "graph"])
@pytest.mark.parametrize("merged", [False, True])
def test_public_ops_sim_match_cpu(mode, merged):
    """reshape_and_cache (dynamic, BNSD) / reshape_and_cache_merged (static per channel with offsets, BSND)
    on set_backend("sim") give the cpu backend's bytes, PyNative and GRAPH_MODE; padding rows and slot -1."""
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode, to_ms, to_np

    mk = public_backend_or_skip("reshape_and_cache")
    rng = np.random.default_rng(17)
    T, H, D, nb, bs = 11, 2, 32, 3, 8
    layout = "BSND" if merged else "BNSD"
    key, value = _rows(rng, T + 2, H, D, "bfloat16"), _rows(rng, T + 2, H, D, "bfloat16")
    slots = make_slots(rng, T, nb * bs, "int32", out_of_range=False)
    shape = _cache_shape(layout, nb, bs, H, D)
    kc0 = rng.integers(-128, 128, size=((2,) + shape if merged else shape), dtype=np.int8)
    vc0 = rng.integers(-128, 128, size=shape, dtype=np.int8)
    sc0 = rng.uniform(1, 2, _sc_shape(layout, nb, bs, H)).astype(np.float32)
    ks, vs, ko, vo = _scales(rng, "channel_offset", H, D)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(Tensor(kc0), name="kc")
            self.vc = Parameter(Tensor(vc0), name="vc")
            self.ksc = Parameter(Tensor(sc0), name="ksc")
            self.vsc = Parameter(Tensor(sc0.copy()), name="vsc")

        def construct(self, k, v, s, a, b, c, d):
            if merged:
                mk.reshape_and_cache_merged(k, v, self.kc, s, layout, k_scale=a, v_scale=b, k_offset=c, v_offset=d)
            else:
                mk.reshape_and_cache(k, v, self.kc, self.vc, s, layout, k_scale_cache=self.ksc,
                                     v_scale_cache=self.vsc)
            return s

    results = {}
    for backend in ("cpu", "sim"):
        mk.set_backend(backend)
        reset_last_launch(OP)
        try:
            with ms_mode(mode):
                net = Net()
                ins = (to_ms(key), to_ms(value), ms.Tensor(slots), Tensor(ks), Tensor(vs), Tensor(ko), Tensor(vo))
                if mode == "graph":
                    net(*ins)
                else:
                    net.construct(*ins)
                results[backend] = [to_np(p) for p in (net.kc, net.vc, net.ksc, net.vsc)]
                if backend == "sim":
                    assert_last_launch(OP, numTokens=T)
        finally:
            mk.set_backend("cpu")
    for a, b in zip(results["cpu"], results["sim"]):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    assert (results["sim"][0] != kc0).any()


def test_public_float8_cache_refused_on_sim():
    """A float8 cache on the sim backend: a TypeError naming the op, the argument and why (no AscendC Cast to
    fp8 on these SoCs), before any launch; the cpu backend writes it (tests/test_kv_quant.py)."""
    import ms_kvcache
    from mindspore import Tensor

    mk = public_backend_or_skip("reshape_and_cache")
    from test_kv_quant import fp8_tensor

    kc = fp8_tensor(np.zeros((2, 4, 2, 32), np.uint8), "float8_e4m3fn")
    vc = fp8_tensor(np.zeros((2, 4, 2, 32), np.uint8), "float8_e4m3fn")
    x = Tensor(np.ones((3, 2, 32), np.float16))
    s = Tensor(np.float32(0.1))
    mk.set_backend("sim")
    try:
        with pytest.raises(TypeError, match=r"reshape_and_cache: argument 'key_cache': expected dtype int8 on backend "
                                            r"'sim' \(float8 caches have no AscendC kernel on Atlas A2/A3 or Ascend310P"):
            ms_kvcache.reshape_and_cache(x, x, kc, vc, Tensor(np.array([0, 1, -1], np.int32)), k_scale=s, v_scale=s)
    finally:
        mk.set_backend("cpu")


# ------------------------------------------------------------------------------------------ bad static values
_BAD_STATIC = [  # (granularity, input index: 5 k_scale 6 v_scale 7 k_offset 8 v_offset, flat index, value)
    ("tensor", 5, 0, 0.0), ("head", 6, 1, np.nan), ("channel", 5, 37, np.inf), ("channel", 6, 3, -0.25),
    ("offset", 7, 40, np.nan), ("offset", 8, 0, -np.inf)]


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
@pytest.mark.parametrize("gran,idx,at,bad", _BAD_STATIC)
def test_bad_static_values_trap_before_any_write(soc, gran, idx, at, bad):
    """A static scale of 0 / NaN / inf / < 0 or a NaN / inf offset (per tensor, per head, per channel): every core
    checks the values it uses before its first write and calls AscendC::Trap() (rule TRAP); no cache byte changes.
    In a graph no host code sees these values (was: saturated or zero codes, no error)."""
    from _copy_sim_ref import sim_module

    sim = sim_module()
    rng = np.random.default_rng(stable_seed(soc, gran, idx, at))
    T, H, D = 9, 2, 32
    key, value = _rows(rng, T, H, D, "float16"), _rows(rng, T, H, D, "float16")
    kc, vc = (rng.integers(-128, 128, size=(3, 8, H, D), dtype=np.int8) for _ in range(2))
    shape = {"tensor": (), "head": (H,)}.get(gran, (H, D))
    ks, vs = (rng.uniform(0.004, 0.03, shape).astype(np.float32) for _ in range(2))
    ko, vo = (rng.uniform(-3, 3, shape).astype(np.float32) if gran == "offset" else E for _ in range(2))
    args = [key, value, kc, vc, make_slots(rng, T, 24, "int32", out_of_range=False), ks, vs, ko, vo, E, E, status()]
    args[idx].reshape(-1)[at] = bad
    before = kc.copy(), vc.copy()
    with pytest.raises(sim.EmulationError) as ei:
        launch(OP, args, {}, soc, gm_copy="never")
    assert ei.value.rule == "TRAP" and "AscendC::Trap()" in str(ei.value), str(ei.value)
    np.testing.assert_array_equal(kc, before[0], "key_cache written before the trap")
    np.testing.assert_array_equal(vc, before[1], "value_cache written before the trap")
    args[idx].reshape(-1)[at] = 0.01 if idx < 7 else 1.5  # the same launch with a valid value runs
    launch(OP, args, {}, soc, gm_copy="never")
    assert (kc != before[0]).any()


def test_bad_static_value_graph_mode_on_sim_fails_the_launch():
    """GRAPH_MODE on set_backend("sim"): a per-channel k_scale with a 0 reaches the kernel, which traps; MindSpore
    raises RuntimeError and the caches keep their bytes."""
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode, to_np

    mk = public_backend_or_skip("reshape_and_cache")
    rng = np.random.default_rng(5)
    T, H, D = 5, 2, 32
    kc0 = rng.integers(-128, 128, size=(3, 8, H, D), dtype=np.int8)
    ks = rng.uniform(0.004, 0.03, (H, D)).astype(np.float32)
    ks[1, 7] = 0.0

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(Tensor(kc0), name="kc_bad")
            self.vc = Parameter(Tensor(kc0.copy()), name="vc_bad")

        def construct(self, k, s, a):
            mk.reshape_and_cache(k, k, self.kc, self.vc, s, k_scale=a, v_scale=a)
            return s

    mk.set_backend("sim")
    try:
        with ms_mode("graph"):
            net = Net()
            with pytest.raises(RuntimeError, match="TRAP"):
                net(Tensor(_rows(rng, T, H, D, "float16")), Tensor(np.array([0, 3, -1, 9, 20], np.int32)),
                    Tensor(ks)).asnumpy()
            np.testing.assert_array_equal(to_np(net.kc), kc0)
            np.testing.assert_array_equal(to_np(net.vc), kc0)
    finally:
        mk.set_backend("cpu")


# ------------------------------------------------------------------------------------------ UB limit
@pytest.mark.parametrize("merged", [False, True])
def test_row_too_large_for_ub_names_the_public_op_and_argument(merged):
    """A float16 key [T, 96, 128] does not fit UB on Ascend910B1: the PyNative call raises TilingRejectedError
    naming the public op (not reshape_and_cache_quant), the argument 'key' and the largest row that fits; that
    bound is exact (its num_kv_heads passes the tiling, one more head does not)."""
    import re

    from mindspore import Tensor

    from ms_kvcache import sim

    mk = public_backend_or_skip("reshape_and_cache")
    soc = sim.get_soc()
    T, H, D = 2, 96, 128
    x = Tensor(np.zeros((T, H, D), np.float16))
    kc = Tensor(np.zeros(((2,) if merged else ()) + (2, 4, H, D), np.int8))
    sl, s = Tensor(np.array([0, 5], np.int32)), Tensor(np.float32(0.1))
    op = "reshape_and_cache_merged" if merged else "reshape_and_cache"
    mk.set_backend("sim")
    try:
        with pytest.raises(sim.TilingRejectedError) as ei:
            if merged:
                mk.reshape_and_cache_merged(x, x, kc, sl, k_scale=s, v_scale=s)
            else:
                mk.reshape_and_cache(x, x, kc, Tensor(np.zeros((2, 4, H, D), np.int8)), sl, k_scale=s, v_scale=s)
    finally:
        mk.set_backend("cpu")
    msg = str(ei.value)
    m = re.match(rf"{op}: the AscendC tiling for {soc} rejects this call: key: expected a token row of num_kv_heads "
                 rf"\* head_size <= (\d+) elements \(num_kv_heads <= (\d+) at head_size 128: .*\), got 12288 "
                 rf"\(num_kv_heads 96, \d+ bytes needed\)", msg)
    assert m, msg
    assert ei.value.op == op and "reshape_and_cache_quant" not in msg
    fit = int(m.group(2))
    assert int(m.group(1)) == fit * D and 0 < fit < H

    def tiling(h):
        a = _args(D=D, H=h)
        ins = [(y.shape, str(y.dtype)) if y.size or y.ndim != 1 else None for y in a[:-1]]
        return sim.check_tiling(OP, ins, {}, soc)

    tiling(fit)
    with pytest.raises(sim.TilingRejectedError, match=rf"num_kv_heads <= {fit} at head_size 128"):
        tiling(fit + 1)


def test_row_too_large_for_ub_graph_mode_names_the_public_op():
    """GRAPH_MODE on set_backend("sim"): the same UB rejection reaches MindSpore as a RuntimeError whose text
    starts with the public op (reshape_and_cache_merged, the primitive's mskv_op_name), not only the internal
    OpType MskvReshapeAndCacheQuant; the cache keeps its bytes."""
    from mindspore import Parameter, Tensor, nn

    from conftest import ms_mode, to_np

    mk = public_backend_or_skip("reshape_and_cache")
    T, H, D = 2, 96, 128
    kc0 = np.random.default_rng(3).integers(-128, 128, size=(2, 2, 4, H, D), dtype=np.int8)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kv = Parameter(Tensor(kc0), name="kv_big")

        def construct(self, k, s, a):
            mk.reshape_and_cache_merged(k, k, self.kv, s, k_scale=a, v_scale=a)
            return s

    mk.set_backend("sim")
    try:
        with ms_mode("graph"):
            net = Net()
            with pytest.raises(RuntimeError) as ei:
                net(Tensor(np.zeros((T, H, D), np.float16)), Tensor(np.array([0, 5], np.int32)),
                    Tensor(np.float32(0.1))).asnumpy()
            np.testing.assert_array_equal(to_np(net.kv), kc0)
    finally:
        mk.set_backend("cpu")
    msg = str(ei.value)
    assert "reshape_and_cache_merged: " in msg and "key: expected a token row of num_kv_heads" in msg, msg


@pytest.mark.parametrize("arg,at,bad", [("k_scale", 39, 0.0), ("v_offset", 45, np.nan)])
def test_bad_static_value_graph_mode_on_sim_names_the_cause(arg, at, bad):
    """GRAPH_MODE on set_backend("sim"), reshape_and_cache static int8 per channel with offsets: a k_scale with a 0
    (or a NaN v_offset) at flat index `at` makes the kernel trap; the RuntimeError still reports rule TRAP and
    then the cause found on the host from the same inputs, with the public argument name, the value and the flat
    index (the cpu backend's graph-mode text); the caches keep their bytes."""
    from mindspore import Parameter, Tensor, nn

    mk = public_backend_or_skip("reshape_and_cache")
    rng = np.random.default_rng(stable_seed(arg, at))
    T, H, D = 5, 2, 32
    kc0 = rng.integers(-128, 128, size=(3, 8, H, D), dtype=np.int8)
    vals = {n: rng.uniform(0.004, 0.03, (H, D)).astype(np.float32) for n in ("k_scale", "v_scale")}
    vals.update({n: rng.uniform(-3, 3, (H, D)).astype(np.float32) for n in ("k_offset", "v_offset")})
    vals[arg].reshape(-1)[at] = bad

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.kc = Parameter(Tensor(kc0), name="kc_cause")
            self.vc = Parameter(Tensor(kc0.copy()), name="vc_cause")

        def construct(self, k, s, ks, vs, ko, vo):
            mk.reshape_and_cache(k, k, self.kc, self.vc, s, k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo)
            return s

    want = "finite values > 0, got 0" if arg == "k_scale" else "finite values, got nan"
    expect_sim_graph_trap(
        mk, Net, lambda net: net(Tensor(_rows(rng, T, H, D, "float16")), Tensor(np.array([0, 3, -1, 9, 20], np.int32)),
                                 *(Tensor(vals[n]) for n in ("k_scale", "v_scale", "k_offset", "v_offset"))).asnumpy(),
        f"; cause: argument '{arg}': expected {want} at flat index {at}", lambda net: [(net.kc, kc0), (net.vc, kc0)])
