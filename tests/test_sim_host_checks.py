"""Host-side rules of the AscendC emulation: each check a real CANN would also apply (or that guards
the host<->kernel contract) fires with an EmulationError naming the rule, the op and the values.

Test ops: tests/sim_kernels/host/ (SimHostFaulty misbehaves on purpose, selected by its "fault" attr).
"""
import pytest


@pytest.fixture(scope="module")
def sim():
    import _sim_host_harness

    return _sim_host_harness.build_module()


X4 = [((4, 8), "float32")]


def fails(sim, rule, *args, match=(), **kwargs):
    """Run sim.tiling(*args) expecting an EmulationError of `rule` whose message contains `match`."""
    with pytest.raises(sim.EmulationError) as ei:
        sim.tiling(*args, **kwargs)
    e = ei.value
    assert e.rule == rule, str(e)
    assert str(e).startswith(f"[{rule}] ") and str(e).count(f"[{rule}]") == 1 and e.message == str(e)
    assert e.core is None
    for m in match:
        assert m in str(e), f"{m!r} not in {e}"
    return e


def faulty(sim, fault, soc="Ascend910B1", **kw):
    return sim.tiling("SimHostFaulty", X4, attrs={"fault": fault, "seed": 5}, soc=soc, **kw)


def test_valid_call_passes(sim):
    r = faulty(sim, "none")
    assert r["block_dim"] == 48 and r["fields"] == {"a": 5, "b": 48, "c": 0x0123456789ABCDEF}


# ---------------------------------------------------------------------------- tiling function result
def test_tiling_failed_names_op_inputs_and_stderr_reason(sim):
    e = fails(sim, "tiling.failed", "SimHostFaulty", X4, attrs={"fault": "fail", "seed": 11},
              match=("GRAPH_FAILED", "x=float32[4, 8]", "fault='fail'", "soc Ascend910B1",
                     "refusing seed 11 on purpose"))
    assert e.op == "SimHostFaulty"


def test_tiling_exception(sim):
    fails(sim, "tiling.exception", "SimHostFaulty", X4, attrs={"fault": "throw", "seed": 1}, match=("tiling blew up",))


def test_block_dim_zero_and_unset(sim):
    fails(sim, "tiling.block_dim", "SimHostFaulty", X4, attrs={"fault": "block_dim_0", "seed": 1},
          match=("SetBlockDim(0)", "[1, 65535]"))
    fails(sim, "tiling.block_dim", "SimHostFaulty", X4, attrs={"fault": "no_block_dim", "seed": 1},
          match=("never called",))
    fails(sim, "tiling.block_dim", "SimHostFaulty", X4, attrs={"fault": "block_dim_65536", "seed": 1},
          match=("65536",))


@pytest.mark.parametrize("soc,cores", [("Ascend910B1", 48), ("Ascend910B3", 40), ("Ascend910_9391", 48),
                                       ("Ascend310P3", 8)])
def test_block_dim_above_vector_cores(sim, soc, cores):
    fails(sim, "tiling.block_dim_cores", "SimHostFaulty", X4, attrs={"fault": "block_dim_big", "seed": 1},
          soc=soc, match=(f"block dim {cores + 1}", f"= {cores}", soc))
    # kernel_type="any" only applies CANN's hard range [1, 65535]
    assert sim.tiling("SimHostFaulty", X4, attrs={"fault": "block_dim_big", "seed": 1}, soc=soc,
                      kernel_type="any")["block_dim"] == cores + 1


def test_block_dim_cube_kernels_use_aic_count(sim):
    fails(sim, "tiling.block_dim_cores", "SimHostFaulty", X4, attrs={"fault": "none", "seed": 1},
          kernel_type="mix", match=("GetCoreNumAic() = 24",))


# ---------------------------------------------------------------------------- tiling data buffer
def test_save_to_buffer_larger_than_capacity(sim):
    fails(sim, "tiling.data_overflow", "SimHostFaulty", X4, attrs={"fault": "save_overflow", "seed": 1},
          match=("SimHostBigTilingData", "4104 bytes", "capacity is 2048"))


def test_data_size_above_capacity(sim):
    fails(sim, "tiling.data_overflow", "SimHostFaulty", X4, attrs={"fault": "size_over_capacity", "seed": 1},
          match=("2056 bytes", "capacity 2048"))


def test_data_size_not_set(sim):
    fails(sim, "tiling.data_size_unset", "SimHostFaulty", X4, attrs={"fault": "size_unset", "seed": 1},
          match=("SimHostFaultyTilingData", "16 bytes", "SetDataSize"))


def test_data_size_smaller_than_struct(sim):
    fails(sim, "tiling.data_size_mismatch", "SimHostFaulty", X4, attrs={"fault": "size_short", "seed": 1},
          match=("4 bytes", "16 bytes"))


# ---------------------------------------------------------------------------- workspace
def test_workspace_never_set(sim):
    fails(sim, "tiling.workspace_unset", "SimHostFaulty", X4, attrs={"fault": "no_workspace", "seed": 1},
          match=("GetWorkspaceSizes",))


def test_workspace_requested_but_not_written(sim):
    fails(sim, "tiling.workspace_unset", "SimHostFaulty", X4, attrs={"fault": "ws_unwritten", "seed": 1},
          match=("workspace[1]", "GetWorkspaceSizes(2)"))


# ---------------------------------------------------------------------------- attributes
def test_required_attr_missing(sim):
    fails(sim, "attr.missing", "SimHostFaulty", X4, attrs={"fault": "none"}, match=("'seed'", "int"))


@pytest.mark.parametrize("attrs,match", [
    ({"fault": "none", "seed": 1.5}, ("'seed'", "declared int", "float")),
    ({"fault": 3, "seed": 1}, ("'fault'", "declared str", "int")),
    ({"fault": "none", "seed": True}, ("'seed'", "bool")),
])
def test_attr_wrong_type(sim, attrs, match):
    fails(sim, "attr.type", "SimHostFaulty", X4, attrs=attrs, match=match)


def test_attr_wrong_type_lists(sim):
    ins = [((2, 16), "float16"), ((2, 16), "float16"), None]
    fails(sim, "attr.type", "SimHostAdd", ins, attrs={"flags": [1.5, 2]}, match=("'flags'", "list_int"))
    fails(sim, "attr.type", "SimHostAdd", ins, attrs={"double_buffer": 1}, match=("'double_buffer'", "bool"))


def test_attr_unknown(sim):
    fails(sim, "attr.unknown", "SimHostFaulty", X4, attrs={"seed": 1, "sead": 2}, match=("'sead'", "fault, seed"))


# ---------------------------------------------------------------------------- dtype/format rows, SoC
def test_dtype_combination_not_in_rows(sim):
    fails(sim, "opdef.dtype_row", "SimHostAdd", [((2, 16), "float16"), ((2, 16), "float32"), None],
          match=("x=float16[2, 16]", "y=float32[2, 16]", "(float16, float16, float16 -> float16)",
                 "'y' expected float16 got float32"))


def test_dtype_not_in_soc_config(sim):
    # float16 x with int8 bias: no row on any SoC; on 310P the message names the 310P override
    fails(sim, "opdef.dtype_row", "SimHostAdd", [((4,), "float16"), ((4,), "float16"), ((4,), "int8")],
          soc="Ascend310P3", match=('AddConfig("ascend310p")', "(float32, float32, float32 -> float32)"))


def test_bf16_rejected_on_310p(sim):
    fails(sim, "soc.bf16", "SimHostAdd", [((4,), "bfloat16"), ((4,), "bfloat16"), None], soc="Ascend310P3",
          match=("'x'", "Ascend310P3"))


def test_strict_format_match(sim):
    ok = sim.tiling("SimHostStrict", [((2, 3, 4, 5), "int32", "NCHW")], outputs=[((2, 3, 4, 5), "int32", "NCHW")])
    assert ok["block_dim"] == 1
    fails(sim, "opdef.dtype_row", "SimHostStrict", [((2, 3), "float32", "NHWC")], outputs=[((2, 3), "float32")],
          match=("'x' expected ND got NHWC",))


def test_nd_accepts_any_format_by_default(sim):
    r = sim.tiling("SimHostAdd", [((2, 3, 4, 5), "float32", "NCHW")] * 2 + [None])
    assert r["block_dim"] >= 1


def test_op_not_configured_for_soc(sim):
    fails(sim, "opdef.soc_not_configured", "SimHostNoConfig", X4, attrs={"seed": 1},
          match=('AddConfig("ascend910b")', "configured: none"))
    fails(sim, "opdef.soc_not_configured", "SimHostStrict", [((4,), "float32")], outputs=[((4,), "float32")],
          soc="Ascend910_9391", match=('AddConfig("ascend910_93")', "configured: ascend910b"))


def test_unknown_soc(sim):
    fails(sim, "platform.unknown_soc", "SimHostFaulty", X4, attrs={"seed": 1}, soc="Ascend910A",
          match=("Ascend910A", "Ascend910B1"))


# ---------------------------------------------------------------------------- inputs
def test_input_count(sim):
    fails(sim, "input.count", "SimHostAdd", [((4,), "float16")], match=("expected 3 inputs", "(x, y, bias)"))


def test_required_input_absent(sim):
    fails(sim, "input.missing", "SimHostAdd", [None, ((4,), "float16"), None], match=("'x'", "required"))


def test_unknown_dtype(sim):
    fails(sim, "input.dtype", "SimHostAdd", [((4,), "float17"), ((4,), "float16"), None], match=("'float17'",))


def test_negative_dim_and_rank(sim):
    fails(sim, "input.shape", "SimHostAdd", [((4, -1), "float16"), ((4, 1), "float16"), None], match=("[4, -1]",))
    fails(sim, "input.rank", "SimHostAdd", [((1,) * 26, "float16"), ((1,), "float16"), None], match=("rank 26",))


def test_dynamic_input_counts(sim):
    e = fails(sim, "input.missing", "SimHostDyn", [[((4,), "int8"), None], [((4,), "int8")], ((2, 2), "int64")],
              match=("'key_caches'", "dynamic"))
    assert e.op == "SimHostDyn"


# ---------------------------------------------------------------------------- OpDef validation
def test_opdef_rows_of_unequal_length(sim):
    e = fails(sim, "opdef.invalid", "SimHostBadRows", [((4,), "float16")],
              match=("input 'x' has 2 DataType entries but 1 Format entries",
                     "output 'y' has 3 DataType entries but input 'x' has 2"))
    with pytest.raises(sim.EmulationError) as ei:
        sim.opdef("SimHostBadRows")
    assert ei.value.rule == "opdef.invalid" and str(ei.value) == str(e)


def test_opdef_bad_attrs(sim):
    fails(sim, "opdef.invalid", "SimHostBadAttr", [((4,), "float32"), ((4,), "float32")],
          match=("attr 'no_default' is OPTIONAL but has no default",
                 "attr 'two_types': attribute type set twice",
                 "attr 'untyped' has no type",
                 "input 'w' has no DataType list",
                 'AddConfig("Ascend910B")'))


def test_unknown_op(sim):
    with pytest.raises(sim.EmulationError) as ei:
        sim.opdef("NoSuchOp")
    assert ei.value.rule == "opdef.unknown_op" and "SimHostAdd" in str(ei.value)


def test_conflicting_tiling_registrations(sim):
    fails(sim, "opdef.conflicting_impl", "SimHostConflict", X4, match=("Tiling",))


def test_outputs_needed_without_infer_shape(sim):
    fails(sim, "infer_shape.not_registered", "SimHostStrict", [((4,), "float32")], match=("output shapes",))
