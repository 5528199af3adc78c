#include "kernels/rope/reference.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace smelt::kernels {

// Every step rounds to float32 where transformers computes on float32 tensors, and stays in double where
// it computes with Python floats (the YaRN correction range), so the table matches to within the ulp by
// which std::pow and torch's vectorised pow may differ.
std::vector<float> rope_inv_freq(const RopeParams& p) {
  const int dim = p.rope_dim, half = dim / 2;
  const float base = float(p.theta);
  std::vector<float> pos_freqs(half), inv(half);
  for (int i = 0; i < half; ++i) pos_freqs[i] = std::pow(base, float(2 * i) / float(dim));
  if (p.yarn_factor == 0.0) {
    for (int i = 0; i < half; ++i) inv[i] = 1.0f / pos_freqs[i];
    return inv;
  }
  // YaRN: dimensions that rotate more than beta_fast times over the original context keep their frequency
  // (extrapolation), those rotating fewer than beta_slow times are divided by the factor (interpolation),
  // with a linear ramp between.
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(p.yarn_original_max_pos / (rotations * 2 * std::numbers::pi))) / (2 * std::log(p.theta));
  };
  const double low = std::max(std::floor(correction_dim(p.yarn_beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(p.yarn_beta_slow)), double(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  const float flow = float(low), width = float(high - low), factor = float(p.yarn_factor);
  for (int i = 0; i < half; ++i) {
    const float ramp = std::clamp((float(i) - flow) / width, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float extrapolation = 1.0f / pos_freqs[i];
    const float interpolation = 1.0f / (factor * pos_freqs[i]);
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv;
}

std::vector<float> rope_inv_freq_v41(const RopeParams& p) {
  const int dim = p.rope_dim, half = dim / 2;
  const float base = float(p.theta);
  std::vector<float> freqs(half);
  for (int i = 0; i < half; ++i) freqs[i] = 1.0f / std::pow(base, float(2 * i) / float(dim));
  if (p.yarn_factor == 0.0) return freqs;
  // The correction range in double (Python floats), the blend in float32 tensors.
  auto corrected_dim = [&](double rotations) {
    return dim * std::log(p.yarn_original_max_pos / (rotations * 2 * std::numbers::pi)) / (2 * std::log(p.theta));
  };
  const double low = std::max(std::floor(corrected_dim(p.yarn_beta_fast)), 0.0);
  const double high = std::min(std::ceil(corrected_dim(p.yarn_beta_slow)), double(dim - 1));
  const float flow = float(low), width = float(std::max(high - low, 1e-3)), factor = float(p.yarn_factor);
  for (int i = 0; i < half; ++i) {
    const float ramp = std::clamp((float(i) - flow) / width, 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    freqs[i] = freqs[i] / factor * (1.0f - smooth) + freqs[i] * smooth;
  }
  return freqs;
}

void rope(float* x, int rows, int heads, int head_dim, int rope_dim, const float* inv_freq,
          const int64_t* positions, bool inverse) {
  const int half = rope_dim / 2;
  std::vector<float> cs(half), sn(half);
  for (int r = 0; r < rows; ++r) {
    const float pos = float(positions[r]);
    for (int i = 0; i < half; ++i) {
      const float angle = inv_freq[i] * pos;  // float32 product, as transformers' freqs
      cs[i] = std::cos(angle);
      sn[i] = inverse ? -std::sin(angle) : std::sin(angle);
    }
    for (int h = 0; h < heads; ++h) {
      float* v = x + (int64_t(r) * heads + h) * head_dim + (head_dim - rope_dim);
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cs[i] - b * sn[i];
        v[2 * i + 1] = b * cs[i] + a * sn[i];
      }
    }
  }
}

}  // namespace smelt::kernels
