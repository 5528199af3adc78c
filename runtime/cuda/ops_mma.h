// Launchers of the tensor-core decode act-quant GEMVs (kernels/linear/linear_mma.cu, kernels/moe/moe_mma.cu;
// sm_89+, FP8 MMA). Each returns false (launching nothing) where its kernel does not apply, and the caller takes
// the exact CUDA-core path; the same answer in prepare (dry) and run, so scratch sizes agree. They carve no scratch.
#pragma once
#include "runtime/cuda/ops_common.h"

namespace smelt::runtime::cuda::detail {

// The most rows (<= 8) whose staging of K the act-quant tensor-core GEMVs fit in shared memory; 0 when K % 32.
int linear_mma_rows(const OpLaunch& l, int K);
// y = act_quant(x) W^T for rows <= linear_mma_rows(K) (the act-quant branch of linear()). One FP8 row on sm_90: the
// wgmma kernel, its K split across blocks only when `wz` (the linear's zeroed memory, wgmma_linear_zeroed) is given.
bool try_linear_mma(Ctx& c, DevPtr x, DevPtr y, const LinearW& f, DevPtr w, DevPtr s, int rows, int K, int N,
                    float scale_after, int round, DevPtr wz = 0);
// The zeroed memory an FP8 act-quant linear's one-row wgmma launch may split K with, carved from the op's (at every
// row count, so that prepare and run carve alike; 0 off sm_90, where the prepare could not know the arch, it carves).
DevPtr wgmma_linear_zeroed(Ctx& c, const LinearW& f, int K, int N);

// The V4.1 expert FFN of one row with the model's numerics (run_experts): up and down; swiglu_mlp's down kernel
// applies the op's bf16 round (`a.round`).
bool try_experts_mma(Ctx& c, const ExpertsLaunch& a);
// The routed FP4 experts on wgmma (sm_90) and the shared FP8 expert `s` (one slot, the same x) in one up and one down
// launch (moe_mma.cu smelt_moe_*_fp4_wgmma_with_fp8), each block running one kernel's body as its own launch would;
// false (nothing launched) where either kernel does not apply. Only for ops the backend paired, which it does only with
// $SMELT_CUDA_FUSE_SHARED=1 (=up: the downs as two launches): measured slower in the step (docs/performance.md
// "Session 22").
bool try_experts_mma_with_shared(Ctx& c, const ExpertsLaunch& a, const ExpertsLaunch& s);
// The weight-only FP4 (and with $SMELT_CUDA_WO_RING=all FP8) expert FFN of one row (run_experts without the model's
// numerics, sm_80+) on the same ring, in fp32 accuracy as the wo_mma kernels (ops_wo_mma.h), which take the other row
// counts and formats.
bool try_experts_wo_ring(Ctx& c, const ExpertsLaunch& a);
// The same with the shared FP8 expert s (one slot, the same x) in the routed FP4 experts' up launch (sm_80+).
bool try_experts_wo_ring_with_shared(Ctx& c, const ExpertsLaunch& a, const ExpertsLaunch& s);
// The weight-only FP8 / FP4 linear (G = 1) or grouped linear of one row (sm_80+) on the same ring, in fp32 accuracy
// as the wo_mma kernels; other row counts, and every call without $SMELT_CUDA_LINEAR_RING=1, return false.
bool try_linear_wo_ring(Ctx& c, DevPtr x, DevPtr y, const LinearW& f, DevPtr w, DevPtr s, int rows, int K, int N,
                        int G, float scale_after, int round);

}  // namespace smelt::runtime::cuda::detail
