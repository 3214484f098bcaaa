"""scripts/build_opp.sh and the CANN custom-op project under scripts/opp/ without a CANN toolkit.

- no toolkit (or an incomplete one): non-zero exit and exactly one line saying what is missing;
- CMakePresets.json: parses, vendor name, compute units and the CANN path variable are right;
- the project's CMake logic runs against a stand-in of CANN's ASC CMake package that records every
  npu_op_* call, so we check that every op of op_kernel/ is collected with the right OpType, kernel file,
  host / proto sources, vendor and compute units (the real toolkit is not available here);
- the msopgen fallback puts the sources, and every header they include, into a (stand-in) msopgen skeleton,
  keeps no framework plugin and sets its presets (vendor, compute units, ENABLE_TEST off);
- compute units: A2/A3 by default, ascend310p opt-in, the units not built named in the output.
scripts/check_cann_build.py (tests/test_cann_build.py) runs the fallback on the real msopgen template and
compiles the result against the official headers.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ms_kvcache._backends import ascend as A

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "build_opp.sh"
PRESETS = ROOT / "scripts" / "opp" / "CMakePresets.json"
FIXTURE_SRC = Path(__file__).resolve().parent / "fixtures" / "opp_src"

needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_")}
    env.pop("JOBS", None)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "Ascend" not in p)
    env.update(extra)
    return env


def run(args, env, timeout=120):
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)


def one_line_failure(res):
    assert res.returncode != 0, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {res.stderr!r}"
    assert res.stdout.strip() == "", res.stdout
    assert lines[0].startswith("build_opp.sh: ")
    return lines[0]


def test_help_prints_the_usage_text_only():
    res = run(["--help"], clean_env())
    assert res.returncode == 0 and res.stderr == "", res.stderr
    out = res.stdout
    assert out.startswith("Build the CANN custom-op package of ms_kvcache") and "Usage: scripts/build_opp.sh" in out
    assert "--stage-into-package" in out and out.rstrip().endswith("prepends ASCEND_CUSTOM_OPP_PATH")
    for code in ("set -uo pipefail", "here=", "rc=0", "#!/usr/bin/env bash"):
        assert code not in out, code
    assert not any(ln.startswith("#") for ln in out.splitlines())


# ------------------------------------------------------------------------------------------ no CANN
def test_no_cann_exits_with_one_line():
    line = one_line_failure(run([], clean_env()))
    assert "CANN toolkit not found: ASCEND_HOME_PATH is not set" in line and "set_env.sh" in line


def test_cann_path_that_does_not_exist(tmp_path):
    line = one_line_failure(run([], clean_env(ASCEND_HOME_PATH=str(tmp_path / "nope"))))
    assert f"ASCEND_HOME_PATH={tmp_path / 'nope'} does not exist" in line


def test_cann_without_asc_modules_or_msopgen(tmp_path):
    cann = tmp_path / "cann"
    cann.mkdir()
    line = one_line_failure(run(["--source-root", str(FIXTURE_SRC), "--build-dir", str(tmp_path / "b")],
                                clean_env(ASCEND_HOME_PATH=str(cann))))
    assert "neither the ASC CMake package" in line and "msopgen" in line and str(cann) in line


def test_no_kernels_is_one_line(tmp_path):
    src = tmp_path / "src"
    (src / "op_kernel").mkdir(parents=True)
    cann = tmp_path / "cann"
    cann.mkdir()
    line = one_line_failure(run(["--source-root", str(src)], clean_env(ASCEND_HOME_PATH=str(cann))))
    assert "no AscendC kernels" in line


# ------------------------------------------------------------------------------------------ presets
def test_presets_json():
    p = json.loads(PRESETS.read_text())
    assert p["version"] >= 1 and p["cmakeMinimumRequired"]["minor"] >= 19
    (preset,) = [c for c in p["configurePresets"] if c["name"] == "default"]
    cv = {k: v["value"] for k, v in preset["cacheVariables"].items()}
    assert cv["vendor_name"] == A.VENDOR_NAME == "ms_kvcache"
    # A2 / A3 by default; ascend310p (an OpDef compute unit too) is opt-in (scripts/build_opp.sh --compute-units)
    assert tuple(cv["ASCEND_COMPUTE_UNIT"].split(";")) == ("ascend910b", "ascend910_93")
    assert set(cv["ASCEND_COMPUTE_UNIT"].split(";")) < set(A.COMPUTE_UNITS) == {"ascend910b", "ascend910_93", "ascend310p"}
    assert cv["ENABLE_TEST"] == "False"
    assert cv["ASCEND_CANN_PACKAGE_PATH"] == "$env{ASCEND_HOME_PATH}"
    assert preset["binaryDir"] == "${sourceDir}/../../build_out"   # scripts/opp -> <repo>/build_out
    assert preset["generator"] == "Unix Makefiles"


# ------------------------------------------------------------------------------------------ stand-in ASC package
STANDIN_ASC = textwrap.dedent(r"""
    # Stand-in for CANN's ASC CMake package (tests only): records each npu_op_* call.
    set(ASCEND_AUTOGEN_PATH ${CMAKE_BINARY_DIR}/autogen)
    file(MAKE_DIRECTORY ${ASCEND_AUTOGEN_PATH})
    set(_rec_file ${CMAKE_BINARY_DIR}/asc_calls.txt)
    file(WRITE ${_rec_file} "ASC_ENV|${vendor_name}|${ASCEND_COMPUTE_UNIT}|${ASCEND_CANN_PACKAGE_PATH}|$ENV{ASCEND_HOME_PATH}|${ASCEND_SKIP_FAILED_COMPUTE_UNIT}|${ASC_DIR}\n")
    file(WRITE ${CMAKE_BINARY_DIR}/standin_empty.cpp "")
    function(_rec name)
      string(REPLACE ";" " " a "${ARGN}")
      file(APPEND ${_rec_file} "${name}|${a}\n")
    endfunction()
    function(npu_op_package)
      _rec(npu_op_package ${ARGN})
    endfunction()
    function(npu_op_code_gen)
      _rec(npu_op_code_gen ${ARGN})
      file(WRITE ${ASCEND_AUTOGEN_PATH}/aclnn_standin.cpp "")
      file(WRITE ${ASCEND_AUTOGEN_PATH}/op_proto.cc "")
    endfunction()
    function(npu_op_library name type)
      _rec(npu_op_library ${name} ${type} ${ARGN})
      add_library(${name} OBJECT ${CMAKE_BINARY_DIR}/standin_empty.cpp)
    endfunction()
    function(npu_op_package_add)
      _rec(npu_op_package_add ${ARGN})
    endfunction()
    function(npu_op_kernel_sources)
      _rec(npu_op_kernel_sources ${ARGN})
    endfunction()
    function(npu_op_kernel_library)
      _rec(npu_op_kernel_library ${ARGN})
    endfunction()
""")


def standin_cann(tmp_path, where="lib64/cmake", name="asc-config.cmake"):
    """A CANN folder whose ASC CMake package is the recording stand-in: asc-config.cmake in lib64/cmake (where
    asc-devkit's install rules put it, CANN 9.x), or the ASCConfig.cmake spelling elsewhere."""
    cann = tmp_path / "cann"
    d = cann / where
    d.mkdir(parents=True)
    (d / name).write_text(STANDIN_ASC)
    return cann


def configure(tmp_path, src_root, extra=(), **standin):
    cann = standin_cann(tmp_path, **standin)
    build = tmp_path / "build"
    res = run(["--configure-only", "--source-root", str(src_root), "--build-dir", str(build), *extra],
              clean_env(ASCEND_HOME_PATH=str(cann)), timeout=300)
    return res, build, cann


def read_calls(build):
    calls = []
    for line in (build / "asc_calls.txt").read_text().splitlines():
        name, _, rest = line.partition("|")
        calls.append((name, rest))
    return calls


def expected_ops(src_root):
    return sorted(p.stem for p in (Path(src_root) / "op_kernel").glob("*.cpp"))


def camel(op):
    """The OpType of an op file name: vendor prefix Mskv + CamelCase (docs/design.md)."""
    return "Mskv" + "".join(w[:1].upper() + w[1:] for w in op.split("_") if w)


def check_collected(build, src_root, cann, units="ascend910b;ascend910_93"):
    calls = read_calls(build)
    env = [c for c in calls if c[0] == "ASC_ENV"][0][1].split("|")
    assert env[0] == "ms_kvcache"
    assert env[1] == units
    assert env[2] == str(cann) and env[3] == str(cann)
    # a compute unit whose kernels fail is skipped, not the whole package (build_opp.sh names it)
    assert env[4] == "True"
    assert env[5] == str(cann / "lib64" / "cmake")
    pkg = [r for n, r in calls if n == "npu_op_package"]
    assert pkg and pkg[0].split()[:3] == ["ms_kvcache", "TYPE", "RUN"] and f"INSTALL_PATH {build}/" in pkg[0]
    host = sorted(str(p) for p in (Path(src_root) / "op_host").glob("*.cpp"))
    proto = sorted(str(p) for p in (Path(src_root) / "op_proto").glob("*.cpp"))
    (gen,) = [r.split() for n, r in calls if n == "npu_op_code_gen"]
    assert gen[0] == "SRC" and gen[1:1 + len(host)] == host and "PACKAGE" in gen and "ms_kvcache" in gen
    libs = {r.split()[0]: r.split() for n, r in calls if n == "npu_op_library"}
    assert libs["cust_opapi"][1] == "ACLNN"
    assert libs["cust_op_proto"][1] == "GRAPH" and set(host + proto) <= set(libs["cust_op_proto"])
    assert libs["cust_optiling"][1] == "TILING" and set(host) <= set(libs["cust_optiling"])
    assert not set(proto) & set(libs["cust_optiling"])
    kernels = [r.split() for n, r in calls if n == "npu_op_kernel_sources"]
    got = sorted((k[k.index("OP_TYPE") + 1], k[k.index("KERNEL_FILE") + 1]) for k in kernels)
    assert got == sorted((camel(op), f"{op}.cpp") for op in expected_ops(src_root))
    (klib,) = [r.split() for n, r in calls if n == "npu_op_kernel_library"]
    assert klib[klib.index("SRC_BASE") + 1] == f"{Path(src_root).resolve()}/op_kernel/"
    assert klib[klib.index("TILING_LIBRARY") + 1] == "cust_optiling"
    added = " ".join(r for n, r in calls if n == "npu_op_package_add").split()
    for lib in ("cust_optiling", "cust_opapi", "cust_op_proto", "ascendc_kernels"):
        assert lib in added


@needs_cmake
def test_project_collects_fixture_ops(tmp_path):
    res, build, cann = configure(tmp_path, FIXTURE_SRC)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 ops: MskvFixtureCopy" in res.stdout
    check_collected(build, FIXTURE_SRC, cann)


@needs_cmake
def test_compute_units_default_a2_a3_and_310p_opt_in(tmp_path):
    """The default package is A2 / A3 and the output names what it leaves out; --compute-units adds ascend310p.
    (The old script built ascend310p into every package: one failing 310P kernel failed it for A2 users.)"""
    res, build, cann = configure(tmp_path / "a", FIXTURE_SRC)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ("build_opp.sh: compute units ascend910b;ascend910_93 (not built: ascend310p; add with --compute-units "
            "'ascend910b;ascend910_93;ascend310p')") in res.stdout
    check_collected(build, FIXTURE_SRC, cann)
    all3 = "ascend910b;ascend910_93;ascend310p"
    res, build, cann = configure(tmp_path / "b", FIXTURE_SRC, ["--compute-units", all3])
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"build_opp.sh: compute units {all3}\n" in res.stdout
    check_collected(build, FIXTURE_SRC, cann, units=all3)


@pytest.mark.parametrize("units", ["", "ascend910", "ascend910b;ascend310", ";", "ascend910b;;ascend910_93",
                                   "ascend910b;"])
def test_bad_compute_units_is_one_line(tmp_path, units):
    line = one_line_failure(run(["--compute-units", units, "--source-root", str(FIXTURE_SRC)],
                                clean_env(ASCEND_HOME_PATH=str(tmp_path))))
    assert line.startswith("build_opp.sh: --compute-units: expected one or more of ascend910b, ascend910_93, ascend310p")


@pytest.mark.parametrize("option", ["--build-dir", "--source-root", "--compute-units", "-j"])
def test_an_option_without_its_value_is_one_line(tmp_path, option):
    """The last argument an option that takes a value: one line naming it (the old loop's 'shift 2' failed without
    shifting, so the script spun forever at 100% CPU)."""
    line = one_line_failure(run(["--source-root", str(FIXTURE_SRC), option], clean_env(ASCEND_HOME_PATH=str(tmp_path)),
                                timeout=30))
    assert line == f"build_opp.sh: {option}: expected a value (see --help)", line


@pytest.mark.parametrize("jobs", ["abc", "0", "-3", ""])
def test_bad_job_count_is_one_line(tmp_path, jobs):
    line = one_line_failure(run(["-j", jobs, "--source-root", str(FIXTURE_SRC)], clean_env(ASCEND_HOME_PATH=str(tmp_path))))
    assert line == f"build_opp.sh: -j: expected a positive integer, got '{jobs}'", line
    line = one_line_failure(run([f"-j{jobs}"] if jobs else ["-j", jobs], clean_env(ASCEND_HOME_PATH=str(tmp_path))))
    assert line == f"build_opp.sh: -j: expected a positive integer, got '{jobs}'", line


def test_source_root_that_does_not_exist_is_named(tmp_path):
    line = one_line_failure(run(["--source-root", str(tmp_path / "nope")], clean_env(ASCEND_HOME_PATH=str(tmp_path))))
    assert line == f"build_opp.sh: --source-root: {tmp_path / 'nope'} does not exist", line


@needs_cmake
@pytest.mark.parametrize("where,name", [("lib64/cmake", "asc-config.cmake"),
                                        ("x86_64-linux/lib64/cmake", "asc-config.cmake"),
                                        ("compiler/tikcpp/ascendc_kernel_cmake", "ASCConfig.cmake")])
def test_asc_package_found_where_cann_installs_it(tmp_path, where, name, monkeypatch):
    """asc-devkit installs asc-config.cmake into <arch>-linux/lib64/cmake (cmake/CMakeLists.txt), not into the
    module folder the old script looked at; the configure gets the folder it was found in as ASC_DIR."""
    if where.startswith("x86_64") and os.uname().machine != "x86_64":
        pytest.skip("the <arch>-linux folder of this test is x86_64")
    res, build, cann = configure(tmp_path, FIXTURE_SRC, where=where, name=name)
    assert res.returncode == 0, res.stdout + res.stderr
    env = [c for c in read_calls(build) if c[0] == "ASC_ENV"][0][1].split("|")
    assert env[5] == str(cann / where)


def test_skipped_compute_unit_is_named(tmp_path):
    """A compute unit whose kernels failed (asc-devkit's compile_error.log lines) is named after the build."""
    cann = standin_cann(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    build = tmp_path / "build"
    # stand-in cmake: configure succeeds, the build writes CANN's failure log and a package
    (bindir / "cmake").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in
          --version) echo "cmake version 3.28.0" ;;
          --build) printf '\\nfail op-type: MskvFixtureCopy, fail compute-unit: ascend310p.\\n' > "{build}/compile_error.log"
                   touch "{build}/custom_opp_standin_x86_64.run" ;;
        esac
        exit 0
        """))
    (bindir / "cmake").chmod(0o755)
    env = clean_env(ASCEND_HOME_PATH=str(cann))
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    res = run(["--source-root", str(FIXTURE_SRC), "--build-dir", str(build),
               "--compute-units", "ascend910b;ascend310p"], env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ("build_opp.sh: skipped: the MskvFixtureCopy kernels for ascend310p failed to compile (see "
            f"{build}/compile.log); the package has no MskvFixtureCopy for ascend310p") in res.stdout
    assert f"build_opp.sh: built {build}/custom_opp_standin_x86_64.run" in res.stdout


@needs_cmake
def test_project_collects_every_repository_op(tmp_path):
    if not expected_ops(ROOT):
        pytest.skip("no AscendC ops in op_kernel/ yet (they come from the copy-kernel work)")
    res, build, cann = configure(tmp_path, ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    check_collected(build, ROOT, cann)


@needs_cmake
def test_project_rejects_op_without_proto(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURE_SRC, src)
    (src / "op_proto" / "fixture_copy.cpp").unlink()
    res, _, _ = configure(tmp_path, src)
    assert res.returncode != 0
    flat = " ".join(res.stderr.split())   # cmake wraps long messages
    assert "op fixture_copy has op_kernel/fixture_copy.cpp but no op_proto/fixture_copy.cpp" in flat
    assert res.stderr.rstrip().splitlines()[-1].startswith("build_opp.sh: cmake configure failed")


# ------------------------------------------------------------------------------------------ msopgen fallback
STANDIN_MSOPGEN = textwrap.dedent(r"""
    #!__PY__
    # Stand-in for CANN's msopgen (tests only): writes a project skeleton as msopgen does (the stub op's files,
    # a TensorFlow plugin unless -f names another framework, presets with ENABLE_TEST on, as the template's)
    # whose build.sh records what it saw.
    import json, os, sys
    a = sys.argv[1:]
    assert a[0] == "gen" and "-lan" in a and a[a.index("-lan") + 1] == "cpp"
    assert a[a.index("-c") + 1].startswith("ai_core-")
    out = a[a.index("-out") + 1]
    fw = a[a.index("-f") + 1].lower() if "-f" in a else "tf"
    ops = json.load(open(a[a.index("-i") + 1]))
    assert ops[0]["op"] == "MsKvcacheStub"
    for d in ("op_host", "op_kernel", "build_out", "framework"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    files = ["op_host/ms_kvcache_stub.cpp", "op_host/ms_kvcache_stub_tiling.h", "op_kernel/ms_kvcache_stub.cpp"]
    if fw in ("tf", "tensorflow"):
        os.makedirs(os.path.join(out, "framework", "tf_plugin"))
        files.append("framework/tf_plugin/tensorflow_ms_kvcache_stub_plugin.cc")
    for f in files:
        open(os.path.join(out, f), "w").write("// stub\n")
    json.dump({"version": 1, "configurePresets": [{"name": "default", "cacheVariables": {
        "vendor_name": {"type": "STRING", "value": "customize"},
        "ENABLE_TEST": {"type": "BOOL", "value": "True"},
        "ASCEND_COMPUTE_UNIT": {"type": "STRING", "value": "ascendxxx"}}}]},
        open(os.path.join(out, "CMakePresets.json"), "w"))
    build = os.path.join(out, "build.sh")
    open(build, "w").write('#!/bin/sh\nset -e\ncd "$(dirname "$0")"\n'
                           'find op_host op_kernel framework -type f | sort > build_out/custom_opp_standin_x86_64.run\n'
                           'cat CMakePresets.json >> build_out/custom_opp_standin_x86_64.run\n'
                           'cp -r . ../captured_project\n')
    os.chmod(build, 0o755)
""").replace("__PY__", sys.executable)


def run_msopgen_fallback(tmp_path, src_root, extra=()):
    cann = tmp_path / "cann"
    cann.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "msopgen").write_text(STANDIN_MSOPGEN.lstrip())
    (bindir / "msopgen").chmod(0o755)
    env = clean_env(ASCEND_HOME_PATH=str(cann))
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    build = tmp_path / "build"
    res = run(["--source-root", str(src_root), "--build-dir", str(build), *extra], env)
    return res, build, cann


def fixture_with_proto_header(tmp_path):
    """The fixture op with an op_proto header its infer file includes (as the RoPE ops' rope_cache_infer.h),
    one the header includes in turn, and an op_host header reached through another header."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURE_SRC, src)
    (src / "op_proto" / "fixture_infer_common.h").write_text('#pragma once\n#include "fixture_infer_detail.h"\n')
    (src / "op_proto" / "fixture_infer_detail.h").write_text("#pragma once\n")
    (src / "op_proto" / "unused_proto_header.h").write_text("#pragma once\n")
    proto = src / "op_proto" / "fixture_copy.cpp"
    proto.write_text(proto.read_text().replace('#include "register/op_impl_registry.h"',
                                               '#include "register/op_impl_registry.h"\n#include "fixture_infer_common.h"'))
    tiling = src / "op_host" / "fixture_copy_tiling.h"
    tiling.write_text(tiling.read_text() + '\n#include "fixture_tiling_more.h"\n')
    (src / "op_host" / "fixture_tiling_more.h").write_text("#pragma once\n")
    return src


def test_msopgen_fallback(tmp_path):
    src = fixture_with_proto_header(tmp_path)
    res, build, cann = run_msopgen_fallback(tmp_path, src)
    assert res.returncode == 0, res.stdout + res.stderr
    run_file = build / "custom_opp_standin_x86_64.run"
    assert run_file.is_file(), res.stdout
    text = run_file.read_text()
    files = text.split("{")[0].split()
    # op_host keeps the file names; op_proto/<op>.cpp is op_host/<op>_infer.cpp and every header it includes
    # (transitively) sits next to it, where its #include "..." finds it (the old script copied no op_proto
    # header: the RoPE infer files failed to compile on every CANN 8.x toolkit); the kernel is renamed to the
    # file the template compiles for OpType MskvFixtureCopy: <snake_case(OpType)>.cpp (opbuild's opFile.value)
    for f in ("op_host/fixture_copy.cpp", "op_host/fixture_copy_tiling.h", "op_host/fixture_tiling_more.h",
              "op_host/fixture_copy_infer.cpp", "op_host/fixture_infer_common.h", "op_host/fixture_infer_detail.h",
              "op_kernel/mskv_fixture_copy.cpp"):
        assert f in files, (f, files)
    assert "op_host/unused_proto_header.h" not in files
    assert [f for f in files if f.startswith("op_kernel/")] == ["op_kernel/mskv_fixture_copy.cpp"]
    assert "ms_kvcache_stub" not in text
    # no framework plugin: -f pytorch (msopgen's default tf writes a TensorFlow parser plugin for the stub op)
    assert not [f for f in files if f.startswith("framework/")], files
    presets = json.loads(text[text.index("{"):])
    cv = presets["configurePresets"][0]["cacheVariables"]
    assert cv["vendor_name"]["value"] == "ms_kvcache"
    assert cv["ASCEND_COMPUTE_UNIT"]["value"] == "ascend910b;ascend910_93"
    assert cv["ASCEND_CANN_PACKAGE_PATH"]["value"] == str(cann)
    assert cv["ENABLE_TEST"]["value"] == "False"
    assert "not built: ascend310p" in res.stdout
    proj = build / "captured_project"   # copied by the stand-in build.sh
    assert (proj / "op_host" / "fixture_copy_infer.cpp").read_text() == (src / "op_proto" / "fixture_copy.cpp").read_text()
    assert (proj / "op_host" / "fixture_infer_detail.h").read_bytes() == (src / "op_proto" / "fixture_infer_detail.h").read_bytes()


def test_a_failed_build_leaves_no_package_from_an_earlier_build(tmp_path, monkeypatch):
    """The package of an earlier build is removed before building: after a failed build, the install command of the
    README (./build_out/custom_opp_*.run) must not install stale kernels (the old script left it in place)."""
    monkeypatch.setattr(sys.modules[__name__], "STANDIN_MSOPGEN",
                        STANDIN_MSOPGEN.replace("set -e\\n", "set -e\\necho kernel compile error >&2; exit 3\\n"))
    build = tmp_path / "build"
    build.mkdir()
    (build / "custom_opp_standin_x86_64.run").write_text("an earlier build's package")
    res, build, _ = run_msopgen_fallback(tmp_path, FIXTURE_SRC)
    assert res.returncode != 0 and "kernel compile error" in res.stderr
    assert res.stderr.rstrip().splitlines()[-1] == "build_opp.sh: msopgen project build failed (see the output above)"
    assert not list(build.glob("custom_opp_*.run")), "a stale package is left"


def test_msopgen_fallback_removes_a_framework_plugin(tmp_path):
    """An msopgen that writes a plugin anyway (an older one without -f pytorch): the plugin folder is removed
    and named."""
    res, _, _ = run_msopgen_fallback(tmp_path, FIXTURE_SRC)
    assert res.returncode == 0 and "removed the framework plugin" not in res.stdout
    stand_in = (tmp_path / "bin" / "msopgen")
    stand_in.write_text(stand_in.read_text().replace('fw = a[a.index("-f") + 1].lower() if "-f" in a else "tf"',
                                                     'fw = "tf"'))
    env = clean_env(ASCEND_HOME_PATH=str(tmp_path / "cann"))
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    res = run(["--source-root", str(FIXTURE_SRC), "--build-dir", str(tmp_path / "build2")], env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "build_opp.sh: removed the framework plugin msopgen generated: framework/tf_plugin" in res.stdout
    text = (tmp_path / "build2" / "custom_opp_standin_x86_64.run").read_text()
    assert "framework/" not in text.split("{")[0]


def test_msopgen_fallback_refuses_an_include_from_outside(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURE_SRC, src)
    (tmp_path / "elsewhere.h").write_text("#pragma once\n")
    proto = src / "op_proto" / "fixture_copy.cpp"
    proto.write_text('#include "../../elsewhere.h"\n' + proto.read_text())
    res, _, _ = run_msopgen_fallback(tmp_path, src)
    assert res.returncode != 0
    assert 'op_proto/fixture_copy.cpp includes "../../elsewhere.h" from outside op_host/, op_proto/ and op_kernel/' \
        in res.stderr


# ------------------------------------------------------------------------------------------ CANN's kernel source copy
#: an asc-devkit checkout (public CANN sources: gitcode.com/cann/asc-devkit); tests that run its CMake
#: helper scripts skip without it
ASC_DEVKIT = os.environ.get("MS_KVCACHE_ASC_DEVKIT", "")


def _asc_util():
    """asc-devkit's cmake/asc/fwk_modules/util: a work tree or a bare git dir (extracted as check_cann_headers.py
    does, the form the other CANN source checks take; a bare dir here skipped these tests)."""
    if not ASC_DEVKIT:
        return None
    sys.path.insert(0, str(ROOT / "scripts"))
    import check_cann_headers as H  # noqa: E402

    try:
        tree, _ = H.materialize(ASC_DEVKIT, "asc_devkit")
    except H.SourcesNotFound:
        return None
    return tree / "cmake" / "asc" / "fwk_modules" / "util"


ASC_UTIL = _asc_util()
needs_asc_util = pytest.mark.skipif(
    ASC_UTIL is None or not (ASC_UTIL / "ascendc_copy_kernel_src.py").is_file(),
    reason="set MS_KVCACHE_ASC_DEVKIT to an asc-devkit checkout (CANN's ascendc_source_files_ini.py / "
           "ascendc_copy_kernel_src.py, what npu_op_kernel_sources / npu_op_kernel_library run)")


def _kernel_source_calls(build):
    out = []
    for name, rest in read_calls(build):
        if name == "npu_op_kernel_sources":
            a = rest.split()
            kv = {k: a[a.index(k) + 1] for k in ("OP_TYPE", "KERNEL_DIR", "KERNEL_FILE") if k in a}
            out.append((a[0], kv))
    return out


def _quoted_includes(path):
    import re

    return re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(errors="replace"), re.M)


@needs_cmake
def test_every_kernel_source_call_copies_op_kernel_headers(tmp_path):
    """Each npu_op_kernel_sources call names KERNEL_DIR ./ (copy the whole op_kernel/ folder, the official
    template's form) besides OP_TYPE and KERNEL_FILE: with KERNEL_FILE alone CANN copies only <op>.cpp into
    the source package and an online compile misses the headers (the old CMakeLists)."""
    res, build, _ = configure(tmp_path, ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = _kernel_source_calls(build)
    assert calls and len(calls) == len(expected_ops(ROOT))
    for target, kv in calls:
        assert target == "ascendc_kernels"
        assert kv.get("KERNEL_DIR") == "./", kv
        assert (ROOT / "op_kernel" / kv["KERNEL_DIR"] / kv["KERNEL_FILE"]).is_file(), kv


@needs_cmake
@needs_asc_util
def test_cann_source_copy_ships_every_header_a_kernel_includes(tmp_path):
    """Run CANN's own scripts on the recorded calls, as npu_op_kernel_sources and npu_op_kernel_library do
    (asc-devkit cmake/asc/fwk_modules/func.cmake): ascendc_source_files_ini.py per call, then
    ascendc_copy_kernel_src.py into <binary>/ascendc_kernels/binary/dynamic (the source package's kernel
    folder). Every kernel file must be at the path CANN's compile reads (kernel_dir/kernel_file) and every
    header it includes, transitively, next to it."""
    res, build, _ = configure(tmp_path, ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    autogen = tmp_path / "autogen"
    autogen.mkdir()
    for target, kv in _kernel_source_calls(build):
        cmd = [sys.executable, str(ASC_UTIL / "ascendc_source_files_ini.py"), f"--auto-gen-path={autogen}",
               f"--target-name={target}", f"--op-type={kv['OP_TYPE']}", f"--op-kernel-file={kv['KERNEL_FILE']}"]
        if "KERNEL_DIR" in kv:
            cmd.append(f"--op-kernel-dir={kv['KERNEL_DIR']}")
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    dynamic = tmp_path / "bin" / "ascendc_kernels" / "binary" / "dynamic"
    dynamic.parent.mkdir(parents=True)
    subprocess.run([sys.executable, str(ASC_UTIL / "ascendc_copy_kernel_src.py"), f"--auto-gen-path={autogen}",
                    "--target-name=ascendc_kernels", f"--kernel-base-dir={ROOT / 'op_kernel'}/",
                    f"--copy-dst-dir={dynamic}"], check=True, capture_output=True, text=True)
    missing = []
    for _, kv in _kernel_source_calls(build):
        src = dynamic / kv.get("KERNEL_DIR", ".") / kv["KERNEL_FILE"]
        assert src.is_file(), f"{kv['OP_TYPE']}: CANN's compile would not find {src}"
        todo, seen = [src], set()
        while todo:
            f = todo.pop()
            for inc in _quoted_includes(f):
                dep = (f.parent / inc)
                if dep in seen:
                    continue
                seen.add(dep)
                if dep.is_file():
                    todo.append(dep)
                elif (ROOT / "op_kernel" / inc).is_file():
                    missing.append(f"{kv['OP_TYPE']}: {f.name} includes \"{inc}\", not in the package")
    assert not missing, "\n".join(missing)


@needs_asc_util
def test_cann_names_agree_with_our_files(tmp_path):
    """The names CANN derives from each OpType (opbuild's ConvertToSnakeCase, asc-devkit
    tools/build/opbuild/op_generator.cpp, compiled here from that source) agree with ours: the kernel
    entry CANN compiles (opInterface.value = snake_case(OpType), also when KERNEL_FILE is named otherwise)
    is the entry op_kernel/<op>.cpp defines, and the aclnn header opbuild writes
    (aclnn_<snake_case(OpType)>.h) is the one the ascend backend and MindSpore look for."""
    import re

    from mindspore.ops.operations._custom_ops_utils import CustomInfoGenerator

    from ms_kvcache import _spec
    from ms_kvcache._backends import ascend as A
    import ms_kvcache  # noqa: F401  (registers the specs)

    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to compile opbuild's ConvertToSnakeCase")
    text = (ASC_UTIL.parents[3] / "tools" / "build" / "opbuild" / "op_generator.cpp").read_text()
    start = text.index("std::string ConvertToSnakeCase(const std::string& ins)")
    body, depth, i = [], 0, text.index("{", start)
    for j in range(i, len(text)):   # the function's text up to its matching brace
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            break
    src = tmp_path / "snake.cpp"
    src.write_text("#include <cctype>\n#include <cstdio>\n#include <string>\n#define ASCENDLOGE(...) ((void)0)\n"
                   + text[start:j + 1]
                   + "\nint main(int argc, char** argv) { for (int i = 1; i < argc; ++i) "
                     "std::printf(\"%s\\n\", ConvertToSnakeCase(argv[i]).c_str()); return 0; }\n")
    exe = tmp_path / "snake"
    subprocess.run([cxx, "-std=c++17", "-o", str(exe), str(src)], check=True)
    ops = expected_ops(ROOT)
    snakes = subprocess.run([str(exe)] + [camel(op) for op in ops], check=True, capture_output=True,
                            text=True).stdout.split()
    for op, snake in zip(ops, snakes):
        assert snake == f"mskv_{op}", (op, snake)
        kernel = (ROOT / "op_kernel" / f"{op}.cpp").read_text()
        entries = re.findall(r"__global__\s+__aicore__\s+void\s+(\w+)\s*\(", kernel)
        assert entries == [snake], (op, entries)
        spec = _spec.get_spec(op)
        assert A.aclnn_header_name(spec) == f"aclnn_{snake}.h"
        assert CustomInfoGenerator._get_aclnn_api_file_name(f"aclnn{spec.op_type}") == f"aclnn_{snake}.h"
