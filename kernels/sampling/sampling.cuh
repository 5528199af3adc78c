// The arithmetic of token sampling shared, character for character, by the host Sampler
// (kernels/sampling/reference.cc) and the GPU kernels (kernels/sampling/sampling.cu): compiled by the host C++
// compiler and by NVRTC, so that both compute bit-identical weights, nucleus sizes and draws. Every operation is
// a single IEEE operation (+, -, /, an explicit fused multiply-add, floor/ceil, exact conversions): no
// contraction or library exp can round differently on the two sides.
//
// Semantics (docs/sampling.md has the full statement):
//   order     tokens sorted by logit descending (float order, -0 == +0), ties: lower id first.
//   weight    q(l) = floor(2^44 * e^x), x = (double(l) - mx) / temperature, mx = the greedy token's logit,
//             e^x by the polynomial below; q = 0 when x < -31 (e^x < 2^-44), for -inf and for NaN logits.
//   nucleus   need = ceil(top_p * total) in [1, total] (top_p >= 1: total); the shortest prefix of the order
//             whose integer mass reaches need.
//   draw      r = the top 53 bits of splitmix64 output number `step` of a generator seeded with `seed`;
//             target = floor(r * mass / 2^53); the first kept token whose cumulative mass exceeds target.
#pragma once

#ifdef __CUDACC__
#define SMELT_SMP_FN __device__ __forceinline__
#define SMELT_SMP_FMA(a, b, c) __fma_rn(a, b, c)
#define SMELT_SMP_FLOOR(x) floor(x)
#define SMELT_SMP_CEIL(x) ceil(x)
#else
#include <cmath>
#define SMELT_SMP_FN inline
#define SMELT_SMP_FMA(a, b, c) std::fma(a, b, c)
#define SMELT_SMP_FLOOR(x) std::floor(x)
#define SMELT_SMP_CEIL(x) std::ceil(x)
#endif

namespace smelt_sampling {

typedef unsigned long long u64;
typedef unsigned int u32;

// Integer weights: the largest is 2^44, so a vocabulary of up to 2^19 tokens sums below 2^63.
constexpr int kWeightBits = 44;
constexpr u64 kMaxVocab = 1ull << 19;

// splitmix64 output number `step` (0 = the first) of a generator seeded with `seed`: counter-based, so the
// device computes draw `step` without the ones before it. Returns its top 53 bits.
SMELT_SMP_FN u64 draw_bits(u64 seed, u64 step) {
  u64 z = seed + (step + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) >> 11;
}

// A u32 in the order of the logits: larger logit, larger key; -0 and +0 share one; NaN is 0 (below -inf).
SMELT_SMP_FN u32 order_key(float l) {
  if (l != l) return 0;
  if (l == 0.0f) l = 0.0f;
  u32 u;
#ifdef __CUDACC__
  u = __float_as_uint(l);
#else
  __builtin_memcpy(&u, &l, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The logit of a key (order_key's inverse on every non-NaN float).
SMELT_SMP_FN float key_logit(u32 key) {
  const u32 u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
#ifdef __CUDACC__
  return __uint_as_float(u);
#else
  float l;
  __builtin_memcpy(&l, &u, 4);
  return l;
#endif
}

// q(l) = floor(2^44 * e^x), x = (l - mx) / t <= 0. e^x = 2^k * e^r, k = floor(x / ln 2 + 1/2),
// r = x - k ln 2 (two-part ln 2), e^r by its Taylor series to r^12 (|r| <= 0.35: relative error < 2e-16).
SMELT_SMP_FN u64 weight(float l, double mx, double t) {
  double x = (double(l) - mx) / t;
  if (!(x >= -31.0)) return 0;  // NaN, -inf, or e^x < 2^-44
  if (x > 0.0) x = 0.0;         // only when mx is not the maximum (never in the samplers)
  const double k = SMELT_SMP_FLOOR(SMELT_SMP_FMA(x, 0x1.71547652b82fep+0, 0.5));
  double r = SMELT_SMP_FMA(-k, 0x1.62e42feep-1, x);         // ln 2, high part (exact products)
  r = SMELT_SMP_FMA(-k, 0x1.a39ef35793c76p-33, r);          // ln 2, low part
  double p = 0x1.1eed8eff8d898p-29;                         // 1/12!
  p = SMELT_SMP_FMA(p, r, 0x1.ae64567f544e4p-26);           // 1/11!
  p = SMELT_SMP_FMA(p, r, 0x1.27e4fb7789f5cp-22);           // 1/10!
  p = SMELT_SMP_FMA(p, r, 0x1.71de3a556c734p-19);           // 1/9!
  p = SMELT_SMP_FMA(p, r, 0x1.a01a01a01a01ap-16);           // 1/8!
  p = SMELT_SMP_FMA(p, r, 0x1.a01a01a01a01ap-13);           // 1/7!
  p = SMELT_SMP_FMA(p, r, 0x1.6c16c16c16c17p-10);           // 1/6!
  p = SMELT_SMP_FMA(p, r, 0x1.1111111111111p-7);            // 1/5!
  p = SMELT_SMP_FMA(p, r, 0x1.5555555555555p-5);            // 1/4!
  p = SMELT_SMP_FMA(p, r, 0x1.5555555555555p-3);            // 1/3!
  p = SMELT_SMP_FMA(p, r, 0.5);
  p = SMELT_SMP_FMA(p, r, 1.0);
  p = SMELT_SMP_FMA(p, r, 1.0);  // e^r; exactly 1 at r = 0 (the greedy token)
  const int e = int(k) + kWeightBits;  // k in [-45, 0]
  if (e < 0) return 0;
  return u64(p * double(1ull << e));  // an exact scaling, then truncation = floor
}

// The nucleus' integer mass threshold, in [1, total] (total >= 1).
SMELT_SMP_FN u64 nucleus_need(double top_p, u64 total) {
  if (!(top_p < 1.0)) return total;  // also NaN
  const double n = SMELT_SMP_CEIL(top_p * double(total));
  if (!(n >= 1.0)) return 1;
  const u64 need = u64(n);
  return need > total ? total : need;
}

// floor(r * mass / 2^53) for r < 2^53: in [0, mass).
SMELT_SMP_FN u64 draw_target(u64 r, u64 mass) {
#ifdef __CUDACC__
  const u64 hi = __umul64hi(r, mass), lo = r * mass;
#else
  const unsigned __int128 prod = (unsigned __int128)r * mass;
  const u64 hi = u64(prod >> 64), lo = u64(prod);
#endif
  return (hi << 11) | (lo >> 53);
}

}  // namespace smelt_sampling
