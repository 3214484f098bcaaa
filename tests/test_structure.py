"""Structural check of the AscendC ops (tools/mskv_structure.py): kernel entry, OpDef (names, order,
param types, dtype rows per SoC, formats, attrs, compute units, SetTiling), tiling-data registration,
infer registration, the ascend backend's reg_info and the emulation's OpDef registry must all agree
with the op's OpSpec.

The checker itself is tested on a small fixture op (tests/fixtures/opp_src) and on mutated copies of
it (each mutation must produce a mismatch line naming it); then every op of op_kernel/ is checked.
"""
import shutil
import sys
from pathlib import Path

import pytest

import ms_kvcache  # noqa: F401 - registers every public op
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import mskv_structure as S  # noqa: E402 - tools/mskv_structure.py, a developer check outside the package
from ms_kvcache._backends import ascend
from ms_kvcache._spec import INDEX_DTYPES, KV_DTYPES, AttrSpec, OpSpec, TensorSpec, all_specs

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_SRC = Path(__file__).resolve().parent / "fixtures" / "opp_src"

FIXTURE_SPEC = OpSpec(
    name="fixture_copy",
    op_type="MskvFixtureCopy",
    inputs=(TensorSpec("x", "T", (2,)), TensorSpec("cache", "T", (2,), inplace=True), TensorSpec("idx", "S", (1,))),
    dtype_groups={"T": KV_DTYPES, "S": INDEX_DTYPES},
    attrs=(AttrSpec("mode", "str", "fast", ("fast", "safe"), (("fast", 0), ("safe", 1))),),
)


def mutated(tmp_path, rel, old, new, count=1):
    root = tmp_path / "src"
    shutil.copytree(FIXTURE_SRC, root)
    p = root / rel
    text = p.read_text()
    assert text.count(old) >= count, f"fixture has no {old!r} in {rel}"
    p.write_text(text.replace(old, new, count))
    return root


def test_names():
    assert S.camel("reshape_and_cache") == "ReshapeAndCache"
    assert S.op_type_of("reshape_and_cache") == "MskvReshapeAndCache"
    assert S.snake("MskvConcatAndCacheMla") == "mskv_concat_and_cache_mla"
    assert S.op_name_of("MskvConcatAndCacheMla") == "concat_and_cache_mla"
    for spec in all_specs():
        assert S.op_name_of(spec.op_type) == spec.name and S.op_type_of(spec.name) == spec.op_type


def test_fixture_is_consistent():
    assert S.check_op(FIXTURE_SPEC, FIXTURE_SRC, sim=None) == []


def test_fixture_parse():
    f = S.parse_opdef(FIXTURE_SRC / "op_host" / "fixture_copy.cpp", "MskvFixtureCopy")
    assert f.problems == []
    assert [p.name for p in f.inputs] == ["x", "cache", "idx"] and [p.name for p in f.outputs] == ["status"]
    assert list(f.configs) == ["ascend910b", "ascend910_93", "ascend310p"]
    assert f.configs["ascend910b"] is None and f.configs["ascend310p"] is not None
    rows, fmts, why = f.rows_for("ascend910b")
    assert why is None and len(rows) == 8 and set(rows) == set(FIXTURE_SPEC.dtype_rows("Ascend910B1"))
    rows310, _, _ = f.rows_for("ascend310p")
    assert len(rows310) == 6 and not any("bfloat16" in r for r in rows310)
    assert all(x == "ND" for r in fmts for x in r)
    (a,) = f.attrs
    # a named int constant as the default is resolved (kModeFast = 0)
    assert (a.name, a.type, a.required, a.default) == ("mode", "int", False, 0)


MUTATIONS = [
    # (file, old, new, expected line fragment)
    ("op_host/fixture_copy.cpp", 'Input("idx")', 'Input("index")',
     "inputs: expected ['x', 'cache', 'idx'] (OpSpec order), got ['x', 'cache', 'index']"),
    ("op_host/fixture_copy.cpp", 'this->Input("x").ParamType(REQUIRED).DataType(kData).FormatList({ge::FORMAT_ND});\n'
                                 '        this->Input("cache")\n            .ParamType(REQUIRED)\n'
                                 '            .DataType(kData)\n            .FormatList({ge::FORMAT_ND});',
     'this->Input("cache").ParamType(REQUIRED).DataType(kData).FormatList({ge::FORMAT_ND});\n'
     '        this->Input("x").ParamType(REQUIRED).DataType(kData).FormatList({ge::FORMAT_ND});',
     "got ['cache', 'x', 'idx']"),
    ("op_host/fixture_copy.cpp", 'Output("status")', 'Output("y")', "outputs: expected ['status']"),
    ("op_host/fixture_copy.cpp", 'this->Input("idx").ParamType(REQUIRED)', 'this->Input("idx").ParamType(OPTIONAL)',
     "input 'idx': expected ParamType REQUIRED, got OPTIONAL"),
    ("op_host/fixture_copy.cpp", "kIndex = {ge::DT_INT32, ge::DT_INT64,", "kIndex = {ge::DT_INT32, ge::DT_INT32,",
     "ascend910b, ascend910_93: missing dtype rows (float16,float16,int64,int32)"),
    ("op_host/fixture_copy.cpp", "kData310p = {ge::DT_FLOAT16, ge::DT_FLOAT16,", "kData310p = {ge::DT_BF16, ge::DT_BF16,",
     "ascend310p: dtype rows not in the OpSpec (bfloat16,bfloat16,int32,int32)"),
    ("op_host/fixture_copy.cpp", "kData310p = {ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_FLOAT,",
     "kData310p = {ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT,",
     "ascend310p: DataType lists of different lengths"),
    ("op_host/fixture_copy.cpp", 'this->Input("x").ParamType(REQUIRED).DataType(kData).FormatList({ge::FORMAT_ND})',
     'this->Input("x").ParamType(REQUIRED).DataType(kData).FormatList({ge::FORMAT_NCHW})',
     "ascend910b, ascend910_93: expected format ND everywhere, got ['NCHW']"),
    ("op_host/fixture_copy.cpp", '.Int(kModeFast)', '.Int(kModeSafe)', "attr 'mode': expected default 0 ('fast'), got 1"),
    ("op_host/fixture_copy.cpp", '.Int(kModeFast)', '.Int(1)', "attr 'mode': expected default 0 ('fast'), got 1"),
    ("op_host/fixture_copy.cpp", '.Int(kModeFast)', '.String("fast")',
     "attr 'mode': expected type int (named values ('fast', 'safe') are int-coded, AttrSpec.codes), got str"),
    ("op_host/fixture_copy.cpp", 'AttrType(OPTIONAL)', 'AttrType(REQUIRED)',
     "attr 'mode': expected AttrType OPTIONAL, got REQUIRED"),
    ("op_host/fixture_copy.cpp", 'this->Attr("mode")', 'this->Attr("layout")', "attrs: expected ['mode'], got ['layout']"),
    ("op_host/fixture_copy.cpp", '        this->AICore().AddConfig("ascend910_93");\n', '',
     'no AICore().AddConfig("ascend910_93")'),
    ("op_host/fixture_copy.cpp", 'AddConfig("ascend910_93")', 'AddConfig("ascend910")',
     "AddConfig(\"ascend910\") is not one of the package's compute units"),
    ("op_host/fixture_copy.cpp", "this->AICore().SetTiling(optiling::FixtureCopyTiling);", "",
     "no AICore().SetTiling(...)"),
    ("op_host/fixture_copy.cpp", "OP_ADD(MskvFixtureCopy);", "", "op_host/fixture_copy.cpp: no OP_ADD(MskvFixtureCopy)"),
    ("op_host/fixture_copy.cpp", "class MskvFixtureCopy : public OpDef", "class FixtureCopyOp : public OpDef",
     "no 'class MskvFixtureCopy : public OpDef'"),
    ("op_host/fixture_copy.cpp", '.DataType(kIndex)', '.DataType(MakeIndexRows(true))',
     "cannot read the DataType/Format arguments MakeIndexRows(true)"),
    ("op_host/fixture_copy_tiling.h", "REGISTER_TILING_DATA_CLASS(MskvFixtureCopy,", "REGISTER_TILING_DATA_CLASS(OtherOp,",
     "no REGISTER_TILING_DATA_CLASS(MskvFixtureCopy, <TilingData>)"),
    ("op_host/fixture_copy_tiling.h", "BEGIN_TILING_DATA_DEF(FixtureCopyTilingData)", "BEGIN_TILING_DATA_DEF(OtherData)",
     "REGISTER_TILING_DATA_CLASS(MskvFixtureCopy, FixtureCopyTilingData) but no BEGIN_TILING_DATA_DEF(FixtureCopyTilingData)"),
    ("op_proto/fixture_copy.cpp", "IMPL_OP_INFERSHAPE(MskvFixtureCopy)", "IMPL_OP_INFERSHAPE(Other)",
     "op_proto/fixture_copy.cpp: no IMPL_OP_INFERSHAPE(MskvFixtureCopy)"),
    ("op_proto/fixture_copy.cpp", ".InferDataType(InferDataTypeFixtureCopy)", "",
     "IMPL_OP_INFERSHAPE(MskvFixtureCopy) registers no .InferDataType(...)"),
    ("op_kernel/fixture_copy.cpp", "void mskv_fixture_copy(", "void fixture_copy(",
     "kernel entry is 'fixture_copy', expected 'mskv_fixture_copy'"),
    ("op_kernel/fixture_copy.cpp", "GM_ADDR x, GM_ADDR cache", "GM_ADDR cache, GM_ADDR x",
     "kernel parameters ['cache', 'x', 'idx', 'status', 'workspace', 'tiling'], expected"),
    ("op_kernel/fixture_copy.cpp", "GM_ADDR status,", "", "kernel parameters ['x', 'cache', 'idx', 'workspace', 'tiling']"),
    ("op_kernel/fixture_copy.cpp", '#include "kernel_operator.h"',
     '#include "kernel_operator.h"\n#include "../op_host/fixture_copy_tiling.h"',
     "op_kernel/fixture_copy.cpp:3: includes \"../op_host/fixture_copy_tiling.h\" which is not in op_kernel/"),
]


@pytest.mark.parametrize("rel,old,new,expect", MUTATIONS, ids=[m[3][:48] for m in MUTATIONS])
def test_each_mutation_is_reported(tmp_path, rel, old, new, expect):
    root = mutated(tmp_path, rel, old, new)
    lines = S.check_op(FIXTURE_SPEC, root, sim=None)
    assert any(expect in ln for ln in lines), "\n".join(lines) or "(no lines)"
    assert all(ln.startswith("MskvFixtureCopy: ") for ln in lines)
    assert len(lines) <= 3, "one mismatch should give one (or very few) lines:\n" + "\n".join(lines)


def test_guarded_host_include_in_kernel_is_allowed(tmp_path):
    root = mutated(tmp_path, "op_kernel/fixture_copy.cpp", '#include "kernel_operator.h"',
                   '#include "kernel_operator.h"\n#ifdef ASCENDC_SIM_KERNEL_SIDE\n'
                   '#include "../op_host/fixture_copy_tiling.h"\n#endif')
    assert S.check_op(FIXTURE_SPEC, root, sim=None) == []


def test_spec_side_change_is_reported():
    spec = OpSpec(name="fixture_copy", op_type="MskvFixtureCopy", inputs=FIXTURE_SPEC.inputs,
                  dtype_groups={"T": KV_DTYPES, "S": ("int32",)}, attrs=FIXTURE_SPEC.attrs)
    lines = S.check_op(spec, FIXTURE_SRC, sim=None)
    assert any("ascend910b, ascend910_93: dtype rows not in the OpSpec (bfloat16,bfloat16,int64,int32)" in ln
               for ln in lines), lines


def test_reg_info_derivation_is_checked_against_the_opdef(monkeypatch):
    facts = S.parse_opdef(FIXTURE_SRC / "op_host" / "fixture_copy.cpp", "MskvFixtureCopy")
    assert S.compare_reg_info(FIXTURE_SPEC, facts) == []
    real = ascend.reg_info

    def broken(spec, soc=None):   # a reg_info that forgot the int64 slot rows
        info = real(spec, soc)
        info["dtype_format"] = [r for r in info["dtype_format"] if r[2][0] != "int64"]
        return info

    monkeypatch.setattr(ascend, "reg_info", broken)
    lines = S.compare_reg_info(FIXTURE_SPEC, facts)
    assert any("reg_info vs op_host/fixture_copy.cpp: ascend910b: dtype rows differ: reg_info only -; "
               "OpDef only (bfloat16,bfloat16,int64,int32)" in ln for ln in lines), lines


# ------------------------------------------------------------------------------------------ emulation source
def sim_dict_from_facts(f):
    """What ms_kvcache._sim.opdef returns (the dict of sim/csrc/host/py_bind.cpp), from parsed facts."""
    def params(lst):
        return [{"name": p.name, "param_type": p.param_type, "dtypes": list(p.dtypes), "formats": list(p.formats),
                 "unknown_shape_formats": [], "dtype_is_list": p.dtype_list, "format_is_list": p.format_list,
                 "value_depend": False} for p in lst]

    return {
        "type": f.type, "inputs": params(f.inputs), "outputs": params(f.outputs),
        "attrs": [{"name": a.name, "type": a.type, "required": a.required,
                   "default": a.default if a.has_default else None} for a in f.attrs],
        "configs": [dict({"soc": u, "override": ov is not None},
                         **({"inputs": params(ov["inputs"]), "outputs": params(ov["outputs"])} if ov else {}))
                    for u, ov in f.configs.items()],
        "has_tiling": f.has_tiling, "has_infer_shape": True, "has_infer_dtype": True,
    }


def test_emulation_registry_is_compared():
    f = S.parse_opdef(FIXTURE_SRC / "op_host" / "fixture_copy.cpp", "MskvFixtureCopy")
    good = sim_dict_from_facts(f)
    assert S.check_op(FIXTURE_SPEC, FIXTURE_SRC, sim=lambda t: good) == []
    bad = sim_dict_from_facts(f)
    ov = [c for c in bad["configs"] if c["soc"] == "ascend310p"][0]
    for p in ov["inputs"] + ov["outputs"]:   # the emulation would see a 310P row dropped
        p["dtypes"] = p["dtypes"][:-1]
    bad["attrs"][0]["default"] = 1
    lines = S.check_op(FIXTURE_SPEC, FIXTURE_SRC, sim=lambda t: bad)
    assert "MskvFixtureCopy: emulation opdef: attr 'mode': expected default 0 ('fast'), got 1" in lines
    assert any(ln.startswith("MskvFixtureCopy: emulation opdef: ascend310p: missing dtype rows (int8,int8,int64,int32)")
               for ln in lines), lines


def test_emulation_error_is_a_line():
    def raising(op_type):
        raise RuntimeError(f"opdef.unknown_op: {op_type} is not registered")

    lines = S.check_op(FIXTURE_SPEC, FIXTURE_SRC, sim=raising)
    assert lines == ["MskvFixtureCopy: emulation opdef: opdef.unknown_op: MskvFixtureCopy is not registered"]


# ------------------------------------------------------------------------------------------ the repository's ops
REPO_OPS = S.repository_ops(ROOT)
SPECS = {s.name: s for s in all_specs()}


@pytest.mark.parametrize("op", REPO_OPS or ["<none>"])
def test_repository_op_structure(op):
    if op == "<none>":
        pytest.skip("no AscendC ops in op_kernel/ yet")
    if op not in SPECS:
        pytest.skip(f"no OpSpec named {op!r} registered on this branch (the public op comes from the copy-ops work)")
    mod, why = S._load_sim()
    lines = S.check_op(SPECS[op], ROOT, sim="auto")
    assert lines == [], ("\n" + "\n".join(lines)
                         + ("" if mod is not None else f"\n(emulation registry not consulted: {why})"))


SHARED_OPDEF_MUTATIONS = [
    # (op_host header, old, new, expected line fragment): the OpDefs declare their parameters and compute
    # units through mskv_tiling::DeclareOnEverySoc with dtype-row structs; the parser follows both
    ("kv_copy_tiling_common.h", '  op.AICore().AddConfig("ascend310p", cfg310p);\n', "",
     'no AICore().AddConfig("ascend310p")'),
    ("kv_copy_tiling_common.h", '  op.AICore().SetTiling(tiling);\n', "", "no AICore().SetTiling(...)"),
    ("kv_copy_tiling_common.h", "kCopyRows310P = {kKvDTypes310P,", "kCopyRows310P = {kKvDTypes,",
     "ascend310p: DataType lists of different lengths"),
    ("kv_copy_tiling_common.h", "kCopyRows = {kKvDTypes, kIndexDTypes,", "kCopyRows = {kKvDTypes, kKvDTypes,",
     "ascend910b, ascend910_93: missing dtype rows"),
    ("kv_copy_tiling_common.h", "  Op::Declare(cfg310p, rows310p);\n", "",
     "ascend310p: dtype rows not in the OpSpec (bfloat16,bfloat16,bfloat16,bfloat16,int32,int32)"),
]


@pytest.mark.parametrize("header,old,new,expect", SHARED_OPDEF_MUTATIONS)
def test_shared_opdef_helper_is_read(tmp_path, header, old, new, expect):
    shutil.copytree(ROOT / "op_host", tmp_path / "op_host")
    shutil.copytree(ROOT / "op_kernel", tmp_path / "op_kernel")
    spec = SPECS["reshape_and_cache"]
    facts = S.parse_opdef(tmp_path / "op_host" / "reshape_and_cache.cpp", spec.op_type)
    assert S.compare_opdef(spec, facts) == []
    assert list(facts.configs) == ["ascend910b", "ascend910_93", "ascend310p"] and facts.has_tiling
    h = tmp_path / "op_host" / header
    assert old in h.read_text()
    h.write_text(h.read_text().replace(old, new))
    lines = S.compare_opdef(spec, S.parse_opdef(tmp_path / "op_host" / "reshape_and_cache.cpp", spec.op_type))
    assert any(expect in line for line in lines), lines


DECLARE_PARAMS_MUTATIONS = [
    # (op, old, new, expected line fragment): an OpDef's Declare is one mskv_tiling::DeclareParams call; the
    # parser reads its rows as the Input/Output chains (name, ParamType, dtype column)
    ("reshape_and_cache", '{"slot_mapping", r.index}', '{"slot_mapping", r.kv}', "dtype rows"),
    ("reshape_and_cache", '{"value", r.kv}, ', "", "inputs: expected ['key', 'value', 'key_cache'"),
    ("reshape_and_cache", '{{"status", r.status}}', '{{"y", r.status}}', "outputs: expected ['status']"),
    ("reshape_and_cache", '{"key_cache", r.kv}', '{"key_cache", r.kv, OPTIONAL}', "expected ParamType REQUIRED"),
    ("rope_concat_and_cache_mla", '{"kv_c_norm_weight", r.weight, OPTIONAL}', '{"kv_c_norm_weight", r.weight}',
     "expected ParamType OPTIONAL"),
    ("copy_blocks", '{"key_caches", r.kv, DYNAMIC}', '{"key_caches", r.kv}', "expected ParamType DYNAMIC"),
    ("reshape_and_cache_quant", '{"k_scale", r.scale, OPTIONAL}', '{"k_scale", r.nope, OPTIONAL}',
     "cannot read the DataType/Format arguments r.nope"),
    ("reshape_and_cache", '{"key", r.kv}', '"key"', "DeclareParams: input \"key\": expected"),
]


@pytest.mark.parametrize("op,old,new,expect", DECLARE_PARAMS_MUTATIONS)
def test_declare_params_rows_are_read(tmp_path, op, old, new, expect):
    shutil.copytree(ROOT / "op_host", tmp_path / "op_host")
    spec = SPECS[op]
    src = tmp_path / "op_host" / f"{op}.cpp"
    assert S.compare_opdef(spec, S.parse_opdef(src, spec.op_type)) == []
    assert old in src.read_text()
    src.write_text(src.read_text().replace(old, new, 1))
    lines = S.compare_opdef(spec, S.parse_opdef(src, spec.op_type))
    assert any(expect in line for line in lines), lines


def test_main_prints_a_one_line_summary_on_success(capsys):
    assert S.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    ops = S.repository_ops(ROOT)
    assert len(out) == 1 and out[0].startswith(f"OK: {len(ops)} AscendC op(s) in "), out
    assert out[0].endswith(", ".join(ops))


# ------------------------------------------------------------------------------------------ int-coded attributes
def test_repository_has_no_string_attribute():
    """No op declares a String attribute for its kernels: MindSpore 2.7.x / 2.8.0 cannot pass one to an Ascend
    C op (no str type in their aclnn generator), so named modes are int-coded (AttrSpec.codes). That holds for
    the cpu-only ops too (the quantized writes' quant_mode, whose AscendC kernels are still to come)."""
    for spec in all_specs():
        for a in spec.attrs:
            assert a.kernel_type != "str", (spec.name, a.name)
    for op in REPO_OPS:
        facts = S.parse_opdef(ROOT / "op_host" / f"{op}.cpp", S.op_type_of(op))
        assert [a.name for a in facts.attrs if a.type == "str"] == [], op


def test_attr_code_constants_agree():
    assert S.check_attr_codes(ROOT, all_specs()) == []
    ints = S._int_constants(S._strip_comments((ROOT / S.ATTR_CODES_HEADER).read_text()))
    # written out here, not derived: the codes documented in docs/design.md
    assert {k: ints[k] for k in ("kLayoutBSND", "kLayoutBNSD", "kLayoutNZ", "kDirH2D", "kDirD2H", "kQuantSTATIC",
                                 "kQuantDYNAMIC")} == {
        "kLayoutBSND": 0, "kLayoutBNSD": 1, "kLayoutNZ": 2, "kDirH2D": 1, "kDirD2H": 2, "kQuantSTATIC": 0,
        "kQuantDYNAMIC": 1}


@pytest.mark.parametrize("old,new,expect", [
    ("kLayoutBNSD = 1;", "kLayoutBNSD = 2;", "kLayoutBNSD = 2, but AttrSpec codes cache_layout 'BNSD' = 1"),
    ("constexpr int64_t kDirD2H = 2;", "", "no constant kDirD2H (direction 'd2h' = 2)"),
])
def test_attr_code_constant_mismatch_is_reported(tmp_path, old, new, expect):
    (tmp_path / "op_host").mkdir()
    text = (ROOT / S.ATTR_CODES_HEADER).read_text()
    assert old in text
    (tmp_path / S.ATTR_CODES_HEADER).write_text(text.replace(old, new))
    lines = S.check_attr_codes(tmp_path, all_specs())
    assert any(expect in ln for ln in lines), lines


def test_attr_codes_differing_between_ops_are_reported():
    other = OpSpec(name="fixture_other", op_type="MskvFixtureOther", inputs=(TensorSpec("x", "T", (1,)),),
                   dtype_groups={"T": ("float16",)},
                   attrs=(AttrSpec("cache_layout", "str", "BSND", codes=(("BSND", 1), ("BNSD", 0))),))
    lines = S.check_attr_codes(ROOT, list(all_specs()) + [other])
    assert any("MskvFixtureOther: attr 'cache_layout': code of 'BSND' is 1, " in ln and "'s is 0" in ln
               for ln in lines), lines


def test_attr_codes_of_an_op_may_be_a_subset():
    # rerope_cached_keys takes no NZ cache: its cache_layout names are a subset, with the same codes
    sub = OpSpec(name="fixture_sub", op_type="MskvFixtureSub", inputs=(TensorSpec("x", "T", (1,)),),
                 dtype_groups={"T": ("float16",)},
                 attrs=(AttrSpec("cache_layout", "str", "BSND", codes=(("BSND", 0), ("BNSD", 1))),))
    assert S.check_attr_codes(ROOT, list(all_specs()) + [sub]) == []


def test_attrspec_codes():
    a = AttrSpec("cache_layout", "str", "BNSD", codes=(("BSND", 0), ("BNSD", 1)))
    assert a.choices == ("BSND", "BNSD") and a.kernel_type == "int" and a.kernel_default == 1
    assert (a.encode("BSND"), a.encode("BNSD"), a.decode(1), a.decode(0)) == (0, 1, "BNSD", "BSND")
    with pytest.raises(ValueError, match=r"argument 'cache_layout': expected one of \('BSND', 'BNSD'\), got 'bsnd'"):
        a.encode("bsnd")
    plain = AttrSpec("num_layers", "int", 1)
    assert plain.kernel_type == "int" and plain.encode(7) == 7
    for bad in (dict(type="int"), dict(default="NHD"), dict(codes=(("BSND", 0), ("BNSD", 0))),
                dict(choices=("BSND", "NHD"))):
        kw = dict(name="x", type="str", default="BSND", codes=(("BSND", 0), ("BNSD", 1)))
        kw.update(bad)
        with pytest.raises(ValueError):
            AttrSpec(**kw)
