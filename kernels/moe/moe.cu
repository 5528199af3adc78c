// Mixture of experts (kernels/moe/reference.h): routing, and the expert FFNs read only for the selected
// experts, as per-(row, slot) GEMVs (smelt.moe_experts; smelt.swiglu_mlp is the one-expert case).
//
// Expert weights are addressed through ExpertW: either one table of device addresses (6 per expert: w1, w1
// scale, w2, w2 scale, w3, w3 scale, written by smelt_write_u64) or base + e * stride when the backend holds
// the experts' tensors evenly spaced. Row-count invariance: each (row, slot) is computed alone, and the
// combine sums a row's slots in ascending expert order (the reference's order).
#include "kernels/linear/gemv.cuh"

using namespace smelt_dev;

struct ExpertW {
  u64 base[6];
  i64 stride[6];
  const u64* table;  // [n_experts * 6] or nullptr
  // The routed tensor-core experts' slot counters (kernels/moe/moe_mma.cu slot_count_group), or nullptr.
  u32* slot_done;
};

namespace {

__device__ __forceinline__ const u8* eptr(const ExpertW& w, int e, int j) {
  return reinterpret_cast<const u8*>(w.table ? w.table[i64(e) * 6 + j] : w.base[j] + u64(e) * u64(w.stride[j]));
}

__device__ __forceinline__ float swiglu(float g, float u, float limit) {
  if (limit > 0.f) {
    g = g > limit ? limit : g;
    u = u > limit ? limit : (u < -limit ? -limit : u);
  }
  return __fmul_rn(siluf_(g), u);
}

// The V4.1 experts' activation with the model's numerics (rb: bf16 roundings of g, u and the result), times the
// routing weight rw (nullptr: the shared expert, none). One definition for the slot, decode and tensor-core kernels.
__device__ __forceinline__ float swiglu_v41(float g, float u, float limit, int rb, const float* rw, i64 rt) {
  if (rb) g = round_bf16(g), u = round_bf16(u);
  if (limit > 0.f) {
    u = clampf(u, -limit, limit);
    g = g < limit ? g : limit;
  }
  float a = __fmul_rn(siluf_(g), u);
  if (rw) a = __fmul_rn(rw[rt], a);
  return rb ? round_bf16(a) : a;
}

// Expert of slot rt (idx == nullptr: the shared expert, 0); -1 when the index is out of range. l2: the index read
// from L2 (ld_l2: before this grid's dependent-launch wait, moe_mma.cu's down).
__device__ __forceinline__ int expert_of(const i32* idx, i64 rt, int n_experts, bool l2 = false) {
  if (!idx) return 0;
  const int e = l2 ? ld_l2(idx + rt) : idx[rt];
  return e >= 0 && e < n_experts ? e : -1;
}

// V4 up: h[rt, f] = silu(min(x w1^T, l)) * clamp(x w3^T, -l, l). grid (ceil(F/8), rows*topk), block 256.
template <int FMT>
__device__ void up_body(const float* x, int D, int F, int topk, const i32* idx, int n_experts, ExpertW w, int blk,
                        float limit, float* h) {
  const int f = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (f >= F) return;
  const i64 rt = blockIdx.y, r = rt / topk;
  const int e = expert_of(idx, rt, n_experts);
  float g = 0.f, u = 0.f;
  if (e >= 0) {
    dot_rows<FMT, 1>(x + r * D, D, 1, eptr(w, e, 0), eptr(w, e, 1), f, D, blk, &g);
    dot_rows<FMT, 1>(x + r * D, D, 1, eptr(w, e, 4), eptr(w, e, 5), f, D, blk, &u);
  }
  if ((threadIdx.x & 31) == 0) h[rt * F + f] = e >= 0 ? swiglu(g, u, limit) : 0.f;
}

// V4 down: out[rt, d] = h[rt] . w2[d]. grid (ceil(D/8), rows*topk), block 256.
template <int FMT>
__device__ void down_body(const float* h, int D, int F, int topk, const i32* idx, int n_experts, ExpertW w, int blk,
                          float* out) {
  const int d = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (d >= D) return;
  const i64 rt = blockIdx.y;
  const int e = expert_of(idx, rt, n_experts);
  float y = 0.f;
  if (e >= 0) dot_rows<FMT, 1>(h + rt * F, F, 1, eptr(w, e, 2), eptr(w, e, 3), d, F, blk, &y);
  if ((threadIdx.x & 31) == 0) out[rt * D + d] = y;
}

// One row (decode), weight-only: up_body / down_body's sums with C = 1, 2 or 4 columns a warp and a ring of raw
// weights in flight (dot_cols_r1 gives dot_rows<FMT, 1>'s bits, as smelt_linear_*_r1): the fewest columns a warp
// that cover a slot's columns with gridDim.x * 8 warps (the launcher sizes the grid, ops.cc weight_only_blocks;
// any grid is correct). grid (blocks, topk): slot blockIdx.y. The warp-per-column kernels held one 8-byte load
// per lane in flight: the FP8 shared expert of the V4.1 slice ran at ~0.6 TB/s.
__device__ __forceinline__ int r1_columns_per_warp(int cols) {
  const i64 warps = i64(gridDim.x) * (blockDim.x / 32), need = (cols + warps - 1) / warps;
  return need >= 4 ? 4 : (need >= 2 ? 2 : 1);
}

template <int FMT, int C>
__device__ __forceinline__ void up_r1_columns(const float* xr, int D, int F, i64 rt, int e, const ExpertW& w, int blk,
                                              float limit, float* h) {
  const i64 warps = i64(gridDim.x) * (blockDim.x / 32);
  const i64 warp = i64(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  constexpr int DD = r1_depth<FMT, C>();  // up: w1's columns, then w3's, each with this ring
  for (i64 f0 = warp * C; f0 < F; f0 += warps * C) {
    float g[C], u[C];
    if (e >= 0) {
      dot_cols_r1<FMT, C, DD>(xr, eptr(w, e, 0), eptr(w, e, 1), f0, F - 1, D, blk, g);
      dot_cols_r1<FMT, C, DD>(xr, eptr(w, e, 4), eptr(w, e, 5), f0, F - 1, D, blk, u);
    }
#pragma unroll
    for (int j = 0; j < C; ++j)
      if ((threadIdx.x & 31) == j && f0 + j < F) h[rt * F + f0 + j] = e >= 0 ? swiglu(g[j], u[j], limit) : 0.f;
  }
}

template <int FMT>
__device__ void up_r1_body(const float* x, int D, int F, int topk, const i32* idx, int n_experts, const ExpertW& w,
                           int blk, float limit, float* h) {
  const i64 rt = blockIdx.y, r = rt / topk;
  const int e = expert_of(idx, rt, n_experts);
  const float* xr = x + r * D;
  const int c = r1_columns_per_warp(F);
  if (c == 4) up_r1_columns<FMT, 4>(xr, D, F, rt, e, w, blk, limit, h);
  else if (c == 2) up_r1_columns<FMT, 2>(xr, D, F, rt, e, w, blk, limit, h);
  else up_r1_columns<FMT, 1>(xr, D, F, rt, e, w, blk, limit, h);
}

template <int FMT, int C>
__device__ __forceinline__ void down_r1_columns(const float* hr, int D, int F, i64 rt, int e, const ExpertW& w,
                                                int blk, float* out) {
  const i64 warps = i64(gridDim.x) * (blockDim.x / 32);
  const i64 warp = i64(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  constexpr int DD = r1_depth<FMT, C>();
  for (i64 d0 = warp * C; d0 < D; d0 += warps * C) {
    float y[C];
    if (e >= 0) dot_cols_r1<FMT, C, DD>(hr, eptr(w, e, 2), eptr(w, e, 3), d0, D - 1, F, blk, y);
#pragma unroll
    for (int j = 0; j < C; ++j)
      if ((threadIdx.x & 31) == j && d0 + j < D) out[rt * D + d0 + j] = e >= 0 ? y[j] : 0.f;
  }
}

template <int FMT>
__device__ void down_r1_body(const float* h, int D, int F, int topk, const i32* idx, int n_experts,
                             const ExpertW& w, int blk, float* out) {
  const i64 rt = blockIdx.y;
  const int e = expert_of(idx, rt, n_experts);
  const float* hr = h + rt * F;
  const int c = r1_columns_per_warp(D);
  if (c == 4) down_r1_columns<FMT, 4>(hr, D, F, rt, e, w, blk, out);
  else if (c == 2) down_r1_columns<FMT, 2>(hr, D, F, rt, e, w, blk, out);
  else down_r1_columns<FMT, 1>(hr, D, F, rt, e, w, blk, out);
}

// V4.1 up (act quant, exact GEMMs): g = bf16(x w1^T), u = bf16(x w3^T), clamps, a = silu(g) * u in fp32,
// times the routing weight (when given), bf16. xu / xs: act_quant of x [rows, D].
template <bool FP4>
__device__ void up_aq_body(const i32* xu, const float* xs, int D, int F, int topk, const i32* idx, int n_experts,
                           const float* rw, ExpertW w, int blk, float limit, int rb, float* h) {
  const int f = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (f >= F) return;
  const i64 rt = blockIdx.y, r = rt / topk;
  const int e = expert_of(idx, rt, n_experts);
  float g = 0.f, u = 0.f;
  const int nb = D / 32;
  if (e >= 0) {
    dot_rows_aq<FP4, 1>(xu + r * D, D, xs + r * nb, nb, 1, eptr(w, e, 0), eptr(w, e, 1), f, F, D, blk, &g);
    dot_rows_aq<FP4, 1>(xu + r * D, D, xs + r * nb, nb, 1, eptr(w, e, 4), eptr(w, e, 5), f, F, D, blk, &u);
  }
  if ((threadIdx.x & 31) != 0) return;
  if (e < 0) {
    h[rt * F + f] = 0.f;
    return;
  }
  h[rt * F + f] = swiglu_v41(g, u, limit, rb, rw, rt);
}

// V4.1 down: out[rt, d] = bf16(act_quant(h[rt]) . w2[d]) (hu / hs: act_quant of h [rows*topk, F]).
template <bool FP4>
__device__ void down_aq_body(const i32* hu, const float* hs, int D, int F, int topk, const i32* idx, int n_experts,
                             ExpertW w, int blk, int rb, float* out) {
  const int d = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (d >= D) return;
  const i64 rt = blockIdx.y;
  const int e = expert_of(idx, rt, n_experts);
  const int nb = F / 32;
  float y = 0.f;
  if (e >= 0) dot_rows_aq<FP4, 1>(hu + rt * F, F, hs + rt * nb, nb, 1, eptr(w, e, 2), eptr(w, e, 3), d, D, F, blk, &y);
  if ((threadIdx.x & 31) == 0) out[rt * D + d] = (rb && e >= 0) ? round_bf16(y) : y;
}

}  // namespace

#define SMELT_MOE_FMT(NAME, FMT)                                                                                    \
  extern "C" __global__ void smelt_moe_up_##NAME(const float* x, int D, int F, int topk, const i32* idx,            \
                                                 int n_experts, ExpertW w, int blk, float limit, float* h) {        \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    up_body<FMT>(x, D, F, topk, idx, n_experts, w, blk, limit, h);                                                  \
  }                                                                                                                 \
  extern "C" __global__ void smelt_moe_down_##NAME(const float* h, int D, int F, int topk, const i32* idx,          \
                                                   int n_experts, ExpertW w, int blk, float* out) {                 \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    down_body<FMT>(h, D, F, topk, idx, n_experts, w, blk, out);                                                     \
  }                                                                                                                 \
  extern "C" __global__ void __launch_bounds__(256, 2)                                                              \
  smelt_moe_up_##NAME##_r1(const float* x, int D, int F, int topk, const i32* idx, int n_experts, ExpertW w,        \
                           int blk, float limit, float* h) {                                                        \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    up_r1_body<FMT>(x, D, F, topk, idx, n_experts, w, blk, limit, h);                                               \
  }                                                                                                                 \
  extern "C" __global__ void __launch_bounds__(256, 2)                                                              \
  smelt_moe_down_##NAME##_r1(const float* h, int D, int F, int topk, const i32* idx, int n_experts, ExpertW w,      \
                             int blk, float* out) {                                                                 \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    down_r1_body<FMT>(h, D, F, topk, idx, n_experts, w, blk, out);                                                  \
  }
SMELT_MOE_FMT(f32, kWF32)
SMELT_MOE_FMT(bf16, kWBF16)
SMELT_MOE_FMT(f16, kWF16)
SMELT_MOE_FMT(fp8, kWFP8)
SMELT_MOE_FMT(fp4, kWFP4)

#define SMELT_MOE_AQ(NAME, FP4)                                                                                     \
  extern "C" __global__ void smelt_moe_up_##NAME##_aq(const i32* xu, const float* xs, int D, int F, int topk,       \
                                                      const i32* idx, int n_experts, const float* rw, ExpertW w,    \
                                                      int blk, float limit, int rb, float* h) {                     \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    up_aq_body<FP4>(xu, xs, D, F, topk, idx, n_experts, rw, w, blk, limit, rb, h);                                  \
  }                                                                                                                 \
  extern "C" __global__ void smelt_moe_down_##NAME##_aq(const i32* hu, const float* hs, int D, int F, int topk,     \
                                                        const i32* idx, int n_experts, ExpertW w, int blk, int rb,  \
                                                        float* out) {                                               \
    SMELT_KERNEL_PROLOGUE();                                                                                        \
    down_aq_body<FP4>(hu, hs, D, F, topk, idx, n_experts, w, blk, rb, out);                                         \
  }
SMELT_MOE_AQ(fp8, false)
SMELT_MOE_AQ(fp4, true)

// y[r, d] = sum over the row's slots in ascending expert order of out[rt, d] (* rw[rt] when weighted, V4).
// Slots with an invalid expert are skipped. grid (ceil(D/256), rows), block 256. topk <= 32.
// Expert-parallel ranks (n_routed / expert_begin): the route names the model's experts; this rank holds experts
// begin .. begin+count-1. local[i] = idx[i] - begin for those, -1 (nothing) for the others.
extern "C" __global__ void smelt_moe_local_idx(const i32* idx, i32* local, int n, int begin, int count) {
  SMELT_KERNEL_PROLOGUE();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int e = idx[i] - begin;
  local[i] = e >= 0 && e < count ? e : -1;
}

extern "C" __global__ void smelt_moe_combine(const float* out, const float* rw, const i32* idx, int topk,
                                             int n_experts, int D, int weighted, float* y) {
  SMELT_KERNEL_PROLOGUE();
  const i64 r = blockIdx.y;
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float s = 0.f;
  if (topk <= 8) {
    // The slot order first (integers in registers), then every slot's value loaded at once and summed in that
    // order: the loop below issued each load only after the previous add (a serial round trip per slot).
    int ids[8], bt[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) ids[t] = t < topk ? idx[r * topk + t] : -1;
    int last = -1;
#pragma unroll
    for (int n = 0; n < 8; ++n) {  // the next larger expert id each time: ascending order, duplicates once
      int best = -1, b = -1;
#pragma unroll
      for (int t = 0; t < 8; ++t)
        if (t < topk && ids[t] > last && ids[t] < n_experts && (best < 0 || ids[t] < best)) best = ids[t], b = t;
      bt[n] = b;
      if (best >= 0) last = best;
    }
    float v[8];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      v[n] = 0.f;
      if (bt[n] >= 0) {
        const float o = out[(r * topk + bt[n]) * D + d];
        v[n] = weighted ? __fmul_rn(o, rw[r * topk + bt[n]]) : o;
      }
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
      if (bt[n] >= 0) s = __fadd_rn(s, v[n]);
    y[r * D + d] = s;
    return;
  }
  int last = -1;
  for (int n = 0; n < topk; ++n) {  // the next larger expert id each time: ascending order, duplicates once
    int best = -1, bt = -1;
    for (int t = 0; t < topk; ++t) {
      const int e = idx[r * topk + t];
      if (e > last && e < n_experts && (best < 0 || e < best)) best = e, bt = t;
    }
    if (best < 0) break;
    last = best;
    const float v = out[(r * topk + bt) * D + d];
    s = __fadd_rn(s, weighted ? __fmul_rn(v, rw[r * topk + bt]) : v);
  }
  y[r * D + d] = s;
}

// Routing (reference moe_route). One block of 256 threads per row; dynamic shared memory 2 * E floats.
// gate [E, D] (dtype gdt), bias [E] or nullptr, tid2eid [V, K] (i32, or i64 when t64) or nullptr.
// scoring: 0 sqrtsoftplus, 1 softmax, 2 sigmoid.
extern "C" __global__ void smelt_moe_route(const float* x, int D, const void* gate, int gdt, int E, const void* bias,
                                           int bdt, const void* tid2eid, int t64, i64 vocab, const i32* ids, int K,
                                           int scoring, int norm_topk_prob, float route_scale, float gate_temp,
                                           float* weights, i32* idx) {
  SMELT_KERNEL_PROLOGUE();
  extern __shared__ float sh[];
  float* s = sh;
  float* sel = sh + E;
  const i64 r = blockIdx.x;
  const float* xr = x + r * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int e = warp; e < E; e += nw) {
    float d = 0.f;
    for (int c = lane; c < D; c += 32) d = fmaf(xr[c], ldw(gate, i64(e) * D + c, gdt), d);
    d = warp_sum(d);
    if (lane == 0) s[e] = d;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int e = 0; e < E; ++e) {
    float v = s[e];
    if (gate_temp != 1.f) v = __fdiv_rn(v, gate_temp);
    if (scoring == 0) v = __fsqrt_rn(softplusf_(v));
    else if (scoring == 2) v = sigmoidf_(v);
    s[e] = v;
  }
  if (scoring == 1) {
    float mx = s[0], sum = 0.f;
    for (int e = 1; e < E; ++e) mx = fmaxf(mx, s[e]);
    for (int e = 0; e < E; ++e) sum = __fadd_rn(sum, s[e] = expf(__fsub_rn(s[e], mx)));
    for (int e = 0; e < E; ++e) s[e] = __fdiv_rn(s[e], sum);
  }
  i32* ri = idx + r * K;
  float* rwt = weights + r * K;
  if (tid2eid) {
    const i64 id = ids[r];
    for (int t = 0; t < K; ++t) {
      i64 e = -1;
      if (id >= 0 && id < vocab)
        e = t64 ? static_cast<const i64*>(tid2eid)[id * K + t] : static_cast<const i32*>(tid2eid)[id * K + t];
      ri[t] = (e >= 0 && e < E) ? i32(e) : -1;
    }
  } else {
    for (int e = 0; e < E; ++e) sel[e] = bias ? __fadd_rn(s[e], ldw(bias, e, bdt)) : s[e];
    for (int t = 0; t < K; ++t) {  // best remaining: larger value, equal values the lower expert
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int u = 0; u < t; ++u) taken |= ri[u] == e;
        if (!taken && (best < 0 || sel[e] > sel[best])) best = e;
      }
      ri[t] = best;
    }
  }
  float sum = 0.f;
  for (int t = 0; t < K; ++t) {
    rwt[t] = ri[t] >= 0 ? s[ri[t]] : 0.f;
    sum = __fadd_rn(sum, rwt[t]);
  }
  for (int t = 0; t < K; ++t) {
    if (norm_topk_prob) rwt[t] = __fdiv_rn(rwt[t], __fadd_rn(sum, 1e-20f));
    rwt[t] = __fmul_rn(rwt[t], route_scale);
  }
}
