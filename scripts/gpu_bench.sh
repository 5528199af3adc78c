#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu_build.sh: the decode / prefill benches of docs/performance.md in one run
# (same GPU, each with its own copy-bandwidth measurement), then the side by side with transformers.
#   - bench_v41flash_slice4       V4.1-Flash slice with the model's numerics (FP8 act-quant GEMVs: the sm_90 path)
#   - bench_v41flash_slice4_fp32  the same slice with --numerics fp32 (weight-only dequant: the sm_80-path kernels)
#   - scripts/gpu_side_by_side.sh bench_v4flash_slice3 (V4-Flash, bf16) against transformers eager
# usage: scripts/gpu_bench.sh [RESULTS=bench_results]   (BUILD=build dir, default build-gpu; PROMPT=4096, STEPS=32;
#        SIDE_BY_SIDE=0 skips the transformers run)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
RESULTS=${1:-bench_results}
PROMPT=${PROMPT:-4096}
STEPS=${STEPS:-32}
P=$BUILD/gpu_plans/plans
mkdir -p "$RESULTS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$RESULTS/gpu.txt"
for plan in bench_v41flash_slice4 bench_v41flash_slice4_fp32; do
  [ -f "$P/$plan.smelt" ] || { echo "== $plan: no plan (skipped)"; continue; }
  echo "== $plan"
  "$BUILD/bin/smelt-run" bench "$P/$plan.smelt" --synthetic-weights 1 --prompt-len "$PROMPT" --steps "$STEPS" \
    > "$RESULTS/$plan.txt" 2>&1
  echo "rc=$?"
  grep -E "copy|decode|prefill|bytes|kernels|ratio" "$RESULTS/$plan.txt" | head -12
done
if [ "${SIDE_BY_SIDE:-1}" = 1 ] && [ -f "$P/bench_v4flash_slice3.smelt" ]; then
  echo "== side by side (transformers eager vs smelt, V4-Flash slice)"
  OUT="$RESULTS/side_by_side" scripts/gpu_side_by_side.sh "$P/bench_v4flash_slice3.smelt" \
    "$BUILD/gpu_plans/models/v4flash_slice3/config.json" 1024 16 > "$RESULTS/side_by_side.txt" 2>&1
  echo "rc=$?"
  tail -25 "$RESULTS/side_by_side.txt"
fi
