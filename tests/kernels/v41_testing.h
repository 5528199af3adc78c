// Shared oracles of the V4.1 kernel tests: the nearest bf16 by brute force, random quantized weights, and the
// float64 value of a quantized linear.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/quant/reference.h"
#include "tests/kernels/testing.h"

namespace smelt::kernels::testing {

// Nearest bf16 by brute force in double: the candidates are the truncation and the next bf16 up in magnitude.
inline float bf16_oracle(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lo_bits, 4);
  std::memcpy(&hi, &hi_bits, 4);
  const double dl = std::fabs(double(x) - lo), dh = std::fabs(double(hi) - x);
  if (dl != dh) return dl < dh ? lo : hi;
  return (lo_bits >> 16) & 1 ? hi : lo;  // tie: even mantissa
}

// Random E4M3 codes without the NaN codes 0x7F / 0xFF.
inline std::vector<uint8_t> e4m3_codes(Rng& rng, size_t n) {
  std::vector<uint8_t> c(n);
  for (auto& b : c) {
    do b = uint8_t(rng.integer(0, 255));
    while ((b & 0x7f) == 0x7f);
  }
  return c;
}
inline std::vector<uint8_t> bytes(Rng& rng, size_t n, int lo, int hi) {
  std::vector<uint8_t> c(n);
  for (auto& b : c) b = uint8_t(rng.integer(lo, hi));
  return c;
}

// Float64 oracle: y = sum over 32-blocks of (xq . w) * sx * sw, with xq / sx from the (separately tested)
// activation quantizer and w from the (separately tested) weight dequantizer.
inline DVec quant_linear_oracle(const Vec& x, int rows, int in, int out, const Vec& w_deq) {
  std::vector<uint8_t> xq(x.size());
  Vec sx(size_t(rows) * (in / 32));
  quant::act_quant(x.data(), rows, in, 32, xq.data(), sx.data());
  DVec y(size_t(rows) * out);
  for (int r = 0; r < rows; ++r)
    for (int n = 0; n < out; ++n) {
      double acc = 0;
      for (int k = 0; k < in; ++k)
        acc += double(quant::e4m3_decode(xq[size_t(r) * in + k])) * sx[size_t(r) * (in / 32) + k / 32] *
               w_deq[size_t(n) * in + k];
      y[size_t(r) * out + n] = acc;
    }
  return y;
}

}  // namespace smelt::kernels::testing
