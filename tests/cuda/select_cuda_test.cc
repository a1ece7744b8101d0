// The indexer's selections on the GPU (CudaBackend::topk, candidate_blocks, candidate_mask, paged_rows) against
// the CPU backend's, bit for bit, at V4.1-Flash sizes (top-512, candidate blocks of 8) and on rows
// full of equal scores, -inf, and -0 beside +0 (skipped without a GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device.h"
#include "core/float_formats.h"
#include "cuda/cuda_test_util.h"

namespace dsinfer {
namespace {

using testing::from_device;
using testing::to_device;

template <typename T>
TensorView host_view(std::vector<T>& v, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), t, shape);
}
template <typename T>
TensorView device_view(T* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, t, shape, Device::kCuda);
}

// Score rows as the indexer makes them: bf16 values (few distinct ones when `levels` is small, so
// ties abound), -0 and +0 both, -inf from column visible[i] on.
struct Scores {
  int64_t n, T;
  std::vector<float> v;
  std::vector<int32_t> visible;
  Scores(int64_t n_, int64_t T_, int levels, uint32_t seed) : n(n_), T(T_), v(n_ * T_), visible(n_) {
    std::mt19937 rng(seed);
    for (int64_t i = 0; i < n; ++i) {
      visible[i] = i == 0 ? static_cast<int32_t>(T) : static_cast<int32_t>(rng() % (T + 1));
      for (int64_t j = 0; j < T; ++j) {
        float s = levels ? static_cast<float>(static_cast<int>(rng() % levels) - levels / 2) * 0.25f
                         : round_to_bf16(std::normal_distribution<float>(0, 4)(rng));
        if (s == 0 && rng() % 2) s = -0.0f;
        v[i * T + j] = j >= visible[i] ? -std::numeric_limits<float>::infinity() : s;
      }
    }
  }
};

class SelectCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<CudaBackend>();
  }
  CpuBackend cpu_{0};
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(SelectCuda, TopkAsTheCpu) {
  struct Case {
    int64_t n, T, k;
    int levels;  // 0: bf16 normal values
    bool masked;
  };
  for (const Case c : {Case{4, 2048, 512, 0, false},
                       {3, 16384, 512, 0, false},
                       {5, 2048, 512, 3, false},
                       {4, 700, 512, 5, true},
                       {2, 512, 512, 0, false},
                       {37, 4096, 512, 0, true},
                       {3, 100, 1, 2, false}}) {
    Scores sc(c.n, c.T, c.levels, static_cast<uint32_t>(c.T + c.k + c.levels));
    std::vector<uint8_t> mask(c.masked ? c.n * c.T : 0);
    std::mt19937 rng(11);
    for (int64_t e = 0; e < static_cast<int64_t>(mask.size()); e += 8) std::fill_n(&mask[e], 8, rng() % 3 != 0);
    std::vector<int32_t> want(c.n * c.k);
    const TensorView no_mask{};
    cpu_.topk({host_view(sc.v, DType::kF32, {c.n, c.T}), c.masked ? host_view(mask, DType::kU8, {c.n, c.T}) : no_mask,
               host_view(sc.visible, DType::kI32, {c.n}), host_view(want, DType::kI32, {c.n, c.k})});
    float* ds = to_device(sc.v);
    int32_t *dvis = to_device(sc.visible), *dout = to_device(std::vector<int32_t>(c.n * c.k, 77));
    uint8_t* dmask = c.masked ? to_device(mask) : nullptr;
    gpu_->topk({device_view(ds, DType::kF32, {c.n, c.T}),
                c.masked ? device_view(dmask, DType::kU8, {c.n, c.T}) : no_mask, device_view(dvis, DType::kI32, {c.n}),
                device_view(dout, DType::kI32, {c.n, c.k})});
    EXPECT_EQ(from_device(dout, want.size()), want) << "T " << c.T << " k " << c.k << " levels " << c.levels;
    cudaFree(ds), cudaFree(dvis), cudaFree(dout), cudaFree(dmask);
  }
}

TEST_F(SelectCuda, CandidateBlocksAsTheCpu) {
  struct Case {
    int64_t n, T, blocks, block_size;
    int levels;
  };
  for (const Case c : {Case{4, 16384, 2048, 8, 0},
                       {5, 2048, 64, 8, 0},
                       {6, 2048, 64, 8, 3},
                       {3, 1000, 2048, 8, 0},
                       {4, 203, 5, 16, 2}}) {
    Scores sc(c.n, c.T, c.levels, static_cast<uint32_t>(c.T + c.blocks));
    sc.visible[1 % c.n] = 0;  // nothing visible (all -inf, as the indexer writes it): nothing kept
    std::fill_n(sc.v.begin() + (1 % c.n) * c.T, c.T, -std::numeric_limits<float>::infinity());
    const int64_t kb = std::min(c.blocks, (c.T + c.block_size - 1) / c.block_size);
    std::vector<int32_t> want(c.n * kb);
    cpu_.candidate_blocks({host_view(sc.v, DType::kF32, {c.n, c.T}), host_view(sc.visible, DType::kI32, {c.n}),
                           c.blocks, c.block_size, host_view(want, DType::kI32, {c.n, kb})});
    float* ds = to_device(sc.v);
    int32_t* dvis = to_device(sc.visible);
    int32_t* dids = to_device(std::vector<int32_t>(c.n * kb, 9));
    gpu_->candidate_blocks({device_view(ds, DType::kF32, {c.n, c.T}), device_view(dvis, DType::kI32, {c.n}), c.blocks,
                            c.block_size, device_view(dids, DType::kI32, {c.n, kb})});
    const std::vector<int32_t> got = from_device(dids, want.size());
    EXPECT_EQ(got, want) << "T " << c.T << " blocks " << c.blocks;
    // The mask of those blocks, as the layers after the candidate source expand it.
    std::vector<uint8_t> want_mask(c.n * c.T);
    cpu_.candidate_mask(
        {host_view(want, DType::kI32, {c.n, kb}), c.block_size, host_view(want_mask, DType::kU8, {c.n, c.T})});
    uint8_t* dmask = to_device(std::vector<uint8_t>(c.n * c.T, 9));
    gpu_->candidate_mask(
        {device_view(dids, DType::kI32, {c.n, kb}), c.block_size, device_view(dmask, DType::kU8, {c.n, c.T})});
    EXPECT_EQ(from_device(dmask, want_mask.size()), want_mask) << "T " << c.T << " blocks " << c.blocks;
    cudaFree(ds), cudaFree(dvis), cudaFree(dids), cudaFree(dmask);
  }
}

TEST_F(SelectCuda, PagedRowsAsTheCpu) {
  const int64_t n = 3, k = 512, width = 128, per = 64, blocks = 40;
  std::mt19937 rng(3);
  std::vector<int32_t> table(blocks), pos(n * k);
  for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(b);
  std::shuffle(table.begin(), table.end(), rng);
  for (auto& p : pos) p = rng() % 5 == 0 ? -1 : static_cast<int32_t>(rng() % (blocks * per));
  // Written into the columns after a window's, as the attention's row lists hold them.
  std::vector<int32_t> want(n * (width + k), 5);
  TensorView hout = host_view(want, DType::kI32, {n, k});
  hout.data = want.data() + width, hout.stride[0] = width + k;
  cpu_.paged_rows({host_view(pos, DType::kI32, {n, k}), {host_view(table, DType::kI32, {blocks}), per, width}, hout});
  int32_t *dpos = to_device(pos), *dtable = to_device(table), *dout = to_device(std::vector<int32_t>(want.size(), 5));
  TensorView dv = device_view(dout + width, DType::kI32, {n, k});
  dv.stride[0] = width + k;
  gpu_->paged_rows(
      {device_view(dpos, DType::kI32, {n, k}), {device_view(dtable, DType::kI32, {blocks}), per, width}, dv});
  EXPECT_EQ(from_device(dout, want.size()), want);

  // A table a row (a decode batch): each row's positions through its own shuffled table.
  std::vector<int32_t> tables(n * blocks);
  for (int64_t i = 0; i < n; ++i) {
    std::copy(table.begin(), table.end(), tables.begin() + i * blocks);
    std::shuffle(tables.begin() + i * blocks, tables.begin() + (i + 1) * blocks, rng);
  }
  std::vector<int32_t> want2(n * k, 5);
  cpu_.paged_rows({host_view(pos, DType::kI32, {n, k}),
                   {host_view(tables, DType::kI32, {n, blocks}), per, 0},
                   host_view(want2, DType::kI32, {n, k})});
  int32_t *dtables = to_device(tables), *dout2 = to_device(std::vector<int32_t>(want2.size(), 5));
  gpu_->paged_rows({device_view(dpos, DType::kI32, {n, k}),
                    {device_view(dtables, DType::kI32, {n, blocks}), per, 0},
                    device_view(dout2, DType::kI32, {n, k})});
  EXPECT_EQ(from_device(dout2, want2.size()), want2);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = pos[i * k + j];
      ASSERT_EQ(want2[i * k + j], p < 0 ? -1 : tables[i * blocks + p / per] * per + p % per);
    }
  cudaFree(dpos), cudaFree(dtable), cudaFree(dout), cudaFree(dtables), cudaFree(dout2);
}

}  // namespace
}  // namespace dsinfer
