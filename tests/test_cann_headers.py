"""Conformance of op_kernel / op_host / op_proto to the official AscendC / CANN headers.

* ``test_conformance_check`` runs ``scripts/check_cann_headers.py`` completely (every kernel for A2 and,
  where its OpDef configures it, 310P, with g++ and clang++; every host file under c++11 and c++17; the
  libcust_opmaster link) when the official sources or an installed CANN are given
  (``MS_KVCACHE_ASC_DEVKIT``, ``MS_KVCACHE_ASC_TOOLS``, ``MS_KVCACHE_METADEF``, ``MS_KVCACHE_GE``, or
  ``ASCEND_HOME_PATH``), and skips naming what is missing otherwise (CI has no network: it skips there).
* ``test_api_names_*``: every AscendC name op_kernel/ uses (clang AST of the sim build) resolves into the
  emulation, and is declared by the official headers for each target (scripts/ascendc_names.py).
* The other tests check the pieces of the check itself and run everywhere (g++ and git only).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import check_cann_headers as cch  # noqa: E402

SIM_INCLUDE = ROOT / "ms_kvcache" / "sim" / "include"


def _sources(kind="kernel"):
    src, why = cch.sources_status()
    if src is None:
        pytest.skip(f"official AscendC / CANN headers not available: {why}")
    ok, why = src.kernel_ok() if kind == "kernel" else src.host_ok()
    if not ok:
        pytest.skip(why)
    return src


# ------------------------------------------------------------------------------------ the whole check
@pytest.mark.slow
def test_conformance_check():
    src = _sources("kernel")
    _sources("host")
    compilers = tuple(c for c in cch.COMPILERS if shutil.which(c))
    rep = cch.run_check(src, compilers=compilers, jobs=int(os.environ.get("MS_KVCACHE_CHECK_JOBS", "2")))
    n_k = len(list((ROOT / "op_kernel").glob("*.cpp")))
    n_h = len(list((ROOT / "op_host").glob("*.cpp"))) + len(list((ROOT / "op_proto").glob("*.cpp")))
    lines = "\n".join(cch.format_result(r) for r in rep.failures())
    assert rep.summary().startswith(f"{n_k} of {n_k} kernel files and {n_h} of {n_h} host files compile"), \
        f"{rep.summary()}\n{lines}"
    assert rep.ok, f"{rep.summary()}\n{lines}"
    # every kernel ran for both targets (all OpDefs configure ascend310p) and both compilers
    for f in rep.kernel_files:
        configs = {r.config for r in rep.results if r.kind == "kernel" and r.path == f}
        want = {f"{t} {c}" for t in cch.kernel_targets(f) for c in compilers}
        assert configs == want, f"{f}: ran {sorted(configs)}, expected {sorted(want)}"
    assert any(r.kind == "link" and r.ok for r in rep.results)


# ------------------------------------------------------------------------------------ sources
def test_find_sources_requires_input():
    with pytest.raises(cch.SourcesNotFound, match="MS_KVCACHE_ASC_DEVKIT"):
        cch.find_sources(environ={})
    with pytest.raises(cch.SourcesNotFound, match="not a directory"):
        cch.find_sources(asc_devkit="/nonexistent/asc-devkit", environ={})
    with pytest.raises(cch.SourcesNotFound, match="asc-devkit is required"):
        cch.find_sources(environ={"MS_KVCACHE_METADEF": str(ROOT)})


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.mark.skipif(shutil.which("git") is None, reason="git not found")
def test_bare_git_dir_is_extracted(tmp_path, monkeypatch):
    monkeypatch.setenv("MS_KVCACHE_CANN_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "asc-devkit"
    (work / "include").mkdir(parents=True)
    (work / "include" / "kernel_operator.h").write_text("// fake\n")
    _git("init", "-q", cwd=work)
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "x", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(tmp_path / "mirror" / "repo"), cwd=tmp_path)
    src = cch.find_sources(environ={"MS_KVCACHE_ASC_DEVKIT": str(tmp_path / "mirror" / "repo")})
    assert (src.asc_devkit / "include" / "kernel_operator.h").read_text() == "// fake\n"
    assert src.asc_devkit != tmp_path / "mirror" / "repo" and "extracted" in src.origin[0]
    again = cch.find_sources(environ={"MS_KVCACHE_ASC_DEVKIT": str(tmp_path / "mirror" / "repo")})
    assert again.asc_devkit == src.asc_devkit  # cached by commit
    assert not src.kernel_ok()[0] and "MS_KVCACHE_ASC_TOOLS" in src.kernel_ok()[1]


def test_repo_files_and_targets():
    files = cch.find_repo_files()
    assert len(files["kernel"]) == len(list((ROOT / "op_kernel").glob("*.cpp"))) > 0
    for k in files["kernel"]:
        op = cch.op_type_of_kernel(k)
        assert op.startswith("Mskv"), k
        cfg = cch.op_soc_configs(op)
        assert "ascend910b" in cfg, f"{k}: no OpDef with AddConfig(\"ascend910b\") for {op}"
        assert cch.kernel_targets(k) == ["a2"] + (["310p"] if "ascend310p" in cfg else [])


# ------------------------------------------------------------------------------------ diagnostics policy
def test_policy_violations():
    ours = ROOT / "op_kernel" / "copy_blocks.cpp"
    official = "/opt/asc-devkit/impl/basic_api/kernel_operator_data_copy_intf_impl.h"
    log = "\n".join([
        f"{official}:1628:9: warning: 'DataCopyPadGm2UBImpl<float>' is deprecated: NOTICE: DataCopyPad is not "
        "deprecated. Currently, DataCopyPad is an unsupported API on current device. [-Wdeprecated-declarations]",
        f"/opt/asc-devkit/impl/basic_api/utils/kernel_check_copy.h:160:24: warning: narrowing conversion of 'x' "
        "from 'uint32_t' to 'uint16_t' [-Wnarrowing]",
        f"{ours}:40:3: warning: 'Print' is deprecated: will be removed [-Wdeprecated-declarations]",
        f"{ours}:41:3: warning: non-constant-expression cannot be narrowed from type 'int' to 'uint16_t' "
        "in initializer list [-Wc++11-narrowing]",
        f"{ours}:42:3: warning: unused variable 'x' [-Wunused-variable]",
        f"{official}:10:1: warning: 'SetSysWorkSpace' is deprecated: will be removed [-Wdeprecated-declarations]",
    ])
    bad = cch.policy_violations(log, [ours])
    assert [b.split(": warning:")[0].rsplit(":", 2)[0].rsplit("/", 1)[-1] + ":" + b.split(":")[1] for b in bad] == [
        "kernel_operator_data_copy_intf_impl.h:1628", "copy_blocks.cpp:40", "copy_blocks.cpp:41"]


# ------------------------------------------------------------------------------------ tiling generator
def _tiling_headers():
    out = []
    for k in cch.find_repo_files()["kernel"]:
        th = ROOT / "op_host" / f"{k.stem}_tiling.h"
        if th.is_file():
            out.append((k, th))
    return out


@pytest.mark.parametrize("kernel,tiling_h", _tiling_headers(), ids=lambda v: Path(v).stem)
def test_generated_tiling_class_matches_emulation(kernel, tiling_h, tmp_path):
    """The kernel-side tiling class generated the get_op_tiling.py way has the fields of the host
    TilingData in order, and exactly the layout (size, every field offset) of the emulation's
    kernel-side struct (tested against the host class bytes in tests/test_sim_host_tilingdata.py)."""
    op = cch.op_type_of_kernel(kernel)
    structs, regs = cch.parse_tiling_header(tiling_h)
    cls = dict(regs)[op]
    fields = structs[cls].fields
    assert fields and all(k in ("field", "arr", "struct") for k, *_ in fields)
    gen = cch.generate_kernel_tiling(tiling_h, op)
    assert f"class {cls}" in gen and f"    {cls} tiling_data;" in gen and "__may_alias__" in gen
    (tmp_path / "kernel_tiling").mkdir()
    (tmp_path / "kernel_tiling" / "kernel_tiling.h").write_text("")
    (tmp_path / "kernel_log.h").write_text("")
    (tmp_path / "gen.h").write_text(gen)
    checks = []
    for kind, typ, name, count in fields:
        checks.append(f"static_assert(offsetof(gen_side::{cls}, {name}) == offsetof(sim_side::{cls}, {name}), "
                      f"\"{name}\");")
    tu = "\n".join([
        "#define __aicore__", "#define __gm__", "#define ASCENDC_CPU_DEBUG 1", "#include <cstddef>",
        "#include <cstdint>",
        "namespace gen_side {", '#include "gen.h"', "}",
        "#define ASCENDC_SIM_KERNEL_SIDE 1", '#include "register/tilingdata_base.h"',
        "namespace sim_side {", "namespace optiling {}", "using namespace optiling;", f'#include "{tiling_h}"', "}",
        f"static_assert(sizeof(gen_side::{cls}) == sizeof(sim_side::{cls}), \"size\");",
        *checks, "int main() { return 0; }", ""])
    (tmp_path / "t.cpp").write_text(tu)
    # the emulation compiles kernel-side code for one arch at a time (bisheng's predefined macros)
    arch = ["-D__NPU_ARCH__=2201", "-D__CCE_AICORE__=220", "-D__DAV_C220__", "-D__DAV_C220_VEC__"]
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wno-invalid-offsetof", *arch, f"-I{tmp_path}",
                        f"-I{SIM_INCLUDE}", f"-I{tiling_h.parent}", str(tmp_path / "t.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def test_generated_tiling_detects_a_changed_field(tmp_path):
    """The generator reads the header through the preprocessor: a field added behind a macro and an
    array field appear, with the array count."""
    h = tmp_path / "x_tiling.h"
    h.write_text('#include "register/tilingdata_base.h"\n#define MORE TILING_DATA_FIELD_DEF(uint32_t, extra);\n'
                 "namespace optiling {\nBEGIN_TILING_DATA_DEF(XTilingData)\n  TILING_DATA_FIELD_DEF(int64_t, a);\n"
                 "  MORE\n  TILING_DATA_FIELD_DEF_ARR(int32_t, 3, arr);  // comment, TILING_DATA_FIELD_DEF(x, y)\n"
                 "END_TILING_DATA_DEF;\nREGISTER_TILING_DATA_CLASS(MskvX, XTilingData)\n}\n")
    structs, regs = cch.parse_tiling_header(h)
    assert regs == [("MskvX", "XTilingData")]
    assert structs["XTilingData"].fields == [("field", "int64_t", "a", None), ("field", "uint32_t", "extra", None),
                                             ("arr", "int32_t", "arr", "3")]
    gen = cch.generate_kernel_tiling(h, "MskvX")
    assert "    int32_t arr[3];" in gen and "    uint32_t extra;" in gen


# ------------------------------------------------------------------------------------ bf16 / pad guard
@pytest.mark.parametrize("defines,want", [
    (["-D__NPU_ARCH__=2201", "-D__CCE_AICORE__=220"], 1),
    (["-D__NPU_ARCH__=2002", "-D__CCE_AICORE__=200"], 0),
    (["-D__NPU_ARCH__=2002"], 0),  # a devkit that defines only __NPU_ARCH__
    (["-D__NPU_ARCH__=2201"], 1),
    (["-D__NPU_ARCH__=3510"], 1),
    (["-D__CCE_AICORE__=200"], 0),  # an older bisheng: only __CCE_AICORE__
    (["-D__CCE_AICORE__=220"], 1),
    ([], 1),
])
@pytest.mark.parametrize("header", ["kv_copy_common.h", "multi_layer_copy.h"])
def test_bf16_pad_guard(header, defines, want):
    """MSKV_HAS_BF16_AND_PAD, as the kernels' shared headers see it, keys on __NPU_ARCH__ first and on
    __CCE_AICORE__ only without it (the DataCopyPad / bf16 templates must never compile for 310P).
    The shared headers take it from op_kernel/mskv_arch.h, which is preprocessed alone here (the
    emulation's kernel_operator.h accepts only the complete macro sets of 2201 and 2002)."""
    text = (ROOT / "op_kernel" / header).read_text()
    assert '#include "mskv_arch.h"' in text and "#define MSKV_HAS_BF16_AND_PAD" not in text, header
    r = subprocess.run(["g++", "-std=c++17", "-E", "-dM", *defines, f"-I{ROOT / 'op_kernel'}",
                        "-x", "c++", "-"], input='#include "mskv_arch.h"\n', capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"^#define MSKV_HAS_BF16_AND_PAD (\d)$", r.stdout, re.M)
    assert m and int(m.group(1)) == want, (defines, m and m.group(0))


# ------------------------------------------------------------------------------------ API names
def _names():
    import ascendc_names
    ok, why = ascendc_names.clang_available()
    if not ok:
        pytest.skip(why)
    return ascendc_names


KERNEL_TARGETS = [(k, t) for k in cch.find_repo_files()["kernel"] for t in cch.kernel_targets(k)]


@pytest.mark.slow
@pytest.mark.parametrize("kernel,target", KERNEL_TARGETS, ids=lambda v: getattr(v, "stem", v))
def test_api_names(kernel, target):
    """Every AscendC name the kernel uses (a) resolves into the emulation headers and (b) with the
    official headers present, is declared there for the target."""
    an = _names()
    foreign = []
    used = an.used_names(kernel, target, foreign=foreign)
    assert not foreign, f"AscendC names that do not resolve into the emulation headers: {foreign}"
    assert any(n.startswith("AscendC::") for n in used) and "__aicore__" in used
    # the target's #if branches were what was listed
    if target == "310p":
        assert "bfloat16_t" not in used and "AscendC::DataCopyPad" not in used, sorted(used)
    src, why = cch.sources_status()
    if src is None or not src.kernel_ok()[0]:
        pytest.skip(f"(a) checked; (b) needs the official headers: {why or src.kernel_ok()[1]}")
    rows = an.check_names(used, an.official_names(target, src))
    missing = [f"{u.name} ({u.kind}, {', '.join(sorted(u.files))})" for u, st in rows if st == "MISSING"]
    assert not missing, f"{kernel.name} ({target}): not declared by the official headers: {missing}"


@pytest.mark.slow
def test_api_names_cover_known_uses():
    """The listing finds what the kernels visibly use (so an empty or partial listing cannot pass)."""
    an = _names()
    used = an.used_names(ROOT / "op_kernel" / "copy_blocks.cpp", "a2")
    for name in ("AscendC::ListTensorDesc", "AscendC::ListTensorDesc::GetDataPtr", "AscendC::DataCopyPad",
                 "AscendC::DataCopyExtParams", "AscendC::TQueBind::AllocTensor", "AscendC::PipeBarrier",
                 "AscendC::GlobalTensor::GetValue", "AscendC::TPosition::VECIN", "TILING_KEY_IS", "GET_TILING_DATA",
                 "pipe_t::PIPE_MTE3", "bfloat16_t", "half"):
        assert name in used, f"{name} missing from {sorted(used)}"
    assert used["AscendC::DataCopyPad"].kind == "function" and used["AscendC::ListTensorDesc"].kind == "class"
    assert "copy_blocks.cpp" in used["AscendC::ListTensorDesc"].files


# ------------------------------------------------------------------------------------ the link step
def _obj(tmp_path, name, code):
    src = tmp_path / f"{name}.cpp"
    src.write_text(code)
    obj = tmp_path / f"{name}.o"
    subprocess.run(["g++", "-std=c++11", "-fPIC", "-fvisibility=hidden", "-c", str(src), "-o", str(obj)], check=True)
    return obj


def test_link_host_stubs_only_cann_symbols(tmp_path):
    """The libcust_opmaster link: CANN API symbols are stubbed and the library links with --no-undefined;
    a duplicate definition or an undefined symbol of our own code fails it."""
    cann = _obj(tmp_path, "cann", "#include <string>\nnamespace ops { struct OpDef { OpDef(const char*); }; }\n"
                                  "namespace gert { int Reg(const std::string&); }\n"
                                  'static ops::OpDef d("x"); int r = gert::Reg("y");\n')
    ok, log, stubbed = cch.link_host([cann], tmp_path)
    assert ok, log
    assert len(stubbed) == 2, stubbed
    assert any(s.startswith("ops::OpDef::OpDef") for s in stubbed) and any(s.startswith("gert::Reg") for s in stubbed)
    d1 = _obj(tmp_path, "d1", "namespace ops { int x = 1; }\n")
    d2 = _obj(tmp_path, "d2", "namespace ops { int x = 2; }\n")
    ok, log, _ = cch.link_host([d1, d2], tmp_path)
    assert not ok and "duplicate symbols" in log and "ops::x" in log
    own = _obj(tmp_path, "own", "namespace mskv_tiling { int Missing(); }\nint use() { return mskv_tiling::Missing(); }\n")
    ok, log, _ = cch.link_host([own], tmp_path)
    assert not ok and "mskv_tiling::Missing()" in log


def test_op_soc_configs_follow_the_shared_opdef_helper(tmp_path):
    """The OpDefs add their compute units through mskv_tiling::DeclareOnEverySoc (op_host/
    kv_copy_tiling_common.h), directly or through another helper (mskv_rope_tiling::DeclareGqaRopeOnEverySoc):
    op_soc_configs reads the AddConfig calls of the helpers the OpDef calls, so the 310p kernel target follows
    the helper's AddConfig("ascend310p")."""
    import shutil

    assert cch.op_soc_configs("MskvReshapeAndCache") == {"ascend910b", "ascend910_93", "ascend310p"}
    # through a helper that calls it (op_host/rope_tiling_common.h: the family's attributes, then
    # DeclareOnEverySoc)
    assert "mskv_tiling::DeclareOnEverySoc(" not in (ROOT / "op_host" / "rope_reshape_and_cache.cpp").read_text()
    for op in ("MskvRopeReshapeAndCache", "MskvReropeCachedKeys", "MskvRopeConcatAndCacheMla"):
        assert cch.op_soc_configs(op) == {"ascend910b", "ascend910_93", "ascend310p"}, op
    shutil.copytree(ROOT / "op_host", tmp_path / "op_host")
    shutil.copytree(ROOT / "op_kernel", tmp_path / "op_kernel")
    h = tmp_path / "op_host" / "kv_copy_tiling_common.h"
    line = '  op.AICore().AddConfig("ascend310p", cfg310p);\n'
    assert line in h.read_text()
    h.write_text(h.read_text().replace(line, ""))
    assert cch.op_soc_configs("MskvReshapeAndCache", tmp_path) == {"ascend910b", "ascend910_93"}
    assert cch.kernel_targets(tmp_path / "op_kernel" / "reshape_and_cache.cpp", tmp_path) == ["a2"]
    assert cch.op_soc_configs("MskvRopeReshapeAndCache", tmp_path) == {"ascend910b", "ascend910_93"}
    assert cch.kernel_targets(tmp_path / "op_kernel" / "rope_reshape_and_cache.cpp", tmp_path) == ["a2"]
