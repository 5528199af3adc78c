// Weight-only FP8 / FP4 expert GEMVs on tensor cores (kernels/linear/gemv_wo_mma.cuh): what smelt_moe_up_fp8 /
// _fp4 and smelt_moe_down_fp8 / _fp4 compute (V4 swiglu with limit, invalid slots -> 0) in fp32 accuracy. Each
// slot has its own expert, so only token row 0 of the MMA is used. This file follows moe.cu in the family's module
// (ExpertW, eptr, expert_of, swiglu).
//
// Launch (runtime/cuda/ops_wo_mma.cc): block 256 threads, grid (CTAs, rows * topk): y = the slot, whose activation
// row the CTA stages. up: a tile = 8 columns f, A rows 0-7 = w1[f], rows 8-15 = w3[f], so the lane holding gate
// f also holds up f. down: a tile = 16 columns of w2. Dynamic shared memory wo_smem_bytes(1, ks * cb). FP4 codes in
// pair order (kernels/cuda/common.cuh fp4_pair_order), as the ring kernels read them.
#include "kernels/linear/gemv_wo_mma.cuh"

using namespace smelt_dev;

namespace {

template <bool FP4>
__device__ void moe_up_wo_mma_body(const float* x, int D, int F, int topk, const i32* idx, int n_experts,
                                   const ExpertW& w, int blk, float limit, float* h, int ks, int cb) {
  const i64 rt = blockIdx.y, r = rt / topk;
  const int e = expert_of(idx, rt, n_experts);
  if (e < 0) {  // the whole CTA: no syncs follow
    for (int f = blockIdx.x * blockDim.x + threadIdx.x; f < F; f += gridDim.x * blockDim.x) h[rt * F + f] = 0.f;
    return;
  }
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int sh = blk_log2(blk), sc = (D + blk - 1) >> sh, nb = D / 32;
  const u8 *w1 = eptr(w, e, 0), *s1 = eptr(w, e, 1), *w3 = eptr(w, e, 4), *s3 = eptr(w, e, 5);
  const i64 wrow = FP4 ? D / 2 : D;
  auto item = [&](int it, WoRows& rr) {
    const i64 f = min(it * 8 + g, F - 1);
    rr.wa = w1 + f * wrow, rr.wb = w3 + f * wrow;
    rr.sa = FP4 ? s1 + f * nb : s1 + (f >> sh) * sc;
    rr.sb = FP4 ? s3 + f * nb : s3 + (f >> sh) * sc;
    rr.ssh = FP4 ? 5 : sh;
    return true;
  };
  auto store = [&](int it, const float* acc) {
    const int f = it * 8 + g;
    if (tig == 0 && f < F) h[rt * F + f] = swiglu(acc[0], acc[2], limit);
  };
  wo_run<FP4, FP4>(x + r * D, D, 1, D, ks, cb, (F + 7) / 8, item, store);
}

template <bool FP4>
__device__ void moe_down_wo_mma_body(const float* h, int D, int F, int topk, const i32* idx, int n_experts,
                                     const ExpertW& w, int blk, float* out, int ks, int cb) {
  // The routing finished before the up was launched (ops.cc: the up is launched once its predecessor is done), so
  // the expert is final here, before this grid's wait (read from L2: an SM's L1 may hold the previous step's), and
  // the first weights stream in while the up finishes (wo_run).
  const i64 rt = blockIdx.y;
  const int e = expert_of(idx, rt, n_experts, true);
  if (e < 0) {
    grid_dep_wait();
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < D; d += gridDim.x * blockDim.x) out[rt * D + d] = 0.f;
    return;
  }
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int sh = blk_log2(blk), sc = (F + blk - 1) >> sh, nb = F / 32;
  const u8 *w2 = eptr(w, e, 2), *s2 = eptr(w, e, 3);
  const i64 wrow = FP4 ? F / 2 : F;
  auto item = [&](int it, WoRows& rr) {
    const i64 da = min(it * 16 + g, D - 1), db = min(it * 16 + g + 8, D - 1);
    rr.wa = w2 + da * wrow, rr.wb = w2 + db * wrow;
    rr.sa = FP4 ? s2 + da * nb : s2 + (da >> sh) * sc;
    rr.sb = FP4 ? s2 + db * nb : s2 + (db >> sh) * sc;
    rr.ssh = FP4 ? 5 : sh;
    return true;
  };
  auto store = [&](int it, const float* acc) {
    if (tig != 0) return;
    const int d = it * 16 + g;
    if (d < D) out[rt * D + d] = acc[0];
    if (d + 8 < D) out[rt * D + d + 8] = acc[2];
  };
  wo_run<FP4, FP4>(h + rt * F, F, 1, F, ks, cb, (D + 15) / 16, item, store);
}

}  // namespace

#define SMELT_MOE_WO_MMA(NAME, FP4)                                                                                 \
  extern "C" __global__ void smelt_moe_up_##NAME##_wo_mma(const float* x, int D, int F, int topk, const i32* idx,   \
                                                         int n_experts, ExpertW w, int blk, float limit, float* h,  \
                                                         int ks, int cb) {                                          \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    moe_up_wo_mma_body<FP4>(x, D, F, topk, idx, n_experts, w, blk, limit, h, ks, cb);                               \
  }                                                                                                                 \
  extern "C" __global__ void smelt_moe_down_##NAME##_wo_mma(const float* h, int D, int F, int topk, const i32* idx, \
                                                           int n_experts, ExpertW w, int blk, float* out, int ks,   \
                                                           int cb) {                                                \
    SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST(); /* waits in the body (wo_run) */                                        \
    moe_down_wo_mma_body<FP4>(h, D, F, topk, idx, n_experts, w, blk, out, ks, cb);                                  \
  }
SMELT_MOE_WO_MMA(fp8, false)
SMELT_MOE_WO_MMA(fp4, true)
