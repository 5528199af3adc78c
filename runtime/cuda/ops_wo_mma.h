// Launchers of the tensor-core weight-only decode GEMVs (kernels/linear/linear_wo_mma.cu, kernels/moe/moe_wo_mma.cu;
// sm_80+, f16 MMA): FP8 / FP4 weights without act quant (numerics = "fp32", V4 FP8 linears, the FP8 wo_a of every
// V4.1 plan) in fp32 accuracy, not the CUDA-core kernels' bits. Each returns false (launching nothing) where its
// kernel does not apply, and the caller takes the CUDA-core path; they carve no scratch, so prepare (dry) and run
// agree whichever path runs.
#pragma once
#include "runtime/cuda/ops_common.h"

namespace smelt::runtime::cuda::detail {

// y = x W^T for an FP8 / FP4 weight at rows <= 8, G groups (grouped_linear: x row G*K, y row G*N; linear: G = 1).
bool try_linear_wo_mma(Ctx& c, DevPtr x, DevPtr y, const LinearW& f, DevPtr w, DevPtr s, int rows, int K, int N,
                       int G, float scale_after, int round);

// The weight-only expert FFN (run_experts without the model's numerics): up and down (no rounding).
bool try_experts_wo_mma(Ctx& c, const ExpertsLaunch& a);

}  // namespace smelt::runtime::cuda::detail
