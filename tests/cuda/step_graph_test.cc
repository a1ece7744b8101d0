// Decode steps recorded as CUDA graphs and relaunched with each step's uploads (options.graph_tokens:
// the model runner's step recorder in front of CudaBackend's kept graphs) give the logits of the same
// steps run op by op, bit for bit, on both fixture models: a prompt, then single-token steps past
// the window and through new compressed rows (skipped without a GPU). The mixes run as side work on
// a second stream give the bits they give in order on one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <tuple>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device.h"
#include "model/decode_steps.h"
#include "model/model.h"
#include "ops/communicator.h"
#include "test_util.h"

namespace dsinfer {
namespace {

struct Decoded {
  std::vector<float> logits;  // every forward's, in order
  CudaBackend::Stats stats;
  StepRecorder::Stats steps;
};

Decoded decode(const char* fixture, int sequences, bool graphs, int steps, bool side_stream = true) {
  // The other switches as the environment sets them (as golden_test.cc: scripts/device_checks.sh
  // runs this binary with each DSINFER_CUDA_LINEAR kernel); graphs on or off as asked.
  CudaBackendOptions options = CudaBackendOptions::from_switches(std::getenv);
  options.graph_tokens = graphs ? CudaBackendOptions::kDeviceRoutedTokens : 0;
  options.side_stream = side_stream;
  CudaBackend backend(options);
  LocalCommunicator comm;
  auto model = Model::load(testing::data_dir() / fixture / "checkpoint", backend, comm);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  Decoded run;
  if (!model.ok()) return run;
  ModelRunner runner(**model);
  run.logits = testing::prompts_then_decode(runner, steps, sequences);
  run.stats = backend.stats();
  run.steps = runner.step_stats();
  return run;
}

class StepGraph : public ::testing::TestWithParam<std::tuple<const char*, int>> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(StepGraph, LogitsAsStepsOneByOne) {
  const auto [fixture, sequences] = GetParam();
  const int steps = 80;
  const Decoded eager = decode(fixture, sequences, false, steps), graphs = decode(fixture, sequences, true, steps);
  EXPECT_EQ(eager.stats.graph_steps, 0);
  EXPECT_EQ(eager.steps.steps, 0) << "no recorder without graphs";
  // As on the CPU (tests/model/step_replay_test.cc; the same calls, so the same steps match), a
  // third of one sequence's steps or more repeat a recording, and some of three sequences' steps:
  // relaunched as its graph, or captured again where memory it named has moved since (the arena
  // or the graphs' upload buffer regrown: the fixtures' steps grow every few steps). Three
  // sequences' steps run on the device's choice of experts too (CudaBackend::kDeviceRoutedTokens).
  EXPECT_GE(graphs.steps.relaunched + graphs.steps.reissued, sequences == 1 ? steps / 3 : 1)
      << graphs.steps.recorded << " recorded";
  if (sequences == 1) {
    EXPECT_GT(graphs.steps.relaunched, 0);
  }
  EXPECT_GE(graphs.stats.graph_steps, graphs.steps.relaunched);
  EXPECT_EQ(graphs.steps.relaunched + graphs.steps.reissued + graphs.steps.recorded, steps);
  EXPECT_EQ(graphs.stats.downloads - eager.stats.downloads, 0) << "steps read back as often as launched ones";
  ASSERT_EQ(eager.logits.size(), graphs.logits.size());
  EXPECT_TRUE(eager.logits == graphs.logits) << "replayed steps give other logits";
}

TEST_P(StepGraph, SideStreamAsOneStream) {
  const auto [fixture, sequences] = GetParam();
  const int steps = 24;
  const Decoded one = decode(fixture, sequences, false, steps, /*side_stream=*/false);
  const Decoded side = decode(fixture, sequences, false, steps);
  ASSERT_EQ(one.logits.size(), side.logits.size());
  EXPECT_TRUE(one.logits == side.logits) << "the side stream changes the logits";
  const Decoded side_graphs = decode(fixture, sequences, true, steps);
  EXPECT_GT(side_graphs.stats.graph_steps, 0);
  EXPECT_TRUE(one.logits == side_graphs.logits) << "the side stream in graphs changes the logits";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StepGraph,
                         ::testing::Combine(::testing::Values("v41-tiny-a", "v41-tiny-b"), ::testing::Values(1, 3)));

}  // namespace
}  // namespace dsinfer
