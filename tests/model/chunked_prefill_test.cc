// A prompt's output does not depend on how its prefill is cut: every prompt length 1-40 of both
// fixtures, prefilled in pieces of 1-9 tokens (as a server's token budget cuts it), gives bitwise
// the logits of the one-shot prefill, and so do the two decode steps after it (the caches and
// states the pieces leave behind are the one-shot's).
#include <fmt/format.h>

#include "model/same_logits.h"

namespace dsinfer {
namespace {

class ChunkedPrefill : public ::testing::TestWithParam<const char*> {};

TEST_P(ChunkedPrefill, EqualsOneShotBitForBit) {
  testing::FixtureModel fx;
  ASSERT_NO_FATAL_FAILURE(testing::load_fixture(GetParam(), &fx));
  Model& model = *fx.model;
  const std::vector<int32_t>& prompt = fx.prompt;
  ASSERT_GE(prompt.size(), 40u);
  int compared = 0;
  for (size_t len = 1; len <= 40; ++len) {
    const std::vector<std::vector<int32_t>> prompts = {{prompt.begin(), prompt.begin() + len}};
    GoldenRunOptions o;
    o.steps = 2;
    auto one_shot = run_golden_experiment(model, prompts, o);
    ASSERT_TRUE(one_shot.ok()) << one_shot.status().to_string();
    for (int64_t piece = 1; piece <= 9 && piece < static_cast<int64_t>(len); ++piece) {
      o.prefill_chunk = piece;
      auto chunked = run_golden_experiment(model, prompts, o);
      ASSERT_TRUE(chunked.ok()) << chunked.status().to_string();
      testing::expect_same_logits(*chunked, *one_shot, fmt::format("prompt length {} in pieces of {}", len, piece));
      ++compared;
    }
  }
  EXPECT_EQ(compared, 40 * 9 - 45);  // the pieces shorter than the prompt
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChunkedPrefill, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

}  // namespace
}  // namespace dsinfer
