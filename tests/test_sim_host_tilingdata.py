"""Host TilingData class (CANN register/tilingdata_base.h) vs the kernel-side struct of the emulation.

40 random TilingData definitions (every allowed field type, arrays of 1..7, nested structs) are
compiled twice: as CANN host classes (set_/SaveToBuffer) and with ASCENDC_SIM_KERNEL_SIDE as plain
structs (what GET_TILING_DATA reads). Both must give the same bytes, the same size and the same field
offsets, and both must follow CANN's documented layout rule, recomputed here independently: each
field at a multiple of its element size, nested structs at a multiple of 8, total padded to 8.
"""
import struct

import pytest

from _sim_host_harness import SIZES, layout_specs


@pytest.fixture(scope="module")
def sim():
    import _sim_host_harness

    return _sim_host_harness.build_module()


def reference_layout(specs_by_name, name):
    """(size, [(field path, offset)]) by CANN's TilingDef rule (CheckAlignAndGenPlaceHolder)."""
    off = 0
    fields = []
    for kind, ctype, count, fname in specs_by_name[name]:
        if kind == "struct":
            off = (off + 7) // 8 * 8
            sub_size, sub_fields = reference_layout(specs_by_name, ctype)
            fields += [(f"{fname}.{n}", off + o) for n, o in sub_fields]
            off += sub_size
        else:
            esz = SIZES[ctype]
            off = (off + esz - 1) // esz * esz
            fields.append((fname, off))
            off += esz * (count if kind == "array" else 1)
    return (off + 7) // 8 * 8, fields


SPECS = layout_specs()
BY_NAME = dict(SPECS)


@pytest.mark.parametrize("k", range(len(SPECS)))
def test_host_and_kernel_layout_identical(sim, k):
    name, fields = SPECS[k]
    size, ref_offsets = reference_layout(BY_NAME, name)
    host = sim.layout_host_bytes(k)
    kernel = sim.layout_kernel_bytes(k)
    host_off = sim.layout_host_offsets(k)
    kern_off = sim.layout_kernel_offsets(k)
    assert [tuple(x) for x in host_off] == ref_offsets, f"{name}: host offsets differ from the CANN rule"
    assert [tuple(x) for x in kern_off] == ref_offsets, f"{name}: kernel offsets differ from the CANN rule"
    assert len(host) == size
    if size == 0:
        # A definition without fields: CANN's host class has size 0, a C++ struct cannot; the kernel
        # side struct is 8 zero bytes (GET_TILING_DATA reads the zero-padded tiling buffer).
        assert kernel == b"\0" * 8
    else:
        assert len(kernel) == size
        assert host == kernel, f"{name}: host SaveToBuffer bytes != kernel struct bytes"


def test_layout_specs_cover_every_type_and_nesting():
    kinds = {(kind, ctype) for _, fields in SPECS for kind, ctype, _, _ in fields}
    for t in SIZES:
        assert ("scalar", t) in kinds and ("array", t) in kinds, t
    assert any(kind == "struct" for _, fields in SPECS for kind, *_ in fields)
    assert any(not fields for _, fields in SPECS)  # the zero-field edge case is exercised


def test_values_written_by_setters_are_the_bytes(sim):
    # Independent decode of one probe: scalar fields hold the generator's values.
    k = next(i for i, (_, f) in enumerate(SPECS) if any(kind == "scalar" and t == "uint32_t" for kind, t, _, _ in f))
    name, fields = SPECS[k]
    _, offsets = reference_layout(BY_NAME, name)
    host = sim.layout_host_bytes(k)
    for j, (kind, ctype, count, fname) in enumerate(fields):
        if kind == "scalar" and ctype == "uint32_t":
            off = dict(offsets)[fname]
            assert struct.unpack_from("<I", host, off)[0] == (k * 131 + j * 17 + 1) % 251


def test_register_tiling_data_class_alias_on_kernel_side(sim):
    _, lay9 = SPECS[9]
    size, _ = reference_layout(BY_NAME, "Lay9")
    assert sim.layout_kernel_alias_size() == max(size, 8)


def test_sim_host_add_tiling_struct_layout(sim):
    r = sim.tiling("SimHostAdd", [((2, 64), "float32"), ((2, 64), "float32"), None])
    offsets = {f["name"]: f["offset"] for f in r["field_info"]}
    assert offsets == {
        "hasBias": 0, "totalLength": 4, "tileElems": 8, "alpha": 16, "dtypeCode": 20, "flags": 22, "ubBytes": 32,
        "split.blockFactor": 40, "split.tailFactor": 44, "split.usedCores": 48, "bufferNum": 56, "shapeTail": 60,
    }
    assert r["tiling_size"] == 72
