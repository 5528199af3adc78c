// Decode-time (one row) sparse attention split over the key list, with the numbers of smelt_sparse_attention bit
// for bit. That kernel walks a (row, head)'s list in tiles of 64 with an online softmax: tile t's probabilities
// are exp(score - m_t) where m_t = max(m_{t-1}, tile max) is the running max, then denominator and P.V are
// rescaled and added in tile order. m_t is a prefix max of the tile maxima, so the work splits exactly:
//   smelt_attn_dec_scores  grid (tiles, heads / 8), block 256: every slot's score (the same per-lane chains and
//                          warp trees) and each tile's max;
//   smelt_attn_dec_tiles   grid (tiles, heads / 8, hd / 256), block 256: m_t from the tile maxima in tile order,
//                          the tile's probabilities, their sum and its P.V, as the one-block kernel computes them;
//   smelt_attn_dec_merge   grid (heads): the denominators and P.V folded in tile order with the same rescales,
//                          the sink, the output.
// With one (row, head) block per head and up to window + top-k (or thousands of compressed) entries, the single
// kernel leaves most multiprocessors idle; here tiles x heads blocks share the work. All heads read the one shared
// K=V head, so a block serves 8 heads: each K=V row is read once per 8 heads, not once per head. This file follows
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

constexpr int kDecHeads = 8;      // heads per block of the scores / tiles kernels (one K=V load serves them all)
constexpr int kDecThreads = 256;  // block of the scores / tiles kernels

// d + q * k with the one-block kernel's operation: fmaf (V4) or a double add of the exact product (V4.1).
__device__ __forceinline__ float dec_mac(float q, float k, float d) { return fmaf(q, k, d); }
__device__ __forceinline__ double dec_mac(float q, float k, double d) { return d + double(q) * double(k); }

// kr[i] = row[lane + 32 i] (0 past hd or for an empty slot).
__device__ __forceinline__ void dec_load_row(const float* row, int hd, int lane, float* kr) {
#pragma unroll
  for (int i = 0; i < kMaxHd / 32; ++i) {
    const int c = lane + 32 * i;
    kr[i] = (row && c < hd) ? row[c] : 0.f;
  }
}

// The 8 heads' q . k for the row in kr: per lane the chain over c = lane, lane + 32, ... (< hd), then warp_sum's
// tree for each (warp_sum8, kernels/cuda/common.cuh).
template <typename T>
__device__ __forceinline__ T dec_dots(const float* qs, const float* kr, int hd, int lane) {
  static_assert(kDecHeads == 8, "warp_sum8 sums 8 heads");
  T d[kDecHeads];
#pragma unroll
  for (int g = 0; g < kDecHeads; ++g) d[g] = T(0);
#pragma unroll
  for (int i = 0; i < kMaxHd / 32; ++i) {
    const int c = lane + 32 * i;
    if (c < hd) {
#pragma unroll
      for (int g = 0; g < kDecHeads; ++g) d[g] = dec_mac(qs[g * hd + c], kr[i], d[g]);
    }
  }
  return warp_sum8(d);
}

// Channel d of the tile's P.V for nh heads: the one-block kernel's chain over the tile's slots, empty ones skipped.
template <typename T>
__device__ __forceinline__ void dec_pv(const float (*pr)[kDecHeads], const float* const* ptr, int nb, int d, int nh,
                                       float* out, i64 head_stride) {
  T v[kDecHeads];
#pragma unroll
  for (int g = 0; g < kDecHeads; ++g) v[g] = T(0);
#pragma unroll 4
  for (int t = 0; t < nb; ++t) {
    const float* r = ptr[t];
    if (r) {
      const float x = r[d];
      const float4 pa = *reinterpret_cast<const float4*>(&pr[t][0]);
      const float4 pb = *reinterpret_cast<const float4*>(&pr[t][4]);
      const float pp[kDecHeads] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
      for (int g = 0; g < kDecHeads; ++g) v[g] = dec_mac(pp[g], x, v[g]);
    }
  }
#pragma unroll
  for (int g = 0; g < kDecHeads; ++g)
    if (g < nh) out[g * head_stride + d] = float(v[g]);
}

}  // namespace

// Block: kDecHeads heads x one tile, 256 threads (8 warps, 8 slots each). A warp loads a slot's K=V row once (lane
// holds c = lane, lane + 32, ...) and forms the kDecHeads dots from q in shared memory, each with the one-block
// kernel's per-lane chain over c and its butterfly tree (warp_sum8), so every score has its bits.
extern "C" __global__ void smelt_attn_dec_scores(AttnArgs a, const StepInfo* step, int H, int Lmax, int tiles,
                                                 float* sc, float* tmax) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ float qs[kDecHeads * kMaxHd];
  __shared__ float ts[kDecHeads][kTile];
  const int t0 = blockIdx.x, h0 = blockIdx.y * kDecHeads, hd = a.hd;
  const int nh = H - h0 < kDecHeads ? H - h0 : kDecHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 p0 = step->p0, p = p0;
  const DecList dl = dec_list(a, p0);
  const int s0 = t0 * kTile;
  if (s0 >= dl.L) return;
  const int nb = dl.L - s0 < kTile ? dl.L - s0 : kTile;
  for (int k = tid; k < kDecHeads * hd; k += kDecThreads) {
    const int g = k / hd;
    qs[k] = g < nh ? a.q[i64(h0) * hd + k] : 0.f;
  }
  __syncthreads();
  constexpr int kPer = kTile / (kDecThreads / 32);
  // Software pipeline: the next slot's row is loaded while this one's dots are formed.
  float kr[kMaxHd / 32], kn[kMaxHd / 32];
  const float* kv = warp < nb ? slot(a, 0, p0, p, s0 + warp, dl.Lw, 1) : nullptr;
  dec_load_row(kv, hd, lane, kr);
  for (int u = 0; u < kPer; ++u) {
    const int t = warp + u * (kDecThreads / 32);
    const int tn = t + kDecThreads / 32;
    const float* kvn = (u + 1 < kPer && tn < nb) ? slot(a, 0, p0, p, s0 + tn, dl.Lw, 1) : nullptr;
    dec_load_row(kvn, hd, lane, kn);
    float s = -__int_as_float(0x7f800000);
    if (kv) {
      if (a.v41) s = __fmul_rn(float(dec_dots<double>(qs, kr, hd, lane)), a.scale);
      else s = __fmul_rn(dec_dots<float>(qs, kr, hd, lane), a.scale);
    }
    if ((lane & 3) == 0 && t < kTile) ts[lane >> 2][t] = s;  // head (lane >> 2)'s sum sits in lanes 4g .. 4g+3
    kv = kvn;
#pragma unroll
    for (int i = 0; i < kMaxHd / 32; ++i) kr[i] = kn[i];
  }
  __syncthreads();
  for (int k = tid; k < nh * kTile; k += kDecThreads) {
    const int g = k / kTile, t = k % kTile;
    if (t < nb) sc[i64(h0 + g) * Lmax + s0 + t] = ts[g][t];
  }
  if (tid < nh) {
    float m = -__int_as_float(0x7f800000);
    for (int t = 0; t < nb; ++t) m = fmaxf(m, ts[tid][t]);  // the single kernel's blk_max order
    tmax[i64(h0 + tid) * tiles + t0] = m;
  }
}

// Block: kDecHeads heads x one tile x 256 channels (grid.z covers hd), a thread per channel: each K=V value is
// loaded once for the block's heads; every (head, channel) sums over the tile's slots in slot order as before.
extern "C" __global__ void smelt_attn_dec_tiles(AttnArgs a, const StepInfo* step, int H, int Lmax, int tiles,
                                                const float* sc, const float* tmax, float* psum_out, float* nmax_out,
                                                float* pv_out) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ __align__(16) float pr[kTile][kDecHeads];  // [slot][head]: one slot's probabilities in two float4
  __shared__ const float* ptr[kTile];
  __shared__ float nmax_s[kDecHeads];
  const int t0 = blockIdx.x, h0 = blockIdx.y * kDecHeads, hd = a.hd;
  const int nh = H - h0 < kDecHeads ? H - h0 : kDecHeads;
  const int tid = threadIdx.x;
  const i64 p0 = step->p0, p = p0;
  const DecList dl = dec_list(a, p0);
  const int s0 = t0 * kTile;
  if (s0 >= dl.L) return;
  const int nb = dl.L - s0 < kTile ? dl.L - s0 : kTile;
  if (tid < kDecHeads) {
    float run_max = 0.f;
    if (tid < nh) {
      const int h = h0 + tid;
      run_max = a.v41 ? -1e30f : ldw(a.sink, h, a.sink_dt);
      for (int t = 0; t <= t0; ++t) run_max = fmaxf(run_max, tmax[i64(h) * tiles + t]);  // m_t0, in tile order
    }
    nmax_s[tid] = run_max;
  }
  if (tid < kTile) ptr[tid] = tid < nb ? slot(a, 0, p0, p, s0 + tid, dl.Lw, 1) : nullptr;
  __syncthreads();
  for (int k = tid; k < kTile * kDecHeads; k += kDecThreads) {
    const int t = k / kDecHeads, g = k % kDecHeads;
    pr[t][g] = (t < nb && g < nh) ? expf(__fsub_rn(sc[i64(h0 + g) * Lmax + s0 + t], nmax_s[g])) : 0.f;
  }
  __syncthreads();
  if (blockIdx.z == 0 && tid < nh) {
    const int g = tid;
    float psum;
    if (a.v41) {
      double ps = 0.0;
      for (int t = 0; t < nb; ++t) ps += double(pr[t][g]);
      psum = float(ps);
    } else {
      psum = 0.f;
      for (int t = 0; t < nb; ++t) psum = __fadd_rn(psum, pr[t][g]);
    }
    psum_out[i64(h0 + g) * tiles + t0] = psum;
    nmax_out[i64(h0 + g) * tiles + t0] = nmax_s[g];
  }
  __syncthreads();
  if (a.v41 && a.rb)
    for (int k = tid; k < kTile * kDecHeads; k += kDecThreads) pr[k / kDecHeads][k % kDecHeads] =
        round_bf16(pr[k / kDecHeads][k % kDecHeads]);
  __syncthreads();
  const int d = blockIdx.z * kDecThreads + tid;
  if (d >= hd) return;
  if (a.v41) dec_pv<double>(pr, ptr, nb, d, nh, pv_out + (i64(h0) * tiles + t0) * hd, i64(tiles) * hd);
  else dec_pv<float>(pr, ptr, nb, d, nh, pv_out + (i64(h0) * tiles + t0) * hd, i64(tiles) * hd);
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
