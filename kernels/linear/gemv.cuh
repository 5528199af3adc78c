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

// out[r] = sum over K-blocks b in order of fp32(block sum) * xs[r, b] * ws(n, b), for r < nrows (<= RT).
// xu [rows, K] i32 units, xs [rows, K/32] float scales (row strides ldu / lds). K % 32 == 0.
template <bool FP4, int RT>
__device__ __forceinline__ void dot_rows_aq(const i32* xu, i64 ldu, const float* xs, i64 lds, int nrows, const u8* w,
                                            const u8* ws, i64 n, int K, int blk, float* out) {
  const int lane = threadIdx.x & 31;
  const int nb = K / 32;
  float acc[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) acc[r] = 0.f;
  for (int b0 = 0; b0 < nb; b0 += 32) {
    const int b = b0 + lane;
    float term[RT];
    if (b < nb) {
      const u8* wb = FP4 ? w + n * (K / 2) + b * 16 : w + n * K + b * 32;
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
