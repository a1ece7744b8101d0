// greedy_pick: the CPU against the sampler's greedy pick (the first maximum, none for a row that is
// not all finite), the GPU against the CPU; rows at a real vocabulary's width, with ties, signed
// zeros and non-finite values, in a view whose rows are further apart than their width.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_test_util.h"
#include "runtime/sampler.h"

namespace dsinfer {
namespace {

constexpr int64_t kVocab = 129280, kStride = kVocab + 13;

// Rows of `kVocab` values `kStride` apart, each with a case of its own.
std::vector<float> pick_rows() {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows(10);
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].resize(kVocab);
    uint64_t s = 0x9E3779B97F4A7C15ull * (r + 1);
    for (float& v : rows[r]) {  // values in [-8, 8) on a grid of 1/64, so that ties occur
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>(static_cast<int64_t>(s >> 54) - 512) / 64.0f;
    }
  }
  rows[1][kVocab - 1] = 100.0f;                           // the last column
  rows[2][7] = rows[2][90000] = rows[2][129279] = 50.0f;  // equal maxima: the first
  std::fill(rows[3].begin(), rows[3].end(), -3.0f);       // all equal: column 0
  std::fill(rows[4].begin(), rows[4].end(), -1.0f);
  rows[4][40000] = -0.0f, rows[4][50000] = 0.0f;  // -0 == +0: the first
  rows[5][123] = std::nanf("");
  rows[6][kVocab - 1] = kInf;
  rows[7][0] = -kInf;
  rows[8][64] = 1e30f, rows[8][65] = 1e30f;
  std::vector<float> all(rows.size() * kStride, 1234.0f);  // the gaps are never read
  for (size_t r = 0; r < rows.size(); ++r) std::copy(rows[r].begin(), rows[r].end(), all.begin() + r * kStride);
  return all;
}

std::vector<int32_t> run_pick(Backend& be, const std::vector<float>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size()) / kStride;
  const DeviceArray<float> logits = testing::on(be, rows);
  DeviceArray<int32_t> picks = testing::on(be, std::vector<int32_t>(n, -7));
  TensorView view = logits.view(DType::kF32, {n, kVocab});
  view.stride[0] = kStride;
  be.greedy_pick({view, picks.view(DType::kI32, {n})});
  return picks.download();
}

TEST(GreedyPick, CpuPicksAsTheSampler) {
  const std::vector<float> rows = pick_rows();
  CpuBackend cpu(2);
  const std::vector<int32_t> got = run_pick(cpu, rows);
  ASSERT_EQ(got.size(), 10u);
  for (size_t r = 0; r < got.size(); ++r) {
    SamplingParams params;
    params.temperature = 0.0f;
    SamplerState greedy(params, 1, {});
    const std::optional<int32_t> want = greedy.sample(std::span<const float>(rows).subspan(r * kStride, kVocab));
    EXPECT_EQ(got[r], want.value_or(-1)) << "row " << r;
  }
  EXPECT_EQ(got[1], kVocab - 1);
  EXPECT_EQ(got[2], 7);
  EXPECT_EQ(got[3], 0);
  EXPECT_EQ(got[4], 40000);
  EXPECT_EQ(got[5], -1);
  EXPECT_EQ(got[6], -1);
  EXPECT_EQ(got[7], -1);
  EXPECT_EQ(got[8], 64);
}

TEST(GreedyPick, GpuEqualsCpu) {
  const std::unique_ptr<Backend> gpu = testing::gpu_backend();
  DSINFER_GPU_OR_SKIP(gpu);
  const std::vector<float> rows = pick_rows();
  CpuBackend cpu(2);
  EXPECT_EQ(run_pick(*gpu, rows), run_pick(cpu, rows));
}

}  // namespace
}  // namespace dsinfer
