// Decode is batch-invariant: a sequence's logits are bit-identical whether it decodes alone or
// among 1, 7 or 63 others at other positions, and while another prompt is prefilled in pieces in
// the same steps (pieces of 7, and of 160: past the GPU's switch to its kernels for many rows). So
// is prefill: a prompt's logits at every position are the same whether its pieces run alone or
// beside decoding sequences and another prompt's piece. Built twice: on the CPU backend (golden_test) and, with
// DSINFER_GOLDEN_ON_CUDA, on the CUDA backend (golden_cuda_test; skipped without a GPU).
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

// Sequence q's decode chunk of step s: one token, the same in every run.
ForwardChunk decode_chunk(SequenceState& seq, int64_t s, int q) {
  ForwardChunk c;
  c.state = &seq, c.start_pos = seq.length, c.decode = true;
  c.tokens = {static_cast<int32_t>(17 + (31 * s + 7 * q) % 280)};
  return c;
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
  // `prefill_beside`, one more sequence's prompt (45 tokens, or more than two pieces) goes in
  // pieces of `piece` through the steps.
  std::vector<float> decode_among(int others, bool prefill_beside, int64_t piece = 7) {
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
    const std::vector<int32_t> beside_prompt = prompt_of(1000, std::max<int64_t>(45, 2 * piece + 17));
    SequenceState* beside = prefill_beside ? &seqs.emplace_back(model_->new_sequence()) : nullptr;
    int64_t beside_done = 0;
    std::vector<float> mine;
    for (int s = 0; s < kSteps; ++s) {
      std::vector<ForwardChunk> step;
      for (int q = 0; q <= others; ++q) {
        step.push_back(decode_chunk(seqs[q], s, q));
      }
      std::swap(step[0], step[step.size() / 2]);  // sequence 0 in the middle
      if (beside && beside_done < static_cast<int64_t>(beside_prompt.size())) {
        ForwardChunk c;
        c.state = beside, c.start_pos = beside_done, c.prompt_len = static_cast<int64_t>(beside_prompt.size());
        const int64_t len = std::min<int64_t>(piece, c.prompt_len - beside_done);
        c.tokens.assign(beside_prompt.begin() + beside_done, beside_prompt.begin() + beside_done + len);
        beside_done += len;
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

  // Every position's logits of a 337-token prompt prefilled in pieces of 160 ([337, vocab]), the
  // pieces alone in their steps or, `beside`, each in a step with 7 sequences decoding a token
  // and a piece of another prompt before it.
  std::vector<float> prompt_logits(bool beside) {
    const int64_t vocab = model_->config().vocab_size, piece = 160;
    const std::vector<int32_t> prompt = prompt_of(77, 337), other = prompt_of(78, 3 * piece);
    std::deque<SequenceState> seqs;
    std::vector<float> logits(vocab), all;
    const int decoding = beside ? 7 : 0;
    for (int q = 0; q < decoding; ++q) {
      seqs.push_back(model_->new_sequence());
      std::vector<ForwardChunk> c(1);
      c[0].state = &seqs.back(), c[0].tokens = prompt_of(q, 5 + 6 * q);
      c[0].prompt_len = static_cast<int64_t>(c[0].tokens.size());
      EXPECT_TRUE(runner_->forward(c, logits).ok());
    }
    SequenceState& mine = seqs.emplace_back(model_->new_sequence());
    SequenceState& theirs = seqs.emplace_back(model_->new_sequence());
    for (int64_t done = 0, s = 0; done < static_cast<int64_t>(prompt.size()); ++s) {
      std::vector<ForwardChunk> step;
      for (int q = 0; q < decoding; ++q) {
        step.push_back(decode_chunk(seqs[q], s, q));
      }
      if (beside) {
        ForwardChunk c;
        c.state = &theirs, c.start_pos = theirs.length, c.prompt_len = static_cast<int64_t>(other.size());
        c.tokens.assign(other.begin() + c.start_pos, other.begin() + c.start_pos + piece);
        step.push_back(std::move(c));
      }
      ForwardChunk c;
      c.state = &mine, c.start_pos = done, c.prompt_len = static_cast<int64_t>(prompt.size()), c.all_logits = true;
      const int64_t len = std::min<int64_t>(piece, c.prompt_len - done);
      c.tokens.assign(prompt.begin() + done, prompt.begin() + done + len);
      done += len;
      step.insert(step.begin() + static_cast<int64_t>(step.size()) / 2, std::move(c));
      // Rows: a decode's or a piece's last token, every token of the all-logits piece.
      int64_t rows = 0, first = 0;
      for (const ForwardChunk& ch : step) {
        if (ch.state == &mine) first = rows;
        rows += ch.all_logits ? static_cast<int64_t>(ch.tokens.size()) : 1;
      }
      logits.resize(rows * vocab);
      const Status st = runner_->forward(step, logits);
      EXPECT_TRUE(st.ok()) << st.to_string();
      all.insert(all.end(), logits.begin() + first * vocab, logits.begin() + (first + len) * vocab);
    }
    return all;
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
  expect_same(decode_among(7, true, 160), alone, "among 7 others beside prefill pieces of 160");
}

TEST_P(BatchInvariance, APromptAloneOrBesideOthers) {
  const std::vector<float> alone = prompt_logits(false), beside = prompt_logits(true);
  const int64_t vocab = model_->config().vocab_size;
  ASSERT_EQ(beside.size(), alone.size());
  ASSERT_EQ(static_cast<int64_t>(alone.size()), 337 * vocab);
  for (int64_t t = 0; t < 337; ++t)
    EXPECT_EQ(std::memcmp(&beside[t * vocab], &alone[t * vocab], vocab * sizeof(float)), 0)
        << "prompt position " << t << " differs beside other sequences";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvariance, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

}  // namespace
}  // namespace dsinfer
