// Weight-only FP8 / FP4 linear and grouped linear on tensor cores (kernels/linear/gemv_wo_mma.cuh): what
// smelt_linear_fp8 / _fp4 (and their _r1 forms) compute, y = x dequant(W)^T in fp32 accuracy, for 1..8 rows.
//
// Launch (runtime/cuda/ops_wo_mma.cc): block 256 threads, grid (CTAs, ceil(rows / 8), groups), dynamic shared
// memory wo_smem_bytes(min(rows, 8), ks * cb). A tile = 16 output columns; ks warps split K per tile. Group z of
// a grouped linear: x columns [z*K, (z+1)*K) of a row of G*K, W rows [z*N, (z+1)*N), y columns [z*N, (z+1)*N).
#include "kernels/linear/gemv_wo_mma.cuh"

using namespace smelt_dev;

namespace {

template <bool FP4>
__device__ void linear_wo_mma_body(const float* x, float* y, const u8* w, const u8* ws, int rows, int K, int N, int blk,
                                   float scale_after, int round, int ks, int cb) {
  const int G = gridDim.z, z = blockIdx.z;
  const i64 ldx = i64(G) * K, ldy = i64(G) * N;
  const int r0 = blockIdx.y * 8;  // rows in groups of 8, the MMA's n
  rows = min(rows - r0, 8);
  x += r0 * ldx, y += r0 * ldy;
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int sh = blk_log2(blk), sc = (K + blk - 1) >> sh, nb = K / 32;
  const i64 wrow = FP4 ? K / 2 : K;
  auto item = [&](int it, WoRows& r) {
    const i64 na = i64(z) * N + min(it * 16 + g, N - 1), nb8 = i64(z) * N + min(it * 16 + g + 8, N - 1);
    r.wa = w + na * wrow, r.wb = w + nb8 * wrow;
    r.sa = FP4 ? ws + na * nb : ws + (na >> sh) * sc;
    r.sb = FP4 ? ws + nb8 * nb : ws + (nb8 >> sh) * sc;
    r.ssh = FP4 ? 5 : sh;
    return true;
  };
  auto store = [&](int it, const float* acc) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = it * 16 + g + (i >> 1) * 8, r = 2 * tig + (i & 1);
      if (n >= N || r >= rows) continue;
      float v = acc[i];
      if (scale_after != 1.f) v = __fmul_rn(v, scale_after);
      y[r * ldy + i64(z) * N + n] = round ? round_bf16(v) : v;
    }
  };
  wo_run<FP4>(x + i64(z) * K, ldx, rows, K, ks, cb, (N + 15) / 16, item, store);
}

}  // namespace

extern "C" __global__ void smelt_linear_fp8_wo_mma(const float* x, float* y, const u8* w, const u8* ws, int rows,
                                                  int K, int N, int blk, float scale_after, int round, int ks,
                                                  int cb) {
  SMELT_KERNEL_PROLOGUE();
  linear_wo_mma_body<false>(x, y, w, ws, rows, K, N, blk, scale_after, round, ks, cb);
}
extern "C" __global__ void smelt_linear_fp4_wo_mma(const float* x, float* y, const u8* w, const u8* ws, int rows,
                                                  int K, int N, int blk, float scale_after, int round, int ks,
                                                  int cb) {
  SMELT_KERNEL_PROLOGUE();
  linear_wo_mma_body<true>(x, y, w, ws, rows, K, N, blk, scale_after, round, ks, cb);
}
