// CUDA MoE router against the CPU backend at V4.1-Flash shapes (skipped without a GPU): the same
// experts, weights within expf / log1pf's last bits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/moe/router.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

namespace dsinfer {
namespace {

using testing::from_device;
using testing::to_device;

// 5 tokens (a block a token and expert for the logits) and 130 (tiles of 64 tokens and 32 experts
// on the fp64 tensor cores, the last partial).
class CudaRouterTokens : public ::testing::TestWithParam<int> {};

TEST_P(CudaRouterTokens, SameExpertsAndWeightsAsTheCpu) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  const int n = GetParam(), dim = 5120, experts = 384, k = 6;
  const std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(n) * dim, 1),
                              w = testing::random_bf16(static_cast<size_t>(experts) * dim, 2, 0.05f);
  std::mt19937 rng(3);
  std::vector<float> bias(experts), bias_vl(experts);
  for (auto& b : bias) b = std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
  for (auto& b : bias_vl) b = std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
  std::vector<uint8_t> image(n);
  for (int t = 0; t < n; ++t) image[t] = t % 3 == 1;
  uint16_t *dx = to_device(x), *dw = to_device(w);
  float *dbias = to_device(bias), *dbias_vl = to_device(bias_vl);
  uint8_t* dimage = to_device(image);
  float* logits = nullptr;
  ASSERT_EQ(cudaMalloc(&logits, static_cast<size_t>(n) * experts * sizeof(float)), cudaSuccess);
  for (const bool given : {false, true}) {
    std::vector<int32_t> idx(n * k);
    std::vector<float> wt(n * k);
    if (given)
      for (int i = 0; i < n * k; ++i) idx[i] = (i * 37) % experts;
    const std::vector<int32_t> idx_in = idx;
    cpu.router({TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBF16, {n, dim}),
                TensorView::contiguous(const_cast<uint16_t*>(w.data()), DType::kBF16, {experts, dim}),
                TensorView::contiguous(bias.data(), DType::kF32, {experts}),
                TensorView::contiguous(bias_vl.data(), DType::kF32, {experts}),
                TensorView::contiguous(const_cast<uint8_t*>(image.data()), DType::kU8, {n}), RouterScore::kSqrtSoftplus,
                1.0, 1.5, true, given, TensorView::contiguous(idx.data(), DType::kI32, {n, k}),
                TensorView::contiguous(wt.data(), DType::kF32, {n, k})});
    int32_t* didx = to_device(idx_in);
    float* dwt = to_device(std::vector<float>(n * k, -1.0f));
    cuda::RouterParams p;
    p.x = dx, p.x_stride = dim, p.weight = dw, p.w_stride = dim, p.bias = dbias, p.bias_vl = dbias_vl;
    p.is_image = dimage, p.score = cuda::RouterScoreKind::kSqrtSoftplus, p.gate_temp = 1.0f, p.route_scale = 1.5f;
    p.norm_topk_prob = true, p.given_indices = given, p.indices = didx, p.weights = dwt;
    p.n = n, p.dim = dim, p.experts = experts, p.k = k, p.logits = logits;
    ASSERT_EQ(cuda::launch_router(p), cudaSuccess);
    EXPECT_EQ(from_device(didx, idx.size()), idx) << "given " << given;
    const std::vector<float> got = from_device(dwt, wt.size());
    for (size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], wt[j], 1e-5f * std::fabs(wt[j])) << j;
    cudaFree(didx);
    cudaFree(dwt);
  }
  for (void* v : {static_cast<void*>(dx), static_cast<void*>(dw), static_cast<void*>(dbias),
                  static_cast<void*>(dbias_vl), static_cast<void*>(dimage), static_cast<void*>(logits)})
    cudaFree(v);
}

INSTANTIATE_TEST_SUITE_P(Steps, CudaRouterTokens, ::testing::Values(5, 130));

// Equal keys (every gate row the same, no bias) go to the lower experts, as on the CPU.
TEST(CudaRouter, TiesGoToTheLowerExpert) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int n = 2, dim = 64, experts = 300, k = 6;
  const std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(n) * dim, 4),
                              row = testing::random_bf16(dim, 5, 0.05f);
  std::vector<uint16_t> w;
  for (int e = 0; e < experts; ++e) w.insert(w.end(), row.begin(), row.end());
  uint16_t *dx = to_device(x), *dw = to_device(w);
  int32_t* didx = to_device(std::vector<int32_t>(n * k, -1));
  float* dwt = to_device(std::vector<float>(n * k, -1.0f));
  float* logits = to_device(std::vector<float>(n * experts));
  cuda::RouterParams p;
  p.x = dx, p.x_stride = dim, p.weight = dw, p.w_stride = dim, p.indices = didx, p.weights = dwt, p.logits = logits;
  p.n = n, p.dim = dim, p.experts = experts, p.k = k;
  ASSERT_EQ(cuda::launch_router(p), cudaSuccess);
  EXPECT_EQ(from_device(didx, n * k), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  for (void* v : {static_cast<void*>(dx), static_cast<void*>(dw), static_cast<void*>(didx), static_cast<void*>(dwt),
                  static_cast<void*>(logits)})
    cudaFree(v);
}

}  // namespace
}  // namespace dsinfer
