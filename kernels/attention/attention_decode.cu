// Decode-time (one row) sparse attention split over the key list, with the numbers of smelt_sparse_attention bit
// for bit. That kernel walks a (row, head)'s list in tiles of 64 with an online softmax: tile t's probabilities
// are exp(score - m_t) where m_t = max(m_{t-1}, tile max) is the running max, then denominator and P.V are
// rescaled and added in tile order. m_t is a prefix max of the tile maxima, so the work splits exactly:
//   smelt_attn_dec_scores  grid (tiles, heads): every slot's score (the same warp sums) and each tile's max;
//   smelt_attn_dec_tiles   grid (tiles, heads): m_t from the tile maxima in tile order, the tile's
//                          probabilities, their sum and its P.V, as the one-block kernel computes them;
//   smelt_attn_dec_merge   grid (heads): the denominators and P.V folded in tile order with the same rescales,
//                          the sink, the output.
// With one (row, head) block per head and up to window + top-k (or thousands of compressed) entries, the single
// kernel leaves most multiprocessors idle; here tiles x heads blocks share the work. This file follows
// attention.cu in the family's module (AttnArgs, slot, kTile, kThreads, kMaxHd come from there).
//
// Scratch (runtime/cuda/ops.cc): sc [H, Lmax], tmax / psum / nmax [H, tiles], pv [H, tiles, hd]. Blocks past the
// row's actual list (the position is read on the device) return at once.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

namespace {

struct DecList {
  int Lw, L;
};

__device__ __forceinline__ DecList dec_list(const AttnArgs& a, i64 p0) {
  const i64 p = p0;  // one row: i = 0, T = 1
  int Lw = 0, Lc = 0;
  if (a.window > 0) {
    if (!a.v41) Lw = int(p + 1 < a.window ? p + 1 : a.window);
    else if (p0 == 0) Lw = 1 < a.window ? 1 : a.window;
    else Lw = a.window;
  }
  if (a.ratio > 0 && a.pool) Lc = a.idx ? a.k : int((p + 1) / a.ratio);
  return {Lw, Lw + Lc};
}

}  // namespace

extern "C" __global__ void smelt_attn_dec_scores(AttnArgs a, const StepInfo* step, int Lmax, int tiles, float* sc,
                                                 float* tmax) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ float qs[kMaxHd];
  __shared__ float ts[kTile];
  const int t0 = blockIdx.x, h = blockIdx.y, H = gridDim.y, hd = a.hd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 p0 = step->p0, p = p0;
  const DecList dl = dec_list(a, p0);
  const int s0 = t0 * kTile;
  if (s0 >= dl.L) return;
  const int nb = dl.L - s0 < kTile ? dl.L - s0 : kTile;
  const float* q = a.q + i64(h) * hd;
  for (int d = tid; d < hd; d += kThreads) qs[d] = q[d];
  __syncthreads();
  for (int t = warp; t < kTile; t += kThreads / 32) {
    const float* kv = t < nb ? slot(a, 0, p0, p, s0 + t, dl.Lw, 1) : nullptr;
    float s = -__int_as_float(0x7f800000);
    if (kv) {
      if (a.v41) {
        double d = 0.0;
        for (int c = lane; c < hd; c += 32) d += double(qs[c]) * double(kv[c]);
        s = __fmul_rn(float(warp_sum_d(d)), a.scale);
      } else {
        float d = 0.f;
        for (int c = lane; c < hd; c += 32) d = fmaf(qs[c], kv[c], d);
        s = __fmul_rn(warp_sum(d), a.scale);
      }
    }
    if (lane == 0) ts[t] = s;
  }
  __syncthreads();
  if (tid < nb) sc[i64(h) * Lmax + s0 + tid] = ts[tid];
  if (tid == 0) {
    float m = -__int_as_float(0x7f800000);
    for (int t = 0; t < nb; ++t) m = fmaxf(m, ts[t]);  // the single kernel's blk_max order
    tmax[i64(h) * tiles + t0] = m;
  }
}

extern "C" __global__ void smelt_attn_dec_tiles(AttnArgs a, const StepInfo* step, int Lmax, int tiles, const float* sc,
                                                const float* tmax, float* psum_out, float* nmax_out, float* pv_out) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ float pr[kTile];
  __shared__ const float* ptr[kTile];
  const int t0 = blockIdx.x, h = blockIdx.y, hd = a.hd;
  const int tid = threadIdx.x;
  const i64 p0 = step->p0, p = p0;
  const DecList dl = dec_list(a, p0);
  const int s0 = t0 * kTile;
  if (s0 >= dl.L) return;
  const int nb = dl.L - s0 < kTile ? dl.L - s0 : kTile;
  const float sink = ldw(a.sink, h, a.sink_dt);
  float run_max = a.v41 ? -1e30f : sink;
  for (int t = 0; t <= t0; ++t) run_max = fmaxf(run_max, tmax[i64(h) * tiles + t]);  // m_t0, in tile order
  const float new_max = run_max;
  if (tid < kTile) {
    pr[tid] = tid < nb ? expf(__fsub_rn(sc[i64(h) * Lmax + s0 + tid], new_max)) : 0.f;
    ptr[tid] = tid < nb ? slot(a, 0, p0, p, s0 + tid, dl.Lw, 1) : nullptr;
  }
  __syncthreads();
  if (tid == 0) {
    float psum;
    if (a.v41) {
      double ps = 0.0;
      for (int t = 0; t < nb; ++t) ps += double(pr[t]);
      psum = float(ps);
    } else {
      psum = 0.f;
      for (int t = 0; t < nb; ++t) psum = __fadd_rn(psum, pr[t]);
    }
    psum_out[i64(h) * tiles + t0] = psum;
    nmax_out[i64(h) * tiles + t0] = new_max;
  }
  __syncthreads();
  if (a.v41 && a.rb && tid < kTile) pr[tid] = round_bf16(pr[tid]);
  __syncthreads();
  float* pv = pv_out + (i64(h) * tiles + t0) * hd;
#pragma unroll
  for (int u = 0; u < kMaxHd / kThreads; ++u) {
    const int d = tid + u * kThreads;
    if (d < hd) {
      if (a.v41) {
        double v = 0.0;
        for (int t = 0; t < nb; ++t)
          if (ptr[t]) v += double(pr[t]) * double(ptr[t][d]);
        pv[d] = float(v);
      } else {
        float v = 0.f;
        for (int t = 0; t < nb; ++t)
          if (ptr[t]) v = fmaf(pr[t], ptr[t][d], v);
        pv[d] = v;
      }
    }
  }
}

// round: the op's `round = "bf16"` applied to the output here (no separate launch).
extern "C" __global__ void smelt_attn_dec_merge(AttnArgs a, const StepInfo* step, int tiles, const float* psum,
                                                const float* nmax, const float* pv, int round, float* out) {
  SMELT_KERNEL_PROLOGUE();
  const int h = blockIdx.x, hd = a.hd, tid = threadIdx.x;
  const i64 p0 = step->p0;
  const DecList dl = dec_list(a, p0);
  const int nt = (dl.L + kTile - 1) / kTile;
  const float sink = ldw(a.sink, h, a.sink_dt);
  float run_max = a.v41 ? -1e30f : sink, denom = 0.f;
  float acc[kMaxHd / kThreads];
#pragma unroll
  for (int u = 0; u < kMaxHd / kThreads; ++u) acc[u] = 0.f;
  for (int t = 0; t < nt; ++t) {
    const float new_max = nmax[i64(h) * tiles + t];
    const float rescale = expf(__fsub_rn(run_max, new_max));
    denom = __fadd_rn(__fmul_rn(denom, rescale), psum[i64(h) * tiles + t]);
    const float* v = pv + (i64(h) * tiles + t) * hd;
#pragma unroll
    for (int u = 0; u < kMaxHd / kThreads; ++u) {
      const int d = tid + u * kThreads;
      if (d < hd) acc[u] = __fadd_rn(__fmul_rn(acc[u], rescale), v[d]);
    }
    run_max = new_max;
  }
  denom = __fadd_rn(denom, expf(__fsub_rn(sink, run_max)));
  float* o = out + i64(h) * hd;
#pragma unroll
  for (int u = 0; u < kMaxHd / kThreads; ++u) {
    const int d = tid + u * kThreads;
    if (d < hd) {
      const float v = __fdiv_rn(acc[u], denom);
      o[d] = ((a.v41 && a.rb) || round) ? round_bf16(v) : v;
    }
  }
}
