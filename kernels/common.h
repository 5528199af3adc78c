// Small float32 building blocks shared by the reference kernels. Every reduction here has a fixed order
// that depends only on its length, never on how many rows a caller processes at once, so a row computed
// inside a chunk is bit-identical to the same row computed alone.
#pragma once
#include <cmath>

namespace smelt::kernels::detail {

// sum_k a[k] * b[k] in float32: 16 interleaved partial sums (lane l takes k = l mod 16), folded pairwise.
// The lanes let the compiler vectorise without -ffast-math while the order stays fixed.
inline float dot(const float* a, const float* b, int n) {
  float acc[16] = {};
  int k = 0;
  for (; k + 16 <= n; k += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[k + l] * b[k + l];
  for (int l = 0; k + l < n; ++l) acc[l] += a[k + l] * b[k + l];
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// sum_k a[k] * b[k] with exact products accumulated in double and rounded once to float: the closest
// float to the sum. V4.1 uses it where the reference runs a float32 GEMM of unknown blocking (F.linear on
// CPU), which lands within a few ulp of this value.
inline float dot_exact(const float* a, const float* b, int n) {
  double s = 0.0;
  for (int k = 0; k < n; ++k) s += double(a[k]) * double(b[k]);
  return float(s);
}

// mean(x^2) accumulated in double and rounded once to float: the closest float to the exact statistic,
// which is what torch's float32 cascade sum approaches too.
inline float mean_square(const float* x, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return float(s / double(n));
}

// 1 / sqrt(ms + eps) in float32, as torch.rsqrt(variance + eps).
inline float rms_scale(float ms, float eps) { return 1.0f / std::sqrt(ms + eps); }

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// torch.nn.functional.softplus with beta 1, threshold 20: linear above 20 (exp would overflow), else
// log1p(exp(x)), which is accurate for large negative x as well.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace smelt::kernels::detail
