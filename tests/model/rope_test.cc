// RoPE tables against the golden tables of every layer (fp32, within 1e-6).
#include "model/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "io/safetensors.h"
#include "test_util.h"

namespace dsinfer {
namespace {

TEST(Rope, MatchesEveryGoldenLayerTable) {
  for (const char* fx : {"v41-tiny-a", "v41-tiny-b"}) {
    auto config = load_model_config(testing::data_dir() / fx / "checkpoint");
    auto golden = SafetensorsFile::open(testing::data_dir() / fx / "golden_debug.safetensors");
    ASSERT_TRUE(config.ok() && golden.ok());
    for (int l = 0; l < config->n_layers; ++l) {
      const SafetensorsEntry* e = golden->find(fmt::format("rope.layer{}.freqs_cis_real", l));
      ASSERT_NE(e, nullptr);
      const int64_t positions = e->shape[0], half = e->shape[1];
      std::vector<float> want(e->numel());
      std::memcpy(want.data(), golden->data(*e).data(), e->data_bytes);
      const RopeTable t = make_layer_rope_table(*config, l, positions);
      ASSERT_EQ(t.half, half);
      double worst = 0;
      for (int64_t p = 0; p < positions; ++p)
        for (int64_t i = 0; i < half; ++i) {
          worst = std::max(worst, std::fabs(double{t.cos_row(p)[i]} - want[(p * half + i) * 2]));
          worst = std::max(worst, std::fabs(double{t.sin_row(p)[i]} - want[(p * half + i) * 2 + 1]));
        }
      EXPECT_LE(worst, 1e-6) << fx << " layer " << l;
    }
  }
}

// The spec's formula (§3.2) written out the reference's way: fp32 frequencies and blend, the angle
// one fp32 product, then cos/sin of that fp32 angle (here in double, rounded once).
struct SpecRope {
  std::vector<float> f;
  SpecRope(int dim, int original, double base, double factor, double beta_fast, double beta_slow) {
    for (int i = 0; i < dim / 2; ++i) f.push_back(1.0f / std::pow(static_cast<float>(base), (2.0f * i) / dim));
    if (original == 0) return;
    const auto cd = [&](double r) { return dim * std::log(original / (r * 2 * M_PI)) / (2 * std::log(base)); };
    const double low = std::max(std::floor(cd(beta_fast)), 0.0), high = std::min(std::ceil(cd(beta_slow)), dim - 1.0);
    for (int i = 0; i < dim / 2; ++i) {
      const float ramp =
          std::clamp((i - static_cast<float>(low)) / static_cast<float>(std::max(high - low, 1e-3)), 0.0f, 1.0f);
      const float smooth = 1 - ramp;
      f[i] = f[i] / static_cast<float>(factor) * (1 - smooth) + f[i] * smooth;
    }
  }
  float angle(int64_t p, int i) const { return static_cast<float>(p) * f[i]; }
};

// Flash's compressed-layer table (theta 160000, YaRN from 65536 x 16) and its window-only one
// (theta 1e4) at positions where the fp32 angle has lost bits: the table follows the reference's
// rounding within an ulp of cos/sin, and a table built from exact (double) angles is another table.
TEST(Rope, LargePositionsRoundTheAngleInFp32) {
  struct Setting {
    int original;
    double base;
  };
  for (const Setting s : {Setting{65536, 160000}, Setting{0, 10000}}) {
    const std::vector<float> freqs = rope_frequencies(64, s.original, s.base, 16, 32, 1);
    const SpecRope spec(64, s.original, s.base, 16, 32, 1);
    ASSERT_EQ(freqs, spec.f) << "theta " << s.base;
    const RopeTable table = make_rope_table(64, 131072, s.original, s.base, 16, 32, 1);
    for (const int64_t p : {int64_t{65535}, int64_t{131071}, int64_t{1048575}}) {
      std::vector<float> c(32), sn(32);
      rope_row(freqs, p, c.data(), sn.data());
      if (p < table.positions) {  // the table's rows are these rows
        ASSERT_TRUE(std::equal(c.begin(), c.end(), table.cos_row(p)));
        ASSERT_TRUE(std::equal(sn.begin(), sn.end(), table.sin_row(p)));
      }
      double worst_ref = 0, worst_exact = 0, angle_moved = 0;
      for (int i = 0; i < 32; ++i) {
        const double ref_angle = spec.angle(p, i), exact_angle = static_cast<double>(p) * spec.f[i];
        const auto off = [&](double a) {
          return std::max(std::fabs(double{c[i]} - static_cast<float>(std::cos(a))),
                          std::fabs(double{sn[i]} - static_cast<float>(std::sin(a))));
        };
        worst_ref = std::max(worst_ref, off(ref_angle));
        worst_exact = std::max(worst_exact, off(exact_angle));
        angle_moved = std::max(angle_moved, std::fabs(ref_angle - exact_angle));
      }
      EXPECT_LE(worst_ref, 2.5e-7) << "theta " << s.base << " position " << p;
      // The exact angle is another one by far more than cos/sin's last bit: another table.
      EXPECT_GT(angle_moved, 1e-4) << "theta " << s.base << " position " << p;
      EXPECT_GT(worst_exact, 1e-4) << "theta " << s.base << " position " << p;
    }
    // Over the first 66,000 positions the fp32 rounding moves an angle by up to half an fp32 ulp
    // of 2^16 (2e-3) and more past it: the 1.9e-3 of issue 24.
    double most = 0;
    for (int64_t p = 0; p < 66000; ++p)
      for (int i = 0; i < 32; ++i)
        most = std::max(most, std::fabs(double{spec.angle(p, i)} - static_cast<double>(p) * spec.f[i]));
    EXPECT_GT(most, 1.5e-3) << "theta " << s.base;
    EXPECT_LT(most, 4e-3) << "theta " << s.base;
    RecordProperty(fmt::format("max_angle_moved_66k_theta{:g}", s.base), fmt::format("{:.4g}", most));
  }
}

}  // namespace
}  // namespace dsinfer
