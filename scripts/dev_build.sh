#!/usr/bin/env bash
# Development build: compile the native modules into the source tree so that
# `PYTHONPATH=<checkout> python -m pytest` uses them without a pip install.
#   scripts/dev_build.sh            # Release
#   SANITIZE=1 scripts/dev_build.sh # ASan + UBSan build in build/dev-asan
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bdir="$here/build/dev"
extra=()
if [[ "${SANITIZE:-0}" == 1 ]]; then bdir="$here/build/dev-asan"; extra+=(-DMS_KVCACHE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo); fi
cmake -S "$here" -B "$bdir" -DMS_KVCACHE_INPLACE=ON -DPython_EXECUTABLE="$(command -v python)" "${extra[@]}" >/dev/null
cmake --build "$bdir" -j "${JOBS:-2}"
