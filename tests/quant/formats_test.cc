// Element formats against oracles written here in float64: E4M3 (FN), E8M0, E2M1, FP4 packing, BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant/reference.h"

namespace q = smelt::kernels::quant;

namespace {

// E4M3 (FN) by its definition: sign, 4-bit exponent (bias 7), 3-bit mantissa; S.1111.111 is NaN.
double e4m3_formula(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

// E2M1 by its definition: sign, 2-bit exponent (bias 1), 1-bit mantissa.
double e2m1_formula(int code) {
  const int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : (1.0 + m / 2.0) * std::pow(2.0, e - 1);
  return s ? -mag : mag;
}

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

}  // namespace

TEST(E4m3, DecodeAll256CodesMatchFormula) {
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3_formula(c);
    const float got = q::e4m3_decode(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(double(got), want) << "code " << c;
      EXPECT_EQ(std::signbit(got), c >= 128) << "code " << c;
    }
  }
  EXPECT_TRUE(std::isnan(q::e4m3_decode(0x7F)));
  EXPECT_TRUE(std::isnan(q::e4m3_decode(0xFF)));
  EXPECT_EQ(q::e4m3_decode(0x7E), 448.f);
  EXPECT_EQ(q::e4m3_decode(0xFE), -448.f);
}

TEST(E4m3, EncodeRoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if (c == 0x7F || c == 0xFF) continue;
    EXPECT_EQ(q::e4m3_encode(float(e4m3_formula(c))), c) << "code " << c;
  }
  EXPECT_EQ(q::e4m3_encode(-0.f), 0x80);
}

TEST(E4m3, Saturates) {
  EXPECT_EQ(q::e4m3_encode(1000.f), 0x7E);
  EXPECT_EQ(q::e4m3_decode(q::e4m3_encode(1000.f)), 448.f);
  EXPECT_EQ(q::e4m3_encode(-1e9f), 0xFE);
  EXPECT_EQ(q::e4m3_decode(q::e4m3_encode(-1e9f)), -448.f);
  EXPECT_EQ(q::e4m3_encode(INFINITY), 0x7E);
  EXPECT_EQ(q::e4m3_encode(-INFINITY), 0xFE);
  EXPECT_EQ(q::e4m3_encode(465.f), 0x7E);   // above the 448/480 midpoint: still 448, no NaN
  EXPECT_EQ(q::e4m3_encode(447.f), 0x7E);
  EXPECT_EQ(q::e4m3_encode(NAN) & 0x7F, 0x7F);
}

// Every midpoint between neighbouring finite magnitudes goes to the code with an even mantissa;
// one float ulp either side goes to the nearer code.
TEST(E4m3, RoundsHalfToEvenAtEveryMidpoint) {
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_formula(c), hi = e4m3_formula(c + 1);
    const float mid = float((lo + hi) / 2);
    ASSERT_EQ(double(mid), (lo + hi) / 2) << "midpoint not exact in float";
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(q::e4m3_encode(mid), even) << "midpoint of codes " << c << ", " << c + 1;
    EXPECT_EQ(q::e4m3_encode(-mid), 0x80 | even);
    EXPECT_EQ(q::e4m3_encode(std::nextafter(mid, 0.f)), c);
    EXPECT_EQ(q::e4m3_encode(std::nextafter(mid, 1000.f)), c + 1);
  }
}

TEST(E4m3, Subnormals) {
  EXPECT_EQ(q::e4m3_encode(std::ldexp(1.f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(q::e4m3_encode(std::ldexp(1.f, -10)), 0x00);  // half of it: tie -> even (zero)
  EXPECT_EQ(q::e4m3_encode(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(q::e4m3_encode(std::ldexp(3.f, -10)), 0x02);  // 1.5 * 2^-9: tie between 1 and 2 -> 2
  EXPECT_EQ(q::e4m3_encode(std::ldexp(7.5f, -9)), 0x08);  // tie between 7 * 2^-9 and 2^-6 -> 2^-6
  EXPECT_EQ(q::e4m3_encode(std::ldexp(7.f, -9)), 0x07);   // largest subnormal
  EXPECT_EQ(q::e4m3_encode(1e-30f), 0x00);
  EXPECT_EQ(q::e4m3_encode(-1e-30f), 0x80);
  EXPECT_EQ(q::e4m3_decode(0x07), std::ldexp(7.f, -9));
}

TEST(E4m3, RandomValuesRoundToNearest) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-9.0, 9.0);
  for (int i = 0; i < 20000; ++i) {
    const float x = float(std::ldexp(u(gen) / 9.0, int(u(gen))));
    const float r = q::e4m3_round(x);
    // no finite code lies strictly nearer to x than r
    for (int c = 0; c < 256; ++c) {
      const double v = e4m3_formula(c);
      if (std::isnan(v)) continue;
      ASSERT_LE(std::fabs(double(r) - x), std::fabs(v - x)) << "x " << x;
    }
  }
}

TEST(E8m0, Extremes) {
  EXPECT_EQ(double(q::e8m0_decode(0)), std::ldexp(1.0, -127));
  EXPECT_EQ(q::e8m0_decode(0), std::ldexp(1.f, -127));
  EXPECT_GT(q::e8m0_decode(0), 0.f);
  EXPECT_EQ(q::e8m0_decode(127), 1.f);
  EXPECT_EQ(double(q::e8m0_decode(254)), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(q::e8m0_decode(255)));
  for (int e = 0; e < 255; ++e) EXPECT_EQ(double(q::e8m0_decode(uint8_t(e))), std::ldexp(1.0, e - 127)) << e;
}

TEST(E2m1, EveryCodeBothWays) {
  const double table[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    const double want = e2m1_formula(c);
    EXPECT_EQ(std::fabs(want), table[c & 7]) << c;
    EXPECT_EQ(double(q::e2m1_decode(uint8_t(c))), want) << c;
    EXPECT_EQ(std::signbit(q::e2m1_decode(uint8_t(c))), c >= 8) << c;
    EXPECT_EQ(q::e2m1_encode(float(c >= 8 ? -std::fabs(want) : want)), c) << c;
  }
  EXPECT_EQ(q::e2m1_encode(-0.f), 0x8);
}

TEST(E2m1, TiesGoToTheEvenCodeAndSaturate) {
  struct Case { float x; int code; };
  const Case cases[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.f, 6},
                        {0.26f, 1}, {0.74f, 1}, {1.26f, 3}, {2.6f, 5}, {3.4f, 5}, {5.01f, 7}, {4.99f, 6},
                        {6.f, 7}, {7.f, 7}, {1e9f, 7}, {INFINITY, 7}, {0.1f, 0}};
  for (const auto& c : cases) {
    EXPECT_EQ(q::e2m1_encode(c.x), c.code) << c.x;
    EXPECT_EQ(q::e2m1_encode(-c.x), 8 | c.code) << -c.x;
  }
  // every midpoint against the definition: tie -> even code
  for (int c = 0; c < 7; ++c) {
    const float mid = float((e2m1_formula(c) + e2m1_formula(c + 1)) / 2);
    EXPECT_EQ(q::e2m1_encode(mid), c % 2 == 0 ? c : c + 1) << mid;
  }
}

TEST(Fp4, UnpackLowNibbleFirst) {
  const uint8_t packed[3] = {0x21, 0xF7, 0x8A};
  uint8_t codes[6];
  float vals[6];
  q::fp4_unpack_codes(packed, 6, codes);
  q::fp4_unpack(packed, 6, vals);
  const uint8_t want_codes[6] = {0x1, 0x2, 0x7, 0xF, 0xA, 0x8};
  const float want_vals[6] = {0.5f, 1.f, 6.f, -6.f, -1.f, -0.f};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(codes[i], want_codes[i]) << i;
    EXPECT_EQ(vals[i], want_vals[i]) << i;
  }
  EXPECT_THROW(q::fp4_unpack(packed, 5, vals), std::runtime_error);
}

TEST(Bf16, RoundsHalfToEven) {
  EXPECT_EQ(q::bf16_from_f32(1.f), 0x3F80);
  EXPECT_EQ(q::bf16_to_f32(0x3F80), 1.f);
  EXPECT_EQ(q::bf16_to_f32(0xC000), -2.f);
  EXPECT_EQ(q::bf16_round(1.f + std::ldexp(1.f, -8)), 1.f);                         // tie, even is 1
  EXPECT_EQ(q::bf16_round(1.f + 3 * std::ldexp(1.f, -8)), 1.f + std::ldexp(1.f, -6));  // tie, even up
  EXPECT_EQ(q::bf16_round(1.f + std::ldexp(1.f, -8) + std::ldexp(1.f, -20)), 1.f + std::ldexp(1.f, -7));
  EXPECT_TRUE(std::isnan(q::bf16_round(NAN)));
  EXPECT_EQ(q::bf16_round(INFINITY), INFINITY);
  EXPECT_EQ(q::bf16_round(3.4e38f), INFINITY);  // above bf16 max + half ulp
  EXPECT_EQ(q::bf16_round(-0.f), -0.f);
  EXPECT_TRUE(std::signbit(q::bf16_round(-0.f)));
}

// float64 oracle: keep 8 significant bits, round half to even; subnormals keep the fixed 2^-133 step.
TEST(Bf16, RandomFloatsMatchFloat64Rounding) {
  std::mt19937 gen(11);
  std::uniform_int_distribution<uint32_t> u;
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = u(gen);
    if (((b >> 23) & 0xFF) == 0xFF) continue;  // inf/NaN
    float x;
    std::memcpy(&x, &b, 4);
    const double a = std::fabs(double(x));
    double want;
    if (a == 0) {
      want = 0;
    } else {
      int ex;
      std::frexp(a, &ex);
      const int step_exp = std::max(ex - 8, -133);
      want = std::rint(std::ldexp(a, -step_exp));
      want = std::ldexp(want, step_exp);
    }
    if (want > std::ldexp(255.0, 120)) want = INFINITY;  // past bf16 max rounds to inf
    want = std::copysign(want, double(x));
    ASSERT_EQ(double(q::bf16_round(x)), want) << std::hex << bits(x);
    ASSERT_EQ(bits(q::bf16_round(x)) & 0xFFFF, 0u);
  }
}
