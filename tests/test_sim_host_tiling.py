"""Host side of the AscendC emulation: OpDef introspection, tiling and infer-shape through the
emulated CANN host API, on every emulated SoC.

The test op SimHostAdd (tests/sim_kernels/host/sim_host_add) is written to CANN's documented API; its
tiling is recomputed here in Python from the same formula and the platform numbers of the SoC.
"""
import struct
import threading
import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

SOCS = ("Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3")
# (GetCoreNumAiv, GetCoreMemSize(UB), GetLibApiWorkSpaceSize) by CANN's rules (see docs/emulation.md)
EXPECTED_PLATFORM = {
    "Ascend910B1": (48, 196608 - 256, 16 << 20),
    "Ascend910B3": (40, 196608 - 256, 16 << 20),
    "Ascend910_9391": (48, 196608 - 256, 16 << 20),
    "Ascend310P3": (8, 262144, 2 << 20),
}
GE_DTYPE = {"float16": 1, "float32": 0, "bfloat16": 27}
ESIZE = {"float16": 2, "float32": 4, "bfloat16": 2}


@pytest.fixture
def rng(request):
    # local (the ASan run uses --noconftest): stable per test and process, different across tests
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="module")
def sim():
    import _sim_host_harness

    return _sim_host_harness.build_module()


def reference_add_tiling(shape, dtype, soc, bias=False, alpha=1.0, tile_len=0, flags=(1, 2), double_buffer=True):
    cores, ub, ws = EXPECTED_PLATFORM[soc]
    total = int(np.prod(shape))
    esz = ESIZE[dtype]
    align = 32 // esz
    factor = -(-total // cores)
    factor = -(-factor // align) * align
    used = 1 if factor == 0 else -(-total // factor)
    buffers = 2 if double_buffer else 1
    per_elem = 4 * buffers * esz + (0 if esz == 4 else 12)
    tile = tile_len if tile_len > 0 else (ub // per_elem) // align * align
    fields = {
        "hasBias": int(bias), "totalLength": total, "tileElems": tile, "alpha": np.float32(alpha).item(),
        "dtypeCode": GE_DTYPE[dtype], "flags": (list(flags) + [0, 0, 0])[:3], "ubBytes": ub,
        "split.blockFactor": factor, "split.tailFactor": total - factor * (used - 1), "split.usedCores": used,
        "bufferNum": buffers, "shapeTail": [len(shape), shape[-1] if shape else 0],
    }
    key = {"float16": 0, "float32": 1, "bfloat16": 2}[dtype] + (10 if bias else 0)
    if soc == "Ascend310P3" and any((n * esz) % 32 for n in (factor, fields["split.tailFactor"], tile)):
        return None, None, None, None  # no DataCopyPad on 310P: the op's tiling refuses unaligned rows
    return fields, used, key, ws


# bf16 on 310P is rejected (test_sim_host_checks.test_bf16_rejected_on_310p)
SOC_DTYPES = [(s, d) for s in SOCS for d in ("float16", "float32", "bfloat16") if (s, d) != ("Ascend310P3", "bfloat16")]


@pytest.mark.parametrize("soc,dtype", SOC_DTYPES)
@pytest.mark.parametrize("shape,bias", [((4, 1000), False), ((3, 7), True), ((1,), False), ((128, 80), True)])
def test_add_tiling_matches_reference(sim, soc, dtype, shape, bias):
    ins = [(shape, dtype), (shape, dtype), (shape, dtype) if bias else None]
    fields, used, key, ws = reference_add_tiling(shape, dtype, soc, bias=bias)
    if fields is None:
        with pytest.raises(sim.EmulationError, match="no DataCopyPad") as ei:
            sim.tiling("SimHostAdd", ins, soc=soc)
        assert ei.value.rule == "TILING_FAILED"
        return
    r = sim.tiling("SimHostAdd", ins, soc=soc)
    assert r["fields"] == fields
    assert r["block_dim"] == used
    assert r["tiling_key"] == key
    assert r["workspace_sizes"] == [ws] and r["workspace_bytes"] == ws
    assert r["outputs"] == [(tuple(shape), dtype)]
    assert r["tiling_struct"] == "SimHostAddTilingData"
    assert r["tiling_capacity"] == 2048


def test_tiling_bytes_decode_independently(sim, rng):
    shape = (int(rng.integers(1, 50)), int(rng.integers(1, 300)))
    r = sim.tiling("SimHostAdd", [(shape, "float32"), (shape, "float32"), None],
                   attrs={"alpha": 0.375, "flags": [7, 9, 11], "tile_len": 1234, "double_buffer": False})
    b = r["tiling_bytes"]
    assert len(b) == r["tiling_size"] == 72
    has_bias, total, tile, alpha, dcode = struct.unpack_from("<B3xIQfh", b, 0)
    flags = list(b[22:25])
    ub, = struct.unpack_from("<q", b, 32)
    factor, tail, used = struct.unpack_from("<IIB", b, 40)
    nbuf, = struct.unpack_from("<H", b, 56)
    st = list(struct.unpack_from("<ii", b, 60))
    fields, used_ref, _, _ = reference_add_tiling(shape, "float32", "Ascend910B1", alpha=0.375, tile_len=1234,
                                                  flags=(7, 9, 11), double_buffer=False)
    assert (has_bias, total, tile, alpha, dcode) == (0, fields["totalLength"], 1234, 0.375, 0)
    assert flags == [7, 9, 11] and ub == 196352 and nbuf == 1
    assert (factor, tail, used) == (fields["split.blockFactor"], fields["split.tailFactor"], used_ref)
    assert st == [2, shape[1]]
    assert b[1:4] == b"\0\0\0" and b[50:56] == b"\0" * 6  # alignment padding stays zero


def test_attr_defaults_and_overrides(sim):
    ins = [((2, 16), "float16"), ((2, 16), "float16"), None]
    d = sim.tiling("SimHostAdd", ins)["fields"]
    assert (d["alpha"], d["flags"], d["bufferNum"]) == (1.0, [1, 2, 0], 2)
    o = sim.tiling("SimHostAdd", ins, attrs={"alpha": 2, "layout": "BSND", "flags": (True, False, 3)})["fields"]
    assert (o["alpha"], o["flags"]) == (2.0, [1, 0, 3])
    np_attrs = {"alpha": np.float32(0.5), "tile_len": np.int64(64), "double_buffer": np.bool_(False)}
    n = sim.tiling("SimHostAdd", ins, attrs=np_attrs)["fields"]
    assert (n["alpha"], n["tileElems"], n["bufferNum"]) == (0.5, 64, 1)


def test_inputs_accept_arrays_dicts_and_tuples(sim):
    x = np.zeros((3, 5), np.float16)
    a = sim.tiling("SimHostAdd", [x, {"shape": [3, 5], "dtype": "float16", "format": "ND"}, None])
    b = sim.tiling("SimHostAdd", [((3, 5), np.float16), ((3, 5), "fp16"), None])
    assert a["tiling_bytes"] == b["tiling_bytes"]


def test_outputs_given_explicitly(sim):
    r = sim.tiling("SimHostAdd", [((8,), "float32"), ((8,), "float32"), None], outputs=[((8,), "float32")])
    assert r["outputs"] == [((8,), "float32")]


def test_infer_shape(sim):
    assert sim.infer_shape("SimHostAdd", [((2, 3, 4), "bfloat16"), ((2, 3, 4), "bfloat16"), None]) == [
        ((2, 3, 4), "bfloat16")]
    assert sim.infer_shape("SimHostDyn", [[((4, 8), "int8")] * 3, [((4, 8), "int8")] * 3, ((5, 2), "int64")]) == [
        ((1,), "int32")]


def test_opdef_introspection(sim):
    assert {"SimHostAdd", "SimHostFaulty", "SimHostDyn"} <= set(sim.ops())
    d = sim.opdef("SimHostAdd")
    assert [p["name"] for p in d["inputs"]] == ["x", "y", "bias"]
    assert [p["param_type"] for p in d["inputs"]] == ["required", "required", "optional"]
    assert d["inputs"][0]["dtypes"] == ["float16", "float32", "bfloat16"]
    assert d["inputs"][0]["formats"] == ["ND"] * 3
    assert [(a["name"], a["type"], a["default"], a["required"]) for a in d["attrs"]] == [
        ("alpha", "float", 1.0, False), ("layout", "str", "ND", False), ("tile_len", "int", 0, False),
        ("flags", "list_int", [1, 2], False), ("double_buffer", "bool", True, False)]
    socs = {c["soc"]: c for c in d["configs"]}
    assert set(socs) == {"ascend910b", "ascend910_93", "ascend310p"}
    assert socs["ascend310p"]["override"] and socs["ascend310p"]["inputs"][0]["dtypes"] == ["float16", "float32"]
    assert d["has_tiling"] and d["has_infer_shape"] and d["has_infer_dtype"]
    dyn = sim.opdef("SimHostDyn")
    assert [p["param_type"] for p in dyn["inputs"]] == ["dynamic", "dynamic", "required"]
    assert dyn["has_tiling"] and dyn["has_infer_shape"]  # registered with IMPL_OP_OPTILING / IMPL_OP_INFERSHAPE


@pytest.mark.parametrize("soc", SOCS)
def test_platform_table(sim, soc):
    p = sim.platform(soc)
    cores, ub, ws = EXPECTED_PLATFORM[soc]
    assert p["aiv_cores"] == cores
    assert p["ub_size"] - p["ub_kfc_reserved"] == ub
    assert p["has_datacopy_pad"] == p["has_bf16"] == (soc != "Ascend310P3")
    assert p["split_core"] == (soc != "Ascend310P3")
    assert p["source"]
    assert sim.platforms() == list(SOCS)
    assert sim.platform(soc.lower())["soc"] == soc


@pytest.mark.parametrize("soc", SOCS)
def test_dynamic_inputs_parse_and_plain_struct_tiling(sim, soc):
    layers = 3
    ks = [((10, 16, 2, 8), "float16")] * layers
    vs = [((10, 16, 2, 4), "float16")] * layers
    r = sim.tiling("SimHostDyn", [ks, vs, ((6, 2), "int64")], soc=soc)
    b = r["tiling_bytes"]
    assert r["tiling_capacity"] == 4096
    assert len(b) == 4 + 4 + 8 * 8 + 4 + 4 + 3000  # sizeof(SimHostDynTiling) = 3080, a multiple of 8
    num_layers, num_pairs = struct.unpack_from("<II", b, 0)
    elems = list(struct.unpack_from("<8q", b, 8))
    core_num, parsed = struct.unpack_from("<II", b, 72)
    assert (num_layers, num_pairs) == (layers, 6)
    assert elems == [10 * 16 * 2 * 8] * layers + [-1] * (8 - layers)
    assert core_num == EXPECTED_PLATFORM[soc][0] and parsed == 7  # TilingParse ran on this SoC's platform
    assert r["outputs"] == [((1,), "int32")]


def test_concurrent_tiling_calls_agree(sim):
    ins = [((33, 17), "float16"), ((33, 17), "float16"), ((33, 17), "float16")]
    want = sim.tiling("SimHostAdd", ins, soc="Ascend910B3")["tiling_bytes"]
    got, errors = [], []

    def work():
        try:
            for _ in range(40):
                got.append(sim.tiling("SimHostAdd", ins, soc="Ascend910B3")["tiling_bytes"])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 160 and all(g == want for g in got)


def test_stderr_of_a_successful_tiling_passes_through(sim, capfd):
    sim.tiling("SimHostFaulty", [((4,), "float32")], attrs={"seed": 3})
    assert capfd.readouterr().err == ""


# ---------------------------------------------------------------------------- end to end (runner)
E2E = [("Ascend910B1", "float16", (4, 1000), True), ("Ascend910B3", "bfloat16", (3, 7), False),
       ("Ascend910_9391", "float32", (129, 33), True), ("Ascend310P3", "float16", (128, 80), True),
       ("Ascend310P3", "float32", (16, 8), False)]


@pytest.mark.parametrize("soc,dtype,shape,bias", E2E)
def test_kernel_reads_the_tiling_the_host_wrote(sim, rng, soc, dtype, shape, bias):
    """Host tiling (nested struct, arrays, every field size) -> GET_TILING_DATA in the kernel -> output.

    The kernel takes its core split, tile length, buffer count, alpha and bias flag from the struct;
    any host/kernel layout difference changes z.
    """
    import ml_dtypes
    from ms_kvcache import sim as msim

    npdt = {"float16": np.float16, "float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[dtype]
    x = rng.standard_normal(shape).astype(np.float32).astype(npdt)
    y = rng.standard_normal(shape).astype(np.float32).astype(npdt)
    b = rng.standard_normal(shape).astype(np.float32).astype(npdt) if bias else None
    z = np.zeros(shape, npdt)
    alpha = 0.75
    stats = msim.launch_all_orders("SimHostAdd", [x, y, b, z], attrs={"alpha": alpha, "flags": [3, 4, 5]}, soc=soc)
    ref = x.astype(np.float32) + y.astype(np.float32)
    if bias:
        ref = ref + b.astype(np.float32)
    ref = (ref * np.float32(alpha)).astype(npdt)
    assert np.array_equal(z.view(np.uint8), ref.view(np.uint8)), f"{soc} {dtype}"
    fields, used, key, _ = reference_add_tiling(shape, dtype, soc, bias=bias, alpha=alpha, flags=(3, 4, 5))
    assert stats["block_dim"] == used and stats["tiling_key"] == key


def test_documented_template_style_op(sim):
    """An op_host source in the shape of CANN's documented template compiles and tiles unchanged."""
    r = sim.tiling("SimHostDocAdd", [((8, 2048), "float16"), ((8, 2048), "float16")])
    assert r["fields"] == {"totalLength": 8 * 2048, "tileNum": 8}
    assert r["tiling_struct"] == "TilingData" and r["block_dim"] == 8 and r["workspace_sizes"] == [0]
    assert r["outputs"] == [((8, 2048), "float16")]


@settings(max_examples=60, deadline=None)
@given(soc=st.sampled_from(SOCS), dtype=st.sampled_from(["float16", "float32"]),
       shape=st.lists(st.integers(1, 300), min_size=1, max_size=3), bias=st.booleans(),
       alpha=st.floats(-4, 4, width=32), tile_len=st.sampled_from([0, 64, 1024]),
       flags=st.lists(st.integers(0, 255), max_size=3), double_buffer=st.booleans())
def test_add_tiling_random(sim, soc, dtype, shape, bias, alpha, tile_len, flags, double_buffer):
    attrs = {"alpha": alpha, "tile_len": tile_len, "flags": flags, "double_buffer": double_buffer}
    ins = [(shape, dtype), (shape, dtype), (shape, dtype) if bias else None]
    fields, used, key, ws = reference_add_tiling(tuple(shape), dtype, soc, bias=bias, alpha=alpha,
                                                 tile_len=tile_len, flags=flags, double_buffer=double_buffer)
    if fields is None:
        with pytest.raises(sim.EmulationError) as ei:
            sim.tiling("SimHostAdd", ins, attrs=attrs, soc=soc)
        assert ei.value.rule == "TILING_FAILED"
        return
    r = sim.tiling("SimHostAdd", ins, attrs=attrs, soc=soc)
    assert (r["fields"], r["block_dim"], r["tiling_key"], r["workspace_bytes"]) == (fields, used, key, ws)
