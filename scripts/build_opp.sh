#!/usr/bin/env bash
# Build the CANN custom-op package of ms_kvcache (vendor "ms_kvcache"):
#   build_out/custom_opp_<os>_<arch>.run
# from op_kernel/ (AscendC kernels), op_host/ (OpDef + tiling) and op_proto/ (infer shape), for the
# compute units ascend910b;ascend910_93;ascend310p (scripts/opp/CMakePresets.json).
#
# Needs a CANN 8.x toolkit (ASCEND_HOME_PATH set, e.g. `source /usr/local/Ascend/ascend-toolkit/set_env.sh`),
# cmake >= 3.19 and python3. Two ways, picked automatically:
#   asc      the toolkit ships the ASC CMake modules (<cann>/compiler/tikcpp/ascendc_kernel_cmake):
#            configure scripts/opp/ with its preset and build targets "binary" and "package";
#   msopgen  older toolkits without them: generate a project skeleton with the toolkit's own msopgen,
#            put this repository's sources into it, set its CMakePresets.json and run its build.sh.
# Without a usable toolkit it exits non-zero after printing ONE line that says what is missing.
#
# Usage: scripts/build_opp.sh [--build-dir DIR] [--source-root DIR] [--configure-only]
#                             [--stage-into-package] [-j N]
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
vendor="ms_kvcache"
compute_units="ascend910b;ascend910_93;ascend310p"

die() { echo "build_opp.sh: $*" >&2; exit 1; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="${2:-}"; shift 2 ;;
    --source-root) src_root="${2:-}"; shift 2 ;;
    --configure-only) configure_only=1; shift ;;
    --stage-into-package) stage=1; shift ;;
    -j) jobs="${2:-}"; shift 2 ;;
    -j*) jobs="${1#-j}"; shift ;;
    -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n "$build_dir" ]] || build_dir="$src_root/build_out"
src_root="$(cd "$src_root" 2>/dev/null && pwd)" || die "source root does not exist"

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

asc_dir="$cann/compiler/tikcpp/ascendc_kernel_cmake"
mode=""
if [[ -f "$asc_dir/ASCConfig.cmake" || -f "$asc_dir/asc-config.cmake" ]]; then
  mode=asc
else
  msopgen="$(command -v msopgen 2>/dev/null || true)"
  [[ -n "$msopgen" ]] || { [[ -x "$cann/python/site-packages/bin/msopgen" ]] && msopgen="$cann/python/site-packages/bin/msopgen"; }
  [[ -n "$msopgen" ]] && mode=msopgen
fi
[[ -n "$mode" ]] || die "CANN at $cann has neither the ASC CMake modules ($asc_dir/ASCConfig.cmake) nor msopgen: install the CANN 8.x toolkit (Ascend-cann-toolkit), not only the runtime"

mkdir -p "$build_dir" || die "cannot create build directory $build_dir"
build_dir="$(cd "$build_dir" && pwd)"

find_run() { ls -1t "$1"/custom_opp_*.run 2>/dev/null | head -n 1; }

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
if [[ "$mode" == asc ]]; then
  cmake -S "$here/scripts/opp" -B "$build_dir" --preset=default \
        -DASCEND_CANN_PACKAGE_PATH="$cann" -DMSKV_SOURCE_ROOT="$src_root" \
        -Dvendor_name="$vendor" -DASCEND_COMPUTE_UNIT="$compute_units" \
        -DCMAKE_INSTALL_PREFIX="$build_dir" || die "cmake configure failed (see the output above)"
  [[ "$configure_only" == 1 ]] && { echo "build_opp.sh: configured $build_dir"; exit 0; }
  cmake --build "$build_dir" --target binary package -j "$jobs" || die "build failed (see the output above)"
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
stub_json="$build_dir/msopgen_stub.json"
cat > "$stub_json" <<'JSON'
[{"op": "MsKvcacheStub", "language": "cpp",
  "input_desc": [{"name": "x", "param_type": "required", "format": ["ND"], "type": ["fp16"]}],
  "output_desc": [{"name": "y", "param_type": "required", "format": ["ND"], "type": ["fp16"]}]}]
JSON
"$msopgen" gen -i "$stub_json" -c ai_core-Ascend910B1 -lan cpp -out "$proj" >/dev/null \
  || die "msopgen gen failed for $stub_json"
[[ -f "$proj/CMakePresets.json" && -x "$proj/build.sh" ]] || die "msopgen produced no CMakePresets.json/build.sh in $proj"
# replace the stub op by this repository's ops (the template compiles op_host/*.cpp into the proto and
# tiling libraries and op_kernel/<op>.cpp per OpType)
rm -f "$proj"/op_host/ms_kvcache_stub* "$proj"/op_kernel/ms_kvcache_stub*
cp "$src_root"/op_host/*.cpp "$proj/op_host/" || die "cannot copy op_host sources"
cp "$src_root"/op_host/*.h "$proj/op_host/" 2>/dev/null || true
for f in "$src_root"/op_proto/*.cpp; do
  [[ -e "$f" ]] && cp "$f" "$proj/op_host/$(basename "${f%.cpp}")_infer.cpp"
done
# the template compiles op_kernel/<snake_case(OpType)>.cpp per op = mskv_<op>.cpp (opbuild's opFile), and
# copies the whole op_kernel/ folder (headers included) into its source package
for f in "$src_root"/op_kernel/*.cpp; do
  cp "$f" "$proj/op_kernel/mskv_$(basename "$f")" || die "cannot copy $f"
done
cp "$src_root"/op_kernel/*.h "$proj/op_kernel/" 2>/dev/null || true
python3 - "$proj/CMakePresets.json" "$vendor" "$compute_units" "$cann" <<'PY' || die "cannot update $proj/CMakePresets.json"
import json, sys
path, vendor, units, cann = sys.argv[1:]
p = json.load(open(path))
cv = p["configurePresets"][0]["cacheVariables"]
cv["vendor_name"] = {"type": "STRING", "value": vendor}
cv["ASCEND_COMPUTE_UNIT"] = {"type": "STRING", "value": units}
cv["ASCEND_CANN_PACKAGE_PATH"] = {"type": "PATH", "value": cann}
json.dump(p, open(path, "w"), indent=4)
PY
(cd "$proj" && ./build.sh) || die "msopgen project build failed (see the output above)"
run="$(find_run "$proj/build_out")"
[[ -n "$run" ]] || die "msopgen build finished but no custom_opp_*.run in $proj/build_out"
cp "$run" "$build_dir/" || die "cannot copy $run to $build_dir"
if [[ "$stage" == 1 ]]; then build_dir="$proj/build_out" stage_vendor; fi
echo "build_opp.sh: built $build_dir/$(basename "$run")"
