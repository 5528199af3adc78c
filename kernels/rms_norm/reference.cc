#include "kernels/rms_norm/reference.h"

#include <cstdint>

#include "kernels/common.h"

namespace smelt::kernels {

void rms_norm(const float* x, const float* weight, float* y, int rows, int cols, int groups, float eps) {
  const int len = cols / groups;
  for (int64_t s = 0; s < int64_t(rows) * groups; ++s) {
    const float* xs = x + s * len;
    float* ys = y + s * len;
    const float r = detail::rms_scale(detail::mean_square(xs, len), eps);  // before any write: x may alias y
    // Same rounding steps as the oracle: (x * r), then weight * that.
    if (weight)
      for (int i = 0; i < len; ++i) ys[i] = weight[i] * (xs[i] * r);
    else
      for (int i = 0; i < len; ++i) ys[i] = xs[i] * r;
  }
}

}  // namespace smelt::kernels
