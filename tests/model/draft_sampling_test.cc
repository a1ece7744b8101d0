// Drafts drawn rather than the maxima (DraftSampling): the chain then runs a row at a time, and a
// pick that takes the maximum gives the greedy chain's tokens, logits and confidence bit for bit;
// a pick that takes other tokens changes only its own block, whose next row carries the Markov
// bias of the picked token. Built on the CPU backend (golden_test) and on CUDA (golden_cuda_test,
// skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "model/model.h"
#include "model/test_backend.h"
#include "ops/device_array.h"
#include "test_util.h"
#include "testing/tiny_model.h"

namespace dsinfer {
namespace {

struct Drafts {
  std::vector<int32_t> tokens;
  std::vector<float> base, confidence;
};

TEST(DraftSampling, PicksSteerOnlyTheirOwnBlock) {
  if (!testing::test_backend_available()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<Backend> backend = testing::make_test_backend();
  LocalCommunicator comm;
  testing::TempDir dir;
  ASSERT_TRUE(write_tiny_checkpoint(dir.path(), 7).ok());
  auto loaded = Model::load(dir.path(), *backend, comm);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  Model& model = **loaded;
  ASSERT_TRUE(model.has_drafter());
  const ModelConfig& c = model.config();
  const int64_t V = c.vocab_size, B = c.dspark_block_size, width = model.main_hidden_width();
  // Two prompts prefilled with their main hidden states.
  SequenceState a = model.new_sequence(), b = model.new_sequence();
  std::vector<ForwardChunk> chunks{{&a, 0, {5, 9, 14, 3, 8, 21}, false, 6}, {&b, 0, {7, 2, 30, 11}, false, 4}};
  const int64_t rows = 10;
  DeviceArray<uint16_t> hidden = DeviceArray<uint16_t>::uninitialized(*backend, rows * width);
  ForwardContext ctx;
  ctx.main_hidden = hidden.view(DType::kBF16, {rows, width});
  DeviceArray<float> logits = DeviceArray<float>::uninitialized(*backend, 2 * V);
  ASSERT_TRUE(model.forward(chunks, logits.view(DType::kF32, {2, V}), ctx).ok());
  const std::vector<DraftChunk> draft{{&a, 0, 6, 0, true, 40}, {&b, 0, 4, 6, true, 41}};
  const auto run = [&](const DraftSampling& sampling) {
    DeviceArray<int32_t> tokens = DeviceArray<int32_t>::uninitialized(*backend, 2 * (B + 1));
    DeviceArray<float> base = DeviceArray<float>::uninitialized(*backend, 2 * B * V);
    DeviceArray<float> confidence = DeviceArray<float>::uninitialized(*backend, 2 * B);
    const Status s = model.draft(
        draft, ctx.main_hidden,
        {tokens.view(DType::kI32, {2, B + 1}), base.view(DType::kF32, {2, B, V}), confidence.view(DType::kF32, {2, B})},
        {}, sampling);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return Drafts{tokens.download(0, 2 * (B + 1)), base.download(0, 2 * B * V), confidence.download(0, 2 * B)};
  };
  const Drafts greedy = run({});

  std::vector<std::vector<float>> seen;  // the rows the pick saw
  const Drafts maxima = run({{1}, B, [&](int64_t k, int64_t, std::span<const float> row) {
                               EXPECT_EQ(k, 1);
                               seen.emplace_back(row.begin(), row.end());
                               return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
                             }});
  EXPECT_EQ(maxima.tokens, greedy.tokens);
  EXPECT_EQ(maxima.base, greedy.base);
  EXPECT_EQ(maxima.confidence, greedy.confidence);
  ASSERT_EQ(static_cast<int64_t>(seen.size()), B);
  for (int64_t j = 0; j < B; ++j)
    EXPECT_TRUE(std::equal(seen[j].begin(), seen[j].end(), greedy.base.begin() + (B + j) * V)) << j;

  // Block 1's first two drafts picked as other tokens; the later rows go on with the maxima.
  const auto other = [&](int64_t j) { return static_cast<int32_t>((greedy.tokens[B + 1 + j + 1] + 17 + j) % V); };
  const Drafts picked = run({{1}, 2, [&](int64_t, int64_t j, std::span<const float>) { return other(j); }});
  EXPECT_TRUE(std::equal(picked.tokens.begin(), picked.tokens.begin() + B + 1, greedy.tokens.begin()));
  EXPECT_TRUE(std::equal(picked.base.begin(), picked.base.begin() + B * V, greedy.base.begin()));
  EXPECT_EQ(picked.tokens[B + 2], other(0));
  EXPECT_EQ(picked.tokens[B + 3], other(1));
  // Row 0 carries the anchor's bias, as before; row 1 the picked token's.
  EXPECT_TRUE(std::equal(picked.base.begin() + B * V, picked.base.begin() + (B + 1) * V, greedy.base.begin() + B * V));
  EXPECT_FALSE(std::equal(picked.base.begin() + (B + 1) * V, picked.base.begin() + (B + 2) * V,
                          greedy.base.begin() + (B + 1) * V));
  const std::vector<float> row3(picked.base.begin() + (B + 2) * V, picked.base.begin() + (B + 3) * V);
  EXPECT_EQ(picked.tokens[B + 4], static_cast<int32_t>(std::max_element(row3.begin(), row3.end()) - row3.begin()));
}

}  // namespace
}  // namespace dsinfer
