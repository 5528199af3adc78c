#!/usr/bin/env bash
# On the GPU machine: builds the runtime, smelt-run and the GPU tests against the folder scripts/gpu_plans.sh
# prepared (plans unpacked into $BUILD/gpu_plans), nothing else. scripts/gpu_test.sh runs it first; a bench or
# profiling run calls it alone.
# usage: scripts/gpu_build.sh [CARRY=gpu_carry]   (BUILD=build dir, default build-gpu; TARGETS="smelt-run ..." to
# build fewer targets)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$(cd "${1:-gpu_carry}" && pwd)
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
export PATH=/usr/local/cuda/bin:$PATH

# GoogleTest from the carried sources, installed beside the build.
if [ ! -f "$BUILD/gtest/lib/cmake/GTest/GTestConfig.cmake" ] && [ ! -f "$BUILD/gtest/lib64/cmake/GTest/GTestConfig.cmake" ]; then
  cmake -S "$CARRY/googletest" -B "$BUILD/gtest-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$ROOT/$BUILD/gtest" \
    -DBUILD_GMOCK=OFF > /dev/null
  cmake --build "$BUILD/gtest-build" -j "$JOBS" --target install > /dev/null
fi
mkdir -p "$BUILD/gpu_plans"
tar -C "$BUILD/gpu_plans" -xJf "$CARRY/plans.tar.xz"

GEN=()
command -v ninja > /dev/null && GEN=(-G Ninja)
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DSMELT_BUILD_COMPILER=OFF \
  -DCMAKE_PREFIX_PATH="$ROOT/$BUILD/gtest" \
  -DCMAKE_CXX_FLAGS="-isystem $CARRY/include" \
  -Dnlohmann_json_DIR="$CARRY/cmake/nlohmann_json" \
  -DFLATBUFFERS_INCLUDE_DIR="$CARRY/include" -DFLATC="$CARRY/flatc" \
  -DSMELT_GPU_PLANS_DIR="$ROOT/$BUILD/gpu_plans"
if [ -n "${TARGETS:-}" ]; then
  read -r -a T <<< "$TARGETS"
else
  T=(smelt-run cuda_gpu_compare)
  grep -q "test_kernels_gpu" "$BUILD/build.ninja" "$BUILD"/Makefile 2>/dev/null && T+=(test_kernels_gpu)
fi
cmake --build "$BUILD" -j "$JOBS" --target "${T[@]}"

