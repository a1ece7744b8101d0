// draw_tokens: the CPU against core/token_draw.h's draw_token, the GPU against the CPU, token for
// token; rows at a real vocabulary's width (peaked, flat, with ties, not finite) in a view whose
// rows lie further apart than their width, each drawn with many parameters and bits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/hash.h"
#include "op_test_util.h"

namespace dsinfer {
namespace {

constexpr int64_t kVocab = 129280, kStride = kVocab + 13, kRows = 6;

std::vector<float> draw_rows() {
  std::vector<float> all(kRows * kStride, 1e30f);  // the gaps are never read
  uint64_t s = 3;
  for (int64_t r = 0; r < kRows; ++r) {
    float* row = all.data() + r * kStride;
    for (int64_t t = 0; t < kVocab; ++t) {
      const double u = splitmix64_uniform(s);
      switch (r) {
        case 0:
          row[t] = static_cast<float>(12.0 * u - 6.0);
          break;  // flat
        case 1:
          row[t] = static_cast<float>(-10.0 + 3.0 * u);
          break;  // a few likely ones below
        case 2:
          row[t] = static_cast<float>(std::floor(u * 64) / 8.0 - 4.0);
          break;  // ties everywhere
        case 3:
          row[t] = static_cast<float>(30.0 * u - 40.0);
          break;  // a long tail
        case 4:
          row[t] = static_cast<float>(u);
          break;
        default:
          row[t] = static_cast<float>(u - 0.5);
          break;
      }
    }
  }
  float* peaked = all.data() + 1 * kStride;
  peaked[5] = 8.0f, peaked[70000] = 7.5f, peaked[kVocab - 1] = 7.0f;
  all[4 * kStride + 1234] = std::nanf("");
  all[5 * kStride + 99] = -std::numeric_limits<float>::infinity();
  return all;
}

// Each row drawn with each parameter set, several times with other bits.
std::vector<RowDraw> all_draws() {
  const DrawParams sets[] = {{.temperature = 1.0f},
                             {.temperature = 0.7f, .top_p = 0.9f},
                             {.temperature = 1.0f, .top_k = 50},
                             {.temperature = 1.0f, .top_k = 1},
                             {.temperature = 0.01f},
                             {.temperature = 100.0f, .top_p = 0.5f},
                             {.temperature = 1.3f, .top_k = 3000, .top_p = 0.95f, .min_p = 0.05f},
                             {.temperature = 0.6f, .top_p = 0.01f}};
  std::vector<RowDraw> draws;
  uint64_t s = 17;
  for (const DrawParams& p : sets)
    for (int i = 0; i < 3; ++i) {
      RowDraw d{0, p};
      d.params.bits = splitmix64(s);
      draws.push_back(d);
    }
  return draws;
}

// picks[r] for draws d of row r, one op call per draw set (a call's rows are distinct).
std::vector<int32_t> run_draws(Backend& be, const std::vector<float>& rows, const std::vector<RowDraw>& sets) {
  const DeviceArray<float> logits = testing::on(be, rows);
  TensorView view = logits.view(DType::kF32, {kRows, kVocab});
  view.stride[0] = kStride;
  std::vector<int32_t> all;
  for (const RowDraw& d : sets) {
    DeviceArray<int32_t> picks = testing::on(be, std::vector<int32_t>(kRows, -7));
    std::vector<RowDraw> call;
    for (int32_t r = 0; r < kRows; ++r) call.push_back({r, d.params});
    be.draw_tokens({view, call, picks.view(DType::kI32, {kRows})});
    const std::vector<int32_t> got = picks.download();
    all.insert(all.end(), got.begin(), got.end());
  }
  return all;
}

TEST(DrawTokens, CpuDrawsAsTheHost) {
  const std::vector<float> rows = draw_rows();
  const std::vector<RowDraw> sets = all_draws();
  CpuBackend cpu(2);
  const std::vector<int32_t> got = run_draws(cpu, rows, sets);
  for (size_t i = 0; i < sets.size(); ++i)
    for (int64_t r = 0; r < kRows; ++r)
      EXPECT_EQ(got[i * kRows + r],
                draw_token(std::span<const float>(rows).subspan(r * kStride, kVocab), sets[i].params))
          << "draw " << i << ", row " << r;
  EXPECT_EQ(got[4], -1);  // the NaN's row
  EXPECT_EQ(got[5], -1);  // the infinity's
  // A call leaves the rows it does not draw alone.
  const DeviceArray<float> logits = testing::on(cpu, rows);
  TensorView view = logits.view(DType::kF32, {kRows, kVocab});
  view.stride[0] = kStride;
  DeviceArray<int32_t> picks = testing::on(cpu, std::vector<int32_t>(kRows, -7));
  const std::vector<RowDraw> one = {{3, sets[0].params}};
  cpu.draw_tokens({view, one, picks.view(DType::kI32, {kRows})});
  const std::vector<int32_t> left = picks.download();
  EXPECT_EQ(left[3], got[3]);
  for (int64_t r : {0, 1, 2, 4, 5}) EXPECT_EQ(left[r], -7) << r;
}

TEST(DrawTokens, GpuEqualsCpu) {
  const std::unique_ptr<Backend> gpu = testing::gpu_backend();
  DSINFER_GPU_OR_SKIP(gpu);
  const std::vector<float> rows = draw_rows();
  const std::vector<RowDraw> sets = all_draws();
  CpuBackend cpu(2);
  EXPECT_EQ(run_draws(*gpu, rows, sets), run_draws(cpu, rows, sets));
}

}  // namespace
}  // namespace dsinfer
