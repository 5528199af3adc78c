// Decode-time (one row) sparse attention split over the key list, with the numbers of smelt_sparse_attention bit
// for bit. That kernel walks a (row, head)'s list in tiles of 64 with an online softmax: tile t's probabilities
// are exp(score - m_t) where m_t = max(m_{t-1}, tile max) is the running max, then denominator and P.V are
// rescaled and added in tile order. m_t is a prefix max of the tile maxima, so the work splits exactly:
//   smelt_attn_dec_scores  grid (tiles * 64 / spb, heads / 8), block 256: every slot's score (the same per-lane
//                          chains and warp trees), spb slots a block; with spb = 64 also each tile's max;
//   smelt_attn_dec_tiles   grid (tiles, heads / hpb, hd / 256), block 256: m_t from the tile maxima in tile order,
//                          the tile's probabilities, their sum and its P.V, as the one-block kernel computes them;
//   smelt_attn_dec_merge   grid (heads, hd / 128): the denominators and P.V folded in tile order with the same
//                          rescales, the sink, the output.
// With one (row, head) block per head and up to window + top-k (or thousands of compressed) entries, the single
// kernel leaves most multiprocessors idle; here tiles x heads blocks share the work. All heads read the one shared
// K=V head, so a block serves 8 heads: each K=V row is read once per 8 heads, not once per head. This file follows
// attention.cu in the family's module (AttnArgs, slot, kTile, kThreads, kMaxHd come from there).
//
// Scratch (runtime/cuda/ops.cc): sc [H, Lmax], tmax / psum / nmax [H, tiles], pv [H, tiles, hd]. Blocks past the
// row's actual list (the position is read on the device) return at once.
#include "kernels/rope/rope_pair.cuh"

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
// The same with the probability already a double: the V4.1 tiles kernel stages them as doubles in shared memory,
// each converted once a block instead of once a thread (the conversions had been a third of that kernel's stall
// samples, Nsight Compute, session 15). double(float) is exact: the same numbers.
__device__ __forceinline__ double dec_mac(double q, float k, double d) { return d + q * double(k); }

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

// Channel d of the tile's P.V for nh <= NH heads: the one-block kernel's chain over the tile's slots, empty ones
// skipped. The K=V values of channel d are loaded a half tile at a time, so 32 loads are in flight together (all 64
// took the tiles kernel past 128 registers: one block a multiprocessor).
template <typename T, int NH>
__device__ __forceinline__ void dec_pv(const T (*pr)[kDecHeads], const float* const* ptr, int nb, int d, int nh,
                                       float* out, i64 head_stride) {
  constexpr int kHalf = kTile / 2;
  T v[NH];
#pragma unroll
  for (int g = 0; g < NH; ++g) v[g] = T(0);
#pragma unroll
  for (int t0 = 0; t0 < kTile; t0 += kHalf) {
    float x[kHalf];
#pragma unroll
    for (int t = 0; t < kHalf; ++t) {
      const float* r = t0 + t < nb ? ptr[t0 + t] : nullptr;
      x[t] = r ? r[d] : 0.f;
    }
#pragma unroll
    for (int t = 0; t < kHalf; ++t) {
      if (t0 + t < nb && ptr[t0 + t]) {
        T pp[kDecHeads];
        if constexpr (sizeof(T) == 4) {
          const float4 pa = *reinterpret_cast<const float4*>(&pr[t0 + t][0]);
          pp[0] = pa.x, pp[1] = pa.y, pp[2] = pa.z, pp[3] = pa.w;
          if (NH > 4) {
            const float4 pb = *reinterpret_cast<const float4*>(&pr[t0 + t][4]);
            pp[4] = pb.x, pp[5] = pb.y, pp[6] = pb.z, pp[7] = pb.w;
          }
        } else {
#pragma unroll
          for (int g = 0; g < NH; g += 2) {
            const double2 q2 = *reinterpret_cast<const double2*>(&pr[t0 + t][g]);
            pp[g] = q2.x;
            if (g + 1 < NH) pp[g + 1] = q2.y;
          }
        }
#pragma unroll
        for (int g = 0; g < NH; ++g) v[g] = dec_mac(pp[g], x[t], v[g]);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < NH; ++g)
    if (g < nh) out[g * head_stride + d] = float(v[g]);
}

template <typename T>
__device__ __forceinline__ void dec_pv_heads(int hpb, const T (*pr)[kDecHeads], const float* const* ptr, int nb,
                                             int d, int nh, float* out, i64 head_stride) {
  if (hpb == 1) dec_pv<T, 1>(pr, ptr, nb, d, nh, out, head_stride);
  else if (hpb == 2) dec_pv<T, 2>(pr, ptr, nb, d, nh, out, head_stride);
  else if (hpb == 4) dec_pv<T, 4>(pr, ptr, nb, d, nh, out, head_stride);
  else dec_pv<T, 8>(pr, ptr, nb, d, nh, out, head_stride);
}

// Tile t's max of the scores in slot order (the single kernel's blk_max fold), from sc of head h.
__device__ __forceinline__ float dec_tile_max(const float* sc_h, int t, int L) {
  const int s0 = t * kTile, nb = L - s0 < kTile ? L - s0 : kTile;
  float m = -__int_as_float(0x7f800000);
#pragma unroll 32
  for (int s = 0; s < nb; ++s) m = fmaxf(m, sc_h[s0 + s]);
  return m;
}

}  // namespace

// Block: kDecHeads heads x a part of spb slots (8, 16, 32 or 64) of one tile, 256 threads (8 warps, spb / 8 slots
// each): grid (tiles * 64 / spb, heads / 8). A warp loads a slot's K=V row once (lane holds c = lane, lane + 32,
// ...) and forms the kDecHeads dots from q in shared memory, each with the one-block kernel's per-lane chain over c
// and its butterfly tree (warp_sum8), so every score has its bits. Small parts spread a short list (window-only
// layers: 2 tiles) over many multiprocessors; with spb = 64 the block also writes the tile's max (tmax), else
// tmax is unused and smelt_attn_dec_tiles folds the tile maxima from sc itself.
extern "C" __global__ void smelt_attn_dec_scores(AttnArgs a, const StepInfo* step, int H, int Lmax, int tiles, int spb,
                                                 float* sc, float* tmax) {
  SMELT_KERNEL_PROLOGUE();
  // q as floats: staged as doubles (V4.1) it measured slower (12.3 -> 13.5 us a launch eager, session 15: twice the
  // shared-memory bytes per dot), unlike the tiles kernel's probabilities.
  __shared__ float qs[kDecHeads * kMaxHd];
  __shared__ float ts[kDecHeads][kTile];
  const int parts = kTile / spb;
  const int t0 = blockIdx.x / parts, h0 = blockIdx.y * kDecHeads, hd = a.hd;
  const int nh = H - h0 < kDecHeads ? H - h0 : kDecHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 p0 = step->p0, p = p0;
  const DecList dl = dec_list(a, p0);
  const int s0 = t0 * kTile + (blockIdx.x % parts) * spb;
  if (s0 >= dl.L) return;
  const int nb = dl.L - s0 < spb ? dl.L - s0 : spb;
  // The first slot's K=V row, then the 8 heads' q (hd floats each, contiguous; a fixed trip count, unrolled), are
  // all in flight before the block waits: the strided staging loop had issued q a few loads at a time, and the
  // first row (after its top-k index, on CSA layers) only after it.
  const float* kv = warp < nb ? slot(a, 0, p0, p, s0 + warp, dl.Lw, 1) : nullptr;
  constexpr int kQPer = kDecHeads * kMaxHd / kDecThreads;
  float qv[kQPer];
#pragma unroll
  for (int u = 0; u < kQPer; ++u) {
    const int k = tid + u * kDecThreads;
    qv[u] = k < nh * hd ? a.q[i64(h0) * hd + k] : 0.f;
  }
  float kr[kMaxHd / 32], kn[kMaxHd / 32];
  dec_load_row(kv, hd, lane, kr);
#pragma unroll
  for (int u = 0; u < kQPer; ++u) {
    const int k = tid + u * kDecThreads;
    if (k < kDecHeads * hd) qs[k] = qv[u];
  }
  __syncthreads();
  const int kPer = spb / (kDecThreads / 32);
  // Software pipeline: the next slot's row is loaded while this one's dots are formed.
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
    if ((lane & 3) == 0) ts[lane >> 2][t] = s;  // head (lane >> 2)'s sum sits in lanes 4g .. 4g+3
    kv = kvn;
#pragma unroll
    for (int i = 0; i < kMaxHd / 32; ++i) kr[i] = kn[i];
  }
  __syncthreads();
  for (int k = tid; k < nh * spb; k += kDecThreads) {
    const int g = k / spb, t = k % spb;
    if (t < nb) sc[i64(h0 + g) * Lmax + s0 + t] = ts[g][t];
  }
  if (spb == kTile && tid < nh) {
    float m = -__int_as_float(0x7f800000);
    for (int t = 0; t < nb; ++t) m = fmaxf(m, ts[tid][t]);  // the single kernel's blk_max order
    tmax[i64(h0 + tid) * tiles + t0] = m;
  }
}

// Block: hpb heads (1, 2, 4 or 8) x one tile x 256 channels (grid (tiles, ceil(heads / hpb), hd / 256)), a thread
// per channel: each K=V value is loaded once for the block's heads, all the tile's values up front (64 loads in
// flight instead of a few); every (head, channel) sums over the tile's slots in slot order as before. Fewer heads
// a block give short lists (2 tiles) enough blocks. tmax: the scores kernel's tile maxima, or nullptr: folded here
// from sc (a lane per earlier tile, each in slot order; then in tile order as before).
// Two blocks a multiprocessor (<= 128 registers; it took 145, one block an SM): the 10-tile V4.1-Flash list
// launches 160 blocks, which ran in two waves (Nsight Compute, session 10).
extern "C" __global__ void __launch_bounds__(kDecThreads, 2)
    smelt_attn_dec_tiles(AttnArgs a, const StepInfo* step, int H, int Lmax, int tiles, int hpb, const float* sc,
                         const float* tmax, float* psum_out, float* nmax_out, float* pv_out) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ __align__(16) float pr[kTile][kDecHeads];  // [slot][head]: one slot's probabilities in two float4
  __shared__ __align__(16) double prd[kTile][kDecHeads];  // V4.1: the P.V probabilities as doubles (dec_mac)
  __shared__ const float* ptr[kTile];
  __shared__ float nmax_s[kDecHeads];
  const int t0 = blockIdx.x, h0 = blockIdx.y * hpb, hd = a.hd;
  const int nh = H - h0 < hpb ? H - h0 : hpb;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 p0 = step->p0, p = p0;
  const DecList dl = dec_list(a, p0);
  const int s0 = t0 * kTile;
  if (s0 >= dl.L) return;
  const int nb = dl.L - s0 < kTile ? dl.L - s0 : kTile;
  if (warp < kDecHeads) {  // warp g: head h0 + g's m_t0
    float run_max = 0.f;
    if (warp < nh) {
      const int h = h0 + warp;
      run_max = a.v41 ? -1e30f : ldw(a.sink, h, a.sink_dt);
      for (int b = 0; b <= t0; b += 32) {
        const int t = b + lane;
        float m = 0.f;
        if (t <= t0) m = tmax ? tmax[i64(h) * tiles + t] : dec_tile_max(sc + i64(h) * Lmax, t, dl.L);
        for (int u = 0; u < 32 && b + u <= t0; ++u)
          run_max = fmaxf(run_max, __shfl_sync(0xffffffffu, m, u));  // m_t0, in tile order
      }
    }
    if (lane == 0) nmax_s[warp] = run_max;
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
#pragma unroll 16
      for (int t = 0; t < nb; ++t) ps += double(pr[t][g]);  // in slot order; unrolled: the shared loads fly ahead
      psum = float(ps);
    } else {
      psum = 0.f;
#pragma unroll 16
      for (int t = 0; t < nb; ++t) psum = __fadd_rn(psum, pr[t][g]);
    }
    psum_out[i64(h0 + g) * tiles + t0] = psum;
    nmax_out[i64(h0 + g) * tiles + t0] = nmax_s[g];
  }
  __syncthreads();
  if (a.v41)
    for (int k = tid; k < kTile * kDecHeads; k += kDecThreads) {
      const float v = pr[k / kDecHeads][k % kDecHeads];
      prd[k / kDecHeads][k % kDecHeads] = double(a.rb ? round_bf16(v) : v);
    }
  __syncthreads();
  const int d = blockIdx.z * kDecThreads + tid;
  if (d >= hd) return;
  float* pv = pv_out + (i64(h0) * tiles + t0) * hd;
  if (a.v41) dec_pv_heads<double>(hpb, prd, ptr, nb, d, nh, pv, i64(tiles) * hd);
  else dec_pv_heads<float>(hpb, pr, ptr, nb, d, nh, pv, i64(tiles) * hd);
}

namespace {

// The merge's value of channel d of head h (the op's round applied): the denominators and P.V folded in tile order
// with the same rescales, then the sink. Every thread of the block returns (0 for d >= hd).
__device__ __forceinline__ float dec_merge_value(const AttnArgs& a, const StepInfo* step, int tiles, const float* psum,
                                                 const float* nmax, const float* pv, int round, int h, int d) {
  const int hd = a.hd;
  const i64 p0 = step->p0;
  const DecList dl = dec_list(a, p0);
  const int nt = (dl.L + kTile - 1) / kTile;
  const float sink = ldw(a.sink, h, a.sink_dt);
  float run_max = a.v41 ? -1e30f : sink, denom = 0.f, acc = 0.f;
  // The fold is a serial chain; its inputs are not: 8 tiles' loads are issued together before their steps (the
  // loop's loads had waited one by one, ~7 us at 10 tiles in Nsight Compute). Same operations, same order.
  constexpr int kU = 8;
  for (int t0 = 0; t0 < nt; t0 += kU) {
    float nm[kU], ps[kU], x[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = t0 + u < nt ? t0 + u : nt - 1;
      nm[u] = nmax[i64(h) * tiles + t];
      ps[u] = psum[i64(h) * tiles + t];
      x[u] = d < hd ? pv[(i64(h) * tiles + t) * hd + d] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (t0 + u >= nt) break;
      const float rescale = expf(__fsub_rn(run_max, nm[u]));
      denom = __fadd_rn(__fmul_rn(denom, rescale), ps[u]);
      acc = __fadd_rn(__fmul_rn(acc, rescale), x[u]);
      run_max = nm[u];
    }
  }
  denom = __fadd_rn(denom, expf(__fsub_rn(sink, run_max)));
  if (d >= hd) return 0.f;
  const float v = __fdiv_rn(acc, denom);
  return ((a.v41 && a.rb) || round) ? round_bf16(v) : v;
}

}  // namespace

// round: the op's `round = "bf16"` applied to the output here (no separate launch). grid (heads, hd / 128),
// block 128: a thread per channel (every block also folds the head's denominators, the same numbers).
extern "C" __global__ void smelt_attn_dec_merge(AttnArgs a, const StepInfo* step, int tiles, const float* psum,
                                                const float* nmax, const float* pv, int round, float* out) {
  SMELT_KERNEL_PROLOGUE();
  const int h = blockIdx.x, d = blockIdx.y * kThreads + threadIdx.x;
  const float v = dec_merge_value(a, step, tiles, psum, nmax, pv, round, h, d);
  if (d < a.hd) out[i64(h) * a.hd + d] = v;
}

// The ops right after a decode attention in a layer, run by its merge (runtime/cuda/backend.cc plan_attn_tails):
// the window KV update of the row (kv != nullptr) and the inverse rope of the attention's output into y
// (y != nullptr), each with its own kernel's operations (smelt_window_kv_update, smelt_rope_units*).
struct AttnTail {
  const float* kv;  // the row's kv, kv_hd values, into ring slot p0 % R
  float* ring;
  int R, kv_hd;
  float* y;  // rope(out): heads x hd, channels [hd - rope_dim, hd) rotated in pairs, rounded to bf16 when rround
  int rope_dim, inverse, rround;
};

// smelt_attn_dec_merge, then the tail. The ring slot is written after this grid's dependency wait: every read of the
// ring (the scores' and the tiles' kernels, which this grid follows) has finished by then, as the separate update
// kernel had them finished. out is written as without the tail (its other readers, if any, see the same values).
// The rope needs both channels of a pair in one warp: hd - rope_dim even (the launcher checks it).
extern "C" __global__ void smelt_attn_dec_merge_tail(AttnArgs a, const StepInfo* step, int tiles, const float* psum,
                                                     const float* nmax, const float* pv, int round, float* out,
                                                     AttnTail t, InvFreq f) {
  SMELT_KERNEL_PROLOGUE();
  const int h = blockIdx.x, hd = a.hd, d = blockIdx.y * kThreads + threadIdx.x;
  if (t.kv && h == 0) {
    const i64 slot = step->p0 % t.R;
    for (int c = d; c < t.kv_hd; c += int(gridDim.y) * kThreads) t.ring[slot * t.kv_hd + c] = t.kv[c];
  }
  const float v = dec_merge_value(a, step, tiles, psum, nmax, pv, round, h, d);
  if (d < hd) out[i64(h) * hd + d] = v;
  if (!t.y) return;
  const float other = __shfl_xor_sync(0xffffffffu, v, 1);  // the pair's other channel (d ^ 1: nope is even)
  if (d >= hd) return;
  const int nope = hd - t.rope_dim;
  float* y = t.y + i64(h) * hd;
  if (d < nope) {
    y[d] = t.rround ? round_bf16(v) : v;
    return;
  }
  const int j = d - nope, lo = (j & 1) == 0;
  float o[2];
  if (t.rround) rope_pair<true>(lo ? v : other, lo ? other : v, f.v[j / 2], float(step->p0), t.inverse, o);
  else rope_pair<false>(lo ? v : other, lo ? other : v, f.v[j / 2], float(step->p0), t.inverse, o);
  y[d] = o[lo ? 0 : 1];
}
