// Decode (one row) V4.1 expert GEMVs on FP8 tensor cores (sm_89+; kernels/linear/gemv_mma.cuh):
// smelt_moe_up_*_mma / smelt_moe_down_*_mma compute what smelt_moe_up_*_aq_dec / smelt_moe_down_*_aq_dec compute
// (expert_of, invalid slots -> 0, rb, limit, rw, round: the same epilogues), the 32-block sums by mma.sync (within
// a tolerance of the exact sums, docs/performance.md "Tensor-core decode"). Only token row n = 0 of the MMA is
// used: each slot has its own expert. This file follows moe.cu in the family's module (ExpertW, eptr, expert_of).
//
// Launch (runtime/cuda/ops_mma.cc): block kMmaWarps * 32, persistent grid over groups of kMmaWarps / S tiles (a
// tile = one slot's 16 output columns; S warps split K per tile). Dynamic shared memory mma_smem_bytes(D, 1) for
// up, mma_smem_bytes(F, topk) for down (topk <= 8).
// smelt_moe_*_fp4_wgmma (sm_90a): the same with 64-row tiles (x SMELT_MMA_DOWN_TPW for down), each walked by the 4
// warps of a warpgroup, the block sums by wgmma (MmaSegment::run_wg); groups of 2 / S tiles, S <= 2.
#include "kernels/linear/gemv_mma.cuh"

using namespace smelt_dev;

namespace {

// up: h[t, f] = the swiglu of up_dec_body from g = x . w1[f], u = x . w3[f] of slot t's expert. WG: the wgmma
// path (FP4, sm_90a): a tile is 64 rows walked by a warpgroup, warp q of it rows 16 q .. 16 q + 15.
template <bool FP4, bool WG>
__device__ void up_mma_body(const float* x, int D, int F, int topk, const i32* idx, int n_experts, const float* rw,
                            const ExpertW& w, int blk, float limit, int rb, float* h, int S) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && (!WG || SMELT_WGMMA)
  extern __shared__ __align__(16) unsigned char mma_sm[];
  const int nb = D / 32, stride = mma_x_stride(D);
  mma_check_smem(D, 1);
  u8* xq = mma_sm;
  float* xsc = reinterpret_cast<float*>(mma_sm + stride);
  float* part = xsc + nb * 8;
  constexpr int WR = WG ? 4 : 1, TR = 16 * WR;  // warps a tile, its rows
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int unit = warp / WR, q = warp % WR;
  const int tpg = kMmaWarps / WR / S, seg = unit % S;
  const int tps = (F + TR - 1) / TR, tiles = topk * tps, groups = (tiles + tpg - 1) / tpg;
  int b0, b1;
  mma_seg_range(nb, seg, S, b0, b1);
  // Each group: its tile's expert, then its first weight blocks in flight before anything else (for the first
  // group, before the act-quant staging, which every thread of the block runs once).
  MmaSegment<FP4, 2> ms;
  const u8* xrow = g == 0 ? xq : nullptr;
  // Routed slots: the experts come from the routing kernel, so wait first, and only then let the down be scheduled
  // (it reads the experts before its own wait). The shared expert (idx null) has its first weight blocks in flight
  // before the dependent-launch wait, as the linear GEMVs.
  if (idx) grid_dep_wait();
  grid_dep_launch();
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int tile = grp * tpg + unit / S;
    const int t = tile / tps, ft = (tile - t * tps) * TR, f0 = ft + 16 * q;
    const int e = tile < tiles ? expert_of(idx, t, n_experts) : -1;
    if (e >= 0) {
      const u8* wm[2] = {eptr(w, e, 0), eptr(w, e, 4)};
      const u8* sm[2] = {eptr(w, e, 1), eptr(w, e, 5)};
      // a warp of a wgmma tile past F: every row reads 0, pointers at the tile's first row
      const bool past = WG && f0 >= F;
      ms.init(wm, sm, past ? ft : f0, past ? ft : F, D, blk, mma_warp_ring(mma_sm, D, 1), mma_warp_scales(mma_sm, D, 1));
      ms.prefetch(b0, b1);
    }
    if (grp == int(blockIdx.x)) {
      if (!idx) grid_dep_wait();
      mma_stage_quant<WG ? kStageE4m3Split : FP4 ? kStageF16Paired : kStageF16>(x, 1, D, xq, stride, xsc);
    }
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // [g, u][rows g, g + 8]
    if (e >= 0) {
#if SMELT_WGMMA
      if constexpr (WG) ms.run_wg(b0, b1, smem_addr(xq), xsc, acc);
      else
#endif
        ms.template run_checked<1>(b0, b1, xrow, xsc, acc);
    }
    if (S > 1) mma_combine<4>(part, &acc[0][0], S, WR);
    if (seg != 0 || tile >= tiles || tig != 0) continue;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int f = f0 + g + 8 * i;
      if (f >= F) continue;
      const i64 o = i64(t) * F + f;
      h[o] = e < 0 ? 0.f : swiglu_v41(acc[0][i], acc[1][i], limit, rb, rw, t);
    }
  }
#else
  __trap();  // the runtime launches these on sm_89+ only (the wgmma ones on sm_90a cubins)
#endif
}

// down: out[t, d] = act_quant(h[t]) . w2[d] of slot t's expert (bf16 when rb and the slot is valid, or round). WG as in
// up_mma_body: a tile is 64 x TPW rows, warp q of its warpgroup rows 16 q + 64 m of each of the TPW matrices.
template <bool FP4, bool WG>
__device__ void down_mma_body(const float* h, int D, int F, int topk, const i32* idx, int n_experts,
                              const ExpertW& w, int blk, int rb, int round, float* out, int S) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && (!WG || SMELT_WGMMA)
  extern __shared__ __align__(16) unsigned char mma_sm[];
  const int nb = F / 32, stride = mma_x_stride(F);
  mma_check_smem(F, topk);
  u8* xq = mma_sm;
  float* xsc = reinterpret_cast<float*>(mma_sm + topk * stride);
  float* part = xsc + nb * 8;
  constexpr int WR = WG ? 4 : 1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int unit = warp / WR, q = warp % WR;
  const int tpg = kMmaWarps / WR / S, seg = unit % S;
  constexpr int TPW = SMELT_MMA_DOWN_TPW;  // 16-row matrices a warp walks at once (as the linear GEMV's TPW)
  constexpr int TR = 16 * WR * TPW;        // rows of a tile
  const int tps = (D + TR - 1) / TR, tiles = topk * tps, groups = (tiles + tpg - 1) / tpg;
  int b0, b1;
  mma_seg_range(nb, seg, S, b0, b1);
  MmaSegment<FP4, TPW> ms;  // as in up_mma_body: the group's first weight blocks in flight first
  // Routed slots too: the up lets this grid be scheduled only after its own wait for the routing, so the expert
  // indices are final before this grid's wait (read from L2), and the first group's weights stream in while the up
  // finishes.
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int tile = grp * tpg + unit / S;
    const int t = tile / tps, dt = (tile - t * tps) * TR, d0 = dt + 16 * q;
    const int e = tile < tiles ? expert_of(idx, t, n_experts, true) : -1;
    if (e >= 0) {
      const u8* wm[TPW];
      const u8* sm[TPW];
#pragma unroll
      for (int m = 0; m < TPW; ++m) wm[m] = eptr(w, e, 2), sm[m] = eptr(w, e, 3);
      const bool past = WG && d0 >= D;  // as in up_mma_body
      ms.init(wm, sm, past ? dt : d0, past ? dt : D, F, blk, mma_warp_ring(mma_sm, F, topk),
              mma_warp_scales(mma_sm, F, topk), 16 * WR);
      ms.prefetch(b0, b1);
    }
    // slot t's row: xq + t * stride, scales xsc[b * 8 + t]. A block that runs one group only stages the slots of its
    // tiles (tiles are slot-major: one or two slots of the topk), the others every slot.
    if (grp == int(blockIdx.x)) {
      grid_dep_wait();
      int t_lo = 0, t_hi = topk - 1;
      if (int(gridDim.x) >= groups) {
        t_lo = (grp * tpg) / tps;
        t_hi = min(grp * tpg + tpg - 1, tiles - 1) / tps;
      }
      mma_stage_quant<WG ? kStageE4m3Split : FP4 ? kStageF16Paired : kStageF16>(
          h + i64(t_lo) * F, t_hi - t_lo + 1, F, xq + t_lo * stride, stride, xsc + t_lo);
    }
    float acc[TPW][2] = {};
    if (e >= 0) {
#if SMELT_WGMMA
      if constexpr (WG) ms.run_wg(b0, b1, smem_addr(xq + t * stride), xsc + t, acc);
      else
#endif
        ms.template run_checked<1>(b0, b1, g == 0 ? xq + t * stride : nullptr, xsc + t, acc);
    }
    if (S > 1) mma_combine<2 * TPW>(part, &acc[0][0], S, WR);
    if (seg != 0 || tile >= tiles || tig != 0) continue;
#pragma unroll
    for (int m = 0; m < TPW; ++m)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int d = d0 + 16 * WR * m + g + 8 * i;
        if (d >= D) continue;
        const float y = e >= 0 ? acc[m][i] : 0.f;
        out[i64(t) * D + d] = ((rb && e >= 0) || round) ? round_bf16(y) : y;
      }
  }
#else
  __trap();
#endif
}

}  // namespace

#define SMELT_MOE_MMA(NAME, FP4, SUFFIX, WG)                                                                      \
  extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)                                           \
  smelt_moe_up_##NAME##_##SUFFIX(const float* x, int D, int F, int topk, const i32* idx,                             \
                                 int n_experts, const float* rw, ExpertW w, int blk,                                \
                                 float limit, int rb, float* h, int ksplit) {                                       \
    SMELT_KERNEL_PROLOGUE_IN_BODY(); /* wait (first, unless the shared expert), then launch the dependents */    \
    up_mma_body<FP4, WG>(x, D, F, topk, idx, n_experts, rw, w, blk, limit, rb, h, ksplit);                        \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)                                           \
  smelt_moe_down_##NAME##_##SUFFIX(const float* h, int D, int F, int topk, const i32* idx,                           \
                                   int n_experts, ExpertW w, int blk, int rb, int round,                            \
                                   float* out, int ksplit) {                                                        \
    SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();                                                                        \
    down_mma_body<FP4, WG>(h, D, F, topk, idx, n_experts, w, blk, rb, round, out, ksplit);                        \
  }
SMELT_MOE_MMA(fp8, false, mma, false)
SMELT_MOE_MMA(fp4, true, mma, false)
// FP4 on wgmma: launched on sm_90 (whose cubins are built for sm_90a); elsewhere the bodies trap.
SMELT_MOE_MMA(fp4, true, wgmma, true)
