// ModelRunner's readback: of a step's logit rows the host gets the whole rows it asks for, the
// device's greedy pick or draw of others (the sampler's of the same row), and nothing of the rest.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "model/model.h"
#include "runtime/model_runner.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace dsinfer {
namespace {

TEST(ModelRunner, ReadsBackWholeRowsPicksDrawsOrNothing) {
  CpuBackend backend(2);
  LocalCommunicator comm;
  auto model = Model::load(testing::data_dir() / "v41-tiny-a" / "checkpoint", backend, comm);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_TRUE((*model)->reserve_cache(Model::kDefaultCacheBlockTokens).ok());
  ModelRunner runner(**model);
  const int64_t vocab = (*model)->config().vocab_size;
  // Three prompts in one forward (three logit rows), each time on new sequences.
  const auto run = [&](const LogitsReadback& out) {
    std::vector<SequenceState> states;
    for (int q = 0; q < 3; ++q) states.push_back((*model)->new_sequence());
    std::vector<ForwardChunk> chunks(3);
    for (int q = 0; q < 3; ++q) {
      chunks[q].state = &states[q];
      chunks[q].tokens = {1, 300 + q, 17, 42 + 5 * q};
      chunks[q].prompt_len = 4;
    }
    return runner.forward(chunks, out);
  };
  std::vector<float> whole(3 * vocab);
  ASSERT_TRUE(run(LogitsReadback{whole}).ok());

  std::vector<float> got(3 * vocab, 77.0f);
  std::vector<int32_t> picks(3, -9);
  const std::vector<RowReadback> rows = {RowReadback::kPick, RowReadback::kNone, RowReadback::kWhole};
  ASSERT_TRUE(run({got, rows, picks}).ok());
  SamplingParams params;
  params.temperature = 0.0f;
  SamplerState greedy(params, 1, {});
  EXPECT_EQ(picks[0], greedy.sample(std::span<const float>(whole).first(vocab)));
  const auto row = [&](const std::vector<float>& v, int64_t r) {
    return std::vector<float>(v.begin() + r * vocab, v.begin() + (r + 1) * vocab);
  };
  EXPECT_EQ(row(got, 0), std::vector<float>(vocab, 77.0f));  // picked: the logits stay on the device
  EXPECT_EQ(row(got, 1), std::vector<float>(vocab, 77.0f));
  EXPECT_EQ(row(got, 2), row(whole, 2));

  std::vector<int32_t> too_few(2);
  EXPECT_EQ(run({got, rows, too_few}).kind(), ErrorKind::kInvalidArgument);

  // A drawn row comes back as the token the draw gives on the host; a greedy pick beside it.
  const std::vector<RowReadback> drawn = {RowReadback::kPick, RowReadback::kDraw, RowReadback::kNone};
  const std::vector<RowDraw> draws = {{1, {.temperature = 0.8f, .top_p = 0.9f, .bits = 0x0123456789ABCDEFull}}};
  ASSERT_TRUE(run({got, drawn, picks, draws}).ok());
  EXPECT_EQ(picks[0], greedy.sample(std::span<const float>(whole).first(vocab)));
  EXPECT_EQ(picks[1], draw_token(std::span<const float>(whole).subspan(vocab, vocab), draws[0].params));
  // A draw for a row not marked as drawn, or none for one that is: refused.
  const std::vector<RowDraw> misplaced = {{2, draws[0].params}};
  EXPECT_EQ(run({got, drawn, picks, misplaced}).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(run({got, drawn, picks}).kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace dsinfer
