// Bit-level helpers of the GPU kernel tests: bit-for-bit comparison of float outputs (NaN payloads and the sign of
// zero included), and bf16 bit patterns of float values for bf16 weights and inputs.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.h"

namespace smelt::test_cuda {

// a[i] and b[i] have the same bits for every i < n.
inline void expect_bits_equal(const float* a, const float* b, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t x, y;
    std::memcpy(&x, a + i, 4);
    std::memcpy(&y, b + i, 4);
    ASSERT_EQ(x, y) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}
inline void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  expect_bits_equal(got.data(), want.data(), got.size(), what);
}

// The bf16 bits of v, rounded to nearest even (kernels/bf16.h round_bf16).
inline std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const float r = kernels::round_bf16(v[i]);
    uint32_t u;
    std::memcpy(&u, &r, 4);
    b[i] = uint16_t(u >> 16);
  }
  return b;
}

}  // namespace smelt::test_cuda
