// Decode is batch-invariant: a sequence's logits are bit-identical whether it decodes alone or
// among 1, 7 or 63 others at other positions, and while another prompt is prefilled in pieces in
// the same steps. Built twice: on the CPU backend (golden_test) and, with DSINFER_GOLDEN_ON_CUDA,
// on the CUDA backend (golden_cuda_test; skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/test_backend.h"
#include "ops/communicator.h"
#include "runtime/model_runner.h"
#include "test_util.h"

namespace dsinfer {
namespace {

using testing::make_test_backend;
using testing::test_backend_available;

constexpr int kSteps = 32;

// Token ids below both fixtures' vocabularies (384, 512).
std::vector<int32_t> prompt_of(int seq, int64_t len) {
  std::vector<int32_t> p{1};
  for (int64_t t = 1; t < len; ++t) p.push_back(static_cast<int32_t>(20 + (37 * t + 53 * seq) % 280));
  return p;
}

class BatchInvariance : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!test_backend_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = make_test_backend();
    auto model = Model::load(testing::data_dir() / GetParam() / "checkpoint", *backend_, comm_);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::move(*model);
    runner_ = std::make_unique<ModelRunner>(*model_);
  }

  // The logits of sequence 0's kSteps decode steps, [kSteps, vocab]: its 11-token prompt and
  // `others` sequences' prompts (5 to 40 tokens: other positions) prefilled one by one, then
  // every sequence decoding a token a step with sequence 0 in the middle of the step. With
  // `prefill_beside`, one more sequence's 45-token prompt goes in pieces of 7 through the steps.
  std::vector<float> decode_among(int others, bool prefill_beside) {
    const int64_t vocab = model_->config().vocab_size;
    std::deque<SequenceState> seqs;  // stable addresses
    std::vector<float> logits(vocab);
    for (int q = 0; q <= others; ++q) {
      seqs.push_back(model_->new_sequence());
      std::vector<ForwardChunk> prompt(1);
      prompt[0].state = &seqs.back();
      prompt[0].tokens = prompt_of(q, q == 0 ? 11 : 5 + (13 * q) % 36);
      prompt[0].prompt_len = static_cast<int64_t>(prompt[0].tokens.size());
      const Status st = runner_->forward(prompt, logits);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    const std::vector<int32_t> beside_prompt = prompt_of(1000, 45);
    SequenceState* beside = prefill_beside ? &seqs.emplace_back(model_->new_sequence()) : nullptr;
    int64_t beside_done = 0;
    std::vector<float> mine;
    for (int s = 0; s < kSteps; ++s) {
      std::vector<ForwardChunk> step;
      for (int q = 0; q <= others; ++q) {
        ForwardChunk c;
        c.state = &seqs[q], c.start_pos = seqs[q].length, c.decode = true;
        c.tokens = {static_cast<int32_t>(17 + (31 * s + 7 * q) % 280)};
        step.push_back(std::move(c));
      }
      std::swap(step[0], step[step.size() / 2]);  // sequence 0 in the middle
      if (beside && beside_done < static_cast<int64_t>(beside_prompt.size())) {
        ForwardChunk c;
        c.state = beside, c.start_pos = beside_done, c.prompt_len = static_cast<int64_t>(beside_prompt.size());
        const int64_t piece = std::min<int64_t>(7, c.prompt_len - beside_done);
        c.tokens.assign(beside_prompt.begin() + beside_done, beside_prompt.begin() + beside_done + piece);
        beside_done += piece;
        step.insert(step.begin() + static_cast<int64_t>(step.size()) / 3, std::move(c));
      }
      const auto at =
          std::find_if(step.begin(), step.end(), [&](const ForwardChunk& c) { return c.state == &seqs[0]; }) -
          step.begin();
      logits.resize(step.size() * vocab);
      const Status st = runner_->forward(step, logits);
      EXPECT_TRUE(st.ok()) << st.to_string();
      mine.insert(mine.end(), logits.begin() + at * vocab, logits.begin() + (at + 1) * vocab);
    }
    return mine;
  }

  void expect_same(const std::vector<float>& got, const std::vector<float>& alone, const char* what) {
    const int64_t vocab = model_->config().vocab_size;
    ASSERT_EQ(got.size(), alone.size()) << what;
    for (int s = 0; s < kSteps; ++s)
      EXPECT_EQ(std::memcmp(&got[s * vocab], &alone[s * vocab], vocab * sizeof(float)), 0)
          << what << ": decode step " << s << " differs from the sequence alone";
  }

  std::unique_ptr<Backend> backend_;
  LocalCommunicator comm_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(BatchInvariance, AloneOrAmongOthers) {
  const std::vector<float> alone = decode_among(0, false);
  expect_same(decode_among(1, false), alone, "among 1 other");
  expect_same(decode_among(7, false), alone, "among 7 others");
  expect_same(decode_among(63, false), alone, "among 63 others");
}

TEST_P(BatchInvariance, BesideAPrefill) {
  const std::vector<float> alone = decode_among(0, false);
  expect_same(decode_among(0, true), alone, "beside a prefill");
  expect_same(decode_among(7, true), alone, "among 7 others beside a prefill");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvariance, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

}  // namespace
}  // namespace dsinfer
