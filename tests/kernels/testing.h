// Helpers for the kernel tests: seeded random inputs and float32-vs-float64 comparisons.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace smelt::kernels::testing {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  Vec normal(size_t n, double stddev = 1.0) {
    std::normal_distribution<double> d(0.0, stddev);
    Vec v(n);
    for (auto& x : v) x = float(d(gen));
    return v;
  }
  Vec uniform(size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    Vec v(n);
    for (auto& x : v) x = float(d(gen));
    return v;
  }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }
};

inline DVec widen(const Vec& v) { return DVec(v.begin(), v.end()); }

// Float32 results against a float64 oracle. Each element may be off by tol relative to the larger of its
// own magnitude and the RMS of the whole expected array, so tiny elements of a well-scaled output (where
// float32 cancellation leaves absolute, not relative, error) do not fail spuriously.
inline void expect_close(const float* got, const DVec& want, double tol, const char* what) {
  double ms = 0.0;
  for (double w : want) ms += w * w;
  const double rms = want.empty() ? 0.0 : std::sqrt(ms / double(want.size()));
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]) / std::fmax(std::fabs(want[i]), rms + 1e-30);
    if (!(err <= worst)) worst = err, at = i;  // NaN counts as worst
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " got " << got[at] << " want " << want[at];
}
inline void expect_close(const Vec& got, const DVec& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  expect_close(got.data(), want, tol, what);
}

inline void expect_bit_identical(const Vec& a, const Vec& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t first = a.size();
  for (size_t i = 0; i < a.size() && first == a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) first = i;
  EXPECT_EQ(first, a.size()) << what << ": first difference at " << first << " (" << a[first] << " vs "
                             << b[first] << ")";
}

inline double ddot(const double* a, const double* b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace smelt::kernels::testing
