// GPU sampling (kernels/sampling/sampling.cu) against the host reference kernels::sample_top_p (itself checked
// against hand-computed tokens in tests/runtime/sampling_test.cc). docs/sampling.md: the device token must be
// the host token, always (integer weights: no rounding boundary), for greedy and temperature + top-p, on rows
// with ties, -inf, NaN, +inf, a dominant token, equal logits, and vocabularies from 1 to 129,280.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "kernels/sampling/reference.h"
#include "tests/kernels_cuda/harness.h"

namespace {

using smelt::kernels::SamplerParams;
using smelt::test_cuda::DevPtr;
using smelt::test_cuda::Gpu;
using smelt::test_cuda::gpu;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The launch sequence of runtime/cuda/sample.cc on one logits row (scratch reused, never cleared).
struct DeviceSampler {
  Gpu& g;
  int64_t n;
  DevPtr logits, scratch;

  DeviceSampler(Gpu& gpu, int64_t vocab) : g(gpu), n(vocab) {
    logits = g.alloc(size_t(n) * 4);
    const size_t bytes = 256 + 2048 * 8 + size_t(n) * 8;
    scratch = g.alloc(bytes);
    g.upload(scratch, std::vector<unsigned char>(bytes, 0xff).data(), bytes);  // garbage: the kernels set it up
  }
  void set(const std::vector<float>& row) { g.upload(logits, row.data(), row.size() * 4); }
  int32_t sample(const SamplerParams& p, uint64_t step) {
    DevPtr best = scratch, token = scratch + 8, hist = scratch + 256, q = scratch + 256 + 2048 * 8;
    g.launch("sampling", "smelt_sample_argmax", 1, 1, 1, 1024, 0, logits, n, best, token, hist);
    if (p.temperature > 0.0 && n >= 2) {
      const unsigned grid = unsigned(std::min<int64_t>(std::max<int64_t>((n + 2047) / 2048, 1), 1024));
      g.launch("sampling", "smelt_sample_weights", grid, 1, 1, 256, 0, logits, n, best, p.temperature, q, hist);
      g.launch("sampling", "smelt_sample_pick", 1, 1, 1, 1024, 0, logits, n, best, p.temperature, p.top_p, p.seed,
               step, q, hist, token);
    }
    return g.get<int32_t>(token, 1)[0];
  }
};

// Row kinds: the shapes of logits a model gives, and the corner cases of the semantics.
std::vector<float> make_row(const std::string& kind, int64_t n, uint32_t seed) {
  std::vector<float> r = smelt::test_cuda::randn(size_t(n), seed, 3.f);
  if (kind == "ties")  // quarter steps: many equal logits, ties at the nucleus boundary and in the draw
    for (float& x : r) x = std::round(x * 4.f) / 4.f;
  if (kind == "coarse_ties")  // a handful of values: big tie groups
    for (float& x : r) x = std::round(x / 2.f);
  if (kind == "neg_inf")
    for (size_t i = 0; i < r.size(); i += 3) r[i] = -kInf;
  if (kind == "nan")
    for (size_t i = 1; i < r.size(); i += 5) r[i] = kNaN;
  if (kind == "nan_first") r[0] = kNaN;
  if (kind == "pos_inf" && n > 2) r[size_t(n / 2)] = kInf;
  if (kind == "dominant") r[size_t(n - 1)] += 40.f;  // the others weigh (nearly) nothing
  if (kind == "equal")
    for (float& x : r) x = 1.5f;
  if (kind == "signed_zero")
    for (size_t i = 0; i < r.size(); ++i) r[i] = (i % 3 == 0) ? -0.0f : (i % 3 == 1 ? 0.0f : -1.0f);
  if (kind == "wide")  // logits like a confident model: a spread of hundreds
    for (float& x : r) x *= 40.f;
  return r;
}

const char* const kKinds[] = {"randn", "ties", "coarse_ties", "neg_inf", "nan", "nan_first",
                              "pos_inf", "dominant", "equal", "signed_zero", "wide"};

void check_vocab(int64_t n, bool full_grid) {
  DeviceSampler dev(gpu(), n);
  int mismatches = 0, sampled = 0, not_greedy = 0;
  uint32_t row_seed = uint32_t(n);
  for (const char* kind : kKinds) {
    const std::vector<float> row = make_row(kind, n, ++row_seed);
    dev.set(row);
    const int32_t greedy = smelt::kernels::sample_greedy(row);
    for (double t : {0.0, 0.7, 1.0, 1.5})
      for (double top_p : {0.1, 0.9, 1.0})
        for (uint64_t seed : {0ull, 1ull, 12345ull})
          for (uint64_t step : {0ull, 1ull, 17ull}) {
            if (!full_grid && (seed != 1 || step == 17)) continue;
            const SamplerParams p{t, top_p, seed};
            const int32_t want = smelt::kernels::sample_top_p(row, p, step);
            const int32_t got = dev.sample(p, step);
            ++sampled;
            not_greedy += want != greedy;
            if (got != want && ++mismatches <= 10)
              ADD_FAILURE() << "vocab " << n << " " << kind << " t " << t << " top_p " << top_p << " seed " << seed
                            << " step " << step << ": device " << got << ", host " << want;
          }
  }
  EXPECT_EQ(mismatches, 0) << "of " << sampled;
  if (n >= 3) {
    EXPECT_GT(not_greedy, 0) << "vocab " << n << ": no draw left the greedy token";
  }
}

TEST(SamplingGpu, SmallVocabularies) {
  NEED_GPU();
  for (int64_t n : {1, 2, 3, 7, 100, 1000, 1025, 4097}) check_vocab(n, true);
}

TEST(SamplingGpu, DeepSeekVocabulary) {
  NEED_GPU();
  check_vocab(129280, false);
}

// Many draws on one row: the steps are independent draws (and device == host for each).
TEST(SamplingGpu, ManyStepsOneRow) {
  NEED_GPU();
  const int64_t n = 129280;
  DeviceSampler dev(gpu(), n);
  const std::vector<float> row = make_row("ties", n, 7);
  dev.set(row);
  const SamplerParams p{1.0, 0.9, 2024};
  std::vector<int32_t> seen;
  for (uint64_t step = 0; step < 64; ++step) {
    const int32_t want = smelt::kernels::sample_top_p(row, p, step);
    ASSERT_EQ(dev.sample(p, step), want) << "step " << step;
    seen.push_back(want);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 8);  // really sampling
}

// Not a pass/fail check: how long one device sample takes at the V4 vocabulary (launches and the int32 copy
// included; the harness synchronises after every kernel), against the host reference on the same row.
TEST(SamplingGpu, Timing) {
  NEED_GPU();
  const int64_t n = 129280;
  DeviceSampler dev(gpu(), n);
  const std::vector<float> row = make_row("randn", n, 11);
  dev.set(row);
  const SamplerParams p{0.7, 0.9, 5};
  for (int i = 0; i < 5; ++i) dev.sample(p, uint64_t(i));  // warm up (module load)
  auto t0 = std::chrono::steady_clock::now();
  const int reps = 50;
  for (int i = 0; i < reps; ++i) dev.sample(p, uint64_t(i));
  const double gpu_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) smelt::kernels::sample_top_p(row, p, uint64_t(i));
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 5;
  std::printf("sampling vocab %lld: device %.3f ms/token (3 launches + sync each), host reference %.3f ms\n",
              (long long)n, gpu_ms, host_ms);
  RecordProperty("device_ms", std::to_string(gpu_ms));
  RecordProperty("host_ms", std::to_string(host_ms));
}

}  // namespace
