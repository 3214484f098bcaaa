"""scripts/check_cann_build.py: the package build through CANN's own tools (opbuild built from asc-devkit, the
msopgen template from asc-tools), and its comparisons.

The full check needs the public sources (MS_KVCACHE_ASC_DEVKIT, _ASC_TOOLS, _METADEF, _GE: work trees or bare
git dirs) and skips without them, saying so (CI has none). Its parsers and comparisons run everywhere, on
texts of the form opbuild writes (written here from asc-devkit tools/build/opbuild's generators).
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
import check_cann_build as B  # noqa: E402

SOURCES, WHY = None, ""
try:
    SOURCES = B.find_build_sources()
    if any(getattr(SOURCES, n) is None for n in ("asc_devkit", "asc_tools", "metadef", "ge")):
        SOURCES, WHY = None, "needs all four of MS_KVCACHE_ASC_DEVKIT, _ASC_TOOLS, _METADEF and _GE"
except B.H.SourcesNotFound as exc:
    WHY = str(exc)
needs_sources = pytest.mark.skipif(SOURCES is None, reason=f"CANN public sources not given: {WHY}")
needs_tools = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("cmake") is None,
                                 reason="needs g++ and cmake")


# ------------------------------------------------------------------------------------------ the comparisons
HEADER = """
#ifndef ACLNN_MSKV_FOO_H_
#define ACLNN_MSKV_FOO_H_
#include "aclnn/acl_meta.h"
/* function: aclnnMskvFooGetWorkspaceSize
 * parameters :
 * key : required
 */
__attribute__((visibility("default")))
aclnnStatus aclnnMskvFooGetWorkspaceSize(
    const aclTensor *key,
    const aclTensorList *caches,
    int64_t cacheLayout,
    const aclTensor *out,
    uint64_t *workspaceSize,
    aclOpExecutor **executor);

__attribute__((visibility("default")))
aclnnStatus aclnnMskvFoo(
    void *workspace,
    uint64_t workspaceSize,
    aclOpExecutor *executor,
    aclrtStream stream);
#endif
"""

FOO = {"params": [["T", "const aclTensor *", "key", "key"], ["L", "const aclTensorList *", "caches", "caches"],
                  ["i", "int64_t ", "cacheLayout", "cache_layout"], ["O", "const aclTensor *", "out", "status"]],
       "inputs": [["key", "required"], ["caches", "dynamic"]], "outputs": ["status"],
       "attrs": [["cache_layout", "int", 0]], "formats": {},
       "rows": {"Ascend910B1": [["float16", "float16", "int32"], ["bfloat16", "bfloat16", "int32"]]}}


def test_prototypes_parsed_and_compared():
    got = B.parse_aclnn_header(HEADER)
    assert got == B.expected_prototypes("MskvFoo", FOO)
    assert got["aclnnMskvFooGetWorkspaceSize"][2] == ("int64_t", "cacheLayout")
    changed = dict(FOO, params=[p if p[0] != "i" else ["b", "bool ", "cacheLayout", "cache_layout"] for p in FOO["params"]])
    assert got != B.expected_prototypes("MskvFoo", changed)


INI = """[MskvFoo]
input0.name=key
input0.dtype=float16,bfloat16
input0.format=ND,ND
input0.paramType=required
input1.name=caches
input1.dtype=float16,bfloat16
input1.format=ND,ND
input1.paramType=dynamic
output0.name=status
output0.dtype=int32,int32
output0.format=ND,ND
output0.paramType=required
attr.list=cache_layout
attr_cache_layout.type=int
attr_cache_layout.value=all
attr_cache_layout.paramType=optional
attr_cache_layout.defaultValue=0
opFile.value=mskv_foo
"""


def test_ops_info_rows_compared_with_the_spec():
    sec = B.parse_ini(INI)["MskvFoo"]
    assert B.check_ini_op("MskvFoo", sec, FOO, "Ascend910B1") == []
    wrong_row = dict(sec, **{"input0.dtype": "float16,float32"})
    assert any("dtype rows" in p for p in B.check_ini_op("MskvFoo", wrong_row, FOO, "Ascend910B1"))
    wrong_default = dict(sec, **{"attr_cache_layout.defaultValue": "1"})
    assert any("attribute cache_layout" in p for p in B.check_ini_op("MskvFoo", wrong_default, FOO, "Ascend910B1"))
    wrong_kind = dict(sec, **{"input1.paramType": "required"})
    assert any("inputs" in p for p in B.check_ini_op("MskvFoo", wrong_kind, FOO, "Ascend910B1"))
    fmt = dict(sec, **{"input0.format": "ND,NZ"})
    assert any("formats" in p for p in B.check_ini_op("MskvFoo", fmt, FOO, "Ascend910B1"))


def test_op_proto_parsed():
    text = """REG_OP(MskvFoo)
    .INPUT(key, ge::TensorType::ALL())
    .OPTIONAL_INPUT(scale, ge::TensorType::ALL())
    .DYNAMIC_INPUT(caches, ge::TensorType::ALL())
    .OUTPUT(status, ge::TensorType::ALL())
    .ATTR(is_neox_style, Bool, true)
    .ATTR(epsilon, Float, 1e-06)
    .OP_END_FACTORY_REG(MskvFoo);"""
    d = B.parse_op_proto(text)["MskvFoo"]
    assert d["inputs"] == [("key", "required"), ("scale", "optional"), ("caches", "dynamic")]
    assert d["outputs"] == ["status"]
    assert d["attrs"] == [("is_neox_style", "bool", "true"), ("epsilon", "float", "1e-06")]
    assert B._same_attr_value("float", "1e-06", 1e-6) and not B._same_attr_value("bool", "true", False)


def test_every_standin_says_what_it_stands_for():
    names = [s.path for s in B.STANDINS]
    assert len(set(names)) == len(names)
    for s in B.STANDINS:
        assert len(s.stands_for) > 40 and s.text.strip(), s.path


def test_no_sources_exits_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MS_KVCACHE_ASC", "MS_KVCACHE_METADEF",
                                                                      "MS_KVCACHE_GE", "ASCEND_"))}
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_cann_build.py")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("check_cann_build: "), res.stderr


def _no_source_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("MS_KVCACHE_ASC", "MS_KVCACHE_METADEF",
                                                                     "MS_KVCACHE_GE", "ASCEND_"))}


def test_no_sources_names_what_this_check_needs():
    """An installed CANN is not enough for this check (it builds opbuild from source): the message must not send the
    user to ASCEND_HOME_PATH (the old one was check_cann_headers.py's, which does)."""
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_cann_build.py")], env=_no_source_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout
    assert "ASCEND_HOME_PATH" not in res.stderr and "MS_KVCACHE_ASC_DEVKIT" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_partial_sources_exit_2_naming_the_missing_ones(tmp_path):
    """Some of the four sources: one line naming the missing ones, exit 2 as without sources (the old run printed
    ten FAIL steps and 'cann build: 0 of 10 steps passed', exit 1: as if the package build had failed)."""
    devkit = tmp_path / "asc-devkit"
    (devkit / "include").mkdir(parents=True)
    (devkit / "include" / "kernel_operator.h").write_text("// stand-in\n")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_cann_build.py"), "--asc-devkit", str(devkit),
                          "--ge", str(tmp_path)], env=_no_source_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout
    assert res.stderr.strip() == ("check_cann_build: the build check needs all four public source trees; missing: "
                                  "--asc-tools / $MS_KVCACHE_ASC_TOOLS, --metadef / $MS_KVCACHE_METADEF"), res.stderr


# ------------------------------------------------------------------------------------------ the check itself
@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """The user's cache (~/.cache/ms_kvcache/cann_build or $MS_KVCACHE_CANN_BUILD_CACHE): a repeated run reuses
    the tools and the objects."""
    return B.cache_root()


@pytest.mark.slow
@needs_sources
@needs_tools
def test_check_passes_on_this_repository(cache_dir):
    """Every step passes on this checkout (first run on a 2-core machine: ~3 min to build opbuild and compile
    the op_host files twice; later runs: seconds)."""
    lines = []
    rep = B.run_check(SOURCES, ROOT, cache=cache_dir, progress=lambda i, s: lines.append(B.format_step(i, s)))
    assert rep.ok, "\n".join(lines)
    assert rep.summary() == f"cann build: {len(B.STEPS)} of {len(B.STEPS)} steps passed"
    assert [s.name for s in rep.steps] == list(B.STEPS)


def _repo_copy(tmp_path):
    dst = tmp_path / "repo"
    for d in ("op_host", "op_proto", "op_kernel"):
        shutil.copytree(ROOT / d, dst / d)
    (dst / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "build_opp.sh", dst / "scripts" / "build_opp.sh")
    return dst


#: the msopgen fallback's copy step as it was: op_proto/*.cpp copied as op_host/<op>_infer.cpp, no header they
#: include
OLD_COPY = """cp "$src_root"/op_host/*.cpp "$proj/op_host/"
cp "$src_root"/op_host/*.h "$proj/op_host/" 2>/dev/null || true
for f in "$src_root"/op_proto/*.cpp; do cp "$f" "$proj/op_host/$(basename "${f%.cpp}")_infer.cpp"; done
for f in "$src_root"/op_kernel/*.cpp; do cp "$f" "$proj/op_kernel/mskv_$(basename "$f")"; done
cp "$src_root"/op_kernel/*.h "$proj/op_kernel/" 2>/dev/null || true
"""


@pytest.mark.slow
@needs_sources
@needs_tools
def test_fallback_compile_catches_the_header_left_behind(tmp_path, cache_dir):
    """build_opp.sh with the old copy step: the template-layout compile fails on the five RoPE infer files
    (rope_cache_infer.h), as opbuild's compile of the msopgen project failed on every CANN 8.x toolkit."""
    repo = _repo_copy(tmp_path)
    script = repo / "scripts" / "build_opp.sh"
    text = script.read_text()
    start = text.index('python3 - "$src_root" "$proj" <<\'PY\'')
    end = text.index("\nPY\n", start) + len("\nPY\n")
    script.write_text(text[:start] + OLD_COPY + text[end:])
    rep = B.run_check(SOURCES, repo, cache=cache_dir, only=["msopgen fallback compile"])
    step = {s.name: s for s in rep.steps}["msopgen fallback compile"]
    assert not step.ok and not rep.ok
    assert step.detail.startswith("5 of 32 op_host files failed to compile"), step.detail
    missing = [l for l in step.lines if "fatal error: rope_cache_infer.h: No such file or directory" in l]
    assert len(missing) == 5, step.lines
    assert rep.summary().endswith("failed: msopgen fallback compile")
