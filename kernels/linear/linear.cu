// smelt.linear / smelt.grouped_linear (docs/ops.md): y = x W^T, W stored [N, K] as the checkpoint holds it
// (F32 / BF16 / F16, FP8 E4M3 with E8M0 block scales, packed FP4 E2M1 with per-32 E8M0 scales).
//
// Launch (runtime/cuda/ops.cc): block 256 threads = 8 warps, one output column per warp; grid.x =
// ceil(N / 8), grid.y = groups (1 for linear). Rows are walked in groups of 4 inside the warp, so the weight
// row is read from memory once and reused from cache; a row's sum order never depends on `rows`. The one-row
// kernels (_r1) take 1, 2 or 4 columns a warp, as many as grid.x * 8 warps need to cover N (ops.cc
// weight_only_blocks); any grid is correct.
#include "kernels/linear/gemv.cuh"

using namespace smelt_dev;

namespace {

constexpr int kRT = 4;

// Group g of a grouped linear: x columns [g*K, (g+1)*K) of a row of G*K, W rows [g*N, (g+1)*N), y columns
// [g*N, (g+1)*N) of a row of G*N. Plain linear: G = 1.
template <int FMT>
__device__ void linear_body(const float* x, float* y, const void* w, const u8* ws, int rows, int K, int N, int blk,
                            float scale_after, int round) {
  const int G = gridDim.y, g = blockIdx.y;
  const i64 n_local = i64(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (n_local >= N) return;
  const i64 n = i64(g) * N + n_local;  // weight row
  const i64 ldx = i64(G) * K, ldy = i64(G) * N;
  const float* xg = x + i64(g) * K;
  for (int r0 = 0; r0 < rows; r0 += kRT) {
    float out[kRT];
    const int nr = rows - r0 < kRT ? rows - r0 : kRT;
    dot_rows<FMT, kRT>(xg + r0 * ldx, ldx, nr, w, ws, n, K, blk, out);
    if ((threadIdx.x & 31) == 0)
      for (int r = 0; r < nr; ++r) {
        float v = out[r];
        if (scale_after != 1.f) v = __fmul_rn(v, scale_after);
        y[(r0 + r) * ldy + n] = round ? round_bf16(v) : v;
      }
  }
}

// One row (decode): the sums of dot_rows<FMT, 1> (the same bits), a warp taking C = 1, 2 or 4 columns at a time
// (dot_cols_r1): the fewest that cover N with gridDim.x * warps-per-block warps (the launcher sizes the grid for
// the C it wants; a smaller grid loops). Own kernels, so that the 4-row instance's registers do not set their
// occupancy; bounded to 80 registers (3 blocks an SM) where that spills nothing.
// Columns warp * C + i * warps * C (+ 0 .. C-1) of group g.
template <int FMT, int C>
__device__ __forceinline__ void r1_columns(const float* xg, float* y, const void* w, const u8* ws, i64 g, i64 warp,
                                           i64 warps, int K, int N, int blk, float scale_after, int round) {
  constexpr int D = r1_depth<FMT, C>();
  for (i64 n_local = warp * C; n_local < N; n_local += warps * C) {
    const i64 n0 = g * N + n_local;
    float out[C];
    dot_cols_r1<FMT, C, D>(xg, w, ws, n0, g * N + N - 1, K, blk, out, [] { grid_dep_wait(); });
#pragma unroll
    for (int j = 0; j < C; ++j)
      if ((threadIdx.x & 31) == j && n_local + j < N) {
        float v = out[j];
        if (scale_after != 1.f) v = __fmul_rn(v, scale_after);
        y[n0 + j] = round ? round_bf16(v) : v;
      }
  }
}

template <int FMT>
__device__ void linear_r1_body(const float* x, float* y, const void* w, const u8* ws, int K, int N, int blk,
                               float scale_after, int round) {
  const i64 g = blockIdx.y;
  const int wpb = blockDim.x / 32;
  const i64 warps = i64(gridDim.x) * wpb, need = (N + warps - 1) / warps;
  const i64 warp = i64(blockIdx.x) * wpb + (threadIdx.x >> 5);
  const float* xg = x + g * K;
  // A group's C weight rows g * N + n_local .. (n_local % C == 0) share one FP8 scale row when C divides N or G == 1.
  const bool by4 = gridDim.y == 1 || N % 4 == 0, by2 = gridDim.y == 1 || N % 2 == 0;
  if (need >= 4 && by4) r1_columns<FMT, 4>(xg, y, w, ws, g, warp, warps, K, N, blk, scale_after, round);
  else if (need >= 2 && by2) r1_columns<FMT, 2>(xg, y, w, ws, g, warp, warps, K, N, blk, scale_after, round);
  else r1_columns<FMT, 1>(xg, y, w, ws, g, warp, warps, K, N, blk, scale_after, round);
}

template <bool FP4>
__device__ void linear_aq_body(const i32* xu, const float* xs, float* y, const u8* w, const u8* ws, int rows, int K,
                               int N, int blk, float scale_after, int round) {
  const i64 n = i64(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (n >= N) return;
  const int nb = K / 32;
  for (int r0 = 0; r0 < rows; r0 += kRT) {
    float out[kRT];
    const int nr = rows - r0 < kRT ? rows - r0 : kRT;
    dot_rows_aq<FP4, kRT>(xu + i64(r0) * K, K, xs + i64(r0) * nb, nb, nr, w, ws, n, N, K, blk, out);
    if ((threadIdx.x & 31) == 0)
      for (int r = 0; r < nr; ++r) {
        float v = out[r];
        if (scale_after != 1.f) v = __fmul_rn(v, scale_after);
        y[i64(r0 + r) * N + n] = round ? round_bf16(v) : v;
      }
  }
}

}  // namespace

// Weight-only paths: weights dequantized in registers, fp32 accumulation (the sm_80 path).
extern "C" __global__ void smelt_linear_f32(const float* x, float* y, const void* w, const u8* ws, int rows, int K,
                                            int N, int blk, float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE();
  linear_body<kWF32>(x, y, w, ws, rows, K, N, blk, scale_after, round);
}
extern "C" __global__ void smelt_linear_bf16(const float* x, float* y, const void* w, const u8* ws, int rows, int K,
                                             int N, int blk, float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE();
  linear_body<kWBF16>(x, y, w, ws, rows, K, N, blk, scale_after, round);
}
extern "C" __global__ void smelt_linear_f16(const float* x, float* y, const void* w, const u8* ws, int rows, int K,
                                            int N, int blk, float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE();
  linear_body<kWF16>(x, y, w, ws, rows, K, N, blk, scale_after, round);
}
extern "C" __global__ void smelt_linear_fp8(const float* x, float* y, const void* w, const u8* ws, int rows, int K,
                                            int N, int blk, float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE();
  linear_body<kWFP8>(x, y, w, ws, rows, K, N, blk, scale_after, round);
}
extern "C" __global__ void smelt_linear_fp4(const float* x, float* y, const void* w, const u8* ws, int rows, int K,
                                            int N, int blk, float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE();
  linear_body<kWFP4>(x, y, w, ws, rows, K, N, blk, scale_after, round);
}

// Act-quant paths (V4.1: every FP8 / FP4 linear quantizes its input per token): bit-exact against
// kernels/quant fp8_linear / fp4_linear. xu / xs come from smelt_act_quant_b32.
extern "C" __global__ void smelt_linear_fp8_aq(const i32* xu, const float* xs, float* y, const u8* w, const u8* ws,
                                               int rows, int K, int N, int blk, float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE();
  linear_aq_body<false>(xu, xs, y, w, ws, rows, K, N, blk, scale_after, round);
}
extern "C" __global__ void smelt_linear_fp4_aq(const i32* xu, const float* xs, float* y, const u8* w, const u8* ws,
                                               int rows, int K, int N, int blk, float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE();
  linear_aq_body<true>(xu, xs, y, w, ws, rows, K, N, blk, scale_after, round);
}

// x [rows, ldx] (first K columns) -> xu [rows, K] E4M3 units of 2^-9, xs [rows, K/32] scales.
// Block 256 threads = 8 warps = 8 K-blocks; grid (ceil(K/32 / 8), rows).
extern "C" __global__ void smelt_act_quant_b32(const float* x, int ldx, int K, i32* xu, float* xs) {
  SMELT_KERNEL_PROLOGUE();
  const int nb = K / 32;
  const int b = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const i64 r = blockIdx.y;
  if (b >= nb) return;
  act_quant_block(x + r * ldx + b * 32, xu + r * K + b * 32, xs + r * nb + b);
}

// One-row forms (launcher: rows == 1); the `rows` argument is kept so that both forms take the same arguments. Their
// first weight chunks are loaded before the dependent-launch wait (dot_cols_r1), overlapping the previous kernel.
// Written out (no macro): tests/kernels_cuda/test_nvrtc_compile.cc finds entry points in the source text.
extern "C" __global__ void __launch_bounds__(256, 2)
smelt_linear_f32_r1(const float* x, float* y, const void* w, const u8* ws, int, int K, int N, int blk,
                     float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // r1_columns waits before it reads x
  linear_r1_body<kWF32>(x, y, w, ws, K, N, blk, scale_after, round);
}
extern "C" __global__ void __launch_bounds__(256, 3)
smelt_linear_bf16_r1(const float* x, float* y, const void* w, const u8* ws, int, int K, int N, int blk,
                     float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // r1_columns waits before it reads x
  linear_r1_body<kWBF16>(x, y, w, ws, K, N, blk, scale_after, round);
}
extern "C" __global__ void __launch_bounds__(256, 3)
smelt_linear_f16_r1(const float* x, float* y, const void* w, const u8* ws, int, int K, int N, int blk,
                     float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // r1_columns waits before it reads x
  linear_r1_body<kWF16>(x, y, w, ws, K, N, blk, scale_after, round);
}
#ifndef SMELT_R1_FP8_MIN_BLOCKS
#define SMELT_R1_FP8_MIN_BLOCKS 3  // blocks an SM (register budget 80); see gemv.cuh SMELT_R1_RING_REGS
#endif
extern "C" __global__ void __launch_bounds__(256, SMELT_R1_FP8_MIN_BLOCKS)
smelt_linear_fp8_r1(const float* x, float* y, const void* w, const u8* ws, int, int K, int N, int blk,
                     float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // r1_columns waits before it reads x
  linear_r1_body<kWFP8>(x, y, w, ws, K, N, blk, scale_after, round);
}
extern "C" __global__ void __launch_bounds__(256, 2)
smelt_linear_fp4_r1(const float* x, float* y, const void* w, const u8* ws, int, int K, int N, int blk,
                     float scale_after, int round) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // r1_columns waits before it reads x
  linear_r1_body<kWFP4>(x, y, w, ws, K, N, blk, scale_after, round);
}
