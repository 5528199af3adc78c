#include "kernels/rms_norm/reference.h"

#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

// Float64 oracle: y = w * x / sqrt(mean(x^2) + eps) per segment.
DVec rms_norm64(const Vec& x, const Vec* w, int rows, int cols, int groups, double eps) {
  const int len = cols / groups;
  DVec y(x.size());
  for (int s = 0; s < rows * groups; ++s) {
    double ms = 0.0;
    for (int i = 0; i < len; ++i) ms += double(x[s * len + i]) * x[s * len + i];
    const double r = 1.0 / std::sqrt(ms / len + eps);
    for (int i = 0; i < len; ++i) y[s * len + i] = x[s * len + i] * r * (w ? double((*w)[i]) : 1.0);
  }
  return y;
}

TEST(RmsNorm, HandComputed) {
  // x = [3, -4]: mean square 12.5, so x / sqrt(12.5) = [0.848528137, -1.131370850]; weight [1, 2].
  const Vec x = {3.0f, -4.0f}, w = {1.0f, 2.0f};
  Vec y(2);
  rms_norm(x.data(), w.data(), y.data(), 1, 2, 1, 0.0f);
  EXPECT_NEAR(y[0], 0.8485281374, 1e-6);
  EXPECT_NEAR(y[1], -2.2627416998, 1e-6);
  // eps sits inside the root: [1, 1] with eps 3 -> 1 / sqrt(1 + 3) = 0.5.
  const Vec ones = {1.0f, 1.0f};
  rms_norm(ones.data(), nullptr, y.data(), 1, 2, 1, 3.0f);
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[1], 0.5f);
}

TEST(RmsNorm, GroupsNormaliseEachSegment) {
  // Two groups of two: [3, 4 | 0.5, 0.5] -> [3, 4] / sqrt(12.5), [0.5, 0.5] / 0.5.
  const Vec x = {3.0f, 4.0f, 0.5f, 0.5f};
  Vec y(4);
  rms_norm(x.data(), nullptr, y.data(), 1, 4, 2, 0.0f);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 4 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[2], 1.0, 1e-6);
  EXPECT_NEAR(y[3], 1.0, 1e-6);
}

TEST(RmsNorm, MatchesFloat64) {
  // float32 storage and per-element products: a few ulp (~1e-7 relative each); 1e-5 leaves a wide margin.
  Rng rng(2);
  const int rows = 5, cols = 96;
  for (int groups : {1, 4}) {
    Vec x = rng.normal(size_t(rows) * cols, 3.0), w = rng.normal(size_t(cols / groups));
    Vec y(x.size());
    rms_norm(x.data(), w.data(), y.data(), rows, cols, groups, 1e-6f);
    expect_close(y, rms_norm64(x, &w, rows, cols, groups, 1e-6), 1e-5, "weighted");
    rms_norm(x.data(), nullptr, y.data(), rows, cols, groups, 1e-6f);
    expect_close(y, rms_norm64(x, nullptr, rows, cols, groups, 1e-6), 1e-5, "unweighted");
    // In place gives the same bits as out of place.
    Vec inplace = x;
    rms_norm(inplace.data(), nullptr, inplace.data(), rows, cols, groups, 1e-6f);
    expect_bit_identical(inplace, y, "in place");
  }
}

}  // namespace
}  // namespace smelt::kernels
