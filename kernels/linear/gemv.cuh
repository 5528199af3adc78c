// Warp-per-output-column dot products shared by the linear and MoE kernels.
//
// One warp computes y[r, n] = x[r] . W[n] for up to RT rows at once, streaming weight row n once with wide
// coalesced loads (lane l takes the 8-element chunks l, l+32, l+64, ... of the row), accumulating in fp32,
// then folding the 32 lane sums with a fixed butterfly. The order depends only on K, never on the number of
// rows, so a row's result is the same in a 1-row decode and in a many-row chunk.
//
// Act-quant variants (V4.1 FP8 / FP4 weights with per-token E4M3 activations in K-blocks of 32) are exact:
// the 32 products of a block are integers in units of 2^-18 (FP8 x FP8) or 2^-10 (E4M3 x E2M1) summed
// exactly, converted once to float, scaled by activation and weight scale, and the block terms are added in
// K order in fp32, exactly as kernels/quant block_gemm.
#pragma once
#include "kernels/cuda/common.cuh"

namespace smelt_dev {

enum WFormat { kWF32 = 0, kWBF16 = 1, kWF16 = 2, kWFP8 = 3, kWFP4 = 4 };

// The act-quant weights' layout (FP8 E4M3 [N, K] and packed FP4 [N, K/2] matrices that the act-quant linears and
// experts read; the weight-only paths' weights stay row-major). SMELT_W_TILED = 1 (the default on sm_89+, whose
// tensor-core GEMVs read 16 rows x one 32-block per copy: rows K bytes apart, DRAM 21% busy on wo_b): tile order,
// a tile of 16 rows whose 32-block b lies at b * 16 * BB, row r of the tile at r * BB in it (BB = 32 bytes FP8,
// 16 FP4), so a warp's copy of a tile's block is one contiguous run and a tile one stream; the last tile holds
// N % 16 rows when N is not a multiple of 16 (the same bytes as row-major, no padding). The runtime repacks these
// weights at load (runtime/cuda/device_weights.cc); every act-quant reader addresses them through wtile_off.
#ifndef SMELT_W_TILED
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define SMELT_W_TILED 1
#else
#define SMELT_W_TILED 0
#endif
#endif
// Byte offset of 32-block b of row n in an act-quant weight matrix of N rows (row bytes RB, block bytes BB).
__device__ __forceinline__ i64 wtile_off(i64 n, int b, i64 N, i64 RB, int BB) {
#if SMELT_W_TILED
  return tile_order_off(n, b, N, RB, BB);
#else
  (void)N;
  return n * RB + i64(b) * BB;
#endif
}

// Eight consecutive weights of row n starting at k0 (k0 % 8 == 0), dequantized to fp32.
// FP8: E4M3 [N, K] with E8M0 block scales [ceil(N/blk), ceil(K/blk)]; FP4: packed E2M1 [N, K/2] with E8M0
// scales [N, ceil(K/32)].
template <int FMT>
__device__ __forceinline__ void load_w8(const void* w, const u8* ws, i64 n, int k0, int K, int blk, float* v) {
  if (FMT == kWF32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w) + n * K + k0);
    const float4 a = __ldg(p), b = __ldg(p + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else if (FMT == kWBF16 || FMT == kWF16) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(static_cast<const u16*>(w) + n * K + k0));
    const u32 u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (FMT == kWBF16) {
        v[2 * j] = __uint_as_float(u[j] << 16);
        v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
      } else {
        v[2 * j] = f16_to_f32(u16(u[j] & 0xffff));
        v[2 * j + 1] = f16_to_f32(u16(u[j] >> 16));
      }
    }
  } else if (FMT == kWFP8) {
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(static_cast<const u8*>(w) + n * K + k0));
    const int sh = blk_log2(blk), sc = (K + blk - 1) >> sh;
    const float s = e8m0_decode(ws[(n >> sh) * sc + (k0 >> sh)]);
    e4m3x4_decode(q.x, v);
    e4m3x4_decode(q.y, v + 4);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] *= s;
  } else {  // kWFP4
    const u32 q = __ldg(reinterpret_cast<const u32*>(static_cast<const u8*>(w) + n * (K / 2) + k0 / 2));
    const float s = e8m0_decode(ws[n * ((K + 31) / 32) + k0 / 32]);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = e2m1_decode(u8((q >> (4 * j)) & 0xF)) * s;
  }
}

// out[r] = x[r*ldx .. +K] . W[n] for r < nrows (<= RT); every lane gets the sums. K % 8 == 0, x 16-byte aligned
// rows (ldx % 4 == 0).
template <int FMT, int RT>
__device__ __forceinline__ void dot_rows(const float* x, i64 ldx, int nrows, const void* w, const u8* ws, i64 n, int K,
                                         int blk, float* out) {
  const int lane = threadIdx.x & 31;
  float acc[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) acc[r] = 0.f;
  const int chunks = K / 8;
  // The weights of U chunks (lane's c, c+32, ...) are loaded before any is used, so U loads are in flight per lane;
  // the chunks are still accumulated in increasing c, the order the sums have always had.
  constexpr int U = 4;
  for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
    float v[U][8];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c0 + 32 * u < chunks) load_w8<FMT>(w, ws, n, (c0 + 32 * u) * 8, K, blk, v[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c >= chunks) break;
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        if (r < nrows) {
          const float4* xp = reinterpret_cast<const float4*>(x + r * ldx + c * 8);
          const float4 a = xp[0], b = xp[1];
          float s = acc[r];
          s = fmaf(a.x, v[u][0], s), s = fmaf(a.y, v[u][1], s), s = fmaf(a.z, v[u][2], s), s = fmaf(a.w, v[u][3], s);
          s = fmaf(b.x, v[u][4], s), s = fmaf(b.y, v[u][5], s), s = fmaf(b.z, v[u][6], s), s = fmaf(b.w, v[u][7], s);
          acc[r] = s;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < RT; ++r) out[r] = warp_sum(acc[r]);
}

// ---- one row, several columns (decode: smelt_linear_*_r1) ------------------------------------------------------
//
// The same sums as dot_rows<FMT, 1>, laid out for bandwidth: a warp takes C columns at once (each activation chunk
// is loaded once for all C), and keeps D chunks' weights in flight per column in a ring of registers (loaded
// before the chunks ahead of them are summed, with L1 left to the activations). Each column's lane l still
// walks chunks l, l+32, ... in order with the 8 products in order, and the sums fold with warp_sum: the same bits.

// Raw weights of one 8-element chunk: 32 (f32), 16 (bf16 / f16), 8 (FP8) or 4 (FP4) bytes.
template <int FMT>
struct W8Raw {
  static constexpr int R = FMT == kWF32 ? 8 : (FMT == kWFP8 ? 2 : (FMT == kWFP4 ? 1 : 4));
  u32 q[R];
};

// Chunks in flight per column for dot_cols_r1 with C columns a warp: a ring of ~16 registers of raw weights per lane
// (an FP4 chunk's scale byte counted as one), 2 .. 8 chunks: FP8 8 / 4 / 2 for C = 1 / 2 / 4 (more spills under the
// r1 kernels' register bounds).
#ifndef SMELT_R1_RING_REGS
// 32 (with smelt_linear_fp8_r1 at two blocks an SM, SMELT_R1_FP8_MIN_BLOCKS=2, so that it does not spill) measured
// slower: 1.172 -> 1.192 ms (sm_90 path), 1.288 -> 1.344 (sm_80 path), H200 session 16
#define SMELT_R1_RING_REGS 16
#endif
template <int FMT, int C>
__device__ constexpr int r1_depth() {
  constexpr int R = FMT == kWFP4 ? 2 : W8Raw<FMT>::R, DR = SMELT_R1_RING_REGS / (C * R);
  return DR < 2 ? 2 : (DR > 8 ? 8 : DR);
}

#ifndef SMELT_R1_FULL_STEPS
// dot_cols_r1: a round of D chunks wholly in range (with their refills) runs without a check between chunks
#define SMELT_R1_FULL_STEPS 1
#endif

// Streaming weight load: read once, so not kept in L1 (the activation row is, for every column of the SM), and with
// SMELT_W_EVICT_FIRST first out of the L2 (common.cuh).
#if SMELT_W_EVICT_FIRST
#define SMELT_W8_LD "ld.global.nc.L1::no_allocate.L2::cache_hint"
#define SMELT_W8_POL , "l"(l2_evict_first())
#define SMELT_W8_P(n) ", %" #n
#else
#define SMELT_W8_LD "ld.global.nc.L1::no_allocate"
#define SMELT_W8_POL
#define SMELT_W8_P(n)
#endif
template <int FMT>
__device__ __forceinline__ void w8_fetch(const u8* p, W8Raw<FMT>& r) {
  if constexpr (W8Raw<FMT>::R == 1) {
    asm(SMELT_W8_LD ".u32 %0, [%1]" SMELT_W8_P(2) ";" : "=r"(r.q[0]) : "l"(p) SMELT_W8_POL);
  } else if constexpr (W8Raw<FMT>::R == 2) {
    asm(SMELT_W8_LD ".v2.u32 {%0, %1}, [%2]" SMELT_W8_P(3) ";" : "=r"(r.q[0]), "=r"(r.q[1]) : "l"(p) SMELT_W8_POL);
  } else {
#pragma unroll
    for (int h = 0; h < W8Raw<FMT>::R / 4; ++h)
      asm(SMELT_W8_LD ".v4.u32 {%0, %1, %2, %3}, [%4]" SMELT_W8_P(5) ";"
          : "=r"(r.q[4 * h]), "=r"(r.q[4 * h + 1]), "=r"(r.q[4 * h + 2]), "=r"(r.q[4 * h + 3])
          : "l"(p + 16 * h) SMELT_W8_POL);
  }
}
#undef SMELT_W8_LD
#undef SMELT_W8_POL
#undef SMELT_W8_P

// The four E4M3 codes of v times S = 2^120 * scale, bit for bit e4m3x4_decode(v)[j] * scale when no byte of v is a
// NaN code and S is finite (scale codes <= 134): e4m3x4_decode's 2^-120-scaled bits (sign at 31, exponent and
// mantissa at 20..26; the arithmetic shift brings the sign down with them and the mask keeps bit 31 of it) times
// 2^120 is exact, so one rounding of bits * S is the same as the two multiplies' one inexact rounding. ~2.75
// integer ops and one multiply per code.
__device__ __forceinline__ void e4m3x4_scaled(u32 v, float S, float* out) {
  out[0] = __uint_as_float(u32(i32(v << 24) >> 4) & 0x87F00000u) * S;
  out[1] = __uint_as_float(u32(i32(v << 16) >> 4) & 0x87F00000u) * S;
  out[2] = __uint_as_float(u32(i32(v << 8) >> 4) & 0x87F00000u) * S;
  out[3] = __uint_as_float(u32(i32(v) >> 4) & 0x87F00000u) * S;
}

// Bit 7 of a byte of the result is set when that byte of v is an E4M3 NaN code (0x7F / 0xFF): only those cross
// 0x80 or wrap when 1 is added (the carry out of a wrapped 0xFF can only add false positives beside a true one).
__device__ __forceinline__ u32 e4m3x4_nan_flip(u32 v) { return (v + 0x01010101u) ^ v; }

// out[j] = x . W[n0 + j] for j < C (columns past nlast repeat nlast: loaded, summed, not meant to be stored), x one
// row of K floats (16-byte aligned); prefetched() runs once the first weight chunks are in flight, before x is
// read. FP8: columns n0 .. n0 + C - 1 share their scales (n0 % C == 0, C <= blk), and the decode is one multiply by
// 2^120 * scale (e4m3x4_scaled); the rare codes it does not cover are summed again.
struct NoHook {
  __device__ void operator()() const {}
};
template <int FMT, int C, int D, class Prefetched = NoHook>
__device__ __forceinline__ void dot_cols_r1(const float* x, const void* w, const u8* ws, i64 n0, i64 nlast, int K,
                                            int blk, float* out, Prefetched prefetched = {}) {
  const int lane = threadIdx.x & 31;
  const int chunks = K / 8;
  const int cnt = lane < chunks ? (chunks - 1 - lane) / 32 + 1 : 0;  // this lane's chunks: lane + 32 i, i < cnt
  constexpr int EB = FMT == kWF32 ? 4 : (FMT == kWFP8 ? 1 : 2);     // bytes per element (FP4: half a byte, below)
  constexpr int SC = FMT == kWFP4 ? C : 1;                           // scale bytes per chunk: per row for FP4
  const u8* wrow[C];
  const u8* srow[SC];
  int ssh = 0;  // scale index = k0 >> ssh
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const i64 n = n0 + j < nlast ? n0 + j : nlast;
    wrow[j] = FMT == kWFP4 ? static_cast<const u8*>(w) + n * (K / 2) : static_cast<const u8*>(w) + n * K * EB;
    if (FMT == kWFP8 && j == 0) {
      ssh = blk_log2(blk);
      srow[0] = ws + (n >> ssh) * ((K + blk - 1) >> ssh);
    } else if (FMT == kWFP4) {
      srow[j < SC ? j : 0] = ws + n * ((K + 31) / 32);
      ssh = 5;
    }
  }
  float acc[C];
  u32 nan[C], emax = 0u;  // FP8: bit 7 of a byte set once a NaN code was met (e4m3x4_nan_flip); largest scale code
#pragma unroll
  for (int j = 0; j < C; ++j) acc[j] = 0.f, nan[j] = 0u;

  W8Raw<FMT> q[D][C];
  u32 e[D][SC];
  auto fetch = [&](int slot, int i) {
    const int k0 = (lane + 32 * i) * 8;
#pragma unroll
    for (int j = 0; j < C; ++j) w8_fetch<FMT>(wrow[j] + (FMT == kWFP4 ? k0 / 2 : k0 * EB), q[slot][j]);
    if (FMT == kWFP8 || FMT == kWFP4)
#pragma unroll
      for (int j = 0; j < SC; ++j) e[slot][j] = __ldg(srow[j] + (k0 >> ssh));
  };
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (d < cnt) fetch(d, d);
  // The first weights are in flight: `prefetched` (the linear r1 kernels, which start with their weights: their
  // dependent-launch wait, before x is read).
  prefetched();

  // Chunk i from ring slot d (d constant once unrolled).
  auto step = [&](int d, int i) {
    const float4* xp = reinterpret_cast<const float4*>(x + (lane + 32 * i) * 8);
    const float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
    for (int j = 0; j < C; ++j) {
      float v[8];
      const u32* r = q[d][j].q;
      if (FMT == kWF32) {
#pragma unroll
        for (int t = 0; t < 8; ++t) v[t] = __uint_as_float(r[t]);
      } else if (FMT == kWBF16) {
#pragma unroll
        for (int t = 0; t < 4; ++t)
          v[2 * t] = __uint_as_float(r[t] << 16), v[2 * t + 1] = __uint_as_float(r[t] & 0xffff0000u);
      } else if (FMT == kWF16) {
#pragma unroll
        for (int t = 0; t < 4; ++t)
          v[2 * t] = f16_to_f32(u16(r[t] & 0xffff)), v[2 * t + 1] = f16_to_f32(u16(r[t] >> 16));
      } else if (FMT == kWFP8) {
        const float S = __uint_as_float((e[d][0] + 120u) << 23);  // 2^120 * e8m0_decode(code), code <= 134
        emax = e[d][0] > emax ? e[d][0] : emax;
        nan[j] |= e4m3x4_nan_flip(r[0]) | e4m3x4_nan_flip(r[1]);
        e4m3x4_scaled(r[0], S, v);
        e4m3x4_scaled(r[1], S, v + 4);
      } else {  // kWFP4, as load_w8
        const float s = e8m0_decode(u8(e[d][j < SC ? j : 0]));
#pragma unroll
        for (int t = 0; t < 8; ++t) v[t] = e2m1_decode(u8((r[0] >> (4 * t)) & 0xF)) * s;
      }
      float s = acc[j];
      s = fmaf(a.x, v[0], s), s = fmaf(a.y, v[1], s), s = fmaf(a.z, v[2], s), s = fmaf(a.w, v[3], s);
      s = fmaf(b.x, v[4], s), s = fmaf(b.y, v[5], s), s = fmaf(b.z, v[6], s), s = fmaf(b.w, v[7], s);
      acc[j] = s;
    }
  };
  for (int i0 = 0; i0 < cnt; i0 += D) {
    if (SMELT_R1_FULL_STEPS && i0 + 2 * D <= cnt) {
      // D chunks and their refills all in range: no check between them, so that the compiler can interleave them.
#pragma unroll
      for (int d = 0; d < D; ++d) {
        step(d, i0 + d);
        fetch(d, i0 + d + D);
      }
    } else {
#pragma unroll
      for (int d = 0; d < D; ++d) {
        const int i = i0 + d;
        if (i < cnt) {
          step(d, i);
          if (i + D < cnt) fetch(d, i + D);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < C; ++j) {
    out[j] = warp_sum(acc[j]);
    // FP8 columns with a NaN code (summed as 480 * scale above) or a scale code > 134 (2^120 * scale not finite):
    // summed again one code at a time, load_w8's values (e4m3_decode(code) * scale) in the same order. A compact
    // loop: no real checkpoint gets here.
    if (FMT == kWFP8 && __any_sync(0xffffffffu, (nan[j] & 0x80808080u) != 0u || emax > 134u)) {
      const u8* wr = wrow[j];
      float s = 0.f;
#pragma unroll 1
      for (int c = lane; c < chunks; c += 32) {
        const float sc = e8m0_decode(__ldg(srow[0] + ((c * 8) >> ssh)));
        const unsigned long long q8 = __ldg(reinterpret_cast<const unsigned long long*>(wr + c * 8));
#pragma unroll 1
        for (int t = 0; t < 8; ++t) s = fmaf(__ldg(x + c * 8 + t), e4m3_decode(u8(q8 >> (8 * t))) * sc, s);
      }
      out[j] = warp_sum(s);
    }
  }
}

// ---- act-quant (exact) ---------------------------------------------------------------------------------------

// Sum over one 32-block of a row: activations xu (E4M3 values in units of 2^-9, 32 ints) times weights.
// Returns the exact block sum as a float in real units (rounded once, RNE).
template <bool FP4>
__device__ __forceinline__ float block_dot_exact(const i32* xu, const u8* wb) {
  if (FP4) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(wb));  // 16 bytes = 32 nibbles
    const u32 u[4] = {q.x, q.y, q.z, q.w};
    i32 s = 0;  // |sum| <= 32 * 229376 * 12 < 2^31
#pragma unroll
    for (int j = 0; j < 32; ++j) s += xu[j] * e2m1_units(u8((u[j >> 3] >> (4 * (j & 7))) & 0xF));
    return __int2float_rn(s) * 0.0009765625f;  // units 2^-9 * 0.5
  } else {
    const uint4* p = reinterpret_cast<const uint4*>(wb);
    const uint4 q0 = __ldg(p), q1 = __ldg(p + 1);
    const u32 u[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    i64 s = 0;
#pragma unroll
    for (int j = 0; j < 32; ++j) s += i64(xu[j]) * i64(e4m3_units(u8(u[j >> 2] >> (8 * (j & 3)))));
    return __ll2float_rn(s) * 3.814697265625e-06f;  // 2^-18
  }
}

// out[r] = sum over K-blocks b in order of fp32(block sum) * xs[r, b] * ws(n, b), for r < nrows (<= RT); W has N
// rows (wtile_off). xu [rows, K] i32 units, xs [rows, K/32] float scales (row strides ldu / lds). K % 32 == 0.
template <bool FP4, int RT>
__device__ __forceinline__ void dot_rows_aq(const i32* xu, i64 ldu, const float* xs, i64 lds, int nrows, const u8* w,
                                            const u8* ws, i64 n, i64 N, int K, int blk, float* out) {
  const int lane = threadIdx.x & 31;
  const int nb = K / 32;
  float acc[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) acc[r] = 0.f;
  for (int b0 = 0; b0 < nb; b0 += 32) {
    const int b = b0 + lane;
    float term[RT];
    if (b < nb) {
      const u8* wb = w + wtile_off(n, b, N, FP4 ? K / 2 : K, FP4 ? 16 : 32);
      const float sw = FP4 ? e8m0_decode(ws[n * nb + b])
                           : e8m0_decode(ws[(n >> blk_log2(blk)) * ((K + blk - 1) >> blk_log2(blk)) + ((b * 32) >> blk_log2(blk))]);
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        term[r] = 0.f;
        if (r < nrows) {
          const float bs = block_dot_exact<FP4>(xu + r * ldu + b * 32, wb);
          term[r] = __fmul_rn(__fmul_rn(bs, xs[r * lds + b]), sw);
        }
      }
    }
    const int cnt = nb - b0 < 32 ? nb - b0 : 32;
    for (int j = 0; j < cnt; ++j)
#pragma unroll
      for (int r = 0; r < RT; ++r) acc[r] = __fadd_rn(acc[r], __shfl_sync(0xffffffffu, term[r], j));
  }
#pragma unroll
  for (int r = 0; r < RT; ++r) out[r] = acc[r];
}

// Per-token E4M3 activation quantization in K-blocks of 32 (kernels/quant act_quant): one warp per block,
// lane = element. xu gets the E4M3 value in units of 2^-9, xs the power-of-two scale.
__device__ __forceinline__ void act_quant_block(const float* x, i32* xu, float* xs) {
  const int lane = threadIdx.x & 31;
  const float v = x[lane];
  float amax = fabsf(v);
  for (int o = 16; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = pow2_scale(amax > 1e-4f ? amax : 1e-4f, 1.f / 448.f);
  xu[lane] = e4m3_units(e4m3_encode(clampf(__fdiv_rn(v, s), -448.f, 448.f)));
  if (lane == 0) *xs = s;
}

}  // namespace smelt_dev
