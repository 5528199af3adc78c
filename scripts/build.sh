#!/usr/bin/env bash
# Configure and build smelt into build/ (binaries in build/bin/). Extra args go to cmake configure.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${SMELT_JOBS:-$(nproc)}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${GEN[@]}" -DCMAKE_BUILD_TYPE=${SMELT_BUILD_TYPE:-Release} "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B build "$@"
fi
cmake --build build -j "$JOBS"
