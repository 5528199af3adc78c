// smelt.rms_norm: each of the `groups` segments of a row is normalised on its own, y = w * (x * r) with
// r = 1 / sqrt(mean(x^2) + eps), mean accumulated in double (kernels/rms_norm reference). x may alias y.
// grid (rows * groups), block any multiple of 32 (the runtime picks it from len only: up to 1024, ~4 values a
// thread). Four independent partial sums per thread keep four loads in flight; the fold order depends only on len
// and blockDim, never on the row count.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

namespace {

// R: the op's `round = "bf16"` applied to the output in the same pass (smelt_rms_norm_bf16).
template <bool R>
__device__ void rms_norm_body(const float* x, float* y, const void* w, int wdt, int len, float eps) {
  __shared__ double red[32];
  const i64 s = blockIdx.x;
  const float* xs = x + s * len;
  float* ys = y + s * len;
  const int bd = blockDim.x;
  double sq[4] = {0.0, 0.0, 0.0, 0.0};
  for (int i0 = threadIdx.x; i0 < len; i0 += 4 * bd) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = i0 + j * bd;
      if (i < len) sq[j] += double(xs[i]) * double(xs[i]);
    }
  }
  const float r = rms_scale_from(block_sum_d(((sq[0] + sq[1]) + sq[2]) + sq[3], red), len, eps);
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    const float v = __fmul_rn(xs[i], r);
    const float o = w ? __fmul_rn(ldw(w, i, wdt), v) : v;
    ys[i] = R ? round_bf16(o) : o;
  }
}

}  // namespace

extern "C" __global__ void smelt_rms_norm(const float* x, float* y, const void* w, int wdt, int len, float eps) {
  SMELT_KERNEL_PROLOGUE();
  rms_norm_body<false>(x, y, w, wdt, len, eps);
}
extern "C" __global__ void smelt_rms_norm_bf16(const float* x, float* y, const void* w, int wdt, int len, float eps) {
  SMELT_KERNEL_PROLOGUE();
  rms_norm_body<true>(x, y, w, wdt, len, eps);
}

// smelt_rms_norm_regs / _bf16: the same bits as smelt_rms_norm at the same blockDim (same elements per thread, same
// partial sums, same tree), for rows of at most kRegs * blockDim values: a thread's weights are loaded before the
// dependent-launch wait (they overlap the previous kernel) and its values stay in registers between the sum and
// the scaling (smelt_rms_norm read the row twice and the weights only after the reduction: three dependent memory
// round trips after the wait instead of one).
namespace {

constexpr int kRegs = 8;

template <bool R>
__device__ __forceinline__ void rms_norm_regs_body(const float* x, float* y, const void* w, int wdt, int len,
                                                   float eps) {
  __shared__ double red[32];
  const i64 s = blockIdx.x;
  const int bd = blockDim.x, t = threadIdx.x;
  float wv[kRegs], xv[kRegs];
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int i = t + k * bd;
    wv[k] = (w && i < len) ? ldw(w, i, wdt) : 0.f;
  }
  grid_dep_wait();
  const float* xs = x + s * len;
  float* ys = y + s * len;
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int i = t + k * bd;
    xv[k] = i < len ? xs[i] : 0.f;
  }
  // smelt_rms_norm's element i0 + j * bd of its loop is value k = 4 * (i0 - t) / (4 * bd) + j here: partial k % 4.
  double sq[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
  for (int k = 0; k < kRegs; ++k)
    if (t + k * bd < len) sq[k & 3] += double(xv[k]) * double(xv[k]);
  const float r = rms_scale_from(block_sum_d(((sq[0] + sq[1]) + sq[2]) + sq[3], red), len, eps);
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int i = t + k * bd;
    if (i >= len) break;
    const float v = __fmul_rn(xv[k], r);
    const float o = w ? __fmul_rn(wv[k], v) : v;
    ys[i] = R ? round_bf16(o) : o;
  }
}

}  // namespace

// grid (rows * groups), block any multiple of 32 with len <= 8 * blockDim (the runtime's choice: up to 1024
// threads, ~4 values a thread).
extern "C" __global__ void smelt_rms_norm_regs(const float* x, float* y, const void* w, int wdt, int len, float eps) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();
  rms_norm_regs_body<false>(x, y, w, wdt, len, eps);
}
extern "C" __global__ void smelt_rms_norm_regs_bf16(const float* x, float* y, const void* w, int wdt, int len,
                                                    float eps) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();
  rms_norm_regs_body<true>(x, y, w, wdt, len, eps);
}
