#include "kernels/linear/reference.h"

#include <algorithm>
#include <cstdint>

#include <string>
#include <vector>

#include "frontends/error.h"
#include "kernels/bf16.h"
#include "kernels/common.h"
#include "kernels/quant/reference.h"

namespace smelt::kernels {

namespace {

// y[r, n] = x[r, :] . w[n, :] with row strides ldx / ldy. Output columns are walked in tiles whose weight
// rows fit in L2, so each weight row is read from memory once per call while the x row stays in L1. Every
// y element is one detail::dot, whatever the tiling: results do not depend on `rows`.
void linear_strided(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int rows, int in,
                    int out) {
  const int tile = std::max(1, (64 * 1024) / int(sizeof(float)) / std::max(in, 1));
  for (int n0 = 0; n0 < out; n0 += tile) {
    const int n1 = std::min(out, n0 + tile);
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + r * ldx;
      float* yr = y + r * ldy;
      for (int n = n0; n < n1; ++n) yr[n] = detail::dot(xr, w + int64_t(n) * in, in);
    }
  }
}

}  // namespace

void linear(const float* x, const float* w, float* y, int rows, int in, int out) {
  linear_strided(x, in, w, y, out, rows, in, out);
}

void grouped_linear(const float* x, const float* w, float* y, int rows, int groups, int in_per_group,
                    int out_per_group) {
  const int64_t ldx = int64_t(groups) * in_per_group, ldy = int64_t(groups) * out_per_group;
  for (int g = 0; g < groups; ++g)
    linear_strided(x + int64_t(g) * in_per_group, ldx, w + int64_t(g) * out_per_group * in_per_group,
                   y + int64_t(g) * out_per_group, ldy, rows, in_per_group, out_per_group);
}

void linear_quant(const float* x, int rows, int in, int out, const uint8_t* weight, WeightFormat fmt,
                  const uint8_t* scale_e8m0, int block, bool act_quant_fp8_b32, float* y, bool bf16_out) {
  const bool fp4 = fmt == WeightFormat::FP4_E2M1;
  if (fp4 && block != quant::kFp4Block)
    throw smelt::Error("linear_quant: FP4 weights take one scale per 32 inputs, got block " + std::to_string(block));
  if (act_quant_fp8_b32) {
    if (fp4)
      quant::fp4_linear(x, rows, in, weight, scale_e8m0, out, y, bf16_out, 32);
    else
      quant::fp8_linear(x, rows, in, weight, scale_e8m0, out, block, y, bf16_out, 32);
    return;
  }
  std::vector<float> w(size_t(out) * size_t(in));
  if (fp4)
    quant::dequant_fp4_weight(weight, scale_e8m0, out, in, w.data());
  else
    quant::dequant_fp8_weight(weight, scale_e8m0, out, in, block, w.data());
  linear(x, w.data(), y, rows, in, out);
  if (bf16_out) round_bf16_inplace(y, size_t(rows) * size_t(out));
}

}  // namespace smelt::kernels
