// act_quant and fp4_act_quant against references written here from spec §3.4–3.5 with other
// arithmetic (double log2/exp2 for the scales, exhaustive nearest-code search for the roundings).
#include "core/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/float_formats.h"
#include "test_util.h"

namespace dsinfer {
namespace {

// Nearest grid value, ties to the even code; the sign of v is kept (torch casts -tiny to -0).
float nearest_on_grid(float v, const std::vector<float>& grid_with_even_flags, const std::vector<bool>& even) {
  float best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  bool best_even = false;
  for (size_t i = 0; i < grid_with_even_flags.size(); ++i) {
    const double d = std::fabs(double{grid_with_even_flags[i]} - double{v});
    if (d < best_d || (d == best_d && even[i] && !best_even))
      best = grid_with_even_flags[i], best_d = d, best_even = even[i];
  }
  return std::copysign(best, v);
}

// Signed e4m3 grid (finite values) with "even code" flags.
struct Grid {
  std::vector<float> v;
  std::vector<bool> even;
};
Grid e4m3_grid() {
  Grid g;
  for (int c = 0; c < 0x7F; ++c) {
    const float mag =
        (c >> 3) == 0 ? (c & 7) / 8.0f * 0x1p-6f : (1.0f + (c & 7) / 8.0f) * std::ldexp(1.0f, (c >> 3) - 7);
    g.v.push_back(mag), g.even.push_back((c & 1) == 0);
    g.v.push_back(-mag), g.even.push_back((c & 1) == 0);
  }
  return g;
}
Grid e2m1_grid() {
  Grid g;
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    g.v.push_back(mags[c]), g.even.push_back((c & 1) == 0);
    g.v.push_back(-mags[c]), g.even.push_back((c & 1) == 0);
  }
  return g;
}

float pow2_ceil(float t) {
  return static_cast<float>(std::exp2(std::ceil(std::log2(double{t}))));
}

std::vector<uint16_t> reference_act_quant(const std::vector<uint16_t>& x) {
  static const Grid grid = e4m3_grid();
  std::vector<uint16_t> out(x.size());
  for (size_t g0 = 0; g0 < x.size(); g0 += 32) {
    float amax = 1e-4f;
    for (size_t i = g0; i < g0 + 32; ++i) amax = std::max(amax, std::fabs(bf16_to_f32(x[i])));
    const float s = pow2_ceil(amax * (1.0f / 448.0f));
    for (size_t i = g0; i < g0 + 32; ++i) {
      const float q = nearest_on_grid(std::clamp(bf16_to_f32(x[i]) / s, -448.0f, 448.0f), grid.v, grid.even);
      out[i] = f32_to_bf16(q * s);
    }
  }
  return out;
}

std::vector<uint16_t> reference_fp4_quant(const std::vector<uint16_t>& x, int group, Fp4ScaleKind kind) {
  static const Grid grid = e2m1_grid();
  static const Grid e4m3 = e4m3_grid();
  std::vector<uint16_t> out(x.size());
  for (size_t g0 = 0; g0 < x.size(); g0 += group) {
    float amax = 0;
    for (size_t i = g0; i < g0 + group; ++i) amax = std::max(amax, std::fabs(bf16_to_f32(x[i])));
    const float s = kind == Fp4ScaleKind::kE8M0
                        ? pow2_ceil(std::max(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f))
                        : nearest_on_grid(std::min(std::max(amax, 6.0f * 0x1p-9f) / 6.0f, 448.0f), e4m3.v, e4m3.even);
    for (size_t i = g0; i < g0 + group; ++i) {
      const float q = nearest_on_grid(std::clamp(bf16_to_f32(x[i]) / s, -6.0f, 6.0f), grid.v, grid.even);
      out[i] = f32_to_bf16(q * s);
    }
  }
  return out;
}

// Data with varied group magnitudes, an all-zero group and exact grid ties.
std::vector<uint16_t> test_input(size_t n, uint64_t seed) {
  std::vector<uint16_t> x = testing::random_bf16(n, seed);
  for (size_t g = 0; g < n / 32; ++g) {
    const float mag = std::ldexp(1.0f, static_cast<int>(g % 40) - 20);
    for (size_t i = g * 32; i < g * 32 + 32; ++i) x[i] = f32_to_bf16(bf16_to_f32(x[i]) * mag);
  }
  for (size_t i = 0; i < 32 && n >= 64; ++i) x[32 + i] = 0;
  return x;
}

TEST(ActQuant, FakeQuantMatchesReference) {
  std::vector<uint16_t> x = test_input(32 * 97, 11);
  const std::vector<uint16_t> want = reference_act_quant(x);
  act_quant_inplace(x);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], want[i]) << "element " << i;
}

TEST(ActQuant, CodesAndScalesDequantiseToTheFakeQuant) {
  const std::vector<uint16_t> x = test_input(32 * 41, 12);
  std::vector<uint8_t> codes(x.size()), scales(x.size() / 32);
  act_quant(x, codes, scales);
  std::vector<uint16_t> fake = x;
  act_quant_inplace(fake);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(f32_to_bf16(e4m3_to_f32(codes[i]) * e8m0_to_f32(scales[i / 32])), fake[i]) << i;
  EXPECT_EQ(scales[1], e8m0_ceil_pow2(1e-4f / 448.0f));  // the all-zero group takes the 1e-4 floor
}

TEST(ActQuant, GroupMaximumMapsInsideTheFp8Range) {
  // amax 448 * 2^k maps exactly onto 448; just above it the scale doubles.
  std::vector<uint16_t> x(32, f32_to_bf16(1.0f));
  x[5] = f32_to_bf16(448.0f * 4);
  std::vector<uint8_t> codes(32), scales(1);
  act_quant(x, codes, scales);
  EXPECT_EQ(e8m0_to_f32(scales[0]), 4.0f);
  EXPECT_EQ(codes[5], 0x7E);
}

TEST(Fp4ActQuant, E8M0Group32MatchesReference) {
  std::vector<uint16_t> x = test_input(32 * 53, 21);
  const std::vector<uint16_t> want = reference_fp4_quant(x, 32, Fp4ScaleKind::kE8M0);
  fp4_act_quant_inplace(x, 32, Fp4ScaleKind::kE8M0);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], want[i]) << i;
}

TEST(Fp4ActQuant, E4M3Group16MatchesReference) {
  std::vector<uint16_t> x = test_input(32 * 53, 22);
  const std::vector<uint16_t> want = reference_fp4_quant(x, 16, Fp4ScaleKind::kE4M3);
  fp4_act_quant_inplace(x, 16, Fp4ScaleKind::kE4M3);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], want[i]) << i;
}

TEST(Fp4ActQuant, PackedCodesDequantiseToTheFakeQuant) {
  for (Fp4ScaleKind kind : {Fp4ScaleKind::kE8M0, Fp4ScaleKind::kE4M3}) {
    const int group = kind == Fp4ScaleKind::kE8M0 ? 32 : 16;
    const std::vector<uint16_t> x = test_input(32 * 19, 23);
    std::vector<uint8_t> packed(x.size() / 2), scales(x.size() / group);
    fp4_act_quant(x, group, kind, packed, scales);
    std::vector<uint16_t> fake = x;
    fp4_act_quant_inplace(fake, group, kind);
    for (size_t i = 0; i < x.size(); ++i) {
      const float s = kind == Fp4ScaleKind::kE8M0 ? e8m0_to_f32(scales[i / group]) : e4m3_to_f32(scales[i / group]);
      ASSERT_EQ(f32_to_bf16(e2m1_to_f32(e2m1_packed_code(packed.data(), i)) * s), fake[i]) << i;
    }
  }
}

TEST(Fp4ActQuant, E4M3ScaleIsNotAPowerOfTwo) {
  // amax 5 -> scale e4m3(5/6) = 0.8125; 5 / 0.8125 = 6.15 saturates to 6 -> 4.875.
  std::vector<uint16_t> x(16, 0);
  x[0] = f32_to_bf16(5.0f);
  fp4_act_quant_inplace(x, 16, Fp4ScaleKind::kE4M3);
  EXPECT_EQ(bf16_to_f32(x[0]), 4.875f);
  EXPECT_EQ(fp4_act_quant_scale(5.0f, Fp4ScaleKind::kE4M3), 0.8125f);
  EXPECT_EQ(fp4_act_quant_scale(5.0f, Fp4ScaleKind::kE8M0), 1.0f);
}

}  // namespace
}  // namespace dsinfer
