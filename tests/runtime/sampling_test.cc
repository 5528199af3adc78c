// Samplers: greedy ties, the documented reproducible draw, temperature and nucleus behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/session.h"

namespace smelt::runtime {
namespace {

TEST(Sampling, GreedyTakesTheLowestIdOnTies) {
  EXPECT_EQ(sample_greedy(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(sample_greedy(std::vector<float>{-5, -5}), 0);
  EXPECT_EQ(sample_greedy(std::vector<float>{0, 0, 0, 9}), 3);
  Sampler zero_temperature(0.0, 1.0, 42);
  EXPECT_EQ(zero_temperature.sample(std::vector<float>{0, 2, 2, 1}), 1);
}

TEST(Sampling, TheDrawIsTheDocumentedOne) {
  // Two tokens with p = 0.25 / 0.75: the draw picks token 0 iff u < 0.25, with u from the seed's first
  // mt19937_64 output (top 53 bits). Sorted by probability, token 1 comes first: token 1 iff u < 0.75.
  std::vector<float> logits = {0.0f, float(std::log(3.0))};
  for (uint64_t seed : {0ull, 1ull, 7ull, 12345ull, 99ull}) {
    std::mt19937_64 rng(seed);
    double u = double(rng() >> 11) * 0x1.0p-53;
    Sampler s(1.0, 1.0, seed);
    EXPECT_EQ(s.sample(logits), u < 0.75 ? 1 : 0) << "seed " << seed;
  }
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
  for (int i = 0; i < draws; ++i) f[s.sample(logits)] += 1.0 / draws;
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
