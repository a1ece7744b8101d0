// StepRecorder in front of the CPU backend: a step's calls run as issued and are recorded; a later
// step making the same calls runs as recorded but with its own uploads; one whose calls differ is
// recorded anew; a failed step runs nothing. In front of a backend that keeps captured steps (a
// stand-in below) a recording is relaunched with the step's uploads, in the order they were made.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "keeping_backend.h"
#include "ops/device_array.h"
#include "runtime/step_recorder.h"
#include "test_util.h"

namespace dsinfer {
namespace {

constexpr int64_t kDim = 64, kRows = 12;

TensorView host_view(std::vector<uint16_t>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kBF16, shape);
}

// The step: rows x uploaded, RMSNorm'ed (eps) into a temporary, scattered into rows `at` of out.
void step(Backend& be, const std::vector<uint16_t>& x, const std::vector<int32_t>& at, double eps,
          std::vector<uint16_t>& weight, std::vector<uint16_t>& out) {
  const int64_t n = static_cast<int64_t>(at.size());
  const DeviceArray<uint16_t> dx(be, std::span<const uint16_t>(x));
  const DeviceArray<int32_t> dat(be, std::span<const int32_t>(at));
  auto y = DeviceArray<uint16_t>::uninitialized(be, n * kDim);
  be.rms_norm({dx.view(DType::kBF16, {n, kDim}), host_view(weight, {kDim}), eps, y.view(DType::kBF16, {n, kDim})});
  be.scatter_rows({y.view(DType::kBF16, {n, kDim}), dat.view(DType::kI32, {n}), host_view(out, {kRows, kDim})});
}

struct Inputs {
  std::vector<uint16_t> x;
  std::vector<int32_t> at;
};
Inputs inputs(int64_t n, uint64_t seed) {
  Inputs in{testing::random_bf16(n * kDim, seed), {}};
  for (int64_t i = 0; i < n; ++i) in.at.push_back(static_cast<int32_t>((seed * 5 + i * 7) % kRows));
  return in;
}

class StepRecorderTest : public ::testing::Test {
 protected:
  CpuBackend cpu{1};
  std::vector<uint16_t> weight = testing::random_bf16(kDim, 3), out = std::vector<uint16_t>(kRows * kDim, 0),
                        want = out;

  // One step through `be` (a recorder, begun and ended) and the same calls on the CPU backend.
  void run(StepRecorder& be, const Inputs& in, double eps = 1e-6, bool ok = true) {
    ASSERT_TRUE(be.begin_step());
    step(be, in.x, in.at, eps, weight, out);
    be.end_step(ok);
    if (ok) step(cpu, in.x, in.at, eps, weight, want);
    EXPECT_EQ(out, want);
  }
};

TEST_F(StepRecorderTest, OffPassesEveryCallThrough) {
  StepRecorder rec(cpu);
  EXPECT_FALSE(rec.begin_step());
  step(rec, inputs(3, 1).x, inputs(3, 1).at, 1e-6, weight, out);
  step(cpu, inputs(3, 1).x, inputs(3, 1).at, 1e-6, weight, want);
  EXPECT_EQ(out, want);
  EXPECT_EQ(rec.stats().steps, 0);
}

TEST_F(StepRecorderTest, AStepWithTheSameCallsRunsAsRecordedWithItsOwnUploads) {
  StepRecorder rec(cpu);
  rec.set_enabled(true);
  for (uint64_t s = 1; s <= 6; ++s) run(rec, inputs(3, s));  // other rows and other slots each step
  EXPECT_EQ(rec.stats().steps, 6);
  // The first step's temporaries had no arena yet (not kept), the second was kept.
  EXPECT_EQ(rec.stats().recorded, 2);
  EXPECT_EQ(rec.stats().reissued, 4);
  EXPECT_EQ(rec.stats().relaunched, 0) << "the CPU keeps no steps";
}

TEST_F(StepRecorderTest, AStepWhoseCallsDifferIsRecordedAnewAndBothAreKept) {
  StepRecorder rec(cpu);
  rec.set_enabled(true);
  run(rec, inputs(3, 1));
  run(rec, inputs(3, 2));
  run(rec, inputs(3, 3), 1e-3);  // the uploads match, the norm's eps does not
  EXPECT_EQ(rec.stats().recorded, 3);
  EXPECT_EQ(rec.stats().diverged, 1);
  run(rec, inputs(2, 4));  // other sizes: differs from the first call on
  EXPECT_EQ(rec.stats().recorded, 4);
  EXPECT_EQ(rec.stats().diverged, 1);
  run(rec, inputs(3, 5));  // each of the three kept shapes runs as recorded now
  run(rec, inputs(3, 6), 1e-3);
  run(rec, inputs(2, 7));
  EXPECT_EQ(rec.stats().recorded, 4);
  EXPECT_EQ(rec.stats().reissued, 3);
}

TEST_F(StepRecorderTest, AFailedStepRunsNothing) {
  StepRecorder rec(cpu);
  rec.set_enabled(true);
  run(rec, inputs(3, 1));
  run(rec, inputs(3, 2));
  const std::vector<uint16_t> before = out;
  run(rec, inputs(3, 3), 1e-6, /*ok=*/false);  // matches the recording, then fails: nothing issued
  EXPECT_EQ(out, before);
  run(rec, inputs(3, 4));
  EXPECT_EQ(rec.stats().reissued, 1);
}

TEST_F(StepRecorderTest, AStepThatEndsEarlyRunsItsOwnCalls) {
  StepRecorder rec(cpu);
  rec.set_enabled(true);
  run(rec, inputs(3, 1));
  run(rec, inputs(3, 2));
  ASSERT_TRUE(rec.begin_step());  // the recording's first call only: issued as a step of its own
  {
    const Inputs in = inputs(3, 3);
    const DeviceArray<uint16_t> dx(rec, std::span<const uint16_t>(in.x));
  }
  rec.end_step(true);
  EXPECT_EQ(rec.stats().recorded, 3);
  EXPECT_EQ(rec.stats().diverged, 1);
  run(rec, inputs(3, 4));
  EXPECT_EQ(out, want);
}

TEST_F(StepRecorderTest, AKeptStepIsRelaunchedWithTheStepsUploads) {
  testing::KeepingBackend keeping(cpu);
  StepRecorder rec(keeping);
  rec.set_enabled(true);
  for (uint64_t s = 1; s <= 5; ++s) run(rec, inputs(3, s));
  EXPECT_EQ(rec.stats().recorded, 2);
  EXPECT_EQ(rec.stats().relaunched, 3);
  EXPECT_EQ(keeping.relaunches, 3);
  EXPECT_EQ(keeping.kept(), 1u) << "the first step's capture was not kept (no arena yet)";

  keeping.moved = true;  // the kept step cannot run: captured again from the recording, then relaunched
  run(rec, inputs(3, 6));
  EXPECT_EQ(rec.stats().reissued, 1);
  keeping.moved = false;
  run(rec, inputs(3, 7));
  EXPECT_EQ(rec.stats().relaunched, 4);
  EXPECT_EQ(keeping.kept(), 1u) << "the unusable step was released";
}

TEST_F(StepRecorderTest, KeepsAtMostItsLimitOfRecordings) {
  testing::KeepingBackend keeping(cpu);
  StepRecorder rec(keeping);
  rec.set_enabled(true);
  const int64_t shapes = static_cast<int64_t>(StepRecorder::kMaxRecordings) + 2;
  run(rec, inputs(shapes, 1));                                        // grows the arena to the largest step's needs
  for (int64_t n = 1; n <= shapes; ++n) run(rec, inputs(n, 10 + n));  // each of its own shape
  EXPECT_EQ(rec.stats().recorded, shapes + 1);
  EXPECT_EQ(keeping.kept(), StepRecorder::kMaxRecordings) << "the oldest were released";
}

}  // namespace
}  // namespace dsinfer
