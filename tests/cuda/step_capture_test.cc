// CudaBackend's kept graphs under a StepRecorder (skipped without a GPU): a small step (rows
// uploaded, RMSNorm'ed, scattered into uploaded rows of a persistent array) recorded as a graph
// and relaunched with each step's own uploads gives the CPU's results every step; a step of
// another shape is captured as a graph of its own; a step that needs a larger upload buffer and
// arena (its temporaries from the backend, some allocated before its capture began and freed in
// it) runs once, then the buffer regrows, which drops the kept graphs, captured again.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device.h"
#include "ops/device_array.h"
#include "runtime/step_recorder.h"
#include "test_util.h"

namespace dsinfer {
namespace {

constexpr int64_t kDim = 256, kRows = 20000;  // not a multiple of 3: a step's rows are distinct

// The step: rows x uploaded, RMSNorm'ed into a temporary, scattered into rows `at` of out.
void step(Backend& be, const std::vector<uint16_t>& x, const std::vector<int32_t>& at, const DeviceArray<uint16_t>& w,
          const DeviceArray<uint16_t>& out) {
  const int64_t n = static_cast<int64_t>(at.size());
  const DeviceArray<uint16_t> dx(be, std::span<const uint16_t>(x));
  const DeviceArray<int32_t> dat(be, std::span<const int32_t>(at));
  auto y = DeviceArray<uint16_t>::uninitialized(be, n * kDim);
  be.rms_norm({dx.view(DType::kBF16, {n, kDim}), w.view(DType::kBF16, {kDim}), 1e-6, y.view(DType::kBF16, {n, kDim})});
  be.scatter_rows({y.view(DType::kBF16, {n, kDim}), dat.view(DType::kI32, {n}), out.view(DType::kBF16, {kRows, kDim})});
}

class StepCapture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<CudaBackend>(CudaBackendOptions{.graph_tokens = CudaBackendOptions::kDeviceRoutedTokens});
    const std::vector<uint16_t> weight = testing::random_bf16(kDim, 3), zeros(kRows * kDim, 0);
    gpu_w_ = DeviceArray<uint16_t>(*gpu_, std::span<const uint16_t>(weight));
    gpu_out_ = DeviceArray<uint16_t>(*gpu_, std::span<const uint16_t>(zeros));
    cpu_w_ = DeviceArray<uint16_t>(cpu_, std::span<const uint16_t>(weight));
    cpu_out_ = DeviceArray<uint16_t>(cpu_, std::span<const uint16_t>(zeros));
  }
  void TearDown() override {
    gpu_w_ = {}, gpu_out_ = {};
    gpu_.reset();
  }
  // A step of n rows through the recorder on the GPU and directly on the CPU: the same rows out.
  void run(StepRecorder& rec, int64_t n, uint64_t seed) {
    const std::vector<uint16_t> x = testing::random_bf16(n * kDim, seed);
    std::vector<int32_t> at;
    for (int64_t i = 0; i < n; ++i) at.push_back(static_cast<int32_t>((seed * 7 + i * 3) % kRows));
    ASSERT_TRUE(rec.begin_step());
    step(rec, x, at, gpu_w_, gpu_out_);
    rec.end_step(true);
    step(cpu_, x, at, cpu_w_, cpu_out_);
    EXPECT_EQ(gpu_out_.download(), cpu_out_.download()) << "step of " << n << " rows, seed " << seed;
  }

  CpuBackend cpu_{1};
  std::unique_ptr<CudaBackend> gpu_;
  DeviceArray<uint16_t> gpu_w_, gpu_out_, cpu_w_, cpu_out_;
};

TEST_F(StepCapture, KeptGraphsRunWithEachStepsUploads) {
  StepRecorder rec(*gpu_);
  rec.set_enabled(true);
  // 1: run as it is (the backend's first single-token step), not kept (no arena yet); 2: captured
  // with the graphs' first upload buffer, kept; 3-6: relaunched.
  for (uint64_t s = 1; s <= 6; ++s) run(rec, 3, s);
  EXPECT_EQ(rec.stats().recorded, 2);
  EXPECT_EQ(rec.stats().reissued, 0);
  EXPECT_EQ(rec.stats().relaunched, 4);
  EXPECT_EQ(gpu_->stats().graph_steps, 5) << "every step but the first ran as a graph";

  run(rec, 2, 7);  // another shape: a graph of its own, then both are relaunched
  run(rec, 2, 8);
  run(rec, 3, 9);
  EXPECT_EQ(rec.stats().relaunched, 6);

  // Uploads of ~8.8 MB: past the graphs' first buffer (8 MiB) and the arena.
  run(rec, 17000, 10);
  run(rec, 17000, 11);
  run(rec, 3, 12);
  run(rec, 3, 13);
  EXPECT_EQ(rec.stats().relaunched, 7) << "the last step relaunched: graphs kept again after the regrowth";
}

}  // namespace
}  // namespace dsinfer
