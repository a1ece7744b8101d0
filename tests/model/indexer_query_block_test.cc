// The indexer scores, selects and drops a block of queries at a time (so a long prefill holds
// one block's scores, not s x T): each query's selections are its own, so blocks of 1, 3 and 7
// queries give bitwise the logits of one block, on both fixtures, for the 40-token prompt's
// prefill and the decode steps after it.
#include "model/same_logits.h"

namespace dsinfer {
namespace {

class IndexerQueryBlock : public ::testing::TestWithParam<const char*> {};

TEST_P(IndexerQueryBlock, EqualsOneBlockBitForBit) {
  testing::FixtureModel fx;
  ASSERT_NO_FATAL_FAILURE(testing::load_fixture(GetParam(), &fx));
  Model& model = *fx.model;
  const std::vector<int32_t>& prompt = fx.prompt;
  ASSERT_GE(prompt.size(), 40u);
  const std::vector<std::vector<int32_t>> prompts = {{prompt.begin(), prompt.begin() + 40}};
  GoldenRunOptions o;
  o.steps = 2;
  ASSERT_EQ(model.indexer_query_block(40), Model::kIndexerScoreBytes / (40 * 4));  // 40 queries: one block
  auto one_block = run_golden_experiment(model, prompts, o);
  ASSERT_TRUE(one_block.ok()) << one_block.status().to_string();
  for (int64_t rows : {1, 3, 7}) {
    model.set_indexer_query_block(rows);
    auto blocked = run_golden_experiment(model, prompts, o);
    ASSERT_TRUE(blocked.ok()) << blocked.status().to_string();
    testing::expect_same_logits(*blocked, *one_block, "blocks of " + std::to_string(rows) + " queries");
  }
  model.set_indexer_query_block(0);
  EXPECT_EQ(model.indexer_query_block(1 << 20), Model::kIndexerScoreBytes / (int64_t{4} << 20));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, IndexerQueryBlock, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

}  // namespace
}  // namespace dsinfer
