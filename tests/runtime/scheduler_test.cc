// Scheduler scenarios: what runs in each step within the token budget and the cache blocks, and
// who is preempted when blocks run out. The steps run as the engine runs them: a preempted
// request's sequence state (its block table) is dropped, every chunk's positions are covered with
// blocks, then the scheduler learns what ran.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <map>

#include "backends/cpu/cpu_backend.h"
#include "testing/config_builder.h"
#include "testing/tiny_model.h"
#include "testing/tiny_tokenizer.h"

namespace dsinfer {
namespace {

TEST(Scheduler, DecodesFirstThenPromptPiecesWithinTheBudget) {
  Scheduler s({/*token_budget=*/8, /*max_running=*/2}, nullptr);
  s.add(1, 5);
  s.add(2, 6);
  s.add(3, 2);
  auto plan = s.schedule().chunks;  // 1's prompt (5), then 3 of 2's; 3 waits (max_running)
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].id, 1u);
  EXPECT_EQ(plan[0].count, 5);
  EXPECT_EQ(plan[1].id, 2u);
  EXPECT_EQ(plan[1].count, 3);
  EXPECT_EQ(s.num_waiting(), 1u);
  s.update(plan);
  plan = s.schedule().chunks;  // 1 decodes; 2 finishes its prompt
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(plan[0].decode);
  EXPECT_EQ(plan[0].start, 5);
  EXPECT_EQ(plan[1].id, 2u);
  EXPECT_EQ(plan[1].start, 3);
  EXPECT_EQ(plan[1].count, 3);
  s.update(plan);
  s.remove(1);  // 1 finished: 3 gets its place
  plan = s.schedule().chunks;
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(plan[0].decode && plan[0].id == 2u);
  EXPECT_EQ(plan[1].id, 3u);
  EXPECT_EQ(s.num_running(), 2u);
}

// Beside decodes a step takes at most prefill_with_decodes prompt tokens; with none running the
// prompts fill the budget.
TEST(Scheduler, PromptTokensBesideDecodesAreCapped) {
  SchedulerConfig config{/*token_budget=*/16, /*max_running=*/4};
  config.prefill_with_decodes = 5;
  Scheduler s(config, nullptr);
  s.add(1, 12);
  s.add(2, 20);
  auto plan = s.schedule().chunks;  // no decodes yet: 1's prompt and 4 of 2's (16 in all)
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].count, 12);
  EXPECT_EQ(plan[1].count, 4);
  s.update(plan);
  plan = s.schedule().chunks;  // 1 decodes: 5 more of 2's prompt, not 15
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(plan[0].decode && plan[0].id == 1u);
  EXPECT_EQ(plan[1].id, 2u);
  EXPECT_EQ(plan[1].start, 4);
  EXPECT_EQ(plan[1].count, 5);
  s.update(plan);
  s.add(3, 3);
  plan = s.schedule().chunks;  // the cap covers the new requests too: 2 takes it all
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[1].id, 2u);
  EXPECT_EQ(plan[1].count, 5);
  EXPECT_EQ(s.num_waiting(), 1u);
  s.update(plan);
  s.remove(1);
  plan = s.schedule().chunks;  // no decodes again: 2's last 6 and 3's prompt
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].id, 2u);
  EXPECT_EQ(plan[0].count, 6);
  EXPECT_EQ(plan[1].id, 3u);
  EXPECT_EQ(plan[1].count, 3);
}

// A bounded cache store of the tiny model and the block table of each request, driven as the
// engine drives them.
class StepRunner {
 public:
  explicit StepRunner(const CacheLayout& layout) {
    auto vocab = TokenizerVocab::from_json(make_tiny_tokenizer_json(kTinyTokenizerMerges), "tokenizer");
    config_ = *tiny_model_config(*vocab);
    store_ = std::make_unique<CacheStore>(config_, backend_, layout);
  }
  const CacheStore& store() const { return *store_; }
  int free() const { return store_->pool().num_free(); }
  void run(Scheduler& s, const SchedulerOutput& out) {
    for (uint64_t id : out.preempted) tables_.erase(id);
    for (const ScheduledChunk& c : out.chunks) {
      auto [it, fresh] = tables_.try_emplace(c.id, store_.get());
      ASSERT_TRUE(it->second.cover(c.start + c.count).ok()) << "the plan exceeds the blocks";
    }
    s.update(out.chunks);
  }
  void finish(Scheduler& s, uint64_t id) {
    s.remove(id);
    tables_.erase(id);
  }

 private:
  ModelConfig config_;
  CpuBackend backend_{1};
  std::unique_ptr<CacheStore> store_;
  std::map<uint64_t, BlockTable> tables_;
};

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOut) {
  // Blocks of 4 positions, 1 fixed block per request, 6 blocks: two requests of 6 positions fill it.
  StepRunner engine({/*block_tokens=*/4, /*block_bytes=*/1, /*fixed_blocks=*/1, /*num_blocks=*/6});
  Scheduler s({64, 8}, &engine.store());
  s.add(1, 6);
  s.add(2, 6);
  s.add(3, 2);
  auto out = s.schedule();  // 1 and 2 take 3 blocks each; 3 finds none and waits
  ASSERT_EQ(out.chunks.size(), 2u);
  engine.run(s, out);
  EXPECT_EQ(engine.free(), 0);
  EXPECT_EQ(s.num_waiting(), 1u);
  for (int step = 0; step < 2; ++step) {  // positions 6 and 7 still fit the third blocks
    out = s.schedule();
    ASSERT_EQ(out.chunks.size(), 2u);
    EXPECT_TRUE(out.preempted.empty());
    engine.run(s, out);
  }
  out = s.schedule();  // position 8 needs a fourth block: 2 (the newest) gives its blocks to 1
  ASSERT_EQ(out.preempted, std::vector<uint64_t>{2});
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].id, 1u);
  EXPECT_TRUE(out.chunks[0].decode);
  EXPECT_EQ(s.num_preemptions(), 1);
  EXPECT_EQ(s.num_waiting(), 2u);  // 2 first (to compute its 6 prompt positions again, then 3 more), then 3
  engine.run(s, out);
  EXPECT_EQ(engine.free(), 2) << "2's blocks came back once, 1 took one of them";
  out = s.schedule();  // 2 comes back with what fits: 2 free blocks = 1 fixed + 4 positions
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[1].id, 2u);
  EXPECT_EQ(out.chunks[1].start, 0);
  EXPECT_EQ(out.chunks[1].count, 4);
  EXPECT_EQ(out.chunks[1].prompt_tokens, 6);
  engine.run(s, out);
  EXPECT_EQ(engine.free(), 0);
  engine.finish(s, 1);  // finishing frees its blocks
  EXPECT_EQ(engine.free(), 4);
}

// Scenario table: requests of the given prompt lengths arrive together and decode forever; the
// expected running set of each step under a budget of 9 blocks of 2 positions, 1 fixed each.
TEST(Scheduler, ScenarioRunningSetsUnderATightBudget) {
  StepRunner engine({/*block_tokens=*/2, /*block_bytes=*/1, /*fixed_blocks=*/1, /*num_blocks=*/9});
  Scheduler s({/*token_budget=*/16, /*max_running=*/3}, &engine.store());
  for (uint64_t id = 1; id <= 4; ++id) s.add(id, 3);
  struct Expected {
    std::vector<uint64_t> scheduled, preempted;
    int free_after;
  };
  // 1..3 start (3 positions: 1 + 2 blocks each = 9); 4 waits (max_running).
  const std::vector<Expected> table = {
      {{1, 2, 3}, {}, 0},  // the prompts
      {{1, 2, 3}, {}, 0},  // position 4 still fits two blocks
      {{1, 2}, {3}, 1},    // position 5 needs a third: the newest (3) gives its 3 blocks back
      {{1, 2}, {}, 1},     // position 6 fits; 3 waits (1 free block < 1 fixed + 1)
      {{1}, {2}, 4},       // position 7: 1 takes the last block, 2 finds none and gives way itself
  };
  for (size_t step = 0; step < table.size(); ++step) {
    const SchedulerOutput out = s.schedule();
    std::vector<uint64_t> ids;
    for (const ScheduledChunk& c : out.chunks) ids.push_back(c.id);
    EXPECT_EQ(ids, table[step].scheduled) << "step " << step;
    EXPECT_EQ(out.preempted, table[step].preempted) << "step " << step;
    engine.run(s, out);
    EXPECT_EQ(engine.free(), table[step].free_after) << "step " << step;
  }
}

}  // namespace
}  // namespace dsinfer
