// A prompt's output does not depend on how its prefill is cut: every prompt length 1-40 of both
// fixtures, prefilled in pieces of 1-9 tokens (as a server's token budget cuts it), gives bitwise
// the logits of the one-shot prefill, and so do the two decode steps after it (the caches and
// states the pieces leave behind are the one-shot's).
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "io/json.h"
#include "test_util.h"
#include "testing/golden_run.h"

namespace dsinfer {
namespace {

class ChunkedPrefill : public ::testing::TestWithParam<const char*> {};

TEST_P(ChunkedPrefill, EqualsOneShotBitForBit) {
  const std::filesystem::path dir = testing::data_dir() / GetParam();
  CpuBackend backend(2);
  LocalCommunicator comm;
  auto model = Model::load(dir / "checkpoint", backend, comm);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto meta = read_json_file(dir / "golden.json");
  ASSERT_TRUE(meta.ok());
  const std::vector<int32_t> prompt = (*meta)["prompts"][0].get<std::vector<int32_t>>();
  ASSERT_GE(prompt.size(), 40u);
  int compared = 0;
  for (size_t len = 1; len <= 40; ++len) {
    const std::vector<std::vector<int32_t>> prompts = {{prompt.begin(), prompt.begin() + len}};
    GoldenRunOptions o;
    o.steps = 2;
    auto one_shot = run_golden_experiment(**model, prompts, o);
    ASSERT_TRUE(one_shot.ok()) << one_shot.status().to_string();
    for (int64_t piece = 1; piece <= 9 && piece < static_cast<int64_t>(len); ++piece) {
      o.prefill_chunk = piece;
      auto chunked = run_golden_experiment(**model, prompts, o);
      ASSERT_TRUE(chunked.ok()) << chunked.status().to_string();
      ASSERT_EQ(chunked->logits.size(), one_shot->logits.size());
      for (int64_t f = 0; f < one_shot->forwards; ++f) {
        const size_t row = f * one_shot->vocab;
        EXPECT_EQ(std::memcmp(&chunked->logits[row], &one_shot->logits[row], one_shot->vocab * sizeof(float)), 0)
            << "prompt length " << len << " in pieces of " << piece << ": forward " << f << " differs";
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 40 * 9 - 45);  // the pieces shorter than the prompt
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChunkedPrefill, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

}  // namespace
}  // namespace dsinfer
