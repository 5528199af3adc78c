// Decode (few-row) act-quant GEMV shared by the linear and MoE kernels: the same numbers as dot_rows_aq
// (gemv.cuh), bit for bit, with the work laid out for memory bandwidth.
//
// dot_rows_aq gives each lane one 32-block of a weight row and reads that block's 32 activations straight from
// global memory, 128 bytes apart across the warp: every load instruction touches 32 cache lines, which caps an
// FP8 GEMV near 1 byte of weight per SM clock. Here a block of threads holds one activation row in shared memory
// (16-byte chunks rotated by block index, so 8 neighbouring threads reading the same chunk of 8 consecutive
// blocks hit distinct banks) and spreads the items (output column, K-block) over its threads: consecutive
// threads read consecutive 32-blocks of a weight row, i.e. contiguous memory. Each item's term is computed
// exactly as in dot_rows_aq (an exact integer block sum, rounded once, times activation and weight scale);
// terms go to shared memory and one thread per column adds them in K order in fp32 — the same sum in the same
// order, so the result equals the warp-per-column kernels' bit for bit (and kernels/quant's).
//
// Blocks are persistent over column groups (grid.x = 2 per multiprocessor, all resident) so the row is staged
// once per block, and the term buffer is double-buffered so a group's fold overlaps the next group's loads.
#pragma once
#include "kernels/linear/gemv.cuh"

namespace smelt_dev {

constexpr int kGemvThreads = 512;

// Quantizes row x (K floats, K % 32 == 0) per token in K-blocks of 32 exactly as smelt_act_quant_b32 /
// act_quant_block (one warp per block, lane = element) straight into the rotated staging layout: the GEMVs take
// the float row, so no separate act-quant launch precedes them. Call with all threads; synchronises.
// Every block stages the whole row, so this is on each launch's critical path: a warp loads the values of its
// next 8 blocks before quantizing any (8 loads in flight instead of one load, shuffle and store at a time).
// The staged activation element type: FP4 weights take i32 units (their block sums fit int32 and IMAD is cheap);
// FP8 weights take the units as doubles, for the exact DFMA block sums of block_dot_staged.
template <bool FP4>
struct XStage {
  using type = i32;
};
template <>
struct XStage<false> {
  using type = double;
};

// Position of element `lane` of 32-block b in the staged layout: 16-byte chunks (4 i32 or 2 doubles) rotated by b,
// so 8 neighbouring threads reading the same chunk of 8 consecutive blocks hit distinct banks.
__device__ __forceinline__ int staged_pos(const i32*, int b, int lane) {
  return b * 32 + ((((lane >> 2) + b) & 7) << 2) + (lane & 3);
}
__device__ __forceinline__ int staged_pos(const double*, int b, int lane) {
  return b * 32 + ((((lane >> 1) + b) & 15) << 1) + (lane & 1);
}

// The act quant's block scale s = 2^ceil(log2(max(amax, 1e-4) / 448)) (kernels/quant) and 1 / s. s is a power of
// two: v * (1 / s) is the correctly rounded v / s (one real number, one rounding), so the IEEE division (a
// ~20-instruction subroutine, on every element of every block's staging) becomes a multiply wherever 1 / s is a
// normal float (pow2); the division stays for the rest (inf / NaN activations).
struct ActScale {
  float s, inv;
  bool pow2;
};
__device__ __forceinline__ ActScale act_scale(float amax) {
  const float s = pow2_scale(amax > 1e-4f ? amax : 1e-4f, 1.f / 448.f);
  const u32 ef = (__float_as_uint(s) >> 23) & 0xFFu;
  return {s, __uint_as_float((254u - ef) << 23), (__float_as_uint(s) & 0x807FFFFFu) == 0 && ef >= 2 && ef <= 252};
}

template <typename XT>
__device__ __forceinline__ void gemv_stage_quant(const float* x, int K, XT* xq, float* xsc) {
  constexpr int kAhead = 8;
  const int lane = threadIdx.x & 31, nb = K / 32, nw = blockDim.x >> 5;
  for (int b0 = threadIdx.x >> 5; b0 < nb; b0 += kAhead * nw) {
    float v[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int b = b0 + j * nw;
      v[j] = b < nb ? x[b * 32 + lane] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int b = b0 + j * nw;  // the same for the whole warp: the shuffles below see all 32 lanes
      if (b < nb) {
        float amax = fabsf(v[j]);
        for (int o = 16; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const ActScale a = act_scale(amax);
        const float q = a.pow2 ? __fmul_rn(v[j], a.inv) : __fdiv_rn(v[j], a.s);
        xq[staged_pos(xq, b, lane)] = XT(e4m3_units(e4m3_encode(clampf(q, -448.f, 448.f))));
        if (lane == 0) xsc[b] = a.s;
      }
    }
  }
  __syncthreads();
}

// prmt.b32 in its default mode (a selector nibble with bit 3 set replicates the selected byte's sign bit).
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Four E2M1 nibbles (the low 16 bits of h) -> four bytes from 16-entry tables: the nibble's magnitude (3 bits)
// looked up by byte permute in the positive table (pos_lo | pos_hi) and the negative one, then each byte taken
// from the positive or the negative word by its nibble's sign bit.
__device__ __forceinline__ u32 e2m1x4_lookup(u32 h, u32 pos_lo, u32 pos_hi, u32 neg_lo, u32 neg_hi) {
  const u32 mag = h & 0x7777u;
  const u32 pos = prmt(pos_lo, pos_hi, mag);
  const u32 neg = prmt(neg_lo, neg_hi, mag);
  return prmt(pos, neg, 0x3210u | ((h & 0x8888u) >> 1));
}

// ... their values in units of 0.5 as four signed bytes (e2m1_units): {0,1,2,3,4,6,8,12} and the negatives.
__device__ __forceinline__ u32 e2m1_units4(u32 h) {
  return e2m1x4_lookup(h, 0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);  // 0, -1, -2, -3 | -4, -6, -8, -12
}
// Signed byte j of w as an int (prmt sign replication).
template <int J>
__device__ __forceinline__ i32 sbyte(u32 w) {
  return i32(prmt(w, 0u, u32(J | ((J | 8) << 4) | ((J | 8) << 8) | ((J | 8) << 12))));
}

// The weight bytes of one 32-block: FP8 32 bytes, FP4 16 bytes (read-only path).
template <bool FP4>
struct WBlock {
  uint4 q[FP4 ? 1 : 2];
};
template <bool FP4>
__device__ __forceinline__ WBlock<FP4> load_wblock(const u8* wb) {
  WBlock<FP4> r;
  const uint4* p = reinterpret_cast<const uint4*>(wb);
  r.q[0] = __ldg(p);
  if (!FP4) r.q[FP4 ? 0 : 1] = __ldg(p + 1);
  return r;
}

// Exact block sum of staged block b times the weight block, as a float in real units (block_dot_exact's value).
// FP8: the same exact sum from the staged doubles (XStage<false>) by DFMA on e4m3_units_d (~4 instructions per
// weight instead of ~12 for e4m3_units + a 64-bit multiply-add, which bounded the FP8 GEMVs); a block holding a NaN
// weight code takes the integer path (e4m3_units maps it to 0).
__device__ __forceinline__ float block_dot_staged(const double* xq, int b, const WBlock<false>& wq) {
  const double2* xb = reinterpret_cast<const double2*>(xq) + b * 16;
  const u32 u[8] = {wq.q[0].x, wq.q[0].y, wq.q[0].z, wq.q[0].w, wq.q[1].x, wq.q[1].y, wq.q[1].z, wq.q[1].w};
  u32 nan = 0;
#pragma unroll
  for (int c = 0; c < 8; ++c) nan |= (u[c] & 0x7F7F7F7Fu) + 0x01010101u;  // e4m3x4_nan_bits, masked once below
  if (nan & 0x80808080u) {
    i64 s = 0;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const double2 xa = xb[(2 * c + b) & 15], xc = xb[(2 * c + 1 + b) & 15];
      const u32 v = u[c];
      s += i64(i32(xa.x)) * e4m3_units(u8(v)) + i64(i32(xa.y)) * e4m3_units(u8(v >> 8)) +
           i64(i32(xc.x)) * e4m3_units(u8(v >> 16)) + i64(i32(xc.y)) * e4m3_units(u8(v >> 24));
    }
    return __ll2float_rn(s) * 3.814697265625e-06f;  // 2^-18
  }
  double s0 = 0.0, s1 = 0.0;  // two chains for latency; every partial sum is exact, so the order is free
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const double2 xa = xb[(2 * c + b) & 15], xc = xb[(2 * c + 1 + b) & 15];
    const u32 v = u[c];
    s0 = fma(xa.x, e4m3_units_d<0>(v), s0);
    s1 = fma(xa.y, e4m3_units_d<1>(v), s1);
    s0 = fma(xc.x, e4m3_units_d<2>(v), s0);
    s1 = fma(xc.y, e4m3_units_d<3>(v), s1);
  }
  // (s0 + s1) * 2^1025 is the integer sum; * 2^-18 puts it in real units: one exact scaling by 2^1007, one rounding.
  return __double2float_rn((s0 + s1) * 0x1p1007);
}

// FP4: the exact integer block sum of the staged i32 units (XStage<true>) times four E2M1 nibbles at a time.
__device__ __forceinline__ float block_dot_staged(const i32* xq, int b, const WBlock<true>& wq) {
  const int4* xb = reinterpret_cast<const int4*>(xq) + b * 8;
  const u32 u[4] = {wq.q[0].x, wq.q[0].y, wq.q[0].z, wq.q[0].w};
  i32 s = 0;  // |sum| <= 32 * 229376 * 12 < 2^31
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const int4 x = xb[(c + b) & 7];
    const u32 w4 = e2m1_units4(u[c >> 1] >> (16 * (c & 1)));  // elements 4c .. 4c+3
    s += x.x * sbyte<0>(w4) + x.y * sbyte<1>(w4) + x.z * sbyte<2>(w4) + x.w * sbyte<3>(w4);
  }
  return __int2float_rn(s) * 0.0009765625f;  // units 2^-9 * 0.5
}

// Weight block b of row n (layout: wtile_off) and its scale (FP8: E4M3 [N, K], E8M0 [ceil(N/blk), ceil(K/blk)]; FP4:
// packed [N, K/2], E8M0 [N, K/32]).
template <bool FP4>
__device__ __forceinline__ const u8* wblock_ptr(const u8* w, i64 n, int b, int K, i64 N) {
  return w + wtile_off(n, b, N, FP4 ? K / 2 : K, FP4 ? 16 : 32);
}
template <bool FP4>
__device__ __forceinline__ float wblock_scale(const u8* ws, i64 n, int b, int K, int blk) {
  if (FP4) return e8m0_decode(ws[n * (K / 32) + b]);
  const int sh = blk_log2(blk);
  return e8m0_decode(ws[(n >> sh) * ((K + blk - 1) >> sh) + ((b * 32) >> sh)]);
}

// c = it / nb and b = it % nb for 0 <= it < 2^24 without an integer division (~20 instructions each, per item):
// the float quotient (inv_nb = 1 / nb) is off by at most one, which the remainder fixes.
__device__ __forceinline__ int item_split(int it, int nb, float inv_nb, int& b) {
  int c = __float2int_rz(__fmul_rn(__int2float_rn(it), inv_nb));
  int r = it - c * nb;
  if (r < 0) --c, r += nb;
  else if (r >= nb) ++c, r -= nb;
  b = r;
  return c;
}

// 0 + t[0] + t[1] + ... + t[nb-1] in fp32, in that order (the K-order sum of the block terms). The chain of adds
// is inherently serial; loading 8 terms ahead keeps shared-memory latency off it.
__device__ __forceinline__ float fold_terms(const float* t, int nb) {
  float acc = 0.f;
  int b = 0;
  for (; b + 8 <= nb; b += 8) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = t[b + j];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc = __fadd_rn(acc, v[j]);
  }
  for (; b < nb; ++b) acc = __fadd_rn(acc, t[b]);
  return acc;
}

// Shared-memory bytes of a gemv block: the staged row(s) (x_bytes per element: 4 for FP4 weights, 8 for FP8) +
// scales + 2 term buffers of cpb columns x `terms` terms per column (each padded by one float against bank
// conflicts in the fold).
__host__ __device__ constexpr int gemv_smem_bytes(int K, int rows_staged, int cpb, int terms_per_item, int x_bytes) {
  return rows_staged * (K * x_bytes + (K / 32) * 4) + 2 * cpb * terms_per_item * (K / 32 + 1) * 4;
}

}  // namespace smelt_dev
