#!/usr/bin/env bash
# On the GPU machine (cmake, g++, CUDA 13; no MLIR, GoogleTest, flatbuffers, nlohmann_json, CLI11): builds the
# runtime, smelt-run and the GPU tests against the folder scripts/gpu_plans.sh prepared, runs `ctest -L gpu`
# (the kernels' tests and the cuda-vs-cpu plan comparisons), then compute-sanitizer memcheck on one fixture.
# With 2 or more GPUs it also runs `ctest -L gpu2` (partitioned plans through NCCL against their TP1 plans).
# usage: scripts/gpu_test.sh [CARRY=gpu_carry]   (BUILD=build dir, default build-gpu; ONLY=gpu2: those tests alone;
# SKIP_CTEST=1: skip the ctest runs, only the kernel define variants and memcheck)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$(cd "${1:-gpu_carry}" && pwd)
BUILD=${BUILD:-build-gpu}
export PATH=/usr/local/cuda/bin:$PATH

"$ROOT/scripts/gpu_build.sh" "$CARRY"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
if [ "${ONLY:-}" = gpu2 ]; then  # ONLY=gpu2: just the partitioned plans through NCCL
  ctest --test-dir "$BUILD" -L '^gpu2$' --output-on-failure
  exit $?
fi
if [ "${SKIP_CTEST:-}" != 1 ]; then  # SKIP_CTEST=1: only the kernel define variants and memcheck below (a rerun)
  ctest --test-dir "$BUILD" -L '^gpu$' --output-on-failure || status=1
  # Partitioned plans through NCCL, one GPU per rank, against their TP1 plans (needs 2 GPUs).
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    ctest --test-dir "$BUILD" -L '^gpu2$' --output-on-failure || status=1
  else
    echo "== fewer than 2 GPUs: the partitioned-plan tests (ctest -L gpu2) are not run"
  fi
  # Measurements, not pass/fail: V4.1 end to end with the model's numerics (docs/v41-fidelity.md).
  ctest --test-dir "$BUILD" -L '^gpu_drift$' --output-on-failure || true

  # A failing plan comparison: bisect that plan op by op (identical inputs into both backends before every op)
  # and print the first ops whose outputs or states differ.
  FAILED_LOG="$BUILD/Testing/Temporary/LastTestsFailed.log"
  if [ "$status" != 0 ] && [ -f "$FAILED_LOG" ]; then
    for t in $(sed -n 's/^[0-9]*:gpu\.//p' "$FAILED_LOG"); do
      case "$t" in v41_*) continue ;; esac  # the V4.1 plans have their own bisect tests (gpu.<name>.ops)
      line=$(grep "^$t|" "$BUILD/gpu_plans/manifest.txt" || true)
      IFS='|' read -r name plan model prompt decode tol <<< "$line"
      [ -n "${tol:-}" ] || continue
      case "$model" in models/*) model="$BUILD/gpu_plans/$model" ;; *) model="$ROOT/$model" ;; esac
      echo "== bisect: $name"
      timeout 600 "$BUILD/bin/cuda_gpu_compare" bisect "$BUILD/gpu_plans/$plan" "$model" "$prompt" "$decode" "$tol" 16 12 \
        | head -60 || true
    done
  fi

fi

# The tensor-core GEMVs with their other plan-time knobs (two 16-row tiles a warp in the linears, one in the experts'
# down, 4 KB rings, 16 stages for the FP4 gate + up, a bound check per block and plain weight loads, the FP4 wgmma
# chains in one and two accumulators, the mma.sync chains in one): the same tests,
# kernels compiled with those defines (the runtime launches the defaults, which ctest covered above).
# (The tests size shared memory for 8 KB rings, enough for 4 KB ones.)
# MMA_VARIANTS="OPTS;OPTS": these instead (a rerun of the ones a cut-off run did not reach).
IFS=';' read -r -a variants <<< "${MMA_VARIANTS:--DSMELT_MMA_TPW=2 -DSMELT_MMA_DOWN_TPW=1;-DSMELT_MMA_RING_BYTES=4096;-DSMELT_MMA_FP4_PAIR_STAGES=16;-DSMELT_MMA_FULL_GROUPS=0 -DSMELT_W_EVICT_FIRST=0;-DSMELT_MMA_WG_POS=1 -DSMELT_MMA_WG_POS_DOWN=1;-DSMELT_MMA_WG_POS=2 -DSMELT_MMA_WG_POS_DOWN=2;-DSMELT_MMA_HL_CHAIN=1 -DSMELT_MMA_AQ_CHAIN=1}"
for opts in "${variants[@]}"; do
  echo "== MMA kernel tests with $opts"
  SMELT_TEST_NVRTC_OPTIONS="$opts" "$BUILD/bin/test_kernels_gpu" --gtest_filter='CudaMmaKernels.*' --gtest_brief=1 || status=1
done
# The act-quant kernels with row-major weights (-DSMELT_W_TILED=0: the layout on sm_80, and on sm_89+ before the tile
# order): the harness uploads row-major then (tests/kernels_cuda/harness.cc put_aq).
echo "== act-quant kernel tests with -DSMELT_W_TILED=0"
SMELT_TEST_NVRTC_OPTIONS="-DSMELT_W_TILED=0" "$BUILD/bin/test_kernels_gpu" \
  --gtest_filter='CudaMmaKernels.*:CudaKernels.LinearFp8*:CudaKernelsV41.*Expert*:CudaKernelsV41.Engram*:CudaDecodeKernels.Gemv*:CudaDecodeKernels.Moe*' \
  --gtest_brief=1 || status=1

# compute-sanitizer memcheck end to end (prefill chunks, decode graph replays, reset): a V4 fixture, and the V4.1
# tiny backbone (the tensor-core GEMVs and the V4.1 decode kernels on sm_89+).
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null || true)
for fixture in v4_tiny_mixed v41_tiny_backbone; do
  line=$(grep "^$fixture|" "$BUILD/gpu_plans/manifest.txt")
  IFS='|' read -r name plan model prompt decode tol <<< "$line"
  case "$model" in models/*) model="$BUILD/gpu_plans/$model" ;; *) model="$ROOT/$model" ;; esac
  decode_short=$(echo "$decode" | cut -d, -f1-6)
  # Memory errors only: the V4.1 fixture's numeric drift from the cpu backend is gpu_drift's measurement
  # (docs/v41-fidelity.md), so its comparison runs with a loose tolerance here.
  case "$name" in v41_*) tol=1 ;; esac
  echo "== compute-sanitizer memcheck: $name"
  if [ -z "$SAN" ]; then
    echo "error: compute-sanitizer not found (PATH, /usr/local/cuda/compute-sanitizer): memcheck not run"
    status=1
  else
    "$SAN" --tool memcheck --error-exitcode 3 --leak-check full \
      "$BUILD/bin/cuda_gpu_compare" compare "$BUILD/gpu_plans/$plan" "$model" "$prompt" "$decode_short" "$tol" || status=1
  fi
done
exit $status
