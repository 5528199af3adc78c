#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu_build.sh: the decode / prefill benches of docs/performance.md in one run
# (same GPU, each with its own copy-bandwidth measurement), then the side by side with transformers.
#   - bench_v41flash_slice4       V4.1-Flash slice with the model's numerics (FP8 act-quant GEMVs: the sm_90 path)
#   - bench_v41flash_slice4_fp32  the same slice with --numerics fp32 (weight-only dequant: the sm_80-path kernels)
#   - scripts/gpu_side_by_side.sh bench_v4flash_slice3 (V4-Flash, bf16) against transformers eager
# usage: scripts/gpu_bench.sh [RESULTS=bench_results]   (BUILD=build dir, default build-gpu; PROMPT=4096, STEPS=32;
#        SIDE_BY_SIDE=0 skips the transformers run; STATES, VARIANTS below)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
RESULTS=${1:-bench_results}
PROMPT=${PROMPT:-4096}
STEPS=${STEPS:-32}
P=$BUILD/gpu_plans/plans
mkdir -p "$RESULTS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$RESULTS/gpu.txt"
# STATES=synthetic (default) fills the states as after the prompt instead of running it (the prefill of the
# 4096-token prompt took 29 s of device time a run); STATES=prefill runs it. VARIANTS: extra runs of the first
# plan, each "NAME:ENV=VALUE[,ENV=VALUE]" (A/B switches in the same run, e.g. "nomma:SMELT_CUDA_MMA=0").
STATES=${STATES:-synthetic}
run_bench() {  # plan, output name, env assignments...
  local plan=$1 name=$2
  shift 2
  echo "== $name"
  env "$@" "$BUILD/bin/smelt-run" bench "$P/$plan.smelt" --synthetic-weights 1 --prompt-len "$PROMPT" \
    --steps "$STEPS" --states "$STATES" > "$RESULTS/$name.txt" 2>&1
  echo "rc=$?"
  grep -E "copy|decode|prefill|bytes|kernels|ratio" "$RESULTS/$name.txt" | head -12
}
for plan in bench_v41flash_slice4 bench_v41flash_slice4_fp32; do
  [ -f "$P/$plan.smelt" ] || { echo "== $plan: no plan (skipped)"; continue; }
  run_bench "$plan" "$plan"
done
for v in ${VARIANTS:-}; do
  IFS=, read -ra envs <<< "${v#*:}"
  run_bench bench_v41flash_slice4 "bench_v41flash_slice4.${v%%:*}" "${envs[@]}"
done
if [ "${SIDE_BY_SIDE:-1}" = 1 ] && [ -f "$P/bench_v4flash_slice3.smelt" ]; then
  echo "== side by side (transformers eager vs smelt, V4-Flash slice)"
  OUT="$RESULTS/side_by_side" scripts/gpu_side_by_side.sh "$P/bench_v4flash_slice3.smelt" \
    "$BUILD/gpu_plans/models/v4flash_slice3/config.json" 1024 16 > "$RESULTS/side_by_side.txt" 2>&1
  echo "rc=$?"
  tail -25 "$RESULTS/side_by_side.txt"
fi
