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
// warps of a warpgroup, the block sums by wgmma (MmaSegment::run_wg); groups of 2 / S tiles, S <= 2. The up, and the
// down where a block runs one group, stage their rows in column pairs (kStageE4m3Pos) for run_wg_pos's chains of four.
// smelt_moe_*_{fp8,fp4}_wo_ring (sm_80+, the weight-only path of `--numerics fp32` plans): what smelt_moe_*_wo_mma
// compute (V4 swiglu with limit, no routing weight, no roundings: the launcher passes rb = 0, round = 0) through the
// same ring as the act-quant kernels: the activations staged as f16 hi / lo halves in two token columns
// (mma_stage_wo, MmaSegment::run with HL; the FP4 ones four blocks a chain, MmaSegment::run_chain), the weights
// row-major, the FP4 codes in pair order (kernels/cuda/common.cuh fp4_pair_order; the runtime writes them so at
// load). The down stages only the slots of its group's tiles (two halves a slot would not fit every slot beside the
// rings).
#include "kernels/linear/gemv_mma.cuh"

using namespace smelt_dev;

namespace {

constexpr int kPathAq = 0, kPathWg = 1, kPathWo = 2;  // act quant on mma.sync, act quant on wgmma, weight-only

// Staged token rows a slot takes (the weight-only hi / lo halves: two).
template <int P>
constexpr int slot_rows() { return P == kPathWo ? 2 : 1; }

// This lane's staged B rows of slot row lt (lanes g = 0, and g = 1 for the weight-only lo halves; others nullptr).
template <int P>
__device__ __forceinline__ const u8* lane_xrow(const u8* xq, int stride, int lt, int g) {
  if (g == 0) return xq + i64(slot_rows<P>() * lt) * stride;
  if (P == kPathWo && g == 1) return xq + i64(2 * lt + 1) * stride;
  return nullptr;
}

// Pos: the wgmma up's one row in column pairs (kStageE4m3Pos, MmaSegment::run_wg_pos).
template <bool FP4, int P, bool Pos = false>
__device__ __forceinline__ void stage_rows(const float* x, int rows, int K, u8* xq, int stride, float* xsc) {
  if constexpr (P == kPathWo) mma_stage_wo<FP4>(x, rows, K, xq, stride, xsc);
  else if constexpr (P == kPathWg && Pos) mma_stage_quant<kStageE4m3Pos>(x, rows, K, xq, stride, xsc);
  else if constexpr (P == kPathWg) mma_stage_quant<kStageE4m3Split>(x, rows, K, xq, stride, xsc);
  else if constexpr (FP4) mma_stage_quant<kStageF16Paired>(x, rows, K, xq, stride, xsc);
  else mma_stage_quant<kStageF16>(x, rows, K, xq, stride, xsc);
}

// Slot counters (ExpertW::slot_done: topk + 1 words of the op's zeroed memory). The routed up counts each finished
// tile in its slot's word, released at GPU scope after the block's h stores; the down, launched early by dependent
// launch, starts a slot's tiles once that slot's count is whole instead of at its grid-wide wait, which returns only
// when the up's last block (the shared expert's blocks of the paired launch, the last wave's tiles) has ended. Word
// topk counts the down's blocks out; the last one zeroes every word again for the next launch.
__device__ __forceinline__ void slot_count_group(u32* cnt, int grp, int tpg, int tiles, int tps) {
  __syncthreads();  // every warp's h stores of the group are done
  if (threadIdx.x == 0) {
    __threadfence();
    for (int u = 0; u < tpg; ++u) {
      const int tile = grp * tpg + u;
      if (tile < tiles) atomicAdd(cnt + tile / tps, 1u);
    }
  }
}
// Until slots lo .. hi each counted `need` tiles (the up's tiles a slot); all threads, synchronises.
__device__ __forceinline__ void slot_wait(const u32* cnt, int lo, int hi, u32 need) {
  if (threadIdx.x == 0) {
    for (int t = lo; t <= hi; ++t)
      while (ld_acquire_gpu(cnt + t) < need) __nanosleep(128);
    __threadfence();
  }
  __syncthreads();
}
// The down block's end: it still ends after the up grid (the ops after the down wait for the down grid only, and the
// shared expert's down reads what the paired up wrote), and the last block out zeroes the counters.
__device__ __forceinline__ void slot_exit(u32* cnt, int topk, int nblk) {
  if (threadIdx.x != 0) return;
  grid_dep_wait();
  if (atomicAdd(cnt + topk, 1u) == u32(nblk) - 1)
    for (int t = 0; t <= topk; ++t) cnt[t] = 0u;
}

// The bodies' arch guard: act quant on sm_89+ (E4M3 conversions), wgmma on sm_90a, weight-only on sm_80+.
#if defined(__CUDA_ARCH__)
template <int P>
constexpr bool path_arch_ok() {
  return P == kPathWo ? __CUDA_ARCH__ >= 800 : P == kPathWg ? (__CUDA_ARCH__ >= 890 && SMELT_WGMMA) : __CUDA_ARCH__ >= 890;
}
#endif

// up: h[t, f] = the swiglu of up_dec_body from g = x . w1[f], u = x . w3[f] of slot t's expert. WG: the wgmma
// path (FP4, sm_90a): a tile is 64 rows walked by a warpgroup, warp q of it rows 16 q .. 16 q + 15.
template <bool FP4, int P>
__device__ void up_mma_body(const float* x, int D, int F, int topk, const i32* idx, int n_experts, const float* rw,
                            const ExpertW& w, int blk, float limit, int rb, float* h, int S, int bid, int nblk) {
#if defined(__CUDA_ARCH__)
  if constexpr (path_arch_ok<P>()) {
  constexpr bool WG = P == kPathWg, WO = P == kPathWo, POS = WG && SMELT_MMA_WG_POS;
  using Seg = MmaSegment<FP4, 2, WO ? false : bool(SMELT_W_TILED), WO && FP4>;
  extern __shared__ __align__(16) unsigned char mma_sm[];
  const int nb = D / 32, stride = mma_x_stride(D);
  // Staged rows of the one token row; POS: the column-pair layout's, beside rings of the D stages the segment uses
  // (4 of the 8 KB for the FP4 pair), so that the launch takes no more shared memory than the paired shared expert's
  // (runtime/cuda/mma_split.h mma_wg_up_smem).
  const int RS = POS ? mma_pos_rows(D) : slot_rows<P>();
  constexpr int RB = POS ? Seg::D * Seg::SB : kMmaRingBytes;
  mma_check_smem(D, RS, RB);
  u8* xq = mma_sm;
  float* xsc = reinterpret_cast<float*>(mma_sm + RS * stride);
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
  Seg ms;
  const u8* xrow = lane_xrow<P>(xq, stride, 0, g);
  // Routed slots: the experts come from the routing kernel, so wait first, and only then let the down be scheduled
  // (it reads the experts before its own wait). The shared expert (idx null) has its first weight blocks in flight
  // before the dependent-launch wait, as the linear GEMVs.
  if (idx) grid_dep_wait();
  grid_dep_launch();
  u32* const cnt = idx ? w.slot_done : nullptr;  // the routed slots' counters (slot_count_group)
  for (int grp = bid; grp < groups; grp += nblk) {
    const int tile = grp * tpg + unit / S;
    const int t = tile / tps, ft = (tile - t * tps) * TR, f0 = ft + 16 * q;
    const int e = tile < tiles ? expert_of(idx, t, n_experts) : -1;
    if (e >= 0) {
      const u8* wm[2] = {eptr(w, e, 0), eptr(w, e, 4)};
      const u8* sm[2] = {eptr(w, e, 1), eptr(w, e, 5)};
      // a warp of a wgmma tile past F: every row reads 0, pointers at the tile's first row
      const bool past = WG && f0 >= F;
      ms.init(wm, sm, past ? ft : f0, past ? ft : F, D, blk, mma_warp_ring(mma_sm, D, RS, RB),
              mma_warp_scales(mma_sm, D, RS, RB));
      ms.prefetch(b0, b1);
    }
    if (grp == bid) {
      if (!idx) grid_dep_wait();
      stage_rows<FP4, P, POS>(x, 1, D, xq, stride, xsc);
    }
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // [g, u][rows g, g + 8]
    if (e >= 0) {
#if SMELT_WGMMA
      if constexpr (POS) ms.template run_wg_pos<SMELT_MMA_WG_POS>(b0, b1, smem_addr(xq), mma_pos_plane(D), xsc, acc);
      else if constexpr (WG) ms.run_wg(b0, b1, smem_addr(xq), xsc, acc);
      else
#endif
      if constexpr (WO && FP4 && SMELT_MMA_HL_CHAIN) ms.template run_chain<SMELT_MMA_HL_CHAIN, true>(b0, b1, xq, stride, xsc, acc);
      else if constexpr (P == kPathAq && FP4 && SMELT_MMA_AQ_CHAIN) ms.template run_chain<SMELT_MMA_AQ_CHAIN, false>(b0, b1, xq, stride, xsc, acc);
      else if constexpr (WO) ms.template run<1, false, true>(b0, b1, xrow, xsc, acc);
      else ms.template run_checked<1>(b0, b1, xrow, xsc, acc);
    }
    if (S > 1) mma_combine<4>(part, &acc[0][0], S, WR);
    if (seg == 0 && tile < tiles && tig == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int f = f0 + g + 8 * i;
        if (f >= F) continue;
        const i64 o = i64(t) * F + f;
        h[o] = e < 0 ? 0.f
                     : WO ? swiglu(acc[0][i], acc[1][i], limit) : swiglu_v41(acc[0][i], acc[1][i], limit, rb, rw, t);
      }
    }
    if (cnt) slot_count_group(cnt, grp, tpg, tiles, tps);
  }
  } else {
    __trap();  // the runtime launches these where path_arch_ok holds (the wgmma ones on sm_90a cubins)
  }
#endif
}

// down: out[t, d] = act_quant(h[t]) . w2[d] of slot t's expert (bf16 when rb and the slot is valid, or round). WG as in
// up_mma_body: a tile is 64 x TPW rows, warp q of its warpgroup rows 16 q + 64 m of each of the TPW matrices.
template <bool FP4, int P>
__device__ void down_mma_body(const float* h, int D, int F, int topk, const i32* idx, int n_experts,
                              const ExpertW& w, int blk, int rb, int round, float* out, int S, int bid, int nblk) {
#if defined(__CUDA_ARCH__)
  if constexpr (path_arch_ok<P>()) {
  constexpr bool WG = P == kPathWg, WO = P == kPathWo, POS = WG && SMELT_MMA_WG_POS_DOWN;
  extern __shared__ __align__(16) unsigned char mma_sm[];
  const int nb = F / 32, stride = mma_x_stride(F);
  constexpr int WR = WG ? 4 : 1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int unit = warp / WR, q = warp % WR;
  const int tpg = kMmaWarps / WR / S, seg = unit % S;
  constexpr int TPW = SMELT_MMA_DOWN_TPW;  // 16-row matrices a warp walks at once (as the linear GEMV's TPW)
  constexpr int TR = 16 * WR * TPW;        // rows of a tile
  const int tps = (D + TR - 1) / TR, tiles = topk * tps, groups = (tiles + tpg - 1) / tpg;
  // Staged slots: every slot (act quant), or (weight-only) the most a group's tpg tiles span, restaged per group
  // (runtime/cuda/mma_split.h mma_wo_down_span: the launcher sizes the shared memory with the same count).
  const int gspan = min(topk, (tpg + tps - 2) / tps + 1);
  const int span = WO ? gspan : topk, RS = slot_rows<P>() * span;
  // POS (wgmma): a block that runs one group stages only its slots, each in the column-pair layout (kStageE4m3Pos,
  // MmaSegment::run_wg_pos: four blocks a wgmma chain) of mma_pos_rows(F) rows, where they fit in the rows the launch
  // sized for every slot (V4.1: 240 one-slot groups of 264 blocks, 4 rows of the 6); else run_wg's one-row layout.
  const int prow = POS ? mma_pos_rows(F) : 1, pstride = prow * stride;
  const bool pos = POS && nblk >= groups && gspan * prow <= RS;
  using Seg = MmaSegment<FP4, TPW, WO ? false : bool(SMELT_W_TILED), WO && FP4>;
  // wgmma: rings of the D stages the segment uses (4 of the 8 KB for the FP4 pair; runtime/cuda/mma_split.h
  // mma_wg_ring_bytes), which leaves the L1 more of the multiprocessor's 256 KB
  constexpr int RB = WG ? Seg::D * Seg::SB : kMmaRingBytes;
  mma_check_smem(F, RS, RB);
  u8* xq = mma_sm;
  float* xsc = reinterpret_cast<float*>(mma_sm + RS * stride);
  float* part = xsc + nb * 8;
  int b0, b1;
  mma_seg_range(nb, seg, S, b0, b1);
  Seg ms;  // as in up_mma_body: the first weight blocks first
  int staged_lo = -1, staged_hi = -1;  // weight-only: the slots staged
  // The routed slots' counters (slot_count_group): each slot's h is whole once the up counted its tiles of 16 x WR
  // rows there.
  u32* const cnt = idx ? w.slot_done : nullptr;
  const u32 need = u32((F + 16 * WR - 1) / (16 * WR));
  // Routed slots too: the up lets this grid be scheduled only after its own wait for the routing, so the expert
  // indices are final before this grid's wait (read from L2), and the first group's weights stream in while the up
  // finishes.
  for (int grp = bid; grp < groups; grp += nblk) {
    const int tile = grp * tpg + unit / S;
    const int t = tile / tps, dt = (tile - t * tps) * TR, d0 = dt + 16 * q;
    const int e = tile < tiles ? expert_of(idx, t, n_experts, true) : -1;
    if (e >= 0) {
      const u8* wm[TPW];
      const u8* sm[TPW];
#pragma unroll
      for (int m = 0; m < TPW; ++m) wm[m] = eptr(w, e, 2), sm[m] = eptr(w, e, 3);
      const bool past = WG && d0 >= D;  // as in up_mma_body
      ms.init(wm, sm, past ? dt : d0, past ? dt : D, F, blk, mma_warp_ring(mma_sm, F, RS, RB),
              mma_warp_scales(mma_sm, F, RS, RB), 16 * WR);
      ms.prefetch(b0, b1);
    }
    // Act quant: slot t's row at xq + t * stride, scales xsc[b * 8 + t]; a block that runs one group only stages
    // the slots of its tiles (tiles are slot-major: one or two slots of the topk), the others every slot.
    // Weight-only: the group's slots t_lo .. t_hi at local rows t - t_lo (restaged when a later group spans other
    // slots; every thread of the block walks the same groups, so the syncs are uniform).
    const int g_lo = (grp * tpg) / tps, g_hi = min(grp * tpg + tpg - 1, tiles - 1) / tps;
    if (grp == bid) {
      const bool own = WO || nblk >= groups;
      const int t_lo = own ? g_lo : 0, t_hi = own ? g_hi : topk - 1;
      if (cnt) slot_wait(cnt, t_lo, t_hi, need);
      else grid_dep_wait();
      if (pos) {  // the group's slots from row 0 (own: this block's only group)
        stage_rows<FP4, P, true>(h + i64(t_lo) * F, t_hi - t_lo + 1, F, xq, pstride, xsc);
      } else {
        const int r0 = WO ? 0 : t_lo;  // staged row of t_lo
        stage_rows<FP4, P>(h + i64(t_lo) * F, t_hi - t_lo + 1, F, xq + slot_rows<P>() * r0 * stride, stride, xsc + r0);
      }
      staged_lo = t_lo, staged_hi = t_hi;
    } else if (WO && (g_lo != staged_lo || g_hi != staged_hi)) {  // a later group may also end in the next slot
      __syncthreads();  // every warp is done with the staged slots
      if (cnt) slot_wait(cnt, g_lo, g_hi, need);
      stage_rows<FP4, P>(h + i64(g_lo) * F, g_hi - g_lo + 1, F, xq, stride, xsc);
      staged_lo = g_lo, staged_hi = g_hi;
    }
    const int lt = WO ? t - staged_lo : t;  // this tile's staged slot row
    float acc[TPW][2] = {};
    if (e >= 0) {
#if SMELT_WGMMA
      if constexpr (POS) {
        if (pos)
          ms.template run_wg_pos<SMELT_MMA_WG_POS_DOWN>(b0, b1, smem_addr(xq + (t - staged_lo) * pstride), mma_pos_plane(F),
                                                        xsc + (t - staged_lo), acc);
        else ms.run_wg(b0, b1, smem_addr(xq + t * stride), xsc + t, acc);
      } else if constexpr (WG) ms.run_wg(b0, b1, smem_addr(xq + t * stride), xsc + t, acc);
      else
#endif
      if constexpr (WO && FP4 && SMELT_MMA_HL_CHAIN)
        ms.template run_chain<SMELT_MMA_HL_CHAIN, true>(b0, b1, xq + i64(2 * lt) * stride, stride, xsc + lt, acc);
      else if constexpr (P == kPathAq && FP4 && SMELT_MMA_AQ_CHAIN)
        ms.template run_chain<SMELT_MMA_AQ_CHAIN, false>(b0, b1, xq + i64(lt) * stride, stride, xsc + lt, acc);
      else if constexpr (WO) ms.template run<1, false, true>(b0, b1, lane_xrow<P>(xq, stride, lt, g), xsc + lt, acc);
      else ms.template run_checked<1>(b0, b1, lane_xrow<P>(xq, stride, lt, g), xsc + lt, acc);
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
  if (cnt) slot_exit(cnt, topk, nblk);
  } else {
    __trap();
  }
#endif
}

}  // namespace

#define SMELT_MOE_MMA(NAME, FP4, SUFFIX, P)                                                                       \
  extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)                                           \
  smelt_moe_up_##NAME##_##SUFFIX(const float* x, int D, int F, int topk, const i32* idx,                             \
                                 int n_experts, const float* rw, ExpertW w, int blk,                                \
                                 float limit, int rb, float* h, int ksplit) {                                       \
    SMELT_KERNEL_PROLOGUE_IN_BODY(); /* wait (first, unless the shared expert), then launch the dependents */    \
    up_mma_body<FP4, P>(x, D, F, topk, idx, n_experts, rw, w, blk, limit, rb, h, ksplit, int(blockIdx.x),      \
                        int(gridDim.x));                                                                         \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)                                           \
  smelt_moe_down_##NAME##_##SUFFIX(const float* h, int D, int F, int topk, const i32* idx,                           \
                                   int n_experts, ExpertW w, int blk, int rb, int round,                            \
                                   float* out, int ksplit) {                                                        \
    SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();                                                                        \
    down_mma_body<FP4, P>(h, D, F, topk, idx, n_experts, w, blk, rb, round, out, ksplit, int(blockIdx.x),    \
                          int(gridDim.x));                                                                       \
  }
SMELT_MOE_MMA(fp8, false, mma, kPathAq)
SMELT_MOE_MMA(fp4, true, mma, kPathAq)
// FP4 on wgmma: launched on sm_90 (whose cubins are built for sm_90a); elsewhere the bodies trap.
SMELT_MOE_MMA(fp4, true, wgmma, kPathWg)
// Weight-only (sm_80+; rw, rb and round unused: the launcher passes 0).
SMELT_MOE_MMA(fp8, false, wo_ring, kPathWo)
SMELT_MOE_MMA(fp4, true, wo_ring, kPathWo)

// The routed FP4 experts on wgmma and the shared FP8 expert (swiglu_mlp on the same x) in one launch each (sm_90a):
// blocks [0, nblk) run the routed kernel's body, the rest the shared expert's smelt_moe_*_fp8_mma body, each as its
// own kernel would over its own grid (the same bits). The routed up's 216 blocks leave 48 of the 264 two-block slots
// of an H200 idle and finish unevenly (docs/performance.md "Session 21"); the shared expert's blocks take those slots
// instead of running after the routed down and the combine. runtime/cuda/ops.cc run_experts launches them when the
// backend pairs the two ops (backend.cc plan_fusions).
extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)
smelt_moe_up_fp4_wgmma_with_fp8(const float* x, int D, int F, int topk, const i32* idx, int n_experts, const float* rw,
                                ExpertW w, int blk, float limit, int rb, float* h, int ksplit, int nblk, int F2,
                                ExpertW w2, int blk2, float limit2, float* h2, int ksplit2) {
  SMELT_KERNEL_PROLOGUE_IN_BODY();  // each body: the routed wait first, the shared weights before it
  if (int(blockIdx.x) < nblk)
    up_mma_body<true, kPathWg>(x, D, F, topk, idx, n_experts, rw, w, blk, limit, rb, h, ksplit, int(blockIdx.x), nblk);
  else
    up_mma_body<false, kPathAq>(x, D, F2, 1, nullptr, 1, nullptr, w2, blk2, limit2, rb, h2, ksplit2,
                                int(blockIdx.x) - nblk, int(gridDim.x) - nblk);
}
extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)
smelt_moe_down_fp4_wgmma_with_fp8(const float* h, int D, int F, int topk, const i32* idx, int n_experts, ExpertW w,
                                  int blk, int rb, int round, float* out, int ksplit, int nblk, const float* h2,
                                  int F2, ExpertW w2, int blk2, int round2, float* out2, int ksplit2) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();
  if (int(blockIdx.x) < nblk)
    down_mma_body<true, kPathWg>(h, D, F, topk, idx, n_experts, w, blk, rb, round, out, ksplit, int(blockIdx.x), nblk);
  else
    down_mma_body<false, kPathAq>(h2, D, F2, 1, nullptr, 1, w2, blk2, rb, round2, out2, ksplit2,
                                  int(blockIdx.x) - nblk, int(gridDim.x) - nblk);
}

// The same pairing on the weight-only ring (sm_80+, `--numerics fp32` plans): blocks [0, nblk) run the routed FP4
// up's smelt_moe_up_fp4_wo_ring body, the rest the shared FP8 expert's smelt_moe_up_fp8_wo_ring body (rw null, rb 0:
// what those kernels get from their launcher). runtime/cuda/ops.cc try_experts_wo_ring_with_shared launches it.
extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)
smelt_moe_up_fp4_wo_ring_with_fp8(const float* x, int D, int F, int topk, const i32* idx, int n_experts, ExpertW w,
                                  int blk, float limit, float* h, int ksplit, int nblk, int F2, ExpertW w2, int blk2,
                                  float limit2, float* h2, int ksplit2) {
  SMELT_KERNEL_PROLOGUE_IN_BODY();  // each body: the routed wait first, the shared weights before it
  if (int(blockIdx.x) < nblk)
    up_mma_body<true, kPathWo>(x, D, F, topk, idx, n_experts, nullptr, w, blk, limit, 0, h, ksplit, int(blockIdx.x),
                               nblk);
  else
    up_mma_body<false, kPathWo>(x, D, F2, 1, nullptr, 1, nullptr, w2, blk2, limit2, 0, h2, ksplit2,
                                int(blockIdx.x) - nblk, int(gridDim.x) - nblk);
}
