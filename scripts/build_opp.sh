#!/usr/bin/env bash
# Build the CANN custom-op package of ms_kvcache (vendor "ms_kvcache"):
#   build_out/custom_opp_<os>_<arch>.run
# from op_kernel/ (AscendC kernels), op_host/ (OpDef + tiling) and op_proto/ (infer shape), for the
# compute units of --compute-units (default ascend910b;ascend910_93: Atlas A2 / A3).
#
# Needs a CANN 8.x or 9.x toolkit (ASCEND_HOME_PATH set, e.g. `source <cann>/set_env.sh`), cmake >= 3.19
# and python3. Two ways, picked automatically:
#   asc      the toolkit ships the ASC CMake modules (<cann>/compiler/tikcpp/ascendc_kernel_cmake, CANN 9.x):
#            configure scripts/opp/ with its preset and build targets "binary" and "package"; a compute
#            unit whose kernels fail to compile is skipped (ASCEND_SKIP_FAILED_COMPUTE_UNIT) and named;
#   msopgen  toolkits without them (CANN 8.x): generate a project skeleton with the toolkit's own msopgen
#            (-f pytorch: no framework plugin), put this repository's sources into it (every header an
#            op_host / op_proto file includes with them), set its CMakePresets.json (vendor, compute
#            units, ENABLE_TEST off) and run its build.sh; a failing kernel fails the build.
# Without a usable toolkit it exits non-zero after printing ONE line that says what is missing.
#
# Usage: scripts/build_opp.sh [--build-dir DIR] [--source-root DIR] [--compute-units LIST]
#                             [--configure-only] [--stage-into-package] [-j N]
#   --compute-units LIST  ';'-separated ASCEND_COMPUTE_UNIT values out of ascend910b, ascend910_93,
#                         ascend310p (default "ascend910b;ascend910_93"; Atlas 300I/V Pro users add
#                         ascend310p: its kernels are a separate compile that may fail on its own).
#   --stage-into-package  copy the built vendor folder to ms_kvcache/opp/vendors/ms_kvcache so a wheel
#                         built afterwards ships it (ms_kvcache prepends it to ASCEND_CUSTOM_OPP_PATH).
#   --configure-only      stop after the cmake configure step (asc mode; used by the tests).
# Install:  build_out/custom_opp_<os>_<arch>.run --install-path=<dir>
#           source <dir>/vendors/ms_kvcache/bin/set_env.bash      # prepends ASCEND_CUSTOM_OPP_PATH
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
src_root="$here"
build_dir=""
configure_only=0
stage=0
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
jobs_from="\$JOBS"
vendor="ms_kvcache"
compute_units="ascend910b;ascend910_93"
all_units="ascend910b ascend910_93 ascend310p"

die() { echo "build_opp.sh: $*" >&2; exit 1; }

value() { [[ $# -ge 2 ]] || die "$1: expected a value (see --help)"; }   # value OPTION "$@"-after-it
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) value "$@"; build_dir="$2"; shift 2 ;;
    --source-root) value "$@"; src_root="$2"; shift 2 ;;
    --compute-units) value "$@"; compute_units="$2"; shift 2 ;;
    --configure-only) configure_only=1; shift ;;
    --stage-into-package) stage=1; shift ;;
    -j) value "$@"; jobs="$2"; jobs_from="-j"; shift 2 ;;
    -j*) jobs="${1#-j}"; jobs_from="-j"; shift ;;
    -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$jobs" =~ ^[0-9]+$ && "$jobs" -gt 0 ]] || die "$jobs_from: expected a positive integer, got '$jobs'"
[[ -n "$build_dir" ]] || build_dir="$src_root/build_out"
src_root_given="$src_root"
src_root="$(cd "$src_root" 2>/dev/null && pwd)" || die "--source-root: $src_root_given does not exist"
units_msg="--compute-units: expected one or more of ${all_units// /, } separated by ';'"
[[ -n "$compute_units" ]] || die "$units_msg, got ''"
[[ ";$compute_units;" != *";;"* ]] || die "$units_msg, got an empty unit in '$compute_units'"
for u in ${compute_units//;/ }; do
  [[ " $all_units " == *" $u "* ]] || die "$units_msg, got '$u' in '$compute_units'"
done
skipped_units=""
for u in $all_units; do [[ ";$compute_units;" == *";$u;"* ]] || skipped_units+="${skipped_units:+;}$u"; done

# ------------------------------------------------------------------ preflight: one line per failure
cann="${ASCEND_CANN_PACKAGE_PATH:-${ASCEND_HOME_PATH:-}}"
[[ -n "$cann" ]] || die "CANN toolkit not found: ASCEND_HOME_PATH is not set (install the CANN 8.x toolkit and run \`source <cann>/set_env.sh\`)"
[[ -d "$cann" ]] || die "CANN toolkit not found: ASCEND_HOME_PATH=$cann does not exist"
export ASCEND_HOME_PATH="${ASCEND_HOME_PATH:-$cann}"
command -v cmake >/dev/null 2>&1 || die "cmake not found (need cmake >= 3.19)"
cmake_ver="$(cmake --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')"
if ! python3 -c "import sys; v=tuple(map(int,'${cmake_ver:-0.0}'.split('.'))); sys.exit(0 if v>=(3,19) else 1)" 2>/dev/null; then
  die "cmake ${cmake_ver:-?} is too old (need >= 3.19 for CMakePresets.json) or python3 is missing"
fi
compgen -G "$src_root/op_kernel/*.cpp" >/dev/null || die "no AscendC kernels: $src_root/op_kernel/*.cpp is empty"

# The ASC CMake package (asc-devkit cmake/: asc-config.cmake goes to <arch>-linux/lib64/cmake, its modules to
# <arch>-linux/tikcpp/ascendc_kernel_cmake, read through <cann>/compiler/tikcpp/ascendc_kernel_cmake)
asc_config=""
for d in "$cann/lib64/cmake" "$cann/$(uname -m)-linux/lib64/cmake" "$cann/compiler/tikcpp/ascendc_kernel_cmake"; do
  if [[ -f "$d/asc-config.cmake" || -f "$d/ASCConfig.cmake" ]]; then asc_config="$d"; break; fi
done
mode=""
if [[ -n "$asc_config" ]]; then
  mode=asc
else
  msopgen="$(command -v msopgen 2>/dev/null || true)"
  [[ -n "$msopgen" ]] || { [[ -x "$cann/python/site-packages/bin/msopgen" ]] && msopgen="$cann/python/site-packages/bin/msopgen"; }
  [[ -n "$msopgen" ]] && mode=msopgen
fi
[[ -n "$mode" ]] || die "CANN at $cann has neither the ASC CMake package (asc-config.cmake in $cann/lib64/cmake) nor msopgen: install the CANN toolkit (Ascend-cann-toolkit), not only the runtime"
if [[ -n "$skipped_units" ]]; then
  echo "build_opp.sh: compute units $compute_units (not built: $skipped_units; add with --compute-units '$compute_units;$skipped_units')"
else
  echo "build_opp.sh: compute units $compute_units"
fi

mkdir -p "$build_dir" || die "cannot create build directory $build_dir"
build_dir="$(cd "$build_dir" && pwd)"

find_run() { ls -1t "$1"/custom_opp_*.run 2>/dev/null | head -n 1; }
# an earlier build's package goes first: after a failed build, build_out/custom_opp_*.run must not be stale kernels
drop_old_runs() { rm -f "$build_dir"/custom_opp_*.run || die "cannot remove the earlier package in $build_dir"; }

stage_vendor() {
  local staged
  staged="$(ls -d "$build_dir"/_CPack_Packages/*/External/custom_opp_*.run/packages/vendors/"$vendor" 2>/dev/null | head -n 1)"
  [[ -n "$staged" ]] || die "built package has no packages/vendors/$vendor staging folder under $build_dir/_CPack_Packages"
  rm -rf "$here/ms_kvcache/opp/vendors/$vendor"
  mkdir -p "$here/ms_kvcache/opp/vendors"
  cp -a "$staged" "$here/ms_kvcache/opp/vendors/$vendor" || die "cannot copy $staged into ms_kvcache/opp/vendors"
  echo "build_opp.sh: staged $staged -> ms_kvcache/opp/vendors/$vendor"
}

# ------------------------------------------------------------------ asc mode
# the kernels of each compute unit are a separate compile: ASCEND_SKIP_FAILED_COMPUTE_UNIT keeps the package of
# the units that built (asc-devkit cmake/asc/fwk_modules/func.cmake writes each failure to compile_error.log)
report_skipped() {
  local log="$build_dir/compile_error.log"
  [[ -f "$log" ]] || return 0
  sed -n 's/^fail op-type: \(.*\), fail compute-unit: \(.*\)\.$/\2 \1/p' "$log" | sort -u | while read -r unit op; do
    echo "build_opp.sh: skipped: the $op kernels for $unit failed to compile (see $build_dir/compile.log); the package has no $op for $unit"
  done
}

if [[ "$mode" == asc ]]; then
  cmake -S "$here/scripts/opp" -B "$build_dir" --preset=default \
        -DASCEND_CANN_PACKAGE_PATH="$cann" -DMSKV_SOURCE_ROOT="$src_root" -DASC_DIR="$asc_config" \
        -Dvendor_name="$vendor" -DASCEND_COMPUTE_UNIT="$compute_units" -DASCEND_SKIP_FAILED_COMPUTE_UNIT=True \
        -DCMAKE_INSTALL_PREFIX="$build_dir" || die "cmake configure failed (see the output above)"
  [[ "$configure_only" == 1 ]] && { echo "build_opp.sh: configured $build_dir"; exit 0; }
  rm -f "$build_dir/compile_error.log"
  drop_old_runs
  cmake --build "$build_dir" --target binary package -j "$jobs" || { report_skipped; die "build failed (see the output above)"; }
  report_skipped
  run="$(find_run "$build_dir")"
  [[ -n "$run" ]] || die "build finished but no custom_opp_*.run in $build_dir"
  echo "build_opp.sh: built $run"
  [[ "$stage" == 1 ]] && stage_vendor
  exit 0
fi

# ------------------------------------------------------------------ msopgen mode (toolkits without ASC modules)
[[ "$configure_only" == 1 ]] && die "--configure-only needs the ASC CMake modules; $cann only has msopgen"
proj="$build_dir/msopgen_project"
rm -rf "$proj"
drop_old_runs
stub_json="$build_dir/msopgen_stub.json"
cat > "$stub_json" <<'JSON'
[{"op": "MsKvcacheStub", "language": "cpp",
  "input_desc": [{"name": "x", "param_type": "required", "format": ["ND"], "type": ["fp16"]}],
  "output_desc": [{"name": "y", "param_type": "required", "format": ["ND"], "type": ["fp16"]}]}]
JSON
# -f pytorch: msopgen's default framework is tf, which adds a TensorFlow parser plugin for the stub op
"$msopgen" gen -i "$stub_json" -f pytorch -c ai_core-Ascend910B1 -lan cpp -out "$proj" >/dev/null \
  || die "msopgen gen failed for $stub_json"
[[ -f "$proj/CMakePresets.json" && -x "$proj/build.sh" ]] || die "msopgen produced no CMakePresets.json/build.sh in $proj"
for d in "$proj"/framework/*_plugin; do   # a framework plugin (of the stub op) has no place in this package
  [[ -d "$d" ]] || continue
  rm -rf "$d" && echo "build_opp.sh: removed the framework plugin msopgen generated: ${d#"$proj"/}"
done
# replace the stub op by this repository's ops: the template compiles every op_host/*.cpp into the proto and
# tiling libraries (op_proto/<op>.cpp go there as <op>_infer.cpp) and op_kernel/<snake_case(OpType)>.cpp =
# mskv_<op>.cpp per op (opbuild's opFile); it copies the whole op_kernel/ folder into its source package
rm -f "$proj"/op_host/ms_kvcache_stub* "$proj"/op_kernel/ms_kvcache_stub*
python3 - "$src_root" "$proj" <<'PY' || die "cannot lay out the sources in $proj (see the line above)"
# Copy the sources and every header they include (quoted, transitively, found next to the including file)
# to where the includes resolve from the copies: op_host/ and op_proto/ files go to op_host/, op_kernel/
# files to op_kernel/.
import os, re, shutil, sys
src, proj = sys.argv[1:]
dest_dir = {"op_host": "op_host", "op_proto": "op_host", "op_kernel": "op_kernel"}
inc_re = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
placed = {}   # destination -> source

def place(path, name=None):
    rel = os.path.relpath(path, src)
    part = rel.split(os.sep)[0]
    dst = os.path.join(proj, dest_dir[part], name or os.path.basename(path))
    if placed.setdefault(dst, path) != path:
        sys.exit(f"build_opp.sh: {os.path.relpath(path, src)} and {os.path.relpath(placed[dst], src)} would both be "
                 f"{os.path.relpath(dst, proj)} in the msopgen project")
    shutil.copyfile(path, dst)
    return dst

todo = []
for part in ("op_host", "op_proto", "op_kernel"):
    for f in sorted(os.listdir(os.path.join(src, part))):
        if not f.endswith(".cpp"):
            continue
        path = os.path.join(src, part, f)
        name = {"op_proto": f[:-4] + "_infer.cpp", "op_kernel": "mskv_" + f}.get(part, f)
        todo.append((path, place(path, name)))
for f in sorted(os.listdir(os.path.join(src, "op_kernel"))):   # the source package ships them all
    if f.endswith(".h"):
        place(os.path.join(src, "op_kernel", f))
n_headers, seen = 0, set()
while todo:
    path, dst = todo.pop()
    for inc in inc_re.findall(open(path, errors="replace").read()):
        dep = os.path.normpath(os.path.join(os.path.dirname(path), inc))
        if not os.path.isfile(dep):
            continue   # a CANN header (register/..., tiling/...)
        if os.path.relpath(dep, src).split(os.sep)[0] not in dest_dir:
            sys.exit(f"build_opp.sh: {os.path.relpath(path, src)} includes \"{inc}\" from outside op_host/, op_proto/ "
                     f"and op_kernel/")
        want = os.path.normpath(os.path.join(os.path.dirname(dst), inc))
        if dep not in seen:
            seen.add(dep)
            got = place(dep)
            n_headers += 1
            todo.append((dep, got))
        if not os.path.isfile(want) or os.path.realpath(placed.get(want, "")) != os.path.realpath(dep):
            sys.exit(f"build_opp.sh: {os.path.relpath(path, src)} includes \"{inc}\", which would not resolve in the "
                     f"msopgen project")
print(f"build_opp.sh: msopgen project {proj}: {len(placed)} files ({n_headers} headers the sources include)")
PY
python3 - "$proj/CMakePresets.json" "$vendor" "$compute_units" "$cann" <<'PY' || die "cannot update $proj/CMakePresets.json"
import json, sys
path, vendor, units, cann = sys.argv[1:]
p = json.load(open(path))
cv = p["configurePresets"][0]["cacheVariables"]
cv["vendor_name"] = {"type": "STRING", "value": vendor}
cv["ASCEND_COMPUTE_UNIT"] = {"type": "STRING", "value": units}
cv["ASCEND_CANN_PACKAGE_PATH"] = {"type": "PATH", "value": cann}
cv["ENABLE_TEST"] = {"type": "BOOL", "value": "False"}   # the template's default is True (testcases/)
json.dump(p, open(path, "w"), indent=4)
PY
(cd "$proj" && ./build.sh) || die "msopgen project build failed (see the output above)"
run="$(find_run "$proj/build_out")"
[[ -n "$run" ]] || die "msopgen build finished but no custom_opp_*.run in $proj/build_out"
cp "$run" "$build_dir/" || die "cannot copy $run to $build_dir"
if [[ "$stage" == 1 ]]; then build_dir="$proj/build_out" stage_vendor; fi
echo "build_opp.sh: built $build_dir/$(basename "$run")"
