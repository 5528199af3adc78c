// Shared device helpers of the smelt CUDA kernels (compiled by NVRTC with no toolkit header on the include
// path, so every type and number format is spelled out here with bit operations).
//
// Number formats mirror kernels/quant/reference.cc and kernels/bf16.h exactly (RNE, saturation, NaN rules):
// the quantized paths of the kernels are bit-exact against the cpu reference.
//
// Row-count invariance: every kernel computes a row's result with a reduction order fixed by the row's own
// sizes (K, head_dim, ...), never by how many rows the chunk has, so a row decoded alone equals the same row
// inside a speculative-verification chunk.
#pragma once

typedef signed char i8;
typedef unsigned char u8;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

namespace smelt_dev {

// Per-chunk values in device memory (runtime/cuda/launch.h StepInfo): graphs replay without re-baking p0.
struct StepInfo {
  i64 p0;
  i32 rows;
  i32 pad;
};

// Weight element types the float-weight kernels accept (plan DType values of schemas/plan.fbs).
enum WDType { kF32 = 0, kBF16 = 1, kF16 = 2 };

// Programmatic dependent launch (sm_90+; the runtime launches with it where the arch has it, SMELT_CUDA_PDL=0 off):
// the next kernel of the stream may be scheduled while this one finishes, so every kernel entry calls
// grid_dep_wait() before it touches global memory (it returns once the previous kernel has completed and its writes
// are visible; a no-op without a programmatic dependency or below sm_90), then grid_dep_launch() to let its own
// successor be scheduled once all of this grid's blocks are resident.
__device__ __forceinline__ void grid_dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
// Both, at the top of every extern "C" kernel.
#define SMELT_KERNEL_PROLOGUE() (smelt_dev::grid_dep_wait(), smelt_dev::grid_dep_launch())
// Instead, for a kernel that first reads inputs no kernel writes (weights): its body calls grid_dep_wait() before
// it reads anything else (test_kernels_nvrtc checks the family calls it), so the weight loads overlap the previous
// kernel's tail.
#define SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST() smelt_dev::grid_dep_launch()
// Or: the body calls both, grid_dep_launch() only once what its successors may read early is final (the routed
// experts' up: after its wait, so that the down, launched once every up block got there, may read the routing's expert
// indices before its own wait).
#define SMELT_KERNEL_PROLOGUE_IN_BODY()

// An int written by a kernel that has completed but that this grid has not waited for (see
// SMELT_KERNEL_PROLOGUE_IN_BODY), read from L2: this multiprocessor's L1 may hold the line from an earlier launch.
__device__ __forceinline__ i32 ld_l2(const i32* p) { return __ldcg(p); }
// A load that later loads do not pass and that sees what was released before it at GPU scope (the routed experts'
// slot counters, kernels/moe/moe_mma.cu: an acquire at GPU scope also keeps this SM's L1 from serving older lines).
__device__ __forceinline__ u32 ld_acquire_gpu(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(u32(h) << 16); }

// IEEE half -> float, by bits (no cuda_fp16.h).
__device__ __forceinline__ float f16_to_f32(u16 h) {
  const u32 sign = u32(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) {
    const float v = float(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}

// Element i of a float weight of type dt (F32 / BF16 / F16).
__device__ __forceinline__ float ldw(const void* p, i64 i, int dt) {
  if (dt == kBF16) return bf16_to_f32(static_cast<const u16*>(p)[i]);
  if (dt == kF16) return f16_to_f32(static_cast<const u16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// kernels/bf16.h round_bf16: RNE; NaN stays a quiet NaN with its sign.
__device__ __forceinline__ float round_bf16(float x) {
  u32 u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u | 0x00400000u) & 0xffff0000u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  return __uint_as_float(u);
}

// Tile order of a quantized weight matrix (kernels/linear/gemv.cuh wtile_off; written by smelt_tile_weight): byte
// offset of 32-block b of row n, N rows of RB bytes, BB bytes a block. Tiles of 16 rows (the last one N % 16 when N
// is not a multiple of 16), block b of a tile at b * rows * BB, row r of the tile at r * BB in it.
__host__ __device__ __forceinline__ i64 tile_order_off(i64 n, i64 b, i64 N, i64 RB, i64 BB) {
  const i64 t0 = n & ~i64(15);
  const i64 nr = N - t0 < 16 ? N - t0 : 16;  // rows of this tile
  return t0 * RB + b * nr * BB + (n - t0) * BB;
}

// FP4 pair order: the layout of the weight-only tensor-core experts' packed E2M1 codes (kernels/linear/gemv_wo_mma.cuh
// e2m1_pairs_po decodes it; written at load by smelt_fp4_pair_order, runtime/cuda/device_weights.cc). Each 32-bit
// word keeps its 8 codes (k 8t .. 8t + 7 of a row: nibble i of the row-major word is k 8t + i), with their bits
// moved so that f16 pair j = (n_j, n_{j+4}) as values * 2^-14 (magnitude at bits 9-11, sign at 15 of each half) is
// one mask of the word (j = 0), of the word << 8 (j = 1), of its bit reverse (j = 2) or of that << 8 (j = 3):
// 7 instructions for 8 weights where the row-major nibbles take 15 (two shifts a pair: sign and magnitude sit 3
// bits apart in a nibble, 4 in an f16). Code n_{j+4h} (h = 0, 1), magnitude bit b (0: mantissa, 1-2: exponent):
//   j = 0: magnitude at 16h + 9 + b, sign at 16h + 15     j = 1: magnitude at 16h + 1 + b, sign at 16h + 7
//   j = 2: magnitude at 22 - 16h - b, sign at 16 - 16h    j = 3: magnitude at 30 - 16h - b, sign at 24 - 16h
// (tests/kernels_cuda/harness.h fp4_pair_order is the host copy the GPU tests write their weights with.)
__device__ __forceinline__ u32 fp4_pair_order(u32 w) {
  u32 q = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const u32 n = (w >> (4 * i)) & 15u;
    const int j = i & 3, h = i >> 2;
    const int m0 = j == 0 ? 16 * h + 9 : j == 1 ? 16 * h + 1 : j == 2 ? 22 - 16 * h : 30 - 16 * h;
    const int step = j < 2 ? 1 : -1;  // bit b of the magnitude at m0 + step * b
    const int sb = j == 0 ? 16 * h + 15 : j == 1 ? 16 * h + 7 : j == 2 ? 16 - 16 * h : 24 - 16 * h;
#pragma unroll
    for (int b = 0; b < 3; ++b) q |= ((n >> b) & 1u) << (m0 + step * b);
    q |= (n >> 3) << sb;
  }
  return q;
}

// cp.async (sm_80+): 16 bytes global -> shared without registers; src_bytes 0 writes zeros.
__device__ __forceinline__ u32 smem_addr(const void* p) {
  u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
// Weights are read once a step: their streaming loads (the GEMV rings' cp.async, the one-row kernels' w8_fetch)
// carry an L2 evict-first policy, so that the ~2.6 GB a step streams through the 50 MB L2 does not push out what is
// read again soon (kernel code: each launch fetches its instructions through the L2; activations, scales, states).
// V4.1 slice on the H200: 1.252 -> 1.213 ms a step (sm_90 path), 1.380 -> 1.368 (sm_80 path), three alternating
// pairs; docs/performance.md "Session 16". -DSMELT_W_EVICT_FIRST=0 (a plan-time define): plain loads.
#ifndef SMELT_W_EVICT_FIRST
#define SMELT_W_EVICT_FIRST 1
#endif
// The evict-first policy (not volatile: the compiler may share one register for all uses).
__device__ __forceinline__ u64 l2_evict_first() {
  u64 p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// The same to a shared-space address with an L2 prefetch hint (the L2 fetches the aligned PF bytes, 64, 128 or 256,
// around src; 0: none), issued only when ok (a predicate, not a branch: no reconvergence barrier).
template <int PF>
__device__ __forceinline__ void cp_async16_pf_if(u32 dst, const void* src, int src_bytes, bool ok) {
#if SMELT_W_EVICT_FIRST
#define SMELT_CP_ASYNC_IF(HINT)                                                                                    \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %3, 0;\n@p cp.async.cg.shared.global.L2::cache_hint" HINT           \
               " [%0], [%1], 16, %2, %4; }" ::"r"(dst), "l"(src), "r"(src_bytes), "r"(int(ok)), "l"(l2_evict_first()) \
               : "memory")
#else
#define SMELT_CP_ASYNC_IF(HINT)                                                                               \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %3, 0;\n@p cp.async.cg.shared.global" HINT " [%0], [%1], 16, %2; }" \
               ::"r"(dst), "l"(src), "r"(src_bytes), "r"(int(ok)) : "memory")
#endif
  if constexpr (PF == 64) SMELT_CP_ASYNC_IF(".L2::64B");
  else if constexpr (PF == 128) SMELT_CP_ASYNC_IF(".L2::128B");
  else if constexpr (PF == 256) SMELT_CP_ASYNC_IF(".L2::256B");
  else SMELT_CP_ASYNC_IF("");
#undef SMELT_CP_ASYNC_IF
}
// 4 bytes global -> shared (cp.async.ca: 4-byte copies go through L1), zero-filled past src_bytes (0 or 4).
__device__ __forceinline__ void cp_async4_zfill(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Every cp.async of this thread has landed (committed or not).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// ---- E4M3 (FN) ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float e4m3_decode(u8 code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const bool neg = code & 0x80;
  float v;
  if (e == 15 && m == 7) return __uint_as_float(0x7fc00000u);
  if (e == 0) v = float(m) * 0.001953125f;                          // m * 2^-9
  else v = __uint_as_float(u32(e + 120) << 23) * float(8 + m) * 0.125f;  // (8+m)/8 * 2^(e-7), exact
  return neg ? -v : v;
}

// |value| of a finite E4M3 code in units of 2^-9 (exact integer, <= 448 * 512); NaN codes give 0.
__device__ __forceinline__ i32 e4m3_units(u8 code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  if (e == 15 && m == 7) return 0;
  const i32 v = e == 0 ? m : (8 + m) << (e - 1);
  return (code & 0x80) ? -v : v;
}

// Round to nearest even, saturating to +-448; NaN keeps its sign (0x7F / 0xFF). Every step is exact in float
// (power-of-two scalings and rintf), as the reference's double steps are.
__device__ __forceinline__ u8 e4m3_encode(float x) {
  const u32 bits = __float_as_uint(x);
  const u8 sign = (bits >> 31) ? 0x80 : 0x00;
  if ((bits & 0x7fffffffu) > 0x7f800000u) return sign | 0x7F;
  const float a = __uint_as_float(bits & 0x7fffffffu);
  if (a >= 448.f) return sign | 0x7E;
  if (a < 0.015625f) return sign | u8(rintf(a * 512.f));  // subnormals (2^-6 -> code 8)
  const int e = int((__float_as_uint(a) >> 23) & 0xff) - 127;  // a in [2^e, 2^(e+1))
  int q = int(rintf(a * __uint_as_float(u32(127 + 3 - e) << 23)));  // in [8, 16]
  int biased = e + 7;
  if (q == 16) q = 8, ++biased;
  const int code = (biased << 3) | (q - 8);
  return sign | u8(code < 0x7E ? code : 0x7E);
}

__device__ __forceinline__ float e4m3_round(float x) { return e4m3_decode(e4m3_encode(x)); }

// Whether any byte of v is an E4M3 NaN code (0x7F / 0xFF).
// (Bytes of v & 0x7F7F7F7F are <= 0x7F, so + 1 per byte never carries into the next byte and sets bit 7 exactly
// for 0x7F; __vcmpeq4 is emulated by several instructions on sm_80+.)
__device__ __forceinline__ u32 e4m3x4_nan_bits(u32 v) { return ((v & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u; }
__device__ __forceinline__ bool e4m3x4_has_nan(u32 v) { return e4m3x4_nan_bits(v) != 0; }
// v with its E4M3 NaN code bytes set to 0 (e4m3_units' value for them).
__device__ __forceinline__ u32 e4m3x4_nan_to_zero(u32 v) { return v & ~((e4m3x4_nan_bits(v) >> 7) * 0xFFu); }

// log2 of an FP8 weight block edge: the launchers pass powers of two only (runtime fp8_weight_block: 32 .. 4096),
// so scale indices are shifts, not integer divisions (~20 instructions each).
__device__ __forceinline__ int blk_log2(int blk) { return __ffs(blk) - 1; }

// The four E4M3 codes in the bytes of v as floats, exactly e4m3_decode's values (NaN codes included), without its
// branches: a code's exponent and mantissa bits placed at bits 20..26 of an fp32 give 2^-120 times its value (a
// subnormal when e = 0, which --ftz=false keeps), and the multiply by 2^120 is exact. ~3 integer ops and one
// multiply per code; decoding, not memory, bounded the FP8 GEMVs with e4m3_decode.
__device__ __forceinline__ void e4m3x4_decode(u32 v, float* out) {
  if (e4m3x4_has_nan(v)) {  // rare: the exact slow path
#pragma unroll
    for (int j = 0; j < 4; ++j) out[j] = e4m3_decode(u8(v >> (8 * j)));
    return;
  }
  out[0] = __uint_as_float(((v << 20) & 0x07F00000u) | ((v << 24) & 0x80000000u)) * 0x1p120f;
  out[1] = __uint_as_float(((v << 12) & 0x07F00000u) | ((v << 16) & 0x80000000u)) * 0x1p120f;
  out[2] = __uint_as_float(((v << 4) & 0x07F00000u) | ((v << 8) & 0x80000000u)) * 0x1p120f;
  out[3] = __uint_as_float(((v >> 4) & 0x07F00000u) | (v & 0x80000000u)) * 0x1p120f;
}

// E4M3 code byte J of v as a double equal to e4m3_units(code) * 2^-1025 (a subnormal when e = 0): the code's
// exponent and mantissa bits placed at bits 49..55, its sign at bit 63. Sums of products of these with integer
// doubles are exact (multiples of 2^-1025 below 2^41 units need < 53 bits), so a DFMA chain reproduces the exact
// integer block sum in ~3 integer ops and one DFMA per code. NaN codes are the caller's business.
template <int J>
__device__ __forceinline__ double e4m3_units_d(u32 v) {
  const u32 em = (J == 3 ? (v >> 7) : (v << (17 - 8 * J))) & 0x00FE0000u;
  const u32 sign = (J == 3 ? v : (v << (24 - 8 * J))) & 0x80000000u;
  return __hiloint2double(int(em | sign), 0);
}

// ---- E8M0 --------------------------------------------------------------------------------------------------

// By selects, no branches: it sits in the GEMVs' per-block loops.
__device__ __forceinline__ float e8m0_decode(u8 e) {
  const float n = __uint_as_float(u32(e) << 23);
  return e == 0 ? __uint_as_float(0x00400000u) : (e == 255 ? __uint_as_float(0x7fc00000u) : n);  // 2^-127 / NaN
}

// ---- E2M1 --------------------------------------------------------------------------------------------------

__device__ __forceinline__ float e2m1_decode(u8 nibble) {
  const int m = nibble & 7;
  const float v = m < 4 ? 0.5f * float(m) : (m == 4 ? 2.f : (m == 5 ? 3.f : (m == 6 ? 4.f : 6.f)));
  return (nibble & 8) ? -v : v;
}

// |value| in units of 0.5 (exact integer <= 12), signed.
__device__ __forceinline__ i32 e2m1_units(u8 nibble) {
  const int m = nibble & 7;
  const i32 v = m < 4 ? m : (m == 4 ? 4 : (m == 5 ? 6 : (m == 6 ? 8 : 12)));
  return (nibble & 8) ? -v : v;
}

__device__ __forceinline__ u8 e2m1_encode(float x) {
  const u32 bits = __float_as_uint(x);
  const u8 sign = (bits >> 31) ? 0x8 : 0x0;
  if ((bits & 0x7fffffffu) > 0x7f800000u) return sign | 0x7;
  const float a = __uint_as_float(bits & 0x7fffffffu);
  if (a >= 6.f) return sign | 0x7;
  int code;
  if (a < 2.f) code = int(rintf(a * 2.f));
  else if (a < 4.f) code = int(rintf(a)) + 2;
  else code = int(rintf(a * 0.5f)) + 4;
  return sign | u8(code);
}

__device__ __forceinline__ float e2m1_round(float x) { return e2m1_decode(e2m1_encode(x)); }

// 2^ceil(log2(amax * max_inv)) from the fp32 bits of the product (kernels/quant pow2_scale).
__device__ __forceinline__ float pow2_scale(float amax, float max_inv) {
  const u32 b = __float_as_uint(__fmul_rn(amax, max_inv));
  const int e = int((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0 ? 1 : 0);
  return __uint_as_float(u32(e + 127) << 23);
}

__device__ __forceinline__ float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// The reference's fake-quant scales (kernels/quant).
__device__ __forceinline__ float window_kv_scale(float amax) {
  return pow2_scale(amax > 1e-4f ? amax : 1e-4f, 1.f / 448.f);
}
__device__ __forceinline__ float compressed_kv_scale(float amax) {
  const float floor6 = 6.f * 0.001953125f;
  return e4m3_round(__fdiv_rn(amax > floor6 ? amax : floor6, 6.f));
}
__device__ __forceinline__ float index_scale(float amax) {
  const float floor6 = 6.f * 1.1754943508222875e-38f;  // 6 * 2^-126
  return pow2_scale(amax > floor6 ? amax : floor6, 1.f / 6.f);
}
__device__ __forceinline__ float qdq_e4m3(float x, float s) {
  return __fmul_rn(e4m3_round(clampf(__fdiv_rn(x, s), -448.f, 448.f)), s);
}
__device__ __forceinline__ float qdq_e2m1(float x, float s) {
  return __fmul_rn(e2m1_round(clampf(__fdiv_rn(x, s), -6.f, 6.f)), s);
}

// ---- math ----------------------------------------------------------------------------------------------------

__device__ __forceinline__ float sigmoidf_(float x) { return __fdiv_rn(1.f, 1.f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return __fdiv_rn(x, 1.f + expf(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// Sum over a warp with a fixed butterfly order (same result in every lane).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o >= 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o >= 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// warp_sum of 8 values v[0..7] at once, with warp_sum's tree for each: at offset o a lane adds its partner's
// partial sum to its own, as the butterfly does, but keeps only half of its values and sends the other half to the
// partner (commutative adds: the same bits whichever lane adds). 9 shuffles instead of 40; the sum of v[g] ends in
// lanes 4g .. 4g+3.
template <typename T>
__device__ __forceinline__ T warp_sum8(const T* v) {
  const int lane = threadIdx.x & 31;
  const bool u16 = lane & 16, u8 = lane & 8, u4 = lane & 4;
  T w4[4], w2[2];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w4[k] = (u16 ? v[k + 4] : v[k]) + __shfl_xor_sync(0xffffffffu, u16 ? v[k] : v[k + 4], 16);
#pragma unroll
  for (int k = 0; k < 2; ++k)
    w2[k] = (u8 ? w4[k + 2] : w4[k]) + __shfl_xor_sync(0xffffffffu, u8 ? w4[k] : w4[k + 2], 8);
  T w = (u4 ? w2[1] : w2[0]) + __shfl_xor_sync(0xffffffffu, u4 ? w2[0] : w2[1], 4);
  w += __shfl_xor_sync(0xffffffffu, w, 2);
  w += __shfl_xor_sync(0xffffffffu, w, 1);
  return w;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o >= 1; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum (blockDim.x a multiple of 32, <= 1024): warp sums, then warp 0 folds them in warp order.
// `red` is >= 32 floats of shared memory. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < nw ? red[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) red[0] = s;
  }
  __syncthreads();
  return red[0];
}
__device__ __forceinline__ double block_sum_d(double v, double* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum_d(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double s = lane < nw ? red[lane] : 0.0;
    s = warp_sum_d(s);
    if (lane == 0) red[0] = s;
  }
  __syncthreads();
  return red[0];
}
__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < nw ? red[lane] : -__int_as_float(0x7f800000);
    s = warp_max(s);
    if (lane == 0) red[0] = s;
  }
  __syncthreads();
  return red[0];
}

// 1 / sqrt(mean(x^2) + eps) where the mean is accumulated in double (kernels/common.h mean_square rounds the
// double sum once to float; the summation order differs but a double sum of <= 2^20 float squares rounds to
// the same float almost always).
__device__ __forceinline__ float rms_scale_from(double sumsq, int n, float eps) {
  const float ms = float(sumsq / double(n));
  return __fdiv_rn(1.f, __fsqrt_rn(ms + eps));
}

}  // namespace smelt_dev
