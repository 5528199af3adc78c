// Tensor-core weight-only decode GEMVs (the sm_80 path): FP8 / FP4 weights dequantized exactly to f16,
// activations split into two f16 halves, mma.sync m16n8k16 (f16 in, fp32 accumulate). fp32 accuracy, not the
// CUDA-core kernels' bits (docs/performance.md "Tensor-core weight-only decode").
//
// Swapped operands: A = 16 weight rows (output columns) x 16 k, B = 16 k x 8 token rows (rows >= nrows zero),
// so one kernel serves 1..8 rows. Lane l: g = l / 4, tig = l % 4. Per 32-block of K a lane owns the 8 contiguous
// weights tig*8 .. tig*8+7 of rows g and g+8 (FP8: 8 bytes, FP4: 4 bytes) and the activations at the same k of
// token row g; the k order inside the block is free, so the four 32-bit A registers of a row are
//   FP8 (bytes e0..e7):    (e0,e2) (e1,e3) (e4,e6) (e5,e7)       FP4 (nibbles n0..n7): (n0,n4) (n1,n5) (n2,n6) (n3,n7)
// = (MMA 0: a0/a1, a2/a3), (MMA 1: a0/a1, a2/a3), and the staged activations follow the same order.
//
// Exact weights: an E4M3 code's 7 low bits << 7 plus its sign at bit 15 is the f16 of value * 2^-8 (f16 has 5
// exponent bits, so E4M3 subnormals land on f16 subnormals); an E2M1 nibble's 3 low bits << 9 plus its sign is
// value * 2^-14. NaN codes (0x7F / 0xFF) become f16 NaNs.
// Activations: per 32-block a power of two 2^s puts the largest finite |x| in [2^14, 2^15); hi = f16(x 2^s),
// lo = f16(x 2^s - hi) (~22 significant bits). Products of f16 are exact in fp32; the block sum (4 MMAs: 2 k16
// halves x hi / lo) is scaled by 2^-s (times 2^8 or 2^14) and the weight's E8M0 scale and added to the fp32
// accumulator block by block in K order. Inf / NaN activations stay in hi (lo = 0): the same inf / NaN-ness as fp32.
//
// Work: a CTA of 8 warps = TPC tiles x KS K-parts (KS | 8, from the launcher: depends on K, N and the GPU, never on
// the row count, so a row's bits do not depend on how many rows the chunk has). K-part p owns blocks
// [p*nbp, (p+1)*nbp); the CTA stages, for every K-part, CB blocks at a time (one chunk when they fit) and the
// K-parts' sums are folded in p order through shared memory.
#pragma once
#include "kernels/cuda/common.cuh"

namespace smelt_dev {

constexpr int kWoWarps = 8;             // warps per CTA
constexpr int kWoRedBytes = 8 * 32 * 16;  // K-part fold: a float4 per lane per warp

// Shared bytes for R staged rows of S = KS * CB blocks (kept in step with runtime/cuda/ops_wo_mma.cc).
__host__ __device__ constexpr int wo_row_stride(int S) { return S * 128 + 16; }  // +16: rows g, g+1 on other banks
__host__ __device__ constexpr int wo_smem_bytes(int R, int S) { return kWoRedBytes + R * (wo_row_stride(S) + S * 4); }

__device__ __forceinline__ u16 wo_f16(float x) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
__device__ __forceinline__ float wo_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ void wo_mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four E4M3 codes -> two f16 pairs (e0,e2) and (e1,e3), values * 2^-8.
__device__ __forceinline__ void wo_e4m3_pairs(u32 v, u32& p02, u32& p13) {
  p02 = ((v << 7) & 0x3F803F80u) | ((v << 8) & 0x80008000u);
  p13 = ((v >> 1) & 0x3F803F80u) | (v & 0x80008000u);
  const u32 nan = e4m3x4_nan_bits(v);  // 0x80 in the byte of each NaN code
  if (nan) {                           // rare: exponent all ones, mantissa kept non-zero
    p02 |= ((nan & 0x00800080u) >> 7) * 0x7E00u;
    p13 |= ((nan & 0x80008000u) >> 15) * 0x7E00u;
  }
}

// Eight E2M1 nibbles -> f16 pairs (n0,n4) (n1,n5) (n2,n6) (n3,n7), values * 2^-14.
__device__ __forceinline__ void wo_e2m1_pairs(u32 q, u32* p) {
  p[0] = ((q << 9) & 0x0E000E00u) | ((q << 12) & 0x80008000u);
  p[1] = ((q << 5) & 0x0E000E00u) | ((q << 8) & 0x80008000u);
  p[2] = ((q << 1) & 0x0E000E00u) | ((q << 4) & 0x80008000u);
  p[3] = ((q >> 3) & 0x0E000E00u) | (q & 0x80008000u);
}

// The same four pairs from a word in FP4 pair order (kernels/cuda/common.cuh fp4_pair_order): masks of the word, of
// the word << 8 and of their bit reverses, 7 instructions (brev on its own pipe) against wo_e2m1_pairs' 15.
__device__ __forceinline__ void e2m1_pairs_po(u32 q, u32* p) {
  u32 t;
  asm("brev.b32 %0, %1;" : "=r"(t) : "r"(q));
  p[0] = q & 0x8E008E00u;
  p[1] = (q << 8) & 0x8E008E00u;
  p[2] = t & 0x8E008E00u;
  p[3] = (t << 8) & 0x8E008E00u;
}
// Po: the word in pair order (the weight-only experts' weights), else row-major nibbles.
template <bool Po>
__device__ __forceinline__ void e2m1_pairs(u32 q, u32* p) {
  if constexpr (Po) e2m1_pairs_po(q, p);
  else wo_e2m1_pairs(q, p);
}

// The K split: K-part p's first block and count, chunk c's part of it.
struct WoGeom {
  int nb, KS, nbp, CB, nchunks, S;
  __device__ WoGeom(int K, int ks, int cb) : nb(K / 32), KS(ks), CB(cb) {
    nbp = (nb + KS - 1) / KS;
    nchunks = (nbp + CB - 1) / CB;
    S = KS * CB;
  }
  // Blocks of K-part p in chunk c: global first block and count (<= 0: none).
  __device__ int first(int p, int c) const { return p * nbp + c * CB; }
  __device__ int count(int p, int c) const {
    const int end = min(nb, (p + 1) * nbp), b0 = first(p, c);
    return min(CB, end - b0);
  }
};

// Stage chunk c of rows [0, R) of x (row stride ldx) into shared memory: hi / lo halves in the lanes' order and the
// per-block factor 2^-s * 2^(8 or 14). One warp per (row, block), lane = element.
template <bool FP4>
__device__ __forceinline__ void wo_stage(const float* x, i64 ldx, int R, const WoGeom& G, int c, u8* sx, float* ssc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int tig = lane >> 3, jj = lane & 7;
  const int slot = FP4 ? (((jj & 3) << 1) | (jj >> 2)) : ((jj & 4) | ((jj & 1) << 1) | ((jj >> 1) & 1));
  const int stride = wo_row_stride(G.S);
  for (int t = warp; t < R * G.S; t += nw) {
    const int r = t / G.S, sl = t - r * G.S, p = sl / G.CB, j = sl - p * G.CB;
    if (j >= G.count(p, c)) continue;  // warp-uniform
    const float v = x[r * ldx + i64(G.first(p, c) + j) * 32 + lane];
    const bool fin = fabsf(v) <= 3.402823466e38f;
    const float amax = warp_max(fin ? fabsf(v) : 0.f);
    // s = 14 - floor(log2 amax), at most 126 (zero / tiny blocks): 2^s and 2^-s are normal floats.
    const int e = amax > 0.f ? int((__float_as_uint(amax) >> 23) & 0xFF) - 127 : -112;
    const int s = min(14 - e, 126);
    const float up = __uint_as_float(u32(127 + s) << 23);
    const float y = v * up;  // exact (power of two, no overflow: |y| < 2^15 for finite v)
    const u16 hi = wo_f16(y);
    const u16 lo = fin ? wo_f16(y - wo_f32(hi)) : u16(0);
    u16* dst = reinterpret_cast<u16*>(sx + r * stride + sl * 128 + tig * 32) + slot;
    dst[0] = hi;
    dst[8] = lo;
    if (lane == 0) ssc[r * G.S + sl] = __uint_as_float(u32(127 - s + (FP4 ? 14 : 8)) << 23);
  }
}

// One 32-block's weights as a lane holds them: rows g and g+8, their E8M0 scale bytes.
template <bool FP4>
struct WoW {
  u32 a[FP4 ? 1 : 2], b[FP4 ? 1 : 2];
  u32 sa, sb;
};

// Weight rows of a warp: row g at wa (scale bytes at sa), row g+8 at wb / sb; block b's scale is at
// s[(b * 32) >> ssh] (FP8: the [ceil(N/blk), ceil(K/blk)] row of the block, ssh = log2 blk; FP4: ssh = 5).
struct WoRows {
  const u8 *wa, *wb, *sa, *sb;
  int ssh;
};

template <bool FP4>
__device__ __forceinline__ void wo_load(WoW<FP4>& w, const WoRows& r, int b, int tig) {
  if (FP4) {
    w.a[0] = __ldg(reinterpret_cast<const u32*>(r.wa + i64(b) * 16 + tig * 4));
    w.b[0] = __ldg(reinterpret_cast<const u32*>(r.wb + i64(b) * 16 + tig * 4));
  } else {
    const uint2 qa = __ldg(reinterpret_cast<const uint2*>(r.wa + i64(b) * 32 + tig * 8));
    const uint2 qb = __ldg(reinterpret_cast<const uint2*>(r.wb + i64(b) * 32 + tig * 8));
    w.a[0] = qa.x, w.a[1] = qa.y, w.b[0] = qb.x, w.b[1] = qb.y;
  }
  w.sa = __ldg(r.sa + ((b * 32) >> r.ssh));
  w.sb = __ldg(r.sb + ((b * 32) >> r.ssh));
}

// acc (C fragment: [0] col g row 2tig, [1] col g row 2tig+1, [2] col g+8 row 2tig, [3] col g+8 row 2tig+1) +=
// the block's sum scaled. xrow: the lane's staged token row (nullptr: B = 0), xi0 / xi1: the factors of rows
// 2tig, 2tig+1 (0 for rows not staged).
template <bool FP4, bool Po = false>
__device__ __forceinline__ void wo_block(const WoW<FP4>& w, const u8* xrow, float xi0, float xi1, float* acc) {
  u32 ra[4], rb[4];  // rows g, g + 8: (MMA 0: k 0-7, 8-15 of the half), (MMA 1: ...)
  if (FP4) {
    e2m1_pairs<Po>(w.a[0], ra);
    e2m1_pairs<Po>(w.b[0], rb);
  } else {
    wo_e4m3_pairs(w.a[0], ra[0], ra[1]);
    wo_e4m3_pairs(w.a[1], ra[2], ra[3]);
    wo_e4m3_pairs(w.b[0], rb[0], rb[1]);
    wo_e4m3_pairs(w.b[1], rb[2], rb[3]);
  }
  uint4 hi = make_uint4(0u, 0u, 0u, 0u), lo = hi;
  if (xrow) {
    hi = *reinterpret_cast<const uint4*>(xrow);
    lo = *reinterpret_cast<const uint4*>(xrow + 16);
  }
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  wo_mma(c, ra[0], rb[0], ra[1], rb[1], hi.x, hi.y);
  wo_mma(c, ra[2], rb[2], ra[3], rb[3], hi.z, hi.w);
  wo_mma(c, ra[0], rb[0], ra[1], rb[1], lo.x, lo.y);
  wo_mma(c, ra[2], rb[2], ra[3], rb[3], lo.z, lo.w);
  const float sa = e8m0_decode(u8(w.sa)), sb = e8m0_decode(u8(w.sb));
  acc[0] = fmaf(c[0] * xi0, sa, acc[0]);
  acc[1] = fmaf(c[1] * xi1, sa, acc[1]);
  acc[2] = fmaf(c[2] * xi0, sb, acc[2]);
  acc[3] = fmaf(c[3] * xi1, sb, acc[3]);
}

// A warp's ring of weight blocks in registers (wo_fill, wo_blocks).
template <bool FP4>
constexpr int wo_ring_blocks() { return FP4 ? 12 : 8; }

// The first blocks of K-part p's chunk c into the ring (wo_blocks consumes them): weights only, so wo_run issues the
// first group's before the dependent-launch wait and the activations' staging.
template <bool FP4>
__device__ __forceinline__ void wo_fill(WoW<FP4>* ring, const WoRows& rows, const WoGeom& G, int p, int c) {
  constexpr int U = wo_ring_blocks<FP4>();
  const int tig = threadIdx.x & 3, n = G.count(p, c), b0 = G.first(p, c);
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < n) wo_load<FP4>(ring[u], rows, b0 + u, tig);
}

// K-part p's blocks of chunk c, in order, through the ring of U blocks wo_fill started: a slot is refilled with the
// block U ahead as soon as it has been multiplied, so ~U blocks of loads stay in flight per warp with U blocks of
// registers.
template <bool FP4, bool Po = false>
__device__ __forceinline__ void wo_blocks(WoW<FP4>* ring, const WoRows& rows, const WoGeom& G, int p, int c, int nrows,
                                          const u8* sx, const float* ssc, float* acc) {
  constexpr int U = wo_ring_blocks<FP4>();
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int n = G.count(p, c), b0 = G.first(p, c), sl0 = p * G.CB;
  if (n <= 0) return;
  const int stride = wo_row_stride(G.S);
  const u8* xrow = g < nrows ? sx + g * stride + sl0 * 128 + tig * 32 : nullptr;
  const float* s0 = 2 * tig < nrows ? ssc + (2 * tig) * G.S + sl0 : nullptr;
  const float* s1 = 2 * tig + 1 < nrows ? ssc + (2 * tig + 1) * G.S + sl0 : nullptr;
  for (int j0 = 0; j0 < n; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u;
      if (j < n) {
        wo_block<FP4, Po>(ring[u], xrow ? xrow + j * 128 : nullptr, s0 ? s0[j] : 0.f, s1 ? s1[j] : 0.f, acc);
        if (j + U < n) wo_load<FP4>(ring[u], rows, b0 + j + U, tig);
      }
    }
  }
}

// The CTA loop shared by the linear and expert kernels. x: the staged rows [R, ldx] (R <= 8); items are walked
// in groups of TPC = 8 / KS per CTA iteration; item(it, rows) fills the warp's weight rows and returns false for
// an item past the end (its warps still take part in the syncs); store(it, acc) is called by K-part 0's warp
// with the folded fragment. Dynamic shared memory: wo_smem_bytes(R, KS * CB).
// The first group's first ring of weights is in flight before the dependent-launch wait (here: x may come from the
// previous kernel; item() must not read what a kernel writes unless the caller waited already) and the staging.
template <bool FP4, bool Po = false, class Item, class Store>
__device__ __forceinline__ void wo_run(const float* x, i64 ldx, int R, int K, int ks, int cb, int n_items,
                                       const Item& item, const Store& store) {
  extern __shared__ uint4 wo_smem[];
  u8* base = reinterpret_cast<u8*>(wo_smem);
  float4* red = reinterpret_cast<float4*>(base);
  const WoGeom G(K, ks, cb);
  u8* sx = base + kWoRedBytes;
  float* ssc = reinterpret_cast<float*>(sx + R * wo_row_stride(G.S));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int tpc = kWoWarps / ks, ts = warp / ks, p = warp - ts * ks;
  const int groups = (n_items + tpc - 1) / tpc, grp0 = blockIdx.x;
  WoW<FP4> ring[wo_ring_blocks<FP4>()];
  WoRows rows;
  bool live = false;
  if (grp0 < groups) {
    const int it = grp0 * tpc + ts;
    live = it < n_items && item(it, rows);
    if (live) wo_fill<FP4>(ring, rows, G, p, 0);
  }
  grid_dep_wait();
  if (G.nchunks == 1 && grp0 < groups) {
    wo_stage<FP4>(x, ldx, R, G, 0, sx, ssc);
    __syncthreads();
  }
  for (int grp = grp0; grp < groups; grp += gridDim.x) {
    const int it = grp * tpc + ts;
    if (grp != grp0) live = it < n_items && item(it, rows);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int c = 0; c < G.nchunks; ++c) {
      if (G.nchunks > 1) {
        __syncthreads();
        wo_stage<FP4>(x, ldx, R, G, c, sx, ssc);
        __syncthreads();
      }
      if (live) {
        if (grp != grp0 || c > 0) wo_fill<FP4>(ring, rows, G, p, c);
        wo_blocks<FP4, Po>(ring, rows, G, p, c, R, sx, ssc, acc);
      }
    }
    if (ks > 1) {  // fold the K-parts in p order
      red[warp * 32 + lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      __syncthreads();
      if (p == 0)
        for (int q = 1; q < ks; ++q) {
          const float4 o = red[(warp + q) * 32 + lane];
          acc[0] += o.x, acc[1] += o.y, acc[2] += o.z, acc[3] += o.w;
        }
      __syncthreads();
    }
    if (live && p == 0) store(it, acc);
  }
}

}  // namespace smelt_dev
