// Codecs of core/float_formats.h against slow references written independently here
// (value tables from the format definitions, nearest-value search, ties to the even code).
#include "core/float_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace dsinfer {
namespace {

// e4m3fn by definition: bias 7, 3 mantissa bits, subnormals at exponent field 0, S.1111.111 = NaN.
double e4m3_by_definition(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

// Nearest finite e4m3 code to f by exhaustive search; saturates; ties go to the even code.
uint8_t e4m3_nearest(float f) {
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 0x7F; ++c) {
    const double d = std::fabs(e4m3_by_definition(c) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return static_cast<uint8_t>((std::signbit(f) ? 0x80 : 0) | best);
}

TEST(E4M3, AllCodesDecodeAndReencodeExactly) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    const double want = e4m3_by_definition(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << c;
      EXPECT_EQ(f32_to_e4m3(v) & 0x7F, kE4M3NaN) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), want) << "code " << c;
    EXPECT_EQ(f32_to_e4m3(v), c) << "code " << c;
  }
}

TEST(E4M3, EncodeMatchesNearestSearchOnEveryBf16Value) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_e4m3(f), e4m3_nearest(f)) << "bf16 bits " << b << " value " << f;
  }
}

TEST(E4M3, EncodeMatchesNearestSearchOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exp_dist(-14.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    const float f =
        std::ldexp(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng), static_cast<int>(exp_dist(rng)));
    ASSERT_EQ(f32_to_e4m3(f), e4m3_nearest(f)) << f;
  }
}

TEST(E4M3, FastRoundingEqualsEncodeDecode) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f) || std::fabs(f) > 448.0f) continue;
    ASSERT_EQ(std::bit_cast<uint32_t>(round_to_e4m3(f)), std::bit_cast<uint32_t>(e4m3_to_f32(f32_to_e4m3(f)))) << f;
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-448.0f, 448.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = std::ldexp(u(rng), -static_cast<int>(rng() % 20));
    ASSERT_EQ(round_to_e4m3(f), e4m3_to_f32(f32_to_e4m3(f))) << f;
  }
}

TEST(E4M3, TiesZerosSubnormalsSaturationNaN) {
  EXPECT_EQ(f32_to_e4m3(1.0625f), f32_to_e4m3(1.0f));   // tie between 1.0 (even) and 1.125
  EXPECT_EQ(f32_to_e4m3(1.1875f), f32_to_e4m3(1.25f));  // tie between 1.125 and 1.25 (even)
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);               // half the smallest subnormal -> 0
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-10f), 0x02);           // 1.5 subnormal steps -> 2 (even)
  EXPECT_EQ(f32_to_e4m3(0x1p-9f), 0x01);
  EXPECT_EQ(f32_to_e4m3(15 * 0x1p-10f), 0x08);  // rounds up into the first normal
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(449.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(470.0f), 0x7E);  // torch would give NaN here; we saturate (spec §3.3)
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even).
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(3.4e38f), 0x7F80);  // overflows to inf when rounding up
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), b);
    }
  }
}

TEST(F16, AllCodesRoundTripAndRoundingMatchesDouble) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);      // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);  // tie -> even
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);             // tie with 0 -> even (0)
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);
}

TEST(E8M0, DecodeAndPowerOfTwoCeiling) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), 0x1p-127f);
  EXPECT_EQ(e8m0_to_f32(254), 0x1p127f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  EXPECT_EQ(e8m0_ceil_pow2(1.0f), 127);
  EXPECT_EQ(e8m0_ceil_pow2(1.5f), 128);
  EXPECT_EQ(e8m0_ceil_pow2(0x1p-11f), 116);
  EXPECT_EQ(e8m0_ceil_pow2(0x1.000002p-11f), 117);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(1e-30f, 1e30f);
  for (int i = 0; i < 10000; ++i) {
    const float t = u(rng);
    EXPECT_EQ(e8m0_to_f32(e8m0_ceil_pow2(t)), static_cast<float>(std::exp2(std::ceil(std::log2(double{t}))))) << t;
  }
}

TEST(E2M1, CodesTiesAndSaturation) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c)), (c & 8 ? -1 : 1) * grid[c & 7]);
    EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(static_cast<uint8_t>(c))), c);
  }
  // Ties go to the even code (spec §3.3).
  EXPECT_EQ(f32_to_e2m1(0.25f), 0);
  EXPECT_EQ(f32_to_e2m1(0.75f), 2);
  EXPECT_EQ(f32_to_e2m1(1.25f), 2);
  EXPECT_EQ(f32_to_e2m1(1.75f), 4);
  EXPECT_EQ(f32_to_e2m1(2.5f), 4);
  EXPECT_EQ(f32_to_e2m1(3.5f), 6);
  EXPECT_EQ(f32_to_e2m1(5.0f), 6);
  EXPECT_EQ(f32_to_e2m1(-5.0f), 14);
  EXPECT_EQ(f32_to_e2m1(5.01f), 7);
  EXPECT_EQ(f32_to_e2m1(100.0f), 7);
  EXPECT_EQ(f32_to_e2m1(-100.0f), 15);
  // Off-tie values go to the nearest grid point.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-7.0f, 7.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = u(rng);
    const float got = e2m1_to_f32(f32_to_e2m1(f));
    const float a = std::fmin(std::fabs(f), 6.0f);
    float best = 0;
    for (float g : grid)
      if (std::fabs(g - a) < std::fabs(best - a)) best = g;
    if (std::fabs(best - a) != 0.25f && std::fabs(best - a) != 0.5f && std::fabs(best - a) != 1.0f) {
      EXPECT_EQ(std::fabs(got), best) << f;
    }
  }
  const uint8_t packed[2] = {0x21, 0xF7};
  EXPECT_EQ(e2m1_packed_code(packed, 0), 1);
  EXPECT_EQ(e2m1_packed_code(packed, 1), 2);
  EXPECT_EQ(e2m1_packed_code(packed, 2), 7);
  EXPECT_EQ(e2m1_packed_code(packed, 3), 15);
}

}  // namespace
}  // namespace dsinfer
