// A prefill chunk with all_logits gives every token's logits: row i is what the last-token logits
// of the same prompt prefilled in pieces ending at token i are, bit for bit (prefill is
// chunking-invariant). Built on the CPU backend (golden_test) and on CUDA (golden_cuda_test,
// skipped without a GPU).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "model/model.h"
#include "model/test_backend.h"
#include "test_util.h"
#include "testing/tiny_model.h"

namespace dsinfer {
namespace {

TEST(AllLogits, EveryRowIsThatPrefixsLastLogits) {
  if (!testing::test_backend_available()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<Backend> backend = testing::make_test_backend();
  LocalCommunicator comm;
  testing::TempDir dir;
  ASSERT_TRUE(write_tiny_checkpoint(dir.path(), 3).ok());
  auto loaded = Model::load(dir.path(), *backend, comm);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  Model& model = **loaded;
  const int64_t V = model.config().vocab_size, n = 3 * model.config().window_size / 2 + 5;
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < n; ++i) prompt.push_back(static_cast<int32_t>(3 + (37 * i + 5) % (V - 4)));
  // The whole prompt in two pieces, every row's logits.
  SequenceState all = model.new_sequence();
  const int64_t half = n / 2;
  std::vector<float> rows;
  for (const auto& [start, end] : {std::pair{int64_t{0}, half}, {half, n}}) {
    std::vector<ForwardChunk> chunk{
        {&all, start, {prompt.begin() + start, prompt.begin() + end}, false, n, false, /*all_logits=*/true}};
    std::vector<float> logits((end - start) * V);
    ASSERT_TRUE(model.forward(chunk, logits).ok());
    rows.insert(rows.end(), logits.begin(), logits.end());
  }
  // Each row against the last logits of the same prompt's pieces ending there (one sequence, a
  // token a piece).
  SequenceState one = model.new_sequence();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<ForwardChunk> chunk{{&one, i, {prompt[i]}, false, n}};
    std::vector<float> logits(V);
    ASSERT_TRUE(model.forward(chunk, logits).ok());
    ASSERT_TRUE(std::equal(logits.begin(), logits.end(), rows.begin() + i * V)) << "row " << i;
  }
  // Only prefill chunks take it.
  SequenceState seq = model.new_sequence();
  std::vector<ForwardChunk> decode{{&seq, 0, {5}, true, 0, false, true}};
  std::vector<float> logits(V);
  const Status refused = model.forward(decode, logits);
  EXPECT_NE(refused.message().find("only a prefill chunk takes all_logits"), std::string::npos) << refused.to_string();
}

}  // namespace
}  // namespace dsinfer
