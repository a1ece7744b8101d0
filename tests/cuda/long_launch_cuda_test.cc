// The launches whose grids grow with a prefill's tokens or positions, at one-shot prefill sizes of
// 131K+ queries (skipped without a GPU): the indexer scores of 131,072 queries x 65,600 keys
// (past grid.y's 65,535 tokens a launch), the router of 140,000 tokens (past grid.y's 65,535), the sparse
// attention of 131,072 queries, the top-k and candidate blocks over 600,000 compressed positions
// and of 140,000 rows. Each against the CPU backend on sampled rows: bit for bit, the attention
// within 1 bf16 ulp (expf).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
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
TensorView host_view(T* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, t, shape);
}
template <typename T>
TensorView device_view(T* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, t, shape, Device::kCuda);
}

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

// Rows spread over the whole range, the first and the last included.
std::vector<int64_t> sampled_rows(int64_t n) {
  return {0, 1, n / 3, n / 2 + 7, n - 65537 > 0 ? n - 65537 : 2, n - 2, n - 1};
}

class LongLaunchCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<CudaBackend>();
  }
  CpuBackend cpu_{2};
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(LongLaunchCuda, IndexerScoresOfMoreTokensThanGridY) {
  const int64_t n = 131072, T = 65600, heads = 2, d = 32;
  // fp4 values, as the model's q and keys are (the kernel gives the CPU's bits for them).
  std::vector<uint16_t> q = random_bf16(n * heads * d, 1), keys = random_bf16(T * d, 2);
  const std::vector<uint16_t> w = random_bf16(n * heads, 3);
  cpu_.fake_quant({host_view(q.data(), DType::kBF16, {n * heads, d}), FakeQuant::kFp4E8M0Group32});
  cpu_.fake_quant({host_view(keys.data(), DType::kBF16, {T, d}), FakeQuant::kFp4E8M0Group32});
  std::vector<int32_t> visible(n);
  for (int64_t t = 0; t < n; ++t) visible[t] = static_cast<int32_t>(std::min<int64_t>(T, (t + 1) / 2 + 3));
  uint16_t *dq = to_device(q), *dk = to_device(keys), *dw = to_device(w);
  int32_t* dvis = to_device(visible);
  float* dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dout, n * T * sizeof(float)), cudaSuccess);
  gpu_->indexer_scores({device_view(dq, DType::kBF16, {n, heads, d}), device_view(dk, DType::kBF16, {T, d}),
                        device_view(dw, DType::kBF16, {n, heads}), device_view(dvis, DType::kI32, {n}),
                        device_view(dout, DType::kF32, {n, T}), PagedTable{}, 0.125f});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int64_t t : sampled_rows(n)) {
    std::vector<float> want(T), got(T);
    cpu_.indexer_scores({host_view(const_cast<uint16_t*>(&q[t * heads * d]), DType::kBF16, {1, heads, d}),
                         host_view(const_cast<uint16_t*>(keys.data()), DType::kBF16, {T, d}),
                         host_view(const_cast<uint16_t*>(&w[t * heads]), DType::kBF16, {1, heads}),
                         host_view(&visible[t], DType::kI32, {1}), host_view(want.data(), DType::kF32, {1, T}),
                         PagedTable{}, 0.125f});
    ASSERT_EQ(cudaMemcpy(got.data(), dout + t * T, T * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, want) << "query " << t;
  }
  cudaFree(dq), cudaFree(dk), cudaFree(dw), cudaFree(dvis), cudaFree(dout);
}

TEST_F(LongLaunchCuda, RouterOfMoreTokensThanGridY) {
  const int64_t n = 140000, dim = 64, experts = 16, k = 4;
  const std::vector<uint16_t> x = random_bf16(n * dim, 4), w = random_bf16(experts * dim, 5, 0.2f);
  std::vector<float> bias(experts);
  for (int64_t e = 0; e < experts; ++e) bias[e] = 0.01f * static_cast<float>(e % 5);
  uint16_t *dx = to_device(x), *dw = to_device(w);
  float* dbias = to_device(bias);
  int32_t* didx = to_device(std::vector<int32_t>(n * k, -7));
  float* dwt = to_device(std::vector<float>(n * k, 0.0f));
  gpu_->router({device_view(dx, DType::kBF16, {n, dim}), device_view(dw, DType::kBF16, {experts, dim}),
                device_view(dbias, DType::kF32, {experts}), TensorView{}, TensorView{}, RouterScore::kSqrtSoftplus, 1.0,
                1.5, true, false, device_view(didx, DType::kI32, {n, k}), device_view(dwt, DType::kF32, {n, k})});
  const std::vector<int32_t> idx = from_device(didx, n * k);
  const std::vector<float> wt = from_device(dwt, n * k);
  for (int64_t t : sampled_rows(n)) {
    std::vector<int32_t> want_idx(k);
    std::vector<float> want_wt(k);
    cpu_.router({host_view(const_cast<uint16_t*>(&x[t * dim]), DType::kBF16, {1, dim}),
                 host_view(const_cast<uint16_t*>(w.data()), DType::kBF16, {experts, dim}),
                 host_view(bias.data(), DType::kF32, {experts}), TensorView{}, TensorView{}, RouterScore::kSqrtSoftplus,
                 1.0, 1.5, true, false, host_view(want_idx.data(), DType::kI32, {1, k}),
                 host_view(want_wt.data(), DType::kF32, {1, k})});
    EXPECT_EQ(std::vector<int32_t>(&idx[t * k], &idx[t * k] + k), want_idx) << "token " << t;
    for (int64_t j = 0; j < k; ++j)  // the weights within the router test's bound (router_cuda_test.cc)
      EXPECT_NEAR(wt[t * k + j], want_wt[j], 1e-5f * std::fabs(want_wt[j])) << "token " << t << ", choice " << j;
  }
  cudaFree(dx), cudaFree(dw), cudaFree(dbias), cudaFree(didx), cudaFree(dwt);
}

TEST_F(LongLaunchCuda, SparseAttentionOfAOneShotPrefill) {
  const int64_t n = 131072, heads = 16, d = 64, n_win = 4096, n_cmp = 65536, width = 8, k = 24;
  const std::vector<uint16_t> q = random_bf16(n * heads * d, 6), win = random_bf16(n_win * d, 7),
                              cmp = random_bf16(n_cmp * d, 8);
  std::vector<float> sink(heads);
  for (int64_t h = 0; h < heads; ++h) sink[h] = 0.1f * static_cast<float>(h);
  std::vector<int32_t> idx(n * (width + k));
  std::mt19937 rng(9);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < width + k; ++j)
      idx[t * (width + k) + j] = j < width        ? static_cast<int32_t>((t + j) % n_win)
                                 : rng() % 7 == 0 ? -1
                                                  : static_cast<int32_t>(n_win + rng() % n_cmp);
  uint16_t *dq = to_device(q), *dwin = to_device(win), *dcmp = to_device(cmp);
  uint16_t* dout = to_device(std::vector<uint16_t>(n * heads * d, 0));
  int32_t* didx = to_device(idx);
  float* dsink = to_device(sink);
  const float scale = 0.125f;
  gpu_->sparse_attn({device_view(dq, DType::kBF16, {n, heads, d}), device_view(dwin, DType::kBF16, {n_win, d}),
                     device_view(dcmp, DType::kBF16, {n_cmp, d}), device_view(didx, DType::kI32, {n, width + k}),
                     device_view(dsink, DType::kF32, {heads}), scale, device_view(dout, DType::kBF16, {n, heads, d})});
  const std::vector<uint16_t> out = from_device(dout, n * heads * d);
  int64_t equal = 0, compared = 0;
  for (int64_t t : sampled_rows(n)) {
    std::vector<uint16_t> want(heads * d);
    cpu_.sparse_attn({host_view(const_cast<uint16_t*>(&q[t * heads * d]), DType::kBF16, {1, heads, d}),
                      host_view(const_cast<uint16_t*>(win.data()), DType::kBF16, {n_win, d}),
                      host_view(const_cast<uint16_t*>(cmp.data()), DType::kBF16, {n_cmp, d}),
                      host_view(&idx[t * (width + k)], DType::kI32, {1, width + k}),
                      host_view(sink.data(), DType::kF32, {heads}), scale,
                      host_view(want.data(), DType::kBF16, {1, heads, d})});
    for (int64_t j = 0; j < heads * d; ++j) {  // within 1 bf16 ulp (expf), as attention_cuda_test
      const int got = out[t * heads * d + j];
      equal += got == want[j], compared += 1;
      ASSERT_LE(std::abs(got - static_cast<int>(want[j])), 1) << "query " << t << " element " << j;
    }
  }
  EXPECT_GE(equal, compared * 98 / 100);
  cudaFree(dq), cudaFree(dwin), cudaFree(dcmp), cudaFree(dout), cudaFree(didx), cudaFree(dsink);
}

// Score rows of a long context: bf16 values with ties, -inf from visible on.
std::vector<float> score_rows(int64_t n, int64_t T, const std::vector<int32_t>& visible, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n * T);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < T; ++j)
      v[i * T + j] = j >= visible[i] ? -std::numeric_limits<float>::infinity()
                                     : round_to_bf16(static_cast<float>(static_cast<int>(rng() % 4001) - 2000) / 64);
  return v;
}

TEST_F(LongLaunchCuda, SelectionsOverHundredsOfThousandsOfPositions) {
  struct Case {
    int64_t n, T, k, topk_blocks, block_size;
  };
  for (const Case c : {Case{6, 600000, 512, 2048, 8}, {140000, 96, 8, 5, 2}}) {
    std::vector<int32_t> visible(c.n);
    for (int64_t i = 0; i < c.n; ++i)
      visible[i] = static_cast<int32_t>(c.T - (i % 3 == 1 ? static_cast<int64_t>(i * 7919 % c.T) : 0));
    std::vector<float> scores = score_rows(c.n, c.T, visible, static_cast<uint32_t>(c.T));
    const int64_t kb = std::min(c.topk_blocks, (c.T + c.block_size - 1) / c.block_size);
    float* ds = to_device(scores);
    int32_t *dvis = to_device(visible), *dids = to_device(std::vector<int32_t>(c.n * kb, 9));
    int32_t* dtop = to_device(std::vector<int32_t>(c.n * c.k, 9));
    uint8_t* dmask = to_device(std::vector<uint8_t>(c.n * c.T, 9));
    const TensorView sv = device_view(ds, DType::kF32, {c.n, c.T}), vv = device_view(dvis, DType::kI32, {c.n});
    gpu_->candidate_blocks({sv, vv, c.topk_blocks, c.block_size, device_view(dids, DType::kI32, {c.n, kb})});
    gpu_->candidate_mask(
        {device_view(dids, DType::kI32, {c.n, kb}), c.block_size, device_view(dmask, DType::kU8, {c.n, c.T})});
    gpu_->topk({sv, device_view(dmask, DType::kU8, {c.n, c.T}), vv, device_view(dtop, DType::kI32, {c.n, c.k})});
    const std::vector<int32_t> ids = from_device(dids, c.n * kb), top = from_device(dtop, c.n * c.k);
    for (int64_t i : sampled_rows(c.n)) {
      if (i >= c.n) continue;
      std::vector<int32_t> want_ids(kb), want_top(c.k);
      std::vector<uint8_t> mask(c.T);
      const TensorView row = host_view(&scores[i * c.T], DType::kF32, {1, c.T}),
                       vis = host_view(&visible[i], DType::kI32, {1});
      cpu_.candidate_blocks({row, vis, c.topk_blocks, c.block_size, host_view(want_ids.data(), DType::kI32, {1, kb})});
      cpu_.candidate_mask({host_view(want_ids.data(), DType::kI32, {1, kb}), c.block_size,
                           host_view(mask.data(), DType::kU8, {1, c.T})});
      cpu_.topk(
          {row, host_view(mask.data(), DType::kU8, {1, c.T}), vis, host_view(want_top.data(), DType::kI32, {1, c.k})});
      EXPECT_EQ(std::vector<int32_t>(&ids[i * kb], &ids[i * kb] + kb), want_ids) << "T " << c.T << " row " << i;
      EXPECT_EQ(std::vector<int32_t>(&top[i * c.k], &top[i * c.k] + c.k), want_top) << "T " << c.T << " row " << i;
    }
    cudaFree(ds), cudaFree(dvis), cudaFree(dids), cudaFree(dtop), cudaFree(dmask);
  }
}

}  // namespace
}  // namespace dsinfer
