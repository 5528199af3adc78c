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

// fill(xv): this thread's values of the row (value k at t + k * blockDim, 0 past len), read after the dependent-launch
// wait.
template <bool R, class F>
__device__ __forceinline__ void rms_norm_regs_core(float* ys, const void* w, int wdt, int len, float eps, F fill) {
  __shared__ double red[32];
  const int bd = blockDim.x, t = threadIdx.x;
  float wv[kRegs], xv[kRegs];
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int i = t + k * bd;
    wv[k] = (w && i < len) ? ldw(w, i, wdt) : 0.f;
  }
  grid_dep_wait();
  fill(xv);
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

template <bool R>
__device__ __forceinline__ void rms_norm_regs_body(const float* x, float* y, const void* w, int wdt, int len,
                                                   float eps) {
  const i64 s = blockIdx.x;
  const float* xs = x + s * len;
  rms_norm_regs_core<R>(y + s * len, w, wdt, len, eps, [&](float* xv) {
    const int bd = blockDim.x, t = threadIdx.x;
#pragma unroll
    for (int k = 0; k < kRegs; ++k) xv[k] = t + k * bd < len ? xs[t + k * bd] : 0.f;
  });
}

// smelt.hc_collapse with a folded norm (smelt-fuse-hc-norm): value d of row r is kernels/hc smelt_hc_collapse's sum
// of pre[r, c] X[r, c, d] in copy order (pre null: copy 0), rounded to bf16 when CR (smelt_hc_collapse_bf16), then
// normed as smelt_rms_norm_regs: the same bits as those two kernels, one launch and no round trip of the collapse.
template <bool R, bool CR>
__device__ __forceinline__ void collapse_norm_body(const float* X, const float* pre, int n, float* y, const void* w,
                                                   int wdt, int len, float eps) {
  const i64 r = blockIdx.x;
  const float* x = X + r * n * len;
  const float* p = pre ? pre + r * n : nullptr;
  rms_norm_regs_core<R>(y + r * len, w, wdt, len, eps, [&](float* xv) {
    // Copy by copy, a thread's values of each copy loaded together (one round trip a copy, not one a value), each
    // value's sum in copy order as the collapse kernel's.
    const int bd = blockDim.x, t = threadIdx.x;
#pragma unroll
    for (int k = 0; k < kRegs; ++k) xv[k] = !p && t + k * bd < len ? x[t + k * bd] : 0.f;
    for (int c = 0; p && c < n; ++c) {
      const float pc = p[c];
      const float* xc = x + i64(c) * len;
#pragma unroll
      for (int k = 0; k < kRegs; ++k)
        if (t + k * bd < len) xv[k] = __fadd_rn(xv[k], __fmul_rn(pc, xc[t + k * bd]));
    }
    if (CR)
#pragma unroll
      for (int k = 0; k < kRegs; ++k) xv[k] = round_bf16(xv[k]);
  });
}

}  // namespace

// grid (rows), block as smelt_rms_norm_regs picks it for len (len <= 8 * blockDim); the name says which roundings:
// _cr the collapse's (collapse_round), _bf16 the output's (round).
#define SMELT_COLLAPSE_NORM(SUFFIX, R, CR)                                                                          \
  extern "C" __global__ void smelt_hc_collapse_norm##SUFFIX(const float* X, const float* pre, int n, float* y,        \
                                                            const void* w, int wdt, int len, float eps) {             \
    SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();                                                                          \
    collapse_norm_body<R, CR>(X, pre, n, y, w, wdt, len, eps);                                                      \
  }
SMELT_COLLAPSE_NORM(, false, false)
SMELT_COLLAPSE_NORM(_bf16, true, false)
SMELT_COLLAPSE_NORM(_cr, false, true)
SMELT_COLLAPSE_NORM(_cr_bf16, true, true)
#undef SMELT_COLLAPSE_NORM

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
