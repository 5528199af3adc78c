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
