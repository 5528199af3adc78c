#include "kernels/rope/reference.h"

#include <numbers>

#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

// Float64 YaRN (arXiv 2309.00071 as transformers parameterises it): per pair i, blend the plain frequency
// (extrapolation) and the frequency divided by `factor` (interpolation) with a ramp that is 0 up to the
// pair index `low` and 1 from `high`, where low/high are the pair indices that make beta_fast resp.
// beta_slow rotations over the original context.
DVec yarn64(int dim, double theta, double factor, double orig, double beta_fast, double beta_slow) {
  auto pair_for = [&](double rotations) {
    // Solve orig / (2*pi*theta^(2i/dim)) = rotations for i.
    return dim * std::log(orig / (2 * std::numbers::pi * rotations)) / (2 * std::log(theta));
  };
  const double low = std::max(0.0, std::floor(pair_for(beta_fast)));
  const double high = std::min(double(dim - 1), std::ceil(pair_for(beta_slow)));
  DVec inv(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const double plain = 1.0 / std::pow(theta, 2.0 * i / dim);
    const double ramp = std::clamp((i - low) / (high == low ? 0.001 : high - low), 0.0, 1.0);
    inv[i] = plain * (1 - ramp) + plain / factor * ramp;
  }
  return inv;
}

TEST(RopeInvFreq, PlainTable) {
  RopeParams p;
  p.rope_dim = 4;
  p.theta = 10000.0;
  const Vec inv = rope_inv_freq(p);
  ASSERT_EQ(inv.size(), 2u);
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_FLOAT_EQ(inv[1], 0.01f);  // 10000^(-2/4)
  p.rope_dim = 64;
  p.theta = 160000.0;
  DVec want(32);
  for (int i = 0; i < 32; ++i) want[i] = 1.0 / std::pow(160000.0, 2.0 * i / 64);
  // Exact exponents (i/32), then one pow and one division in float32: a few ulp.
  expect_close(rope_inv_freq(p), want, 1e-6, "plain 64");
}

TEST(RopeInvFreq, YarnMatchesFloat64Formula) {
  struct Case {
    int dim;
    double theta, factor, orig, beta_fast, beta_slow;
  };
  // V4 compress rope; a config where the ramp spans many pairs; one where low clamps at 0.
  for (Case c : {Case{64, 160000, 16, 65536, 32, 1}, Case{64, 10000, 4, 4096, 32, 1}, Case{16, 10000, 8, 256, 32, 1}}) {
    RopeParams p;
    p.rope_dim = c.dim;
    p.theta = c.theta;
    p.yarn_factor = c.factor;
    p.yarn_original_max_pos = c.orig;
    p.yarn_beta_fast = c.beta_fast;
    p.yarn_beta_slow = c.beta_slow;
    expect_close(rope_inv_freq(p), yarn64(c.dim, c.theta, c.factor, c.orig, c.beta_fast, c.beta_slow), 1e-6, "yarn");
  }
}

TEST(RopeInvFreq, YarnKeepsFastPairsAndDividesSlowOnes) {
  // V4 compress rope: low = floor(15.45) = 15, high = ceil(24.71) = 25. Pairs <= 15 keep the plain
  // frequency exactly, pairs >= 25 are divided by 16, pair 20 sits half way.
  RopeParams plain;
  plain.rope_dim = 64;
  plain.theta = 160000.0;
  RopeParams yarn = plain;
  yarn.yarn_factor = 16.0;
  yarn.yarn_original_max_pos = 65536.0;
  const Vec a = rope_inv_freq(plain), b = rope_inv_freq(yarn);
  for (int i = 0; i <= 15; ++i) EXPECT_EQ(a[i], b[i]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_NEAR(b[i], a[i] / 16.0, 1e-6 * a[i] / 16.0) << i;
  EXPECT_NEAR(b[20], 0.5 * a[20] + 0.5 * a[20] / 16.0, 1e-6 * a[20]);
}

// Float64 oracle: rotate pairs (2i, 2i+1) of the trailing rope_dim channels by inv_freq[i] * pos.
DVec rope64(const Vec& x, int rows, int heads, int hd, int rd, const Vec& inv, const std::vector<int64_t>& pos,
            bool inverse) {
  DVec y = widen(x);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rd / 2; ++i) {
        const double ang = double(inv[i]) * double(pos[r]) * (inverse ? -1 : 1);
        double* v = &y[(size_t(r) * heads + h) * hd + (hd - rd) + 2 * i];
        const double a = v[0], b = v[1];
        v[0] = a * std::cos(ang) - b * std::sin(ang);
        v[1] = a * std::sin(ang) + b * std::cos(ang);
      }
  return y;
}

TEST(Rope, MatchesFloat64AndLeavesNopeChannels) {
  Rng rng(6);
  const int rows = 3, heads = 2, hd = 10, rd = 6;
  RopeParams p;
  p.rope_dim = rd;
  const Vec inv = rope_inv_freq(p);
  // Positions small enough that the float32 angle (transformers computes inv_freq * pos in float32) is
  // within ~4e-6 rad of the exact one, so 2e-5 covers it.
  const std::vector<int64_t> pos = {0, 5, 77};
  for (bool inverse : {false, true}) {
    Vec x = rng.normal(size_t(rows) * heads * hd), y = x;
    rope(y.data(), rows, heads, hd, rd, inv.data(), pos.data(), inverse);
    expect_close(y, rope64(x, rows, heads, hd, rd, inv, pos, inverse), 2e-5, "rope");
    for (int rh = 0; rh < rows * heads; ++rh)
      for (int c = 0; c < hd - rd; ++c) EXPECT_EQ(y[size_t(rh) * hd + c], x[size_t(rh) * hd + c]);
  }
}

TEST(Rope, AngleIsTheFloat32Product) {
  // At position 1e6 the float32 angle inv * pos differs from the exact one by far more than 1e-5 rad; the
  // oracle (transformers) uses the float32 angle.
  const float inv = 0.1f;
  const int64_t pos = 1000003;
  const float angle = inv * float(pos);
  Vec x = {1.0f, 0.0f};
  rope(x.data(), 1, 1, 2, 2, &inv, &pos, false);
  EXPECT_NEAR(x[0], std::cos(double(angle)), 1e-6);
  EXPECT_NEAR(x[1], std::sin(double(angle)), 1e-6);
}

TEST(Rope, InverseUndoesRope) {
  Rng rng(7);
  const int rows = 4, heads = 3, hd = 16, rd = 8;
  RopeParams p;
  p.rope_dim = rd;
  p.theta = 160000.0;
  p.yarn_factor = 16.0;
  p.yarn_original_max_pos = 65536.0;
  const Vec inv = rope_inv_freq(p);
  const std::vector<int64_t> pos = {0, 1, 1000, 123456};
  Vec x = rng.normal(size_t(rows) * heads * hd), y = x;
  rope(y.data(), rows, heads, hd, rd, inv.data(), pos.data(), false);
  rope(y.data(), rows, heads, hd, rd, inv.data(), pos.data(), true);
  // Two float32 rotations by exactly opposite angles: only product rounding remains (a few ulp).
  expect_close(y, widen(x), 1e-6, "inverse(rope(x))");
}

}  // namespace
}  // namespace smelt::kernels
