// Decode act-quant linears on FP8 tensor cores (sm_89+; kernels/linear/gemv_mma.cuh): smelt_gemv_fp8_mma /
// smelt_gemv_fp4_mma compute what smelt_gemv_fp8_aq / smelt_gemv_fp4_aq compute for 1..8 rows, the 32-block sums
// by mma.sync (within a tolerance of the exact sums, docs/performance.md "Tensor-core decode").
//
// Launch (runtime/cuda/ops_mma.cc): block kMmaWarps * 32, dynamic shared memory mma_smem_bytes(K, rows), grid
// <= ceil(ceil(N / (16 TPW)) / (kMmaWarps / S)) persistent blocks. S (1, 2, 4 or 8) splits K over the warps of a
// block: a block walks groups of kMmaWarps / S tiles of 16 TPW output columns, S warps per tile.
//
// smelt_linear_fp8_wo_ring / smelt_linear_fp4_wo_ring (sm_80+): the weight-only one-row linear and grouped linear
// (what smelt_linear_*_r1 compute, in fp32 accuracy: the bound of smelt_linear_*_wo_mma) on the same ring: x staged
// as f16 hi / lo halves in two MMA token columns (mma_stage_wo, MmaSegment::run with HL, as the experts'
// smelt_moe_*_wo_ring), the weights row-major. Grid (blocks, 1, G): group z reads x columns [z K, (z + 1) K) and
// weight rows [z N, (z + 1) N) and writes y columns [z N, (z + 1) N). Shared memory mma_smem_bytes(K, 2). Launched
// only with SMELT_CUDA_LINEAR_RING=1: on the H200 they measured slower than the r1 kernels (docs/performance.md,
// "Session 19").
#include "kernels/linear/gemv_mma.cuh"

using namespace smelt_dev;

namespace {

// NC = 1 at one token row (only C's n = 0 column is kept: fewer instructions per block), else 2.
template <bool FP4, int NC>
__device__ void gemv_mma_body(const float* x, float* y, const u8* w, const u8* ws, int rows, int K, int N, int blk,
                              float scale_after, int round, int S) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  extern __shared__ __align__(16) unsigned char mma_sm[];
  const int nb = K / 32, stride = mma_x_stride(K);
  mma_check_smem(K, rows);
  u8* xq = mma_sm;
  float* xsc = reinterpret_cast<float*>(mma_sm + rows * stride);
  float* part = xsc + nb * 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int tpg = kMmaWarps / S, seg = warp % S;
  // A tile is TPW x 16 output columns: a warp walks TPW 16-row matrices at once (MmaSegment<FP4, TPW> with row
  // step 16), so the activation fragment, scale loads, addressing and loop run once for all of them.
  constexpr int TPW = SMELT_MMA_TPW;
  const int tiles = (N + 16 * TPW - 1) / (16 * TPW), groups = (tiles + tpg - 1) / tpg;
  int b0, b1;
  mma_seg_range(nb, seg, S, b0, b1);
  // The first group's first weight batch is loaded before the dependent-launch wait and the act-quant staging.
  MmaSegment<FP4, TPW> ms;
  u8* ring = mma_warp_ring(mma_sm, K, rows);
  u8* scl = mma_warp_scales(mma_sm, K, rows);
  const int first = int(blockIdx.x) * tpg + warp / S;
  if (int(blockIdx.x) < groups && first < tiles) {
    ms.init_tiles(w, ws, i64(first) * 16 * TPW, N, K, blk, ring, scl);
    ms.prefetch(b0, b1);
  }
  grid_dep_wait();
  mma_stage_quant<FP4 ? kStageF16Paired : kStageF16>(x, rows, K, xq, stride, xsc);
  const u8* xrow = g < rows ? xq + g * stride : nullptr;
  const float* xsl = xsc + 2 * tig;
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int tile = grp * tpg + warp / S;
    float acc[TPW][2 * NC] = {};
    if (tile < tiles) {
      if (grp != int(blockIdx.x)) {
        ms.init_tiles(w, ws, i64(tile) * 16 * TPW, N, K, blk, ring, scl);
        ms.prefetch(b0, b1);
      }
      ms.template run_checked<NC>(b0, b1, xrow, xsl, acc);
    }
    if (S > 1) {
      constexpr int NV = TPW * 2 * NC;  // part holds 4 values a warp: two combines past 4
      if constexpr (NV <= 4) {
        mma_combine<NV>(part, &acc[0][0], S);
      } else {
        mma_combine<4>(part, &acc[0][0], S);
        mma_combine<NV - 4>(part, &acc[0][0] + 4, S);
      }
    }
    if (seg != 0 || tile >= tiles) continue;
#pragma unroll
    for (int m = 0; m < TPW; ++m)
#pragma unroll
      for (int i = 0; i < 2 * NC; ++i) {
        // NC = 2: acc = c0..c3 (rows g, g + 8 x token rows 2 tig, 2 tig + 1); NC = 1: c0, c2 (token row 0).
        const int n = (tile * TPW + m) * 16 + g + ((NC == 2 ? i >= 2 : i >= 1) ? 8 : 0),
                  r = NC == 2 ? 2 * tig + (i & 1) : tig;
        if (n < N && r < rows) {
          float v = acc[m][i];
          if (scale_after != 1.f) v = __fmul_rn(v, scale_after);
          y[i64(r) * N + n] = round ? round_bf16(v) : v;
        }
      }
  }
#else
  __trap();  // the runtime launches these on sm_89+ only
#endif
}

// The weight-only ring linear of one row (see the top of the file): group z = blockIdx.z of G = gridDim.z.
template <bool FP4>
__device__ void linear_wo_ring_body(const float* x, float* y, const u8* w, const u8* ws, int K, int N, int blk,
                                    float scale_after, int round, int S) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) unsigned char mma_sm[];
  const int nb = K / 32, stride = mma_x_stride(K);
  mma_check_smem(K, 2);
  u8* xq = mma_sm;
  float* xsc = reinterpret_cast<float*>(mma_sm + 2 * stride);
  float* part = xsc + nb * 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int tpg = kMmaWarps / S, seg = warp % S;
  constexpr int TPW = SMELT_MMA_TPW;
  const int tiles = (N + 16 * TPW - 1) / (16 * TPW), groups = (tiles + tpg - 1) / tpg;
  // Group z's rows of the weight: [nz, nz + N) of G N (the scale rows follow from the row).
  const i64 nz = i64(blockIdx.z) * N;
  int b0, b1;
  mma_seg_range(nb, seg, S, b0, b1);
  MmaSegment<FP4, TPW, false> ms;
  u8* ring = mma_warp_ring(mma_sm, K, 2);
  u8* scl = mma_warp_scales(mma_sm, K, 2);
  // The first group's first weight blocks in flight before the dependent-launch wait and the staging.
  const int first = int(blockIdx.x) * tpg + warp / S;
  if (int(blockIdx.x) < groups && first < tiles) {
    ms.init_tiles(w, ws, nz + i64(first) * 16 * TPW, nz + N, K, blk, ring, scl);
    ms.prefetch(b0, b1);
  }
  grid_dep_wait();
  mma_stage_wo<FP4>(x + i64(blockIdx.z) * K, 1, K, xq, stride, xsc);
  const u8* xrow = g == 0 ? xq : g == 1 ? xq + stride : nullptr;  // hi (column 0) and lo (column 1)
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int tile = grp * tpg + warp / S;
    float acc[TPW][2] = {};
    if (tile < tiles) {
      if (grp != int(blockIdx.x)) {
        ms.init_tiles(w, ws, nz + i64(tile) * 16 * TPW, nz + N, K, blk, ring, scl);
        ms.prefetch(b0, b1);
      }
      ms.template run<1, false, true>(b0, b1, xrow, xsc, acc);
    }
    if (S > 1) mma_combine<2 * TPW>(part, &acc[0][0], S);
    if (seg != 0 || tile >= tiles || tig != 0) continue;
#pragma unroll
    for (int m = 0; m < TPW; ++m)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int n = (tile * TPW + m) * 16 + g + 8 * i;
        if (n >= N) continue;
        float v = acc[m][i];
        if (scale_after != 1.f) v = __fmul_rn(v, scale_after);
        y[nz + n] = round ? round_bf16(v) : v;
      }
  }
#else
  __trap();  // the runtime launches these on sm_80+ only
#endif
}

}  // namespace

// x [rows, K] float (quantized per token inside), y [rows, N]; rows <= 8, K % 32 == 0.
extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)
smelt_gemv_fp8_mma(const float* x, float* y, const u8* w, const u8* ws, int rows, int K,
                   int N, int blk, float scale_after, int round, int ksplit) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // gemv_mma_body waits before it reads x
  if (rows == 1) gemv_mma_body<false, 1>(x, y, w, ws, rows, K, N, blk, scale_after, round, ksplit);
  else gemv_mma_body<false, 2>(x, y, w, ws, rows, K, N, blk, scale_after, round, ksplit);
}
extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)
smelt_gemv_fp4_mma(const float* x, float* y, const u8* w, const u8* ws, int rows, int K,
                   int N, int blk, float scale_after, int round, int ksplit) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // gemv_mma_body waits before it reads x
  if (rows == 1) gemv_mma_body<true, 1>(x, y, w, ws, rows, K, N, blk, scale_after, round, ksplit);
  else gemv_mma_body<true, 2>(x, y, w, ws, rows, K, N, blk, scale_after, round, ksplit);
}

// x [G K] float (one row), y [G N]; K % 32 == 0; grid (blocks, 1, G).
extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)
smelt_linear_fp8_wo_ring(const float* x, float* y, const u8* w, const u8* ws, int K, int N, int blk,
                         float scale_after, int round, int ksplit) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // linear_wo_ring_body waits before it reads x
  linear_wo_ring_body<false>(x, y, w, ws, K, N, blk, scale_after, round, ksplit);
}
extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)
smelt_linear_fp4_wo_ring(const float* x, float* y, const u8* w, const u8* ws, int K, int N, int blk,
                         float scale_after, int round, int ksplit) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // linear_wo_ring_body waits before it reads x
  linear_wo_ring_body<true>(x, y, w, ws, K, N, blk, scale_after, round, ksplit);
}
