// Samplers: greedy ties and NaN, the documented counter-based draw, the integer weights, exact nucleus
// boundaries on ties, temperature and nucleus behaviour (docs/sampling.md). Expected tokens are hand-computed
// from splitmix64's published outputs (seed 0: 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "frontends/error.h"
#include "kernels/sampling/sampling.cuh"
#include "runtime/session.h"

namespace smelt::runtime {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// splitmix64, written out here from its definition (the oracle for the draw).
uint64_t splitmix_output(uint64_t seed, uint64_t k) {
  uint64_t state = seed;
  uint64_t z = 0;
  for (uint64_t i = 0; i <= k; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return z;
}

std::vector<int32_t> draws(Sampler s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(s.sample(logits));
  return t;
}

TEST(Sampling, GreedyTakesTheLowestIdOnTies) {
  EXPECT_EQ(sample_greedy(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(sample_greedy(std::vector<float>{-5, -5}), 0);
  EXPECT_EQ(sample_greedy(std::vector<float>{0, 0, 0, 9}), 3);
  EXPECT_EQ(sample_greedy(std::vector<float>{-0.0f, 0.0f}), 0);  // -0 == +0
  EXPECT_EQ(sample_greedy(std::vector<float>{-kInf, -kInf}), 0);
  EXPECT_EQ(sample_greedy(std::vector<float>{1, kInf, kInf}), 1);
  Sampler zero_temperature(0.0, 1.0, 42);
  EXPECT_EQ(zero_temperature.sample(std::vector<float>{0, 2, 2, 1}), 1);
  EXPECT_EQ(zero_temperature.next_step(), 1u);  // greedy draws still count
}

TEST(Sampling, GreedyNaN) {
  EXPECT_EQ(sample_greedy(std::vector<float>{kNaN, 5}), 0);      // nothing beats a NaN at id 0
  EXPECT_EQ(sample_greedy(std::vector<float>{1, kNaN, 2}), 2);   // a NaN elsewhere never wins
  EXPECT_EQ(sample_greedy(std::vector<float>{-kInf, kNaN}), 0);
  // Sampling keeps the greedy token when the greedy logit is not finite.
  EXPECT_EQ(draws(Sampler(1.0, 1.0, 0), {kNaN, 5, 5}, 3), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(draws(Sampler(1.0, 1.0, 0), {1, kInf, 2}, 3), (std::vector<int32_t>{1, 1, 1}));
}

TEST(Sampling, SplitmixIsTheDocumentedGenerator) {
  EXPECT_EQ(splitmix_output(0, 0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix_output(0, 1), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(splitmix_output(0, 2), 0x06c45d188009454full);
  for (uint64_t seed : {0ull, 1ull, 12345ull, ~0ull}) {
    for (uint64_t k : {0ull, 1ull, 7ull, 100ull}) EXPECT_EQ(smelt_sampling::draw_bits(seed, k), splitmix_output(seed, k) >> 11);
  }
}

TEST(Sampling, TheDrawIsTheDocumentedOne) {
  // Two tokens with p = 0.25 / 0.75: token 1 (the larger logit, first in the order) iff u < 0.75, u = the top 53
  // bits of splitmix64 output `step` times 2^-53. Seed 0: u = 0.883, 0.432, 0.026.
  const std::vector<float> logits = {0.0f, float(std::log(3.0))};
  EXPECT_EQ(draws(Sampler(1.0, 1.0, 0), logits, 3), (std::vector<int32_t>{0, 1, 1}));
  for (uint64_t seed : {1ull, 7ull, 12345ull, 99ull}) {
    Sampler s(1.0, 1.0, seed);
    for (uint64_t step = 0; step < 20; ++step) {
      const double u = double(splitmix_output(seed, step) >> 11) * 0x1.0p-53;
      const int32_t t = s.sample(logits);
      if (std::abs(u - 0.75) > 1e-6) {
        EXPECT_EQ(t, u < 0.75 ? 1 : 0) << "seed " << seed << " step " << step;
      }
      // Counter-based: draw `step` alone gives the same token.
      EXPECT_EQ(kernels::sample_top_p(logits, {1.0, 1.0, seed}, step), t);
    }
  }
}

TEST(Sampling, EqualLogitsSplitTheDrawExactly) {
  // Four equal logits: weights 2^44 each, total 2^46. Top-p 1: token = the top 2 bits of the output;
  // top_p 0.5: need = 2^45 exactly, ids {0, 1}: the top bit; a hair more: ids {0, 1, 2}, floor(3u);
  // 0.25: id 0 only.
  const std::vector<float> four(4, 2.5f);
  EXPECT_EQ(draws(Sampler(1.0, 1.0, 0), four, 3), (std::vector<int32_t>{3, 1, 0}));
  EXPECT_EQ(draws(Sampler(1.0, 0.5, 0), four, 3), (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ(draws(Sampler(1.0, 0.5 + 1e-9, 0), four, 3), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ(draws(Sampler(0.7, 0.25, 0), four, 3), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(draws(Sampler(1.0, 0.0, 0), four, 3), (std::vector<int32_t>{0, 0, 0}));  // at least one token
}

TEST(Sampling, OrderIsByLogitThenId) {
  // Only the first token of the order is kept: the largest logit, the lower id on a tie.
  EXPECT_EQ(draws(Sampler(1.0, 1e-6, 3), {1, 3, 3, 2}, 4), (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(draws(Sampler(1.5, 1e-6, 3), {-1, -2, 4, 4}, 4), (std::vector<int32_t>{2, 2, 2, 2}));
  // -0 and +0 are one group: ids in order.
  EXPECT_EQ(draws(Sampler(1.0, 0.5, 0), {-0.0f, 0.0f, -0.0f, 0.0f}, 3), (std::vector<int32_t>{1, 0, 0}));
}

TEST(Sampling, ZeroWeightTokensAreNeverDrawn) {
  // Weights 2^44, 0, 0, 2^44: the draw's top bit picks id 0 or 3 (seed 0: 1, 0, 0).
  EXPECT_EQ(draws(Sampler(1.0, 1.0, 0), {0, kNaN, -kInf, 0}, 3), (std::vector<int32_t>{3, 0, 0}));
  // e^x < 2^-44 is weight 0: x = -31.5, and x = -10 / 0.25 = -40.
  for (uint64_t seed = 0; seed < 50; ++seed) {
    EXPECT_EQ(kernels::sample_top_p(std::vector<float>{0, -31.5f}, {1.0, 1.0, seed}, 0), 0);
    EXPECT_EQ(kernels::sample_top_p(std::vector<float>{-10, 0}, {0.25, 1.0, seed}, 0), 1);
  }
}

TEST(Sampling, WeightsAreTwoToThe44TimesExp) {
  namespace s = smelt_sampling;
  EXPECT_EQ(s::weight(1.25f, 1.25, 0.7), 1ull << 44);
  for (double x = -30.9; x <= 0.0; x += 0.0173) {
    const float l = float(x);
    const long double want = std::ldexp(std::exp((long double)l), 44);
    const uint64_t q = s::weight(l, 0.0, 1.0);
    EXPECT_LE(std::abs((long double)q - want), 1.0L + want * 1e-15L) << "x " << x;
  }
  EXPECT_EQ(s::weight(-31.01f, 0.0, 1.0), 0u);
  EXPECT_EQ(s::weight(-kInf, 0.0, 1.0), 0u);
  EXPECT_EQ(s::weight(kNaN, 0.0, 1.0), 0u);
  // Temperature divides the gap: (l - mx) / t.
  EXPECT_EQ(s::weight(-2.0f, 0.0, 2.0), s::weight(-1.0f, 0.0, 1.0));
}

TEST(Sampling, TooLargeAVocabularyIsAnError) {
  std::vector<float> big(smelt_sampling::kMaxVocab + 1, 0.0f);
  EXPECT_THROW(kernels::sample_top_p(big, {1.0, 1.0, 0}, 0), Error);
  EXPECT_EQ(kernels::sample_top_p(big, {0.0, 1.0, 0}, 0), 0);  // greedy needs no weights
}

TEST(Sampling, SameSeedSameTokens) {
  std::vector<float> logits = {0.1f, 0.5f, -0.2f, 0.9f, 0.3f};
  Sampler a(0.8, 0.9, 5), b(0.8, 0.9, 5), c(0.8, 0.9, 6);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.sample(logits));
    tb.push_back(b.sample(logits));
    tc.push_back(c.sample(logits));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

// Frequencies over many draws against the intended distribution.
std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[size_t(s.sample(logits))] += 1.0 / draws;
  return f;
}

TEST(Sampling, TemperatureAndTopP) {
  // p = 0.5, 0.3, 0.2 at temperature 1.
  std::vector<float> logits = {float(std::log(0.5)), float(std::log(0.3)), float(std::log(0.2))};
  Sampler plain(1.0, 1.0, 1);
  auto f = frequencies(plain, logits, 40000);
  EXPECT_NEAR(f[0], 0.5, 0.01);
  EXPECT_NEAR(f[1], 0.3, 0.01);
  EXPECT_NEAR(f[2], 0.2, 0.01);

  // Temperature 0.5 squares the probabilities: 25:9:4.
  Sampler cold(0.5, 1.0, 2);
  f = frequencies(cold, logits, 40000);
  EXPECT_NEAR(f[0], 25.0 / 38, 0.01);
  EXPECT_NEAR(f[1], 9.0 / 38, 0.01);
  EXPECT_NEAR(f[2], 4.0 / 38, 0.01);

  // top_p 0.6 keeps {0, 1} (mass 0.8), renormalised 5:3; top_p 0.4 keeps only token 0.
  Sampler nucleus(1.0, 0.6, 3);
  f = frequencies(nucleus, logits, 40000);
  EXPECT_NEAR(f[0], 5.0 / 8, 0.01);
  EXPECT_NEAR(f[1], 3.0 / 8, 0.01);
  EXPECT_EQ(f[2], 0.0);
  Sampler narrow(1.0, 0.4, 4);
  f = frequencies(narrow, logits, 1000);
  EXPECT_NEAR(f[0], 1.0, 1e-9);
}

}  // namespace
}  // namespace smelt::runtime
