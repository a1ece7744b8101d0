// Top-k and candidate-block logic fed the golden run's own scores: the chosen sets must equal the
// golden's except on the tie rows golden.json lists (where torch's choice is arbitrary).
#include "backends/cpu/selection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <tuple>

#include "core/float_formats.h"
#include "io/json.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace dsinfer {
namespace {

struct Golden {
  const SafetensorsFile& f;
  std::vector<float> bf16_floats(const SafetensorsEntry& e) const {
    std::vector<float> v(e.numel());
    const uint8_t* p = f.data(e).data();
    for (int64_t i = 0; i < e.numel(); ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      v[i] = bf16_to_f32(b);
    }
    return v;
  }
  std::vector<int32_t> ints(const SafetensorsEntry& e) const {
    std::vector<int32_t> v(e.numel());
    std::memcpy(v.data(), f.data(e).data(), e.data_bytes);
    return v;
  }
};

class SelectionGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(SelectionGolden, TopkAndCandidatesMatchOutsideTies) {
  const auto dir = testing::data_dir() / GetParam();
  auto config = load_model_config(dir / "checkpoint");
  auto file = SafetensorsFile::open(dir / "golden_debug.safetensors");
  auto meta = read_json_file(dir / "golden.json");
  ASSERT_TRUE(config.ok() && file.ok() && meta.ok());
  std::set<std::tuple<int, std::string, int, int>> ties;
  for (const Json& t : (*meta)["topk_ties"]["tie_rows"])
    ties.emplace(t["step"].get<int>(), t["site"].get<std::string>(), t["batch"].get<int>(), t["query"].get<int>());
  const Golden g{*file};
  int compared = 0, skipped = 0;
  const int steps = (*meta)["steps"].get<int>();
  for (int step = 0; step < steps; ++step)
    for (int l = 0; l < config->n_layers; ++l) {
      const std::string pre = fmt::format("step{:02d}.layer{}.", step, l);
      for (const char* site : {"index_topk", "candidate_blocks"}) {
        const SafetensorsEntry* se = file->find(pre + site + "_scores");
        const SafetensorsEntry* ie = file->find(pre + site + "_indices");
        if (!se || !ie) continue;
        const std::vector<float> scores = g.bf16_floats(*se);
        const std::vector<int32_t> want = g.ints(*ie);
        const int64_t b = se->shape[0], s = se->shape[1], n = se->shape[2], k = ie->shape[2];
        for (int64_t bi = 0; bi < b; ++bi)
          for (int64_t q = 0; q < s; ++q) {
            const std::string site_name = fmt::format("layer{}.{}", l, site);
            if (ties.count({step, site_name, static_cast<int>(bi), static_cast<int>(q)})) {
              ++skipped;
              continue;
            }
            const int64_t row = bi * s + q;
            std::vector<int32_t> got = topk_positions(std::span(scores).subspan(row * n, n), k);
            std::vector<int32_t> exp(want.begin() + row * k, want.begin() + (row + 1) * k);
            // Among -inf (masked) entries any pick is as good: they all become -1. Compare the finite picks.
            const auto finite_sorted = [&](std::vector<int32_t> v) {
              std::erase_if(v, [&](int32_t i) { return std::isinf(scores[row * n + i]) && scores[row * n + i] < 0; });
              std::sort(v.begin(), v.end());
              return v;
            };
            got = finite_sorted(got), exp = finite_sorted(exp);
            ASSERT_EQ(got, exp) << pre << site << " batch " << bi << " query " << q;
            ++compared;
          }
      }
      // The candidate mask from the candidate source's (visibility-masked) scores.
      const SafetensorsEntry* ce = file->find(pre + "candidates");
      if (!ce) continue;
      const std::vector<float> scores = g.bf16_floats(*file->find(pre + "index_topk_scores"));
      std::vector<uint8_t> want(ce->numel());
      std::memcpy(want.data(), file->data(*ce).data(), ce->data_bytes);
      const int64_t b = ce->shape[0], s = ce->shape[1], w = ce->shape[2], r = config->compress_ratio(l);
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t q = 0; q < s; ++q) {
          if (ties.count({step, fmt::format("layer{}.candidate_blocks", l), static_cast<int>(bi), static_cast<int>(q)}))
            continue;
          const int64_t visible = step == 0 ? (q + 1) / r : w;
          const auto got = select_candidate_blocks(std::span(scores).subspan((bi * s + q) * w, w), visible,
                                                   config->candidate_topk_blocks, config->candidate_block_size);
          ASSERT_EQ(got, std::vector<uint8_t>(want.begin() + (bi * s + q) * w, want.begin() + (bi * s + q + 1) * w))
              << pre << "candidates batch " << bi << " query " << q;
          ++compared;
        }
    }
  EXPECT_GT(compared, 100);
  std::printf("%s: %d selection rows equal, %d tie rows skipped\n", GetParam(), compared, skipped);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SelectionGolden, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

TEST(Selection, TopkSortsAndMarksUnreachable) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> s = {0.5f, 2.0f, -inf, 1.0f, 2.0f};
  EXPECT_EQ(select_topk(s, 3, 5), (std::vector<int32_t>{1, 3, 4}));
  EXPECT_EQ(select_topk(s, 3, 4), (std::vector<int32_t>{1, 3, -1}));
  EXPECT_EQ(select_topk(std::vector<float>{1.0f, -inf}, 2, 1), (std::vector<int32_t>{0, -1}));
  // Blocks of 2: scores by max {2, 1, 2}; the block of position 4 is pinned; keep 2.
  EXPECT_EQ(select_candidate_blocks(s, 5, 2, 2), (std::vector<uint8_t>{1, 1, 0, 0, 1}));
  EXPECT_EQ(select_candidate_blocks(std::vector<float>{-inf, -inf, 1.0f}, 1, 3, 1), (std::vector<uint8_t>{1, 0, 1}));
}

}  // namespace
}  // namespace dsinfer
