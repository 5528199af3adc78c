#include "kernels/quant/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "frontends/error.h"

namespace smelt::kernels::quant {
namespace {

uint32_t f32_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float f32_from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

[[noreturn]] void fail(const std::string& what) { throw smelt::Error("quant: " + what); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_block(const char* fn, int block) {
  if (block <= 0) fail(std::string(fn) + ": block size " + std::to_string(block) + " must be positive");
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

// ---- element formats ----------------------------------------------------------------------------

float e4m3_decode(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const float sign = (code & 0x80) ? -1.f : 1.f;
  if (e == 15 && m == 7) return kNaN;
  if (e == 0) return sign * std::ldexp(float(m), -9);
  return sign * std::ldexp(float(8 + m), e - 10);  // (1 + m/8) * 2^(e-7)
}

uint8_t e4m3_encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(double(x));
  if (a >= 448.0) return sign | 0x7E;
  // Scale so that one unit is the code spacing of a's binade, then round half to even (rint in the
  // default rounding mode). Every step here is exact in double.
  if (a < 0x1p-6) return sign | uint8_t(std::rint(a * 0x1p9));  // subnormals; 8 -> code 8 = 2^-6
  int ex;
  std::frexp(a, &ex);  // a in [2^(ex-1), 2^ex)
  const int e = ex - 1;
  int q = int(std::rint(std::ldexp(a, 3 - e)));  // in [8, 16]
  int biased = e + 7;
  if (q == 16) q = 8, ++biased;
  const int code = (biased << 3) | (q - 8);
  return sign | uint8_t(std::min(code, 0x7E));
}

float e4m3_round(float x) { return e4m3_decode(e4m3_encode(x)); }

float e8m0_decode(uint8_t e) {
  if (e == 255) return kNaN;
  return std::ldexp(1.f, int(e) - 127);
}

float e2m1_decode(uint8_t nibble) {
  static constexpr float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = kMag[nibble & 7];
  return (nibble & 8) ? -v : v;
}

uint8_t e2m1_encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  if (std::isnan(x)) return sign | 0x7;
  const double a = std::fabs(double(x));
  if (a >= 6.0) return sign | 0x7;
  // Same scheme as E4M3: binades [0,1) and [1,2) have spacing 0.5, [2,4) spacing 1, [4,6] spacing 2;
  // the rounded multiple maps onto the code directly (and rounding up into the next binade lands on
  // that binade's first code).
  int code;
  if (a < 2.0) code = int(std::rint(a * 2.0));          // 0..4 -> codes 0..4
  else if (a < 4.0) code = int(std::rint(a)) + 2;       // 2..4 -> codes 4..6
  else code = int(std::rint(a * 0.5)) + 4;              // 2..3 -> codes 6..7
  return sign | uint8_t(code);
}

float e2m1_round(float x) { return e2m1_decode(e2m1_encode(x)); }

void fp4_unpack_codes(const uint8_t* packed, int64_t n, uint8_t* codes) {
  if (n % 2) fail("fp4_unpack: odd element count " + std::to_string(n));
  for (int64_t j = 0; j < n / 2; ++j) {
    codes[2 * j] = packed[j] & 0xF;
    codes[2 * j + 1] = packed[j] >> 4;
  }
}

void fp4_unpack(const uint8_t* packed, int64_t n, float* values) {
  if (n % 2) fail("fp4_unpack: odd element count " + std::to_string(n));
  for (int64_t j = 0; j < n / 2; ++j) {
    values[2 * j] = e2m1_decode(packed[j] & 0xF);
    values[2 * j + 1] = e2m1_decode(packed[j] >> 4);
  }
}

uint16_t bf16_from_f32(float x) {
  const uint32_t b = f32_bits(x);
  if (std::isnan(x)) return uint16_t((b >> 16) | 0x40);
  return uint16_t((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

float bf16_to_f32(uint16_t bits) { return f32_from_bits(uint32_t(bits) << 16); }

float bf16_round(float x) { return bf16_to_f32(bf16_from_f32(x)); }

float pow2_scale(float amax, float max_inv) {
  const uint32_t b = f32_bits(amax * max_inv);
  const int e = int((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0 ? 1 : 0);
  return f32_from_bits(uint32_t(e + 127) << 23);
}

// ---- weight dequantization ----------------------------------------------------------------------

void dequant_fp8_weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, int block, float* y) {
  check_block("dequant_fp8_weight", block);
  const int64_t scale_cols = ceil_div(in, block);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      y[o * in + i] = e4m3_decode(w[o * in + i]) * e8m0_decode(scale[(o / block) * scale_cols + i / block]);
}

void dequant_fp4_weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, float* y) {
  if (in % 2) fail("dequant_fp4_weight: odd input width " + std::to_string(in));
  const int64_t scale_cols = ceil_div(in, kFp4Block);
  for (int64_t o = 0; o < out; ++o) {
    fp4_unpack(w + o * (in / 2), in, y + o * in);
    for (int64_t i = 0; i < in; ++i) y[o * in + i] *= e8m0_decode(scale[o * scale_cols + i / kFp4Block]);
  }
}

// ---- activation quantization ---------------------------------------------------------------------

void act_quant(const float* x, int64_t rows, int64_t k, int block, uint8_t* codes, float* scales) {
  check_block("act_quant", block);
  const int64_t nb = ceil_div(k, block);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * block, k1 = std::min(k, k0 + block);
      float amax = 0.f;
      for (int64_t i = k0; i < k1; ++i) amax = std::max(amax, std::fabs(x[r * k + i]));
      const float s = pow2_scale(std::max(amax, kActAmaxFloor), 1.f / kE4m3Max);
      scales[r * nb + b] = s;
      for (int64_t i = k0; i < k1; ++i)
        codes[r * k + i] = e4m3_encode(std::clamp(x[r * k + i] / s, -kE4m3Max, kE4m3Max));
    }
  }
}

// ---- fake quantization ---------------------------------------------------------------------------

namespace {

void check_groups(const char* fn, int64_t n, int group) {
  if (n % group) fail(std::string(fn) + ": length " + std::to_string(n) + " is not a multiple of " +
                      std::to_string(group));
}

float group_amax(const float* x, int group) {
  float amax = 0.f;
  for (int i = 0; i < group; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

// x <- e2m1_rne(clamp(x / s, ±6)) * s over one group.
void qdq_e2m1_group(float* x, int group, float s) {
  for (int i = 0; i < group; ++i) x[i] = e2m1_round(std::clamp(x[i] / s, -kE2m1Max, kE2m1Max)) * s;
}

}  // namespace

float window_kv_scale(float amax) { return pow2_scale(std::max(amax, kActAmaxFloor), 1.f / kE4m3Max); }

// The floor keeps the E4M3 scale at or above its smallest subnormal (2^-9).
float compressed_kv_scale(float amax) { return e4m3_round(std::max(amax, kE2m1Max * 0x1p-9f) / kE2m1Max); }

// The floor keeps amax/6 a normal float (the exponent trick needs one).
float index_scale(float amax) { return pow2_scale(std::max(amax, kE2m1Max * 0x1p-126f), 1.f / kE2m1Max); }

void qdq_window_kv(float* x, int64_t n) {
  constexpr int group = 32;
  check_groups("qdq_window_kv", n, group);
  for (int64_t g = 0; g < n; g += group) {
    const float s = window_kv_scale(group_amax(x + g, group));
    for (int i = 0; i < group; ++i) x[g + i] = e4m3_round(std::clamp(x[g + i] / s, -kE4m3Max, kE4m3Max)) * s;
  }
}

void qdq_compressed_kv(float* x, int64_t n) {
  constexpr int group = 16;
  check_groups("qdq_compressed_kv", n, group);
  for (int64_t g = 0; g < n; g += group) qdq_e2m1_group(x + g, group, compressed_kv_scale(group_amax(x + g, group)));
}

void qdq_index(float* x, int64_t n) {
  constexpr int group = 32;
  check_groups("qdq_index", n, group);
  for (int64_t g = 0; g < n; g += group) qdq_e2m1_group(x + g, group, index_scale(group_amax(x + g, group)));
}

// ---- GEMMs ---------------------------------------------------------------------------------------

namespace {

// Shared body: wval(nn, kk) gives the weight element value, wscale(nn, kb_first_k) its scale.
template <class WVal, class WScale>
void block_gemm(const uint8_t* xq, const float* sx, int64_t m, int64_t k, int act_block, int64_t n, WVal wval,
                WScale wscale, float* y, bool bf16_out) {
  const int64_t nb = ceil_div(k, act_block);
  std::vector<float> xv(size_t(m * k));
  for (int64_t i = 0; i < m * k; ++i) xv[size_t(i)] = e4m3_decode(xq[i]);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t k0 = b * act_block, k1 = std::min(k, k0 + act_block);
        // E4M3 x E4M3 (or E2M1) products are exact in double, and a block's sum spans < 53 bits.
        double sum = 0.0;
        for (int64_t i = k0; i < k1; ++i) sum += double(xv[size_t(r * k + i)]) * double(wval(c, i));
        acc += float(sum) * sx[r * nb + b] * wscale(c, k0);
      }
      y[r * n + c] = bf16_out ? bf16_round(acc) : acc;
    }
  }
}

}  // namespace

void fp8_gemm(const uint8_t* xq, const float* sx, int64_t m, int64_t k, int act_block, const uint8_t* w,
              const uint8_t* w_scale, int64_t n, int w_block, float* y, bool bf16_out) {
  check_block("fp8_gemm", act_block);
  check_block("fp8_gemm", w_block);
  if (w_block % act_block)
    fail("fp8_gemm: activation block " + std::to_string(act_block) + " does not divide weight block " +
         std::to_string(w_block));
  const int64_t scale_cols = ceil_div(k, w_block);
  block_gemm(
      xq, sx, m, k, act_block, n, [&](int64_t c, int64_t i) { return e4m3_decode(w[c * k + i]); },
      [&](int64_t c, int64_t k0) { return e8m0_decode(w_scale[(c / w_block) * scale_cols + k0 / w_block]); }, y,
      bf16_out);
}

void fp4_gemm(const uint8_t* xq, const float* sx, int64_t m, int64_t k, int act_block, const uint8_t* w,
              const uint8_t* w_scale, int64_t n, float* y, bool bf16_out) {
  check_block("fp4_gemm", act_block);
  if (kFp4Block % act_block)
    fail("fp4_gemm: activation block " + std::to_string(act_block) + " does not divide 32");
  if (k % 2) fail("fp4_gemm: odd K " + std::to_string(k));
  const int64_t scale_cols = ceil_div(k, kFp4Block);
  block_gemm(
      xq, sx, m, k, act_block, n,
      [&](int64_t c, int64_t i) {
        const uint8_t byte = w[c * (k / 2) + i / 2];
        return e2m1_decode(i % 2 ? byte >> 4 : byte & 0xF);
      },
      [&](int64_t c, int64_t k0) { return e8m0_decode(w_scale[c * scale_cols + k0 / kFp4Block]); }, y, bf16_out);
}

void fp8_linear(const float* x, int64_t m, int64_t k, const uint8_t* w, const uint8_t* w_scale, int64_t n,
                int w_block, float* y, bool bf16_out, int act_block) {
  check_block("fp8_linear", act_block);
  std::vector<uint8_t> xq(size_t(m * k));
  std::vector<float> sx(size_t(m * ceil_div(k, act_block)));
  act_quant(x, m, k, act_block, xq.data(), sx.data());
  fp8_gemm(xq.data(), sx.data(), m, k, act_block, w, w_scale, n, w_block, y, bf16_out);
}

void fp4_linear(const float* x, int64_t m, int64_t k, const uint8_t* w, const uint8_t* w_scale, int64_t n,
                float* y, bool bf16_out, int act_block) {
  check_block("fp4_linear", act_block);
  std::vector<uint8_t> xq(size_t(m * k));
  std::vector<float> sx(size_t(m * ceil_div(k, act_block)));
  act_quant(x, m, k, act_block, xq.data(), sx.data());
  fp4_gemm(xq.data(), sx.data(), m, k, act_block, w, w_scale, n, y, bf16_out);
}

}  // namespace smelt::kernels::quant
