// smelt.sparse_attention (window + compressed entries with a per-head sink, one shared K=V head) and
// smelt.window_kv_update (kernels/attention/reference.h).
//
// One block per (query row, head), 128 threads. The query's key list (window part, then compressed part) is
// walked in tiles of 64 list slots with an online softmax: warps score the slots (q . k, fp32 for V4, double
// for V4.1 as the reference's dot_exact), then each thread accumulates its channels. With v41 the tile is
// exactly the reference's block of 64 (bf16 probabilities in P.V, fp32 denominator, unscaled sink, bf16
// output; `rb` = 0 keeps fp32, the numerics=fp32 mode). Row r's list depends only on its position, so results
// are independent of the chunk's row count.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

namespace {

constexpr int kTile = 64;
constexpr int kThreads = 128;
constexpr int kMaxHd = 512;

struct AttnArgs {
  const float* q;         // [T, H*hd]
  const float* chunk_kv;  // [T, hd]
  const i32* idx;         // [T, k] or nullptr
  int k;
  const void* sink;       // [H]
  int sink_dt;
  const float* ring;      // [R, hd]
  int R;
  int window;
  int ratio;              // 0 = window only
  const float* pool;      // [pool_rows, hd] or nullptr
  i64 pool_rows;
  int hd;
  float scale;
  int v41;
  int rb;                 // v41: round probabilities / output to bf16
  // dspark: every query lists ring slots 0 .. n_ring-1 then all T chunk rows (no positions involved)
  int dspark;
};

// Slot s of row i's list: a K=V row or nullptr (an empty slot). p = absolute position, p0 of the chunk.
__device__ const float* slot(const AttnArgs& a, int i, i64 p0, i64 p, int s, int Lw, int T) {
  if (a.dspark) {
    const int n_ring = Lw;
    return s < n_ring ? a.ring + i64(s) * a.hd : a.chunk_kv + i64(s - n_ring) * a.hd;
  }
  if (s < Lw) {
    i64 pos;
    if (!a.v41) pos = (p - a.window + 1 > 0 ? p - a.window + 1 : 0) + s;
    else if (p0 == 0) {
      pos = (p - a.window + 1 > 0 ? p - a.window + 1 : 0) + s;
      if (pos > p) return nullptr;
    } else {
      pos = p - a.window + 1 + s;
      if (pos < 0) return nullptr;
    }
    return pos >= p0 ? a.chunk_kv + (pos - p0) * a.hd : a.ring + (pos % a.R) * a.hd;
  }
  s -= Lw;
  const i64 visible = (p + 1) / a.ratio;
  i64 j = s;
  if (a.idx) j = a.idx[i64(i) * a.k + s];
  if (j < 0 || j >= visible || j >= a.pool_rows) return nullptr;
  return a.pool + j * a.hd;
}

__device__ void attend(const AttnArgs& a, const StepInfo* step, int T, float* out) {
  __shared__ float qs[kMaxHd];
  __shared__ float sc[kTile];
  __shared__ float pr[kTile];
  __shared__ const float* ptr[kTile];
  const int i = blockIdx.x, h = blockIdx.y, H = gridDim.y, hd = a.hd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 p0 = step->p0, p = p0 + i;
  // List lengths.
  int Lw = 0, Lc = 0;
  if (a.dspark) {
    Lw = int(a.window < p0 ? a.window : p0);  // ring slots holding positions <= t = p0 - 1
    Lc = T;
  } else {
    if (a.window > 0) {
      if (!a.v41) Lw = int(p + 1 < a.window ? p + 1 : a.window);
      else if (p0 == 0) Lw = T < a.window ? T : a.window;
      else Lw = a.window;
    }
    if (a.ratio > 0 && a.pool) Lc = a.idx ? a.k : int((p + 1) / a.ratio);
  }
  const int L = Lw + Lc;
  const float* q = a.q + (i64(i) * H + h) * hd;
  for (int d = tid; d < hd; d += kThreads) qs[d] = q[d];
  const float sink = ldw(a.sink, h, a.sink_dt);
  float acc[kMaxHd / kThreads];
#pragma unroll
  for (int t = 0; t < kMaxHd / kThreads; ++t) acc[t] = 0.f;
  float run_max = a.v41 ? -1e30f : sink, denom = 0.f;
  __syncthreads();
  for (int s0 = 0; s0 < L; s0 += kTile) {
    const int nb = L - s0 < kTile ? L - s0 : kTile;
    for (int t = warp; t < kTile; t += kThreads / 32) {
      const float* kv = t < nb ? slot(a, i, p0, p, s0 + t, Lw, T) : nullptr;
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
      if (lane == 0) {
        sc[t] = s;
        ptr[t] = kv;
      }
    }
    __syncthreads();
    float blk_max = -__int_as_float(0x7f800000);
    for (int t = 0; t < nb; ++t) blk_max = fmaxf(blk_max, sc[t]);
    const float new_max = fmaxf(run_max, blk_max);
    const float rescale = expf(__fsub_rn(run_max, new_max));
    if (tid < kTile) pr[tid] = tid < nb ? expf(__fsub_rn(sc[tid], new_max)) : 0.f;
    __syncthreads();
    float psum;
    if (a.v41) {
      double ps = 0.0;
      for (int t = 0; t < nb; ++t) ps += double(pr[t]);
      psum = float(ps);
    } else {
      psum = 0.f;
      for (int t = 0; t < nb; ++t) psum = __fadd_rn(psum, pr[t]);
    }
    denom = __fadd_rn(__fmul_rn(denom, rescale), psum);
    __syncthreads();
    if (a.v41 && a.rb && tid < kTile) pr[tid] = round_bf16(pr[tid]);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kMaxHd / kThreads; ++u) {
      const int d = tid + u * kThreads;
      if (d < hd) {
        if (a.v41) {
          double pv = 0.0;
          for (int t = 0; t < nb; ++t)
            if (ptr[t]) pv += double(pr[t]) * double(ptr[t][d]);
          acc[u] = __fadd_rn(__fmul_rn(acc[u], rescale), float(pv));
        } else {
          float pv = 0.f;
          for (int t = 0; t < nb; ++t)
            if (ptr[t]) pv = fmaf(pr[t], ptr[t][d], pv);
          acc[u] = __fadd_rn(__fmul_rn(acc[u], rescale), pv);
        }
      }
    }
    run_max = new_max;
    __syncthreads();
  }
  denom = __fadd_rn(denom, expf(__fsub_rn(sink, run_max)));
  float* o = out + (i64(i) * H + h) * hd;
#pragma unroll
  for (int u = 0; u < kMaxHd / kThreads; ++u) {
    const int d = tid + u * kThreads;
    if (d < hd) {
      const float v = __fdiv_rn(acc[u], denom);
      o[d] = (a.v41 && a.rb) ? round_bf16(v) : v;
    }
  }
}

}  // namespace

// grid (rows, heads), block 128. head_dim <= 512.
extern "C" __global__ void smelt_sparse_attention(AttnArgs a, const StepInfo* step, int rows, float* out) {
  SMELT_KERNEL_PROLOGUE();
  attend(a, step, rows, out);
}

// ring[pos % R] = kv[pos - p0] for the chunk's last min(T, R) positions. grid (rows), block 128. Runs after
// the attention of the same chunk (it overwrites slots that attention read).
extern "C" __global__ void smelt_window_kv_update(const float* kv, int rows, int hd, const StepInfo* step, float* ring,
                                                  int R) {
  SMELT_KERNEL_PROLOGUE();
  const int t = blockIdx.x;
  if (t < rows - R) return;
  const i64 pos = step->p0 + t;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) ring[(pos % R) * hd + d] = kv[i64(t) * hd + d];
}
