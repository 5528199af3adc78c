// Quantized compute against hand-computed values and float64 oracles written here: power-of-two
// scales, activation quantization, weight dequantization (both block sizes, ragged edges), the
// fake-quant of attention state, and the FP8/FP4 GEMMs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/quant/reference.h"

namespace q = smelt::kernels::quant;

namespace {

// All finite E4M3 magnitudes in code order (codes 0x00 .. 0x7E), from the definition.
std::vector<double> e4m3_magnitudes() {
  std::vector<double> v;
  for (int c = 0; c <= 0x7E; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? m * std::ldexp(1.0, -9) : (8 + m) * std::ldexp(1.0, e - 10));
  }
  return v;
}

const double kE2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// Nearest grid value by brute force; ties go to the even index (the even code).
double nearest(const double* grid, int n, double x) {
  const double a = std::fabs(x);
  int best = 0;
  for (int i = 1; i < n; ++i) {
    const double d = std::fabs(grid[i] - a), bd = std::fabs(grid[best] - a);
    if (d < bd || (d == bd && i % 2 == 0)) best = i;
  }
  return std::copysign(grid[best], x);
}

double nearest_e4m3(double x) {
  static const std::vector<double> g = e4m3_magnitudes();
  return nearest(g.data(), int(g.size()), x);
}

double nearest_e2m1(double x) { return nearest(kE2m1, 8, x); }

// 2^ceil(log2(v)) in float64 for the float32 value v.
double pow2_ceil(float v) { return std::ldexp(1.0, int(std::ceil(std::log2(double(v))))); }

float random_bf16(std::mt19937& gen, double scale) {
  std::normal_distribution<double> n(0.0, scale);
  return q::bf16_round(float(n(gen)));
}

}  // namespace

// ---- scales ---------------------------------------------------------------------------------------

TEST(Pow2Scale, ExponentTrickMatchesLog2) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(-20.0, 20.0);
  std::vector<float> amax;
  for (int i = 0; i < 100000; ++i) amax.push_back(float(std::exp2(u(gen))));
  for (int e = -14; e <= 20; ++e) {  // exact multiples of 448 and 6 and their neighbours
    for (float base : {448.f, 6.f, 1.f, 3.f}) {
      const float a = std::ldexp(base, e);
      amax.insert(amax.end(), {a, std::nextafter(a, 0.f), std::nextafter(a, 1e30f)});
    }
  }
  for (float a : amax) {
    for (float inv : {1.f / 448.f, 1.f / 6.f}) {
      const float v = a * inv;  // the fp32 product the kernels take the bits of
      ASSERT_EQ(double(q::pow2_scale(a, inv)), pow2_ceil(v)) << "amax " << a << " inv " << inv;
    }
  }
  EXPECT_EQ(q::pow2_scale(448.f, 1.f / 448.f), 1.f);
  EXPECT_EQ(q::pow2_scale(449.f, 1.f / 448.f), 2.f);
  EXPECT_EQ(q::pow2_scale(1.f, 1.f / 448.f), std::ldexp(1.f, -8));  // 1/448 = 2^-8.81
  EXPECT_EQ(q::pow2_scale(6.f, 1.f / 6.f), 1.f);  // 6 * fp32(1/6) rounds to exactly 1
}

TEST(ActQuant, MatchesFloat64Oracle) {
  std::mt19937 gen(5);
  for (int64_t k : {96, 70}) {  // 70: ragged last block of 6
    const int64_t rows = 7, nb = (k + 31) / 32;
    std::vector<float> x(size_t(rows * k));
    for (auto& v : x) v = random_bf16(gen, 3.0);
    for (int64_t i = 0; i < 32; ++i) x[size_t(1 * k + i)] = 0.f;  // an all-zero block: amax floor 1e-4
    x[size_t(2 * k + 3)] = 1e6f;                                    // a block dominated by one value
    std::vector<uint8_t> codes(x.size());
    std::vector<float> scales(size_t(rows * nb));
    q::act_quant(x.data(), rows, k, 32, codes.data(), scales.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t k0 = b * 32, k1 = std::min(k, k0 + 32);
        float amax = 0;
        for (int64_t i = k0; i < k1; ++i) amax = std::max(amax, std::fabs(x[size_t(r * k + i)]));
        const double s = pow2_ceil(std::max(amax, 1e-4f) * (1.f / 448.f));
        ASSERT_EQ(double(scales[size_t(r * nb + b)]), s) << r << "," << b;
        for (int64_t i = k0; i < k1; ++i) {
          const double want = nearest_e4m3(std::clamp(double(x[size_t(r * k + i)]) / s, -448.0, 448.0));
          ASSERT_EQ(double(q::e4m3_decode(codes[size_t(r * k + i)])), want) << r << "," << i;
        }
      }
    }
  }
  // all-zero block: scale from the 1e-4 floor, codes zero
  std::vector<float> z(32, 0.f);
  std::vector<uint8_t> zc(32);
  float zs;
  q::act_quant(z.data(), 1, 32, 32, zc.data(), &zs);
  EXPECT_EQ(double(zs), pow2_ceil(1e-4f * (1.f / 448.f)));
  EXPECT_EQ(zs, std::ldexp(1.f, -22));  // 1e-4/448 = 2.23e-7, between 2^-23 and 2^-22
  for (auto c : zc) EXPECT_EQ(c, 0);
}

// ---- weight dequantization -------------------------------------------------------------------------

TEST(Dequant, Fp8Block32RaggedByHand) {
  const int64_t out = 33, in = 40;  // scale grid [2, 2]: the last row / last 8 columns are partial tiles
  std::vector<uint8_t> w(size_t(out * in), 0x38);  // 0x38 = 1.0
  w[size_t(5 * in + 33)] = 0x41;                   // (1 + 1/8) * 2 = 2.25
  w[size_t(32 * in + 39)] = 0xC6;                  // -(1 + 6/8) * 2^1 = -3.5
  w[size_t(0 * in + 1)] = 0x03;                    // 3 * 2^-9
  const uint8_t scale[4] = {127, 128, 126, 130};   // [[1, 2], [0.5, 8]]
  std::vector<float> y(size_t(out * in));
  q::dequant_fp8_weight(w.data(), scale, out, in, 32, y.data());
  EXPECT_EQ(y[0], 1.f);
  EXPECT_EQ(y[1], 3.f / 512.f);
  EXPECT_EQ(y[31], 1.f);
  EXPECT_EQ(y[32], 2.f);
  EXPECT_EQ(y[size_t(31 * in + 39)], 2.f);
  EXPECT_EQ(y[size_t(5 * in + 33)], 4.5f);
  EXPECT_EQ(y[size_t(32 * in + 0)], 0.5f);
  EXPECT_EQ(y[size_t(32 * in + 31)], 0.5f);
  EXPECT_EQ(y[size_t(32 * in + 32)], 8.f);
  EXPECT_EQ(y[size_t(32 * in + 39)], -28.f);
}

TEST(Dequant, Fp8Block128RaggedByHand) {
  const int64_t out = 130, in = 129;  // scale grid [2, 2]
  std::vector<uint8_t> w(size_t(out * in), 0x30);  // 0x30 = 0.5
  w[size_t(129 * in + 128)] = 0x7E;                // 448
  w[size_t(127 * in + 127)] = 0xB9;                // -1.125
  const uint8_t scale[4] = {120, 121, 122, 123};   // 2^-7, 2^-6, 2^-5, 2^-4
  std::vector<float> y(size_t(out * in));
  q::dequant_fp8_weight(w.data(), scale, out, in, 128, y.data());
  EXPECT_EQ(y[0], std::ldexp(1.f, -8));
  EXPECT_EQ(y[128], std::ldexp(1.f, -7));
  EXPECT_EQ(y[size_t(127 * in + 127)], -1.125f / 128.f);
  EXPECT_EQ(y[size_t(128 * in + 0)], std::ldexp(1.f, -6));
  EXPECT_EQ(y[size_t(129 * in + 128)], 448.f / 16.f);
}

TEST(Dequant, Fp4ByHand) {
  const int64_t out = 2, in = 66;  // scales [2, 3]: 32 + 32 + a ragged 2
  std::vector<uint8_t> w(size_t(out * in / 2), 0x00);
  w[0] = 0x5A;   // element 0 = code A = -1, element 1 = code 5 = 3
  w[16] = 0x70;  // element 32 = 0, element 33 = 6
  w[32] = 0x1E;  // element 64 = code E = -4, element 65 = 0.5
  w[33 + 2] = 0x94;  // row 1: element 4 = 2, element 5 = code 9 = -0.5
  const uint8_t scale[6] = {128, 125, 131, 127, 127, 127};  // row 0: 2, 0.25, 16; row 1: 1
  std::vector<float> y(size_t(out * in));
  q::dequant_fp4_weight(w.data(), scale, out, in, y.data());
  EXPECT_EQ(y[0], -2.f);
  EXPECT_EQ(y[1], 6.f);
  EXPECT_EQ(y[2], 0.f);
  EXPECT_EQ(y[32], 0.f);
  EXPECT_EQ(y[33], 1.5f);
  EXPECT_EQ(y[64], -64.f);
  EXPECT_EQ(y[65], 8.f);
  EXPECT_EQ(y[size_t(in + 4)], 2.f);
  EXPECT_EQ(y[size_t(in + 5)], -0.5f);
  EXPECT_THROW(q::dequant_fp4_weight(w.data(), scale, 1, 65, y.data()), std::runtime_error);
}

// ---- fake quantization -----------------------------------------------------------------------------

TEST(Qdq, WindowKvByHand) {
  std::vector<float> x(32, 0.f);
  x[0] = 1000.f;  // amax 1000: 1000/448 = 2.23 -> scale 4; 250 -> 256 (binade step 16) -> 1024
  x[1] = 1.f;     // 0.25 exact -> 1
  x[2] = 0.3f;    // 0.075 -> 10 * 2^-7 -> 0.3125
  x[3] = -7.f;    // -1.75 exact
  q::qdq_window_kv(x.data(), 32);
  EXPECT_EQ(x[0], 1024.f);
  EXPECT_EQ(x[1], 1.f);
  EXPECT_EQ(x[2], 0.3125f);
  EXPECT_EQ(x[3], -7.f);
  EXPECT_EQ(x[4], 0.f);
  EXPECT_THROW(q::qdq_window_kv(x.data(), 31), std::runtime_error);
}

TEST(Qdq, CompressedKvByHand) {
  std::vector<float> x(32, 0.f);
  // group 0: amax 3 -> 3/6 = 0.5, an E4M3 value -> x/0.5 on the E2M1 grid
  x[0] = 3.f;     // 6 -> 3
  x[1] = 1.3f;    // 2.6 -> 3 -> 1.5
  x[2] = -0.2f;   // -0.4 -> -0.5 -> -0.25
  x[3] = 1.25f;   // 2.5: tie -> 2 -> 1
  // group 1: amax 1 -> 1/6 = 0.1667 -> E4M3 11 * 2^-6 = 0.171875 (not a power of two)
  x[16] = 1.f;    // 5.818 -> 6 -> 1.03125
  x[17] = 0.5f;   // 2.909 -> 3 -> 0.515625
  x[18] = -0.3f;  // -1.745 -> -1.5 -> -0.2578125
  q::qdq_compressed_kv(x.data(), 32);
  EXPECT_EQ(x[0], 3.f);
  EXPECT_EQ(x[1], 1.5f);
  EXPECT_EQ(x[2], -0.25f);
  EXPECT_EQ(x[3], 1.f);
  EXPECT_EQ(x[16], 1.03125f);
  EXPECT_EQ(x[17], 0.515625f);
  EXPECT_EQ(x[18], -0.2578125f);
  // tiny group: amax floor 6 * 2^-9 keeps the scale at 2^-9 (the smallest E4M3 subnormal)
  std::vector<float> t(16, 0.f);
  t[0] = 1e-5f;           // 0.00512 -> 0
  t[1] = std::ldexp(1.f, -9) * 1.6f;  // 1.6 -> 1.5 -> 1.5 * 2^-9
  q::qdq_compressed_kv(t.data(), 16);
  EXPECT_EQ(t[0], 0.f);
  EXPECT_EQ(t[1], std::ldexp(1.5f, -9));
  EXPECT_EQ(t[2], 0.f);
}

TEST(Qdq, IndexByHand) {
  std::vector<float> x(64, 0.f);
  // group 0: amax 5 -> 5 * fp32(1/6) = 0.83 -> scale 1
  x[0] = 5.f;     // tie between 4 and 6 -> 4
  x[1] = 2.5f;    // tie -> 2
  x[2] = -1.75f;  // tie between 1.5 and 2 -> 2
  x[3] = 0.2f;    // -> 0
  // group 1: amax 7 -> 1.17 -> scale 2
  x[32] = 7.f;    // 3.5: tie -> 4 -> 8
  x[33] = -2.9f;  // -1.45 -> -1.5 -> -3
  q::qdq_index(x.data(), 64);
  EXPECT_EQ(x[0], 4.f);
  EXPECT_EQ(x[1], 2.f);
  EXPECT_EQ(x[2], -2.f);
  EXPECT_EQ(x[3], 0.f);
  EXPECT_EQ(x[32], 8.f);
  EXPECT_EQ(x[33], -3.f);
}

// Every positive finite bf16 amax: the scales against float64. For the compressed-KV scale this also
// shows that amax/6 and amax*fp32(1/6) give the same E4M3 scale for every bf16 amax.
TEST(Qdq, ScalesForEveryBf16Amax) {
  for (uint32_t h = 0x0001; h < 0x7F80; ++h) {
    const float a = q::bf16_to_f32(uint16_t(h));
    ASSERT_EQ(double(q::window_kv_scale(a)), pow2_ceil(std::max(a, 1e-4f) * (1.f / 448.f))) << a;
    ASSERT_EQ(double(q::index_scale(a)), pow2_ceil(std::max(a, float(6 * std::ldexp(1.0, -126))) * (1.f / 6.f)))
        << a;
    const double c = nearest_e4m3(std::max(double(a), 6 * std::ldexp(1.0, -9)) / 6);
    ASSERT_EQ(double(q::compressed_kv_scale(a)), std::min(c, 448.0)) << a;
  }
  EXPECT_EQ(q::compressed_kv_scale(0.f), std::ldexp(1.f, -9));
  EXPECT_EQ(q::compressed_kv_scale(1.f), 0.171875f);
  EXPECT_EQ(q::index_scale(0.f), std::ldexp(1.f, -126));
}

// Random groups against the rules written out in float64 (the divisions the spec puts in fp32 are
// done in fp32 here too).
TEST(Qdq, RandomMatchesOracle) {
  std::mt19937 gen(9);
  for (int trial = 0; trial < 200; ++trial) {
    const double mag = std::exp2(double(int(gen() % 40)) - 20);
    std::vector<float> x(128);
    for (auto& v : x) v = random_bf16(gen, mag);

    std::vector<float> w = x;
    q::qdq_window_kv(w.data(), 128);
    std::vector<float> c = x;
    q::qdq_compressed_kv(c.data(), 128);
    std::vector<float> ix = x;
    q::qdq_index(ix.data(), 128);

    for (int g = 0; g < 128; g += 32) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[size_t(g + i)]));
      const double sw = pow2_ceil(std::max(amax, 1e-4f) * (1.f / 448.f));
      const double si = pow2_ceil(std::max(amax, float(6 * std::ldexp(1.0, -126))) * (1.f / 6.f));
      for (int i = 0; i < 32; ++i) {
        const double v = x[size_t(g + i)];
        ASSERT_EQ(double(w[size_t(g + i)]), nearest_e4m3(std::clamp(v / sw, -448.0, 448.0)) * sw);
        ASSERT_EQ(double(ix[size_t(g + i)]), nearest_e2m1(std::clamp(v / si, -6.0, 6.0)) * si);
      }
    }
    for (int g = 0; g < 128; g += 16) {
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[size_t(g + i)]));
      const float scaled = std::max(amax, float(6 * std::ldexp(1.0, -9))) / 6.f;
      const double s = nearest_e4m3(scaled);
      for (int i = 0; i < 16; ++i) {
        const float r = x[size_t(g + i)] / float(s);
        ASSERT_EQ(double(c[size_t(g + i)]), nearest_e2m1(std::clamp(double(r), -6.0, 6.0)) * s);
      }
    }
    for (float v : w) ASSERT_EQ(v, q::bf16_round(v));  // results stay bf16 values
    for (float v : c) ASSERT_EQ(v, q::bf16_round(v));
    for (float v : ix) ASSERT_EQ(v, q::bf16_round(v));
  }
}

// ---- GEMMs -----------------------------------------------------------------------------------------

namespace {

struct Fp8Weight {
  std::vector<uint8_t> w, s;
  std::vector<double> deq;  // float64, from the definitions above
};

Fp8Weight random_fp8_weight(std::mt19937& gen, int64_t n, int64_t k, int block) {
  static const std::vector<double> mags = e4m3_magnitudes();
  Fp8Weight W;
  const int64_t sr = (n + block - 1) / block, sc = (k + block - 1) / block;
  W.w.resize(size_t(n * k));
  W.s.resize(size_t(sr * sc));
  for (auto& c : W.w) c = uint8_t(gen() % 0x7F) | uint8_t(gen() % 2 ? 0x80 : 0);  // no NaN codes
  for (auto& e : W.s) e = uint8_t(118 + gen() % 10);
  W.deq.resize(W.w.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t c = W.w[size_t(r * k + i)];
      const double v = (c & 0x80 ? -1 : 1) * mags[c & 0x7F];
      W.deq[size_t(r * k + i)] = v * std::ldexp(1.0, W.s[size_t((r / block) * sc + i / block)] - 127);
    }
  return W;
}

// y64[m, n] = sum_k xdq[m, k] * wdq[n, k] in float64, plus the sum of |terms| for the error bound.
void matmul64(const std::vector<double>& x, const std::vector<double>& w, int64_t m, int64_t k, int64_t n,
              std::vector<double>& y, std::vector<double>& mag) {
  y.assign(size_t(m * n), 0);
  mag.assign(size_t(m * n), 0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c)
      for (int64_t i = 0; i < k; ++i) {
        const double t = x[size_t(r * k + i)] * w[size_t(c * k + i)];
        y[size_t(r * n + c)] += t;
        mag[size_t(r * n + c)] += std::fabs(t);
      }
}

std::vector<double> dequant_acts(const std::vector<uint8_t>& xq, const std::vector<float>& sx, int64_t m,
                                 int64_t k) {
  static const std::vector<double> mags = e4m3_magnitudes();
  const int64_t nb = (k + 31) / 32;
  std::vector<double> x(xq.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t c = xq[size_t(r * k + i)];
      x[size_t(r * k + i)] = (c & 0x80 ? -1 : 1) * mags[c & 0x7F] * sx[size_t(r * nb + i / 32)];
    }
  return x;
}

}  // namespace

TEST(Gemm, Fp8MatchesFloat64DequantizedMatmul) {
  std::mt19937 gen(21);
  for (int block : {32, 128}) {
    const int64_t m = 3, k = 160, n = 130;
    std::vector<float> x(size_t(m * k));
    for (auto& v : x) v = random_bf16(gen, 2.0);
    const Fp8Weight W = random_fp8_weight(gen, n, k, block);
    std::vector<uint8_t> xq(x.size());
    std::vector<float> sx(size_t(m * 5));
    q::act_quant(x.data(), m, k, 32, xq.data(), sx.data());
    std::vector<double> y64, mag;
    matmul64(dequant_acts(xq, sx, m, k), W.deq, m, k, n, y64, mag);

    std::vector<float> y(size_t(m * n)), yb(size_t(m * n)), yl(size_t(m * n));
    q::fp8_gemm(xq.data(), sx.data(), m, k, 32, W.w.data(), W.s.data(), n, block, y.data(), false);
    q::fp8_gemm(xq.data(), sx.data(), m, k, 32, W.w.data(), W.s.data(), n, block, yb.data(), true);
    q::fp8_linear(x.data(), m, k, W.w.data(), W.s.data(), n, block, yl.data(), false);
    for (size_t i = 0; i < y.size(); ++i) {
      // 5 fp32 roundings of block sums + 5 of the accumulation
      ASSERT_NEAR(double(y[i]), y64[i], 12 * 0x1p-24 * mag[i] + 1e-30) << "block " << block << " i " << i;
      ASSERT_EQ(yb[i], q::bf16_round(y[i]));
      ASSERT_EQ(yl[i], y[i]);
    }
  }
}

TEST(Gemm, Fp4MatchesFloat64DequantizedMatmul) {
  std::mt19937 gen(22);
  const int64_t m = 4, k = 96, n = 9;
  std::vector<float> x(size_t(m * k));
  for (auto& v : x) v = random_bf16(gen, 1.0);
  std::vector<uint8_t> w(size_t(n * k / 2)), s(size_t(n * 3));
  for (auto& b : w) b = uint8_t(gen());
  for (auto& e : s) e = uint8_t(120 + gen() % 8);
  std::vector<double> wdq(size_t(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t byte = w[size_t(r * k / 2 + i / 2)];
      const int code = i % 2 ? byte >> 4 : byte & 15;
      wdq[size_t(r * k + i)] = (code & 8 ? -1 : 1) * kE2m1[code & 7] * std::ldexp(1.0, s[size_t(r * 3 + i / 32)] - 127);
    }
  std::vector<uint8_t> xq(x.size());
  std::vector<float> sx(size_t(m * 3));
  q::act_quant(x.data(), m, k, 32, xq.data(), sx.data());
  std::vector<double> y64, mag;
  matmul64(dequant_acts(xq, sx, m, k), wdq, m, k, n, y64, mag);
  std::vector<float> y(size_t(m * n)), yl(size_t(m * n));
  q::fp4_gemm(xq.data(), sx.data(), m, k, 32, w.data(), s.data(), n, y.data(), false);
  q::fp4_linear(x.data(), m, k, w.data(), s.data(), n, yl.data(), false);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_NEAR(double(y[i]), y64[i], 8 * 0x1p-24 * mag[i] + 1e-30) << i;
    ASSERT_EQ(yl[i], y[i]);
  }
}

// Small integers: every step is exact, so the result must equal the float64 sum exactly.
TEST(Gemm, ExactOnSmallIntegersByHand) {
  const int64_t m = 1, k = 64, n = 2;
  std::vector<float> x(size_t(k), 1.f);  // amax 1 -> scale 2^-8 -> every code is 256 (0x78)
  std::vector<uint8_t> w(size_t(n * k), 0x38);  // 1.0
  for (int64_t i = 0; i < k; ++i) w[size_t(k + i)] = i < 32 ? 0x40 : 0xB0;  // row 1: 2 then -0.5
  const uint8_t s[4] = {127, 129, 127, 129};  // block 32: row tile 0 only ([1, 4]); n=2 < 32
  std::vector<float> y(2);
  q::fp8_linear(x.data(), m, k, w.data(), s, n, 32, y.data(), true);
  EXPECT_EQ(y[0], 32.f * 1 + 32.f * 4);                 // 160
  EXPECT_EQ(y[1], 32.f * 2 * 1 + 32.f * -0.5f * 4);     // 0
  // an act_block that does not divide the weight block is refused
  std::vector<uint8_t> xq(static_cast<size_t>(k));
  std::vector<float> sx(3);
  EXPECT_THROW(q::fp8_gemm(xq.data(), sx.data(), 1, k, 48, w.data(), s, n, 32, y.data(), false), std::runtime_error);
}
