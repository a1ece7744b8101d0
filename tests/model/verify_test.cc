// Verify chunks (ForwardChunk::verify) are decode steps run at once: a speculative loop that
// verifies drafts, some of them wrong, takes back the rejected positions (Model::truncate) and
// goes on gives every accepted position the logits plain decoding gives it, bit for bit, past
// ring wraps, partial compressor groups and the index-key slot's moves. Built on the CPU backend
// (golden_test) and on CUDA (golden_cuda_test, skipped without a GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "model/model.h"
#include "model/test_backend.h"
#include "test_util.h"
#include "testing/tiny_model.h"

namespace dsinfer {
namespace {

using testing::make_test_backend;
using testing::test_backend_available;

class VerifyChunks : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!test_backend_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = make_test_backend();
    std::filesystem::path dir = testing::data_dir() / "v41-tiny-dspark" / "checkpoint";
    if (std::string(GetParam()) == "tiny") {
      ASSERT_TRUE(write_tiny_checkpoint(tmp_.path(), 7).ok());
      dir = tmp_.path();
    }
    auto m = Model::load(dir, *backend_, comm_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }

  std::vector<float> forward(std::vector<ForwardChunk>& chunks) {
    std::vector<float> logits(Model::logit_rows(chunks) * model_->config().vocab_size);
    const Status s = model_->forward(chunks, logits);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return logits;
  }

  testing::TempDir tmp_;
  std::unique_ptr<Backend> backend_;
  LocalCommunicator comm_;
  std::unique_ptr<Model> model_;
};

TEST_P(VerifyChunks, AcceptedPositionsGetPlainDecodingsLogits) {
  const ModelConfig& c = model_->config();
  const int64_t V = c.vocab_size, K = c.verify_tokens(), P = 9, end = P + 3 * c.window_size;
  ASSERT_GE(K, 2);
  std::vector<int32_t> stream;  // the tokens of positions 0 .. end - 1
  for (int64_t t = 0; t < end; ++t) stream.push_back(static_cast<int32_t>(3 + (29 * t + 11) % (V - 4)));
  const auto prefill = [&](SequenceState& seq) {
    std::vector<ForwardChunk> one{{&seq, 0, {stream.begin(), stream.begin() + P}, false, P}};
    forward(one);
  };
  // Plain decoding: every position's logits, one step a call.
  SequenceState plain = model_->new_sequence();
  prefill(plain);
  std::vector<std::vector<float>> expected(end);
  for (int64_t q = P; q < end; ++q) {
    std::vector<ForwardChunk> one{{&plain, q, {stream[q]}, true, 0}};
    expected[q] = forward(one);
  }
  // Speculation: verify chunks of 1 .. K tokens whose first `right` are the stream's, the rest
  // wrong (rejected drafts), beside another sequence's decode step; then back to the accepted length.
  SequenceState spec = model_->new_sequence(), other = model_->new_sequence();
  prefill(spec);
  prefill(other);
  int64_t checked = 0, rejected = 0;
  for (int64_t round = 0; spec.length < end; ++round) {
    const int64_t L = spec.length, k = std::min<int64_t>(1 + round % K, end - L);
    const int64_t right = std::min<int64_t>(k, 1 + (round * 7) % (k + 1));
    std::vector<int32_t> tokens(stream.begin() + L, stream.begin() + L + k);
    for (int64_t i = right; i < k; ++i) tokens[i] = static_cast<int32_t>((tokens[i] + 1 + i) % V);
    std::vector<ForwardChunk> step{{&other, other.length, {stream[other.length % end]}, true, 0},
                                   {&spec, L, tokens, false, 0, /*verify=*/true}};
    const std::vector<float> logits = forward(step);
    for (int64_t i = 0; i < right; ++i, ++checked)
      ASSERT_EQ(std::memcmp(&logits[(1 + i) * V], expected[L + i].data(), V * sizeof(float)), 0)
          << "position " << L + i << " (row " << i << " of a verify chunk of " << k << " at " << L << ")";
    rejected += k - right;
    ASSERT_TRUE(model_->truncate(spec, L + right).ok());
    EXPECT_EQ(spec.length, L + right);
  }
  EXPECT_EQ(checked, end - P);
  EXPECT_GT(rejected, 10);
  // Back only inside the last verify chunk; not after a plain step.
  EXPECT_FALSE(model_->truncate(spec, spec.length - 1 - K).ok());
  std::vector<ForwardChunk> one{{&spec, spec.length, {stream[5]}, true, 0}};
  forward(one);
  EXPECT_FALSE(model_->truncate(spec, spec.length - 1).ok());
}

TEST_P(VerifyChunks, BadVerifyChunksAreRefused) {
  const ModelConfig& c = model_->config();
  SequenceState seq = model_->new_sequence();
  std::vector<ForwardChunk> one{{&seq, 0, {5, 6, 7, 8, 9, 10, 11, 12}, false, 8}};
  forward(one);
  const auto refused = [&](std::vector<ForwardChunk> chunks, const char* why) {
    std::vector<float> logits(Model::logit_rows(chunks) * c.vocab_size);
    const Status s = model_->forward(chunks, logits);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(why), std::string::npos) << s.to_string();
  };
  refused({{&seq, 8, std::vector<int32_t>(c.verify_tokens() + 1, 5), false, 0, /*verify=*/true}},
          "a verify chunk holds at most");
  SequenceState young = model_->new_sequence();
  std::vector<ForwardChunk> first{{&young, 0, {5}, false, 1}};
  forward(first);
  refused({{&young, 1, {5, 6}, false, 0, /*verify=*/true}}, "no smaller than their count");  // two tokens at 1
  EXPECT_EQ(young.length, 1);
}

INSTANTIATE_TEST_SUITE_P(Models, VerifyChunks, ::testing::Values("v41-tiny-dspark", "tiny"));

}  // namespace
}  // namespace dsinfer
