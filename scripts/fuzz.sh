#!/usr/bin/env bash
# Builds the parser fuzzers (safetensors header, config.json, plan) with clang + libFuzzer into
# build-fuzz/ and runs each for N seconds (default 20) from its seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
CLANG=${CLANG:-clang-22}
CLANGXX=${CLANGXX:-clang++-22}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  cmake -S . -B build-fuzz "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CLANG" \
    -DCMAKE_CXX_COMPILER="$CLANGXX" -DSMELT_BUILD_COMPILER=OFF -DSMELT_BUILD_TESTS=ON -DSMELT_BUILD_FUZZERS=ON \
    -DSMELT_FUZZ_ONLY=ON
fi
cmake --build build-fuzz -j "${SMELT_JOBS:-$(nproc)}" --target smelt_fuzzers
for f in build-fuzz/bin/fuzz_*; do
  name=$(basename "$f")
  corpus=build-fuzz/corpus/$name
  mkdir -p "$corpus"
  seeds=tests/fuzz/seeds/${name#fuzz_}
  echo "fuzz: $name for ${SECS}s"
  "$f" -max_total_time="$SECS" -rss_limit_mb=2048 -print_final_stats=1 "$corpus" ${seeds:+$( [ -d "$seeds" ] && echo "$seeds")} 2>&1 | tail -n 3
done
echo "fuzz: all targets ran without a crash"
