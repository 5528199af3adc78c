// Decode act-quant linears on FP8 tensor cores (sm_89+; kernels/linear/gemv_mma.cuh): smelt_gemv_fp8_mma /
// smelt_gemv_fp4_mma compute what smelt_gemv_fp8_aq / smelt_gemv_fp4_aq compute for 1..8 rows, the 32-block sums
// by mma.sync (within a tolerance of the exact sums, docs/performance.md "Tensor-core decode").
//
// Launch (runtime/cuda/ops_mma.cc): block kMmaWarps * 32, dynamic shared memory mma_smem_bytes(K, rows), grid
// <= ceil(ceil(N / (16 TPW)) / (kMmaWarps / S)) persistent blocks. S (1, 2, 4 or 8) splits K over the warps of a
// block: a block walks groups of kMmaWarps / S tiles of 16 TPW output columns, S warps per tile.
//
// smelt_gemv_fp8_wgmma (sm_90a): smelt_gemv_fp8_mma at one row with the block sums by wgmma (gemv_mma.cuh run_wg8:
// the E4M3 weight codes are the A fragments as they lie in the ring, no conversion), within the wgmma bound of the
// exact sums (2^-12 of the abs mass, the FP4 experts' on wgmma). Launch: block 256 (two warpgroups), dynamic shared
// memory mma_smem_bytes(K, 1), grid <= the groups of mma_split.h mma_wg_linear_ksplit's S; at S > 2 xpart / cnt
// (the op's zeroed memory, mma_wg_linear_zeroed_bytes).
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

// smelt_gemv_fp8_wgmma (sm_90a): one row, 64-row tiles walked by a warpgroup (MmaSegment::run_wg8), two warpgroups
// a block. S = SI x SX segments of K a tile: SI (1 or 2) over the block's warpgroups (SI = 1: two tiles a block),
// SX blocks a tile (SX > 1 with SI = 2). With SX > 1 each block stores its tile's partial sums in xpart
// [tile][SX][64] and counts itself in cnt[tile] (the op's zeroed memory); the tile's last block adds the SX partials
// in their order (the same sums whichever block comes last), writes y and zeroes the count for the next launch.
__device__ void gemv_wg_body(const float* x, float* y, const u8* w, const u8* ws, int K, int N, int blk,
                             float scale_after, int round, int S, float* xpart, u32* cnt) {
#if defined(__CUDA_ARCH__) && SMELT_WGMMA
  extern __shared__ __align__(16) unsigned char mma_sm[];
  __shared__ int wg_flag[2], last_block;
  const int nb = K / 32, stride = mma_x_stride(K);
  mma_check_smem(K, 1);
  u8* xq = mma_sm;
  float* xsc = reinterpret_cast<float*>(mma_sm + stride);
  float* part = xsc + nb * 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int unit = warp / 4, q = warp % 4;
  const int SI = S >= 2 ? 2 : 1, SX = S / SI, tpg = 2 / SI;
  const int tiles = (N + 63) / 64, groups = (tiles + tpg - 1) / tpg * SX;
  MmaSegment<false, 1> ms;
  u8* ring = mma_warp_ring(mma_sm, K, 1);
  u8* scl = mma_warp_scales(mma_sm, K, 1);
  int tile = 0, xs = 0, b0 = 0, b1 = 0;
  auto place = [&](int grp) {
    const int tg = grp / SX;
    xs = grp - tg * SX;
    tile = tg * tpg + unit / SI;
    mma_seg_range(nb, xs * SI + unit % SI, S, b0, b1);
  };
  auto start = [&]() {
    // a warp of a tile past N: every row reads 0, pointers at the tile's first row
    const i64 t0 = i64(tile) * 64, f0 = t0 + 16 * q;
    ms.init_tiles(w, ws, f0 < N ? f0 : t0, f0 < N ? i64(N) : t0, K, blk, ring, scl);
    ms.prefetch(b0, b1);
  };
  // The first group's first weight blocks in flight before the dependent-launch wait and the act-quant staging.
  place(blockIdx.x);
  if (int(blockIdx.x) < groups && tile < tiles) start();
  grid_dep_wait();
  mma_stage_quant<kStageE4m3SplitK>(x, 1, K, xq, stride, xsc);
  auto out = [&](int n, float v) {
    if (scale_after != 1.f) v = __fmul_rn(v, scale_after);
    y[n] = round ? round_bf16(v) : v;
  };
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    place(grp);
    float acc[1][2] = {{0.f, 0.f}};
    if (tile < tiles) {
      if (grp != int(blockIdx.x)) start();
      ms.run_wg8_checked(b0, b1, smem_addr(xq), xsc, acc, wg_flag);
    }
    if (SI > 1) mma_combine<2>(part, acc[0], SI, 4);
    const bool own = unit % SI == 0 && tile < tiles && tig == 0;  // lanes holding the block's sums of rows g, g + 8
    const int r0 = 16 * q + g;
    if (SX == 1) {
      if (own)
#pragma unroll
        for (int i = 0; i < 2; ++i)
          if (tile * 64 + r0 + 8 * i < N) out(tile * 64 + r0 + 8 * i, acc[0][i]);
      continue;
    }
    // SX > 1 (SI = 2: one tile a group, the same for the whole block).
    float* xp = xpart + i64(tile) * SX * 64;
    if (own) {
      xp[xs * 64 + r0] = acc[0][0], xp[xs * 64 + r0 + 8] = acc[0][1];
      __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      last_block = atomicAdd(cnt + tile, 1u) == u32(SX - 1);
      if (last_block) cnt[tile] = 0u;  // every block of the tile has counted: ready for the next launch
    }
    __syncthreads();
    if (!last_block) continue;
    __threadfence();
    if (own)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float v = __ldcg(xp + r0 + 8 * i);
        for (int s = 1; s < SX; ++s) v = __fadd_rn(v, __ldcg(xp + s * 64 + r0 + 8 * i));
        if (tile * 64 + r0 + 8 * i < N) out(tile * 64 + r0 + 8 * i, v);
      }
  }
#else
  __trap();  // the runtime launches it on sm_90 (whose cubins are sm_90a) only
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

// x [K] float (one row, quantized per token inside), y [N]; K % 32 == 0; xpart / cnt: see gemv_wg_body (unused at
// ksplit <= 2).
extern "C" __global__ void __launch_bounds__(256, SMELT_MMA_MIN_BLOCKS)
smelt_gemv_fp8_wgmma(const float* x, float* y, const u8* w, const u8* ws, int K, int N, int blk, float scale_after,
                     int round, int ksplit, float* xpart, u32* cnt) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();  // gemv_wg_body waits before it reads x
  gemv_wg_body(x, y, w, ws, K, N, blk, scale_after, round, ksplit, xpart, cnt);
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
