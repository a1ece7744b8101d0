// Decode steps through the model runner's step recorder (recorded, then issued again
// as recorded with each step's own uploads) give the logits of the same steps run call by call, bit
// for bit, on both fixture models: prompts, then decode steps past the window, through new
// compressed rows and across the indexer's padded widths, of one sequence and of three at other
// positions, with cache blocks of the default size and of two positions (a block table that grows
// every other step).
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "keeping_backend.h"
#include "model/decode_steps.h"
#include "model/model.h"
#include "test_util.h"

namespace dsinfer {
namespace {

struct Decoded {
  std::vector<float> logits;  // every forward's, in order
  StepRecorder::Stats stats;
};

Decoded decode(const char* fixture, int64_t block_tokens, int sequences, bool replay, int steps) {
  CpuBackend backend(2);
  LocalCommunicator comm;
  auto model = Model::load(testing::data_dir() / fixture / "checkpoint", backend, comm);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  Decoded run;
  if (!model.ok()) return run;
  EXPECT_TRUE((*model)->reserve_cache(block_tokens).ok());
  ModelRunner runner(**model, replay);
  run.logits = testing::prompts_then_decode(runner, steps, sequences);
  run.stats = runner.step_stats();
  return run;
}

class StepReplay : public ::testing::TestWithParam<std::tuple<const char*, int64_t, int>> {};

TEST_P(StepReplay, LogitsAsStepsCallByCall) {
  const auto [fixture, block_tokens, sequences] = GetParam();
  const int steps = 80;
  const Decoded plain = decode(fixture, block_tokens, sequences, false, steps);
  const Decoded replayed = decode(fixture, block_tokens, sequences, true, steps);
  EXPECT_EQ(plain.stats.steps, 0);
  EXPECT_EQ(replayed.stats.steps, steps);
  EXPECT_EQ(replayed.stats.recorded + replayed.stats.reissued, steps);
  // A step makes the calls of the one two before it (decode steps alternate: ratio-2 groups
  // complete at odd positions) except where a padded width grows (every index_topk compressed
  // positions of a layer: 6 and 8 here, so a layer's every 6th or 8th step; 512 in V4.1-Flash),
  // the block table's padding grows (every 16 blocks) or the store moves its pools; with three
  // sequences, where any of them does.
  EXPECT_GE(replayed.stats.reissued, sequences == 1 ? steps / 3 : 1) << replayed.stats.recorded << " recorded";
  ASSERT_EQ(plain.logits.size(), replayed.logits.size());
  EXPECT_TRUE(plain.logits == replayed.logits) << "replayed steps give other logits";
}

// In front of a backend whose kept steps pay up to one token (StepGraphs::max_step_tokens), the
// runner records, captures and relaunches one sequence's decode steps and runs three sequences'
// steps call by call: the logits are the plain run's either way.
TEST(StepReplayBound, StepsPastTheKeptStepsBoundRunCallByCall) {
  const int steps = 12;
  for (const int sequences : {1, 3}) {
    CpuBackend cpu(2);
    testing::KeepingBackend keeping(cpu, /*max_tokens=*/1);
    LocalCommunicator comm;
    auto model = Model::load(testing::data_dir() / "v41-tiny-a" / "checkpoint", keeping, comm);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    ASSERT_TRUE((*model)->reserve_cache(64).ok());
    ModelRunner runner(**model);  // the recorder on: the backend keeps captured steps
    const std::vector<float> logits = testing::prompts_then_decode(runner, steps, sequences);
    if (sequences == 1) {
      EXPECT_EQ(runner.step_stats().steps, steps);
      EXPECT_GT(keeping.relaunches, 0);
    } else {
      EXPECT_EQ(runner.step_stats().steps, 0) << "steps of 3 tokens are past the bound";
      EXPECT_EQ(keeping.relaunches, 0);
    }
    EXPECT_TRUE(logits == decode("v41-tiny-a", 64, sequences, false, steps).logits) << sequences << " sequences";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StepReplay,
                         ::testing::Combine(::testing::Values("v41-tiny-a", "v41-tiny-b"),
                                            ::testing::Values(int64_t{64}, int64_t{2}), ::testing::Values(1, 3)));

}  // namespace
}  // namespace dsinfer
