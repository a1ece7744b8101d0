// RoPE tables against the golden tables of every layer (fp32, within 1e-6).
#include "model/rope.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dsinfer
