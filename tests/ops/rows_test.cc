// The row ops (gather_rows, scatter_rows, scatter_add): the CPU against loops written here, the
// GPU against the CPU bit for bit (they move and add rows; nothing to round but the one bf16 of
// scatter_add's output).
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "core/float_formats.h"
#include "op_test_util.h"
#include "test_util.h"

namespace dsinfer {
namespace {

constexpr int64_t kN = 7, kD = 33, kM = 3;
const std::vector<int32_t> kRows = {5, 0, 6};

struct RowOuts {
  std::vector<uint16_t> gathered, added, scattered;
  std::vector<float> acc;
};

// The three ops on `be` over the same inputs.
RowOuts run_row_ops(Backend& be, const std::vector<uint16_t>& x, const std::vector<uint16_t>& src) {
  using testing::on;
  const DeviceArray<uint16_t> dx = on(be, x), dsrc = on(be, src);
  const DeviceArray<int32_t> rows = on(be, kRows);
  DeviceArray<uint16_t> gathered = on(be, std::vector<uint16_t>(kM * kD, 0)),
                        added = on(be, std::vector<uint16_t>(kN * kD, 0xFFFF)), scattered = on(be, x);
  DeviceArray<float> acc = on(be, std::vector<float>(kN * kD, 0.25f));
  be.gather_rows(
      {dx.view(DType::kBF16, {kN, kD}), rows.view(DType::kI32, {kM}), gathered.view(DType::kBF16, {kM, kD})});
  be.scatter_add({dsrc.view(DType::kBF16, {kM, kD}), rows.view(DType::kI32, {kM}), acc.view(DType::kF32, {kN, kD}),
                  added.view(DType::kBF16, {kN, kD})});
  be.scatter_rows(
      {dsrc.view(DType::kBF16, {kM, kD}), rows.view(DType::kI32, {kM}), scattered.view(DType::kBF16, {kN, kD})});
  return {gathered.download(), added.download(), scattered.download(), acc.download()};
}

TEST(RowOps, CpuMovesAndAddsTheRowsItIsGiven) {
  const std::vector<uint16_t> x = testing::random_bf16(kN * kD, 31), src = testing::random_bf16(kM * kD, 32);
  CpuBackend cpu(2);
  const RowOuts got = run_row_ops(cpu, x, src);
  for (int64_t i = 0; i < kN; ++i) {
    const auto hit = std::find(kRows.begin(), kRows.end(), i);
    for (int64_t j = 0; j < kD; ++j) {
      const float want = hit == kRows.end() ? 0.25f : 0.25f + bf16_to_f32(src[(hit - kRows.begin()) * kD + j]);
      EXPECT_EQ(got.acc[i * kD + j], want);
      EXPECT_EQ(got.added[i * kD + j], hit == kRows.end() ? 0xFFFF : f32_to_bf16(want));  // untouched rows stay
      EXPECT_EQ(got.scattered[i * kD + j], hit == kRows.end() ? x[i * kD + j] : src[(hit - kRows.begin()) * kD + j]);
    }
  }
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t j = 0; j < kD; ++j) EXPECT_EQ(got.gathered[i * kD + j], x[kRows[i] * kD + j]);
}

TEST(RowOps, GpuEqualsCpuBitForBit) {
  const std::unique_ptr<Backend> gpu = testing::gpu_backend();
  DSINFER_GPU_OR_SKIP(gpu);
  const std::vector<uint16_t> x = testing::random_bf16(kN * kD, 41), src = testing::random_bf16(kM * kD, 42);
  CpuBackend cpu(2);
  const RowOuts want = run_row_ops(cpu, x, src), got = run_row_ops(*gpu, x, src);
  EXPECT_EQ(got.gathered, want.gathered);
  EXPECT_EQ(got.added, want.added);
  EXPECT_EQ(got.scattered, want.scattered);
  EXPECT_EQ(got.acc, want.acc);
}

// gather_rows and scatter_rows of 4-byte rows (a decode batch's f32 partial groups, int32
// selections) on `be`: the rows gathered, then scattered back into a copy of 11s.
template <typename T>
std::pair<std::vector<T>, std::vector<T>> move_wide_rows(Backend& be, const std::vector<T>& x, DType dtype) {
  using testing::on;
  const DeviceArray<T> dx = on(be, x);
  const DeviceArray<int32_t> rows = on(be, kRows);
  DeviceArray<T> gathered = on(be, std::vector<T>(kM * kD, T{0})), scattered = on(be, std::vector<T>(kN * kD, T{11}));
  be.gather_rows({dx.view(dtype, {kN, kD}), rows.view(DType::kI32, {kM}), gathered.view(dtype, {kM, kD})});
  be.scatter_rows({gathered.view(dtype, {kM, kD}), rows.view(DType::kI32, {kM}), scattered.view(dtype, {kN, kD})});
  return {gathered.download(), scattered.download()};
}

TEST(RowOps, FourByteRowsMoveWhole) {
  std::vector<float> xf(kN * kD);
  std::vector<int32_t> xi(kN * kD);
  for (int64_t i = 0; i < kN * kD; ++i)
    xf[i] = 0.5f + static_cast<float>(i) * 1e-3f, xi[i] = 70000 + static_cast<int32_t>(i);
  CpuBackend cpu(2);
  const auto [gf, sf] = move_wide_rows(cpu, xf, DType::kF32);
  const auto [gi, si] = move_wide_rows(cpu, xi, DType::kI32);
  for (int64_t i = 0; i < kN; ++i) {
    const bool hit = std::find(kRows.begin(), kRows.end(), i) != kRows.end();
    for (int64_t j = 0; j < kD; ++j) {
      EXPECT_EQ(sf[i * kD + j], hit ? xf[i * kD + j] : 11.0f);
      EXPECT_EQ(si[i * kD + j], hit ? xi[i * kD + j] : 11);
    }
  }
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t j = 0; j < kD; ++j) EXPECT_EQ(gf[i * kD + j], xf[kRows[i] * kD + j]);
  const std::unique_ptr<Backend> gpu = testing::gpu_backend();
  if (!gpu) return;  // the GPU's copies as the CPU's
  EXPECT_EQ(move_wide_rows(*gpu, xf, DType::kF32), move_wide_rows(cpu, xf, DType::kF32));
  EXPECT_EQ(move_wide_rows(*gpu, xi, DType::kI32), move_wide_rows(cpu, xi, DType::kI32));
}

}  // namespace
}  // namespace dsinfer
