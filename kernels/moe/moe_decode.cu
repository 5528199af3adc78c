// Decode-time (one row) V4.1 expert GEMVs: smelt_moe_up_*_aq_dec / smelt_moe_down_*_aq_dec compute exactly what
// smelt_moe_up_*_aq / smelt_moe_down_*_aq compute, bit for bit, with the layout of kernels/linear/gemv_aq.cuh: all
// (slot, column) outputs of the selected experts in one launch, the activation row(s) staged once per block,
// consecutive threads reading consecutive 32-blocks of a weight row. Only the selected experts' weights are read.
// The expert kernels quantize their input rows while staging them (no act-quant launches between them).
// This file follows moe.cu in the family's module (ExpertW, eptr, expert_of come from there).
//
// Launch (runtime/cuda/ops.cc): block kGemvThreads, grid min(ceil(topk * cols / cpb), 2 x SMs); dynamic shared
// memory gemv_smem_bytes(D, 1, cpb, 2, x) for up, gemv_smem_bytes(F, topk, cpb, 1, x) for down (x = 4 for FP4
// weights, 8 for FP8: XStage).
#include "kernels/linear/gemv_aq.cuh"

using namespace smelt_dev;

namespace {

// up: h[t, f] for every slot t < topk and f < F: g = x . w1[f], u = x . w3[f] of slot t's expert, then the
// swiglu of up_aq_body. x: the one row [D] (act-quantised while staged, as smelt_act_quant_b32).
template <bool FP4>
__device__ void up_dec_body(const float* x, int D, int F, int topk, const i32* idx, int n_experts, const float* rw,
                            const ExpertW& w, int blk, float limit, int rb, float* h, int cpb) {
  extern __shared__ __align__(16) unsigned char gemv_sm[];
  const int nb = D / 32, ld = nb + 1;
  using XS = typename XStage<FP4>::type;
  XS* xq = reinterpret_cast<XS*>(gemv_sm);
  float* xsc = reinterpret_cast<float*>(gemv_sm + size_t(D) * sizeof(XS));
  float* terms = xsc + nb;  // [2][2 (g, u)][cpb][ld]
  gemv_stage_quant(x, D, xq, xsc);
  const i64 cols = i64(topk) * F;
  const int items = cpb * nb;
  const float inv_nb = 1.f / float(nb);
  int buf = 0;
  for (i64 q0 = i64(blockIdx.x) * cpb; q0 < cols; q0 += i64(gridDim.x) * cpb, buf ^= 1) {
    float* tg = terms + buf * 2 * cpb * ld;
    float* tu = tg + cpb * ld;
    for (int it = threadIdx.x; it < items; it += blockDim.x) {
      int b;
      const int c = item_split(it, nb, inv_nb, b);
      const i64 q = q0 + c;
      if (q >= cols) continue;
      const int t = int(q / F), f = int(q - i64(t) * F);
      const int e = expert_of(idx, t, n_experts);
      if (e < 0) continue;  // the fold writes 0
      const WBlock<FP4> a = load_wblock<FP4>(wblock_ptr<FP4>(eptr(w, e, 0), f, b, D, F));
      const WBlock<FP4> g = load_wblock<FP4>(wblock_ptr<FP4>(eptr(w, e, 4), f, b, D, F));
      const float sa = wblock_scale<FP4>(eptr(w, e, 1), f, b, D, blk);
      const float sg = wblock_scale<FP4>(eptr(w, e, 5), f, b, D, blk);
      tg[c * ld + b] = __fmul_rn(__fmul_rn(block_dot_staged(xq, b, a), xsc[b]), sa);
      tu[c * ld + b] = __fmul_rn(__fmul_rn(block_dot_staged(xq, b, g), xsc[b]), sg);
    }
    __syncthreads();
    const i64 q = q0 + threadIdx.x;
    if (threadIdx.x < cpb && q < cols) {
      const int t = int(q / F);
      const int e = expert_of(idx, t, n_experts);
      float gs = 0.f, us = 0.f;
      if (e >= 0) gs = fold_terms(tg + threadIdx.x * ld, nb), us = fold_terms(tu + threadIdx.x * ld, nb);
      h[q] = e < 0 ? 0.f : swiglu_v41(gs, us, limit, rb, rw, t);
    }
  }
}

// down: out[t, d] = act_quant(h[t]) . w2[d] of slot t's expert (bf16 when rb and the slot is valid); h [topk, F]
// float, quantized per slot row while staged. round: the op's `round = "bf16"` (swiglu_mlp writes its output here).
template <bool FP4>
__device__ void down_dec_body(const float* h, int D, int F, int topk, const i32* idx, int n_experts, const ExpertW& w,
                              int blk, int rb, int round, float* out, int cpb) {
  extern __shared__ __align__(16) unsigned char gemv_sm[];
  const int nb = F / 32, ld = nb + 1;
  using XS = typename XStage<FP4>::type;
  XS* xq = reinterpret_cast<XS*>(gemv_sm);
  float* xsc = reinterpret_cast<float*>(gemv_sm + size_t(topk) * F * sizeof(XS));
  float* terms = xsc + topk * nb;  // [2][cpb][ld]
  gemv_stage_quant(h, topk * F, xq, xsc);  // F % 32 == 0: the 32-blocks of the slots' rows, in order
  const i64 cols = i64(topk) * D;
  const int items = cpb * nb;
  const float inv_nb = 1.f / float(nb);
  int buf = 0;
  for (i64 q0 = i64(blockIdx.x) * cpb; q0 < cols; q0 += i64(gridDim.x) * cpb, buf ^= 1) {
    float* tb = terms + buf * cpb * ld;
    for (int it0 = threadIdx.x; it0 < items; it0 += 2 * blockDim.x) {
      const int it1 = it0 + blockDim.x;
      int b0, b1;
      const int c0 = item_split(it0, nb, inv_nb, b0), c1 = item_split(it1, nb, inv_nb, b1);
      const i64 qa = q0 + c0, qb = q0 + c1;
      const int ta = int(qa / D), tb_ = int(qb / D);
      const int ea = qa < cols ? expert_of(idx, ta, n_experts) : -1;
      const int eb = (it1 < items && qb < cols) ? expert_of(idx, tb_, n_experts) : -1;
      WBlock<FP4> wa{}, wb{};
      float sa = 0.f, sb = 0.f;
      if (ea >= 0) {
        const int d = int(qa - i64(ta) * D);
        wa = load_wblock<FP4>(wblock_ptr<FP4>(eptr(w, ea, 2), d, b0, F, D));
        sa = wblock_scale<FP4>(eptr(w, ea, 3), d, b0, F, blk);
      }
      if (eb >= 0) {
        const int d = int(qb - i64(tb_) * D);
        wb = load_wblock<FP4>(wblock_ptr<FP4>(eptr(w, eb, 2), d, b1, F, D));
        sb = wblock_scale<FP4>(eptr(w, eb, 3), d, b1, F, blk);
      }
      // Slot t's staged row starts at block t * nb of the rotated layout (F % 32 == 0).
      if (ea >= 0) {
        const int bb = ta * nb + b0;
        tb[c0 * ld + b0] = __fmul_rn(__fmul_rn(block_dot_staged(xq, bb, wa), xsc[bb]), sa);
      }
      if (eb >= 0) {
        const int bb = tb_ * nb + b1;
        tb[c1 * ld + b1] = __fmul_rn(__fmul_rn(block_dot_staged(xq, bb, wb), xsc[bb]), sb);
      }
    }
    __syncthreads();
    const i64 q = q0 + threadIdx.x;
    if (threadIdx.x < cpb && q < cols) {
      const int t = int(q / D);
      const int e = expert_of(idx, t, n_experts);
      const float y = e >= 0 ? fold_terms(tb + threadIdx.x * ld, nb) : 0.f;
      out[q] = ((rb && e >= 0) || round) ? round_bf16(y) : y;
    }
  }
}

}  // namespace

#define SMELT_MOE_DEC(NAME, FP4)                                                                                    \
  extern "C" __global__ void smelt_moe_up_##NAME##_aq_dec(const float* x, int D, int F, int topk, const i32* idx,   \
                                                          int n_experts, const float* rw, ExpertW w, int blk,       \
                                                          float limit, int rb, float* h, int cpb) {                 \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    up_dec_body<FP4>(x, D, F, topk, idx, n_experts, rw, w, blk, limit, rb, h, cpb);                                \
  }                                                                                                                 \
  extern "C" __global__ void smelt_moe_down_##NAME##_aq_dec(const float* h, int D, int F, int topk, const i32* idx, \
                                                            int n_experts, ExpertW w, int blk, int rb, int round,   \
                                                            float* out, int cpb) {                                  \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    down_dec_body<FP4>(h, D, F, topk, idx, n_experts, w, blk, rb, round, out, cpb);                                \
  }
SMELT_MOE_DEC(fp8, false)
SMELT_MOE_DEC(fp4, true)

// ---- routing over many blocks ------------------------------------------------------------------------------------
// smelt_moe_route does everything in one block per row: the E gate dot products (E x D weights) through one
// multiprocessor, then thread 0 alone scores and selects. These two kernels give the same outputs bit for bit:
// smelt_moe_gate_dots: s[r, e] = x[r] . gate[e], one warp per expert with smelt_moe_route's lane order and warp
//   sum; grid (ceil(E / warps), rows), any block of whole warps (the runtime: 64), dynamic shared memory
//   gate_dots_smem (the block's gate rows and the x row, staged by cp.async: the gate rows before the
//   dependent-launch wait, so a lane's chain of D / 32 multiply-adds no longer waits on ~D / 512 serial batches of
//   loads from memory).
// smelt_moe_route_select: the scoring transforms per expert in parallel, then each of the K picks as a warp
//   argmax under smelt_moe_route's order (larger value, equal values the lower expert: a total order without NaN,
//   so any tree finds the same expert; with a NaN among the candidates the serial scan runs instead, since NaN
//   breaks that order); softmax sums and the weights stay serial, in shared memory (global memory is written once,
//   at the end: re-reading the just-written picks from global memory cost a serial round trip each). grid (rows),
//   block 256, dynamic shared memory 3 * E floats + K ints.

namespace {

// Copies n bytes global -> shared by the whole block: 16-byte cp.async when both ends and n allow it, else plain
// 4- or 2-byte loads (the caller waits with cp_async_wait_all, then synchronises).
__device__ __forceinline__ void route_stage(void* dst, const void* src, int n) {
  const bool v16 = ((reinterpret_cast<u64>(dst) | reinterpret_cast<u64>(src) | u64(n)) & 15) == 0;
  if (v16) {
    for (int i = threadIdx.x * 16; i < n; i += blockDim.x * 16)
      cp_async16(static_cast<u8*>(dst) + i, static_cast<const u8*>(src) + i, 16);
  } else if (((reinterpret_cast<u64>(dst) | reinterpret_cast<u64>(src) | u64(n)) & 3) == 0) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) static_cast<u32*>(dst)[i] = static_cast<const u32*>(src)[i];
  } else {
    for (int i = threadIdx.x; i < n / 2; i += blockDim.x) static_cast<u16*>(dst)[i] = static_cast<const u16*>(src)[i];
  }
}

}  // namespace

extern "C" __global__ void smelt_moe_gate_dots(const float* x, int D, const void* gate, int gdt, int E, float* s) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();
  extern __shared__ __align__(16) unsigned char gd_sm[];
  const i64 r = blockIdx.y;
  const int warps = blockDim.x / 32, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e0 = blockIdx.x * warps, e = e0 + w;
  const int gsz = gdt == kF32 ? 4 : 2, ne = E - e0 < warps ? E - e0 : warps;
  const int gbytes = (warps * D * gsz + 15) / 16 * 16;
  float* xs = reinterpret_cast<float*>(gd_sm + gbytes);
  // The block's gate rows are contiguous: e0 .. e0 + ne - 1.
  route_stage(gd_sm, static_cast<const u8*>(gate) + i64(e0) * D * gsz, ne * D * gsz);
  grid_dep_wait();
  route_stage(xs, x + r * D, D * 4);
  cp_async_wait_all();
  __syncthreads();
  if (e >= E) return;
  float d = 0.f;
  // The chain of smelt_moe_route's lane, from shared memory.
  if (gdt == kF32) {
    const float* g = reinterpret_cast<const float*>(gd_sm) + i64(w) * D;
#pragma unroll 16
    for (int c = lane; c < D; c += 32) d = fmaf(xs[c], g[c], d);
  } else {
    const u16* g = reinterpret_cast<const u16*>(gd_sm) + i64(w) * D;
#pragma unroll 16
    for (int c = lane; c < D; c += 32) d = fmaf(xs[c], ldw(g, c, gdt), d);
  }
  d = warp_sum(d);
  if (lane == 0) s[r * E + e] = d;
}

constexpr int kRouteRegs = 16;  // experts a lane holds in registers for the picks (E <= 512)

// The warp's best (value v, expert b) under smelt_moe_route's order (larger value, equal values the lower expert;
// b < 0: none), from each lane's own best: every lane ends with the same winner.
__device__ __forceinline__ void route_argmax_warp(float& v, int& b) {
  for (int o = 16; o >= 1; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int ob = __shfl_xor_sync(0xffffffffu, b, o);
    if (ob >= 0 && (b < 0 || ov > v || (ov == v && ob < b))) v = ov, b = ob;
  }
}

extern "C" __global__ void smelt_moe_route_select(const float* dots, int E, const void* bias, int bdt,
                                                  const void* tid2eid, int t64, i64 vocab, const i32* ids, int K,
                                                  int scoring, int norm_topk_prob, float route_scale, float gate_temp,
                                                  float* weights, i32* idx) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();
  extern __shared__ float sh[];
  float* s = sh;
  float* sel = sh + E;
  int* taken = reinterpret_cast<int*>(sh + 2 * E);
  int* pick = taken + E;  // [K]
  __shared__ int any_nan;
  const i64 r = blockIdx.x;
  const int lane = threadIdx.x & 31;
  // The bias is a weight: read before the wait, held in sel until the scores exist.
  if (!tid2eid && bias)
    for (int e = threadIdx.x; e < E; e += blockDim.x) sel[e] = ldw(bias, e, bdt);
  grid_dep_wait();
  if (threadIdx.x == 0) any_nan = 0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    float v = dots[r * E + e];
    if (gate_temp != 1.f) v = __fdiv_rn(v, gate_temp);
    if (scoring == 0) v = __fsqrt_rn(softplusf_(v));
    else if (scoring == 2) v = sigmoidf_(v);
    s[e] = v;
    taken[e] = 0;
  }
  __syncthreads();
  if (scoring == 1 && threadIdx.x == 0) {
    float mx = s[0], sum = 0.f;
    for (int e = 1; e < E; ++e) mx = fmaxf(mx, s[e]);
    for (int e = 0; e < E; ++e) sum = __fadd_rn(sum, s[e] = expf(__fsub_rn(s[e], mx)));
    for (int e = 0; e < E; ++e) s[e] = __fdiv_rn(s[e], sum);
  }
  __syncthreads();
  if (tid2eid) {
    if (threadIdx.x == 0) {
      const i64 id = ids[r];
      for (int t = 0; t < K; ++t) {
        i64 e = -1;
        if (id >= 0 && id < vocab)
          e = t64 ? static_cast<const i64*>(tid2eid)[id * K + t] : static_cast<const i32*>(tid2eid)[id * K + t];
        pick[t] = (e >= 0 && e < E) ? i32(e) : -1;
      }
    }
  } else {
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      sel[e] = bias ? __fadd_rn(s[e], sel[e]) : s[e];
      if (sel[e] != sel[e]) any_nan = 1;
    }
    __syncthreads();
    if (any_nan) {
      if (threadIdx.x == 0)
        for (int t = 0; t < K; ++t) {  // smelt_moe_route's serial scan
          int best = -1;
          for (int e = 0; e < E; ++e) {
            bool tk = false;
            for (int u = 0; u < t; ++u) tk |= pick[u] == e;
            if (!tk && (best < 0 || sel[e] > sel[best])) best = e;
          }
          pick[t] = best;
        }
    } else if (threadIdx.x < 32 && E <= 32 * kRouteRegs) {
      // Warp 0 alone: lane l owns experts l, l + 32, ..., their values in registers (loaded once) and their taken
      // flags as bits, and every lane ends each butterfly with the same winner: a pick is register work and five
      // shuffles, no shared memory and no barrier.
      float v[kRouteRegs];
      unsigned open = 0u;  // bit i: expert lane + 32 i not taken yet
#pragma unroll
      for (int i = 0; i < kRouteRegs; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < E ? sel[e] : 0.f;
        open |= e < E ? 1u << i : 0u;
      }
      for (int t = 0; t < K; ++t) {
        float bv = 0.f;
        int b = -1;
#pragma unroll
        for (int i = 0; i < kRouteRegs; ++i)  // ascending e per lane: strict > keeps the lower
          if (((open >> i) & 1u) && (b < 0 || v[i] > bv)) bv = v[i], b = lane + 32 * i;
        route_argmax_warp(bv, b);
        if (b >= 0 && (b & 31) == lane) open &= ~(1u << (b >> 5));
        if (lane == 0) pick[t] = b;
      }
    } else if (threadIdx.x < 32) {
      // Warp 0 alone, more experts than kRouteRegs a lane: lane l owns experts l, l + 32, ... (it alone reads and
      // sets their taken flags), and every lane ends each butterfly with the same winner, so no barrier between picks.
      for (int t = 0; t < K; ++t) {
        float v = 0.f;
        int b = -1;
        for (int e = lane; e < E; e += 32)  // ascending e per lane: strict > keeps the lower
          if (!taken[e] && (b < 0 || sel[e] > v)) v = sel[e], b = e;
        route_argmax_warp(v, b);
        if (b >= 0 && (b & 31) == lane) taken[b] = 1;
        if (lane == 0) pick[t] = b;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  i32* ri = idx + r * K;
  float* rwt = weights + r * K;
  float sum = 0.f;
  for (int t = 0; t < K; ++t) sum = __fadd_rn(sum, pick[t] >= 0 ? s[pick[t]] : 0.f);
  for (int t = 0; t < K; ++t) {
    float wt = pick[t] >= 0 ? s[pick[t]] : 0.f;
    if (norm_topk_prob) wt = __fdiv_rn(wt, __fadd_rn(sum, 1e-20f));
    ri[t] = pick[t];
    rwt[t] = __fmul_rn(wt, route_scale);
  }
}
