// CUDA sparse attention and indexer scores against the CPU backend at V4.1-Flash shapes (skipped
// without a GPU): the indexer bit for bit, attention within 1 bf16 ulp and 98 % bit-equal (its
// fp32 sums and expf against the CPU's exact sums and std::exp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/attention/attention.h"
#include "core/float_formats.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

namespace dsinfer {
namespace {

using testing::from_device;
using testing::to_device;

// The CUDA sparse attention of n queries against the CPU's: 98 % bit-equal; each output within 2
// bf16 ulps or, where a probability rounded to bf16 the other way (its fp32 score a rounding off
// the exact one) moves an output near zero by many ulps, within 2^-12 of the largest |value|.
// And batch-invariant: a token alone gives the same bits.
void check_sparse_attn(int n, int heads, int d, int n_win, int n_cmp, int k) {
  CpuBackend cpu(0);
  const std::vector<uint16_t> q = testing::random_bf16(static_cast<size_t>(n) * heads * d, 1, 0.5f),
                              win = testing::random_bf16(static_cast<size_t>(n_win) * d, 2),
                              cmp = testing::random_bf16(static_cast<size_t>(n_cmp) * d, 3);
  std::mt19937 rng(4);
  std::vector<int32_t> idx(static_cast<size_t>(n) * k);
  for (auto& v : idx) v = rng() % 9 == 0 ? -1 : static_cast<int32_t>(rng() % (n_win + n_cmp));  // empty slots too
  std::vector<float> sink(heads);
  for (auto& v : sink) v = std::uniform_real_distribution<float>(-2, 2)(rng);
  std::vector<uint16_t> want(q.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  cpu.sparse_attn({TensorView::contiguous(const_cast<uint16_t*>(q.data()), DType::kBF16, {n, heads, d}),
                   TensorView::contiguous(const_cast<uint16_t*>(win.data()), DType::kBF16, {n_win, d}),
                   TensorView::contiguous(const_cast<uint16_t*>(cmp.data()), DType::kBF16, {n_cmp, d}),
                   TensorView::contiguous(idx.data(), DType::kI32, {n, k}),
                   TensorView::contiguous(sink.data(), DType::kF32, {heads}), scale,
                   TensorView::contiguous(want.data(), DType::kBF16, {n, heads, d})});
  uint16_t *dq = to_device(q), *dwin = to_device(win), *dcmp = to_device(cmp),
           *dout = to_device(std::vector<uint16_t>(q.size(), 0xFFFF));
  int32_t* didx = to_device(idx);
  float* dsink = to_device(sink);
  cuda::SparseAttnParams p;
  p.q = dq, p.q_stride = static_cast<int64_t>(heads) * d, p.window = dwin, p.compressed = dcmp, p.n_win = n_win;
  p.n_cmp = n_cmp, p.idx = didx, p.idx_stride = k, p.sink = dsink, p.scale = scale, p.out = dout;
  p.out_stride = static_cast<int64_t>(heads) * d, p.n = n, p.heads = heads, p.d = d, p.k = k;
  float* scores = nullptr;
  ASSERT_EQ(cudaMalloc(&scores, cuda::sparse_attn_workspace_bytes(p)), cudaSuccess);
  p.scores = scores;
  ASSERT_EQ(cuda::launch_sparse_attn(p), cudaSuccess);
  const std::vector<uint16_t> got = from_device(dout, q.size());
  float vmax = 0;
  for (const auto* rows : {&win, &cmp})
    for (uint16_t v : *rows) vmax = std::max(vmax, std::fabs(bf16_to_f32(v)));
  int equal = 0, ulps_max = 0;
  double err_max = 0;
  for (size_t j = 0; j < got.size(); ++j) {
    equal += got[j] == want[j];
    const int ulps = std::abs(static_cast<int>(got[j]) - static_cast<int>(want[j]));
    const double err = std::fabs(bf16_to_f32(got[j]) - bf16_to_f32(want[j]));
    ulps_max = std::max(ulps_max, ulps), err_max = std::max(err_max, err);
    ASSERT_TRUE(ulps <= 2 || err <= std::ldexp(vmax, -12)) << j << ": " << ulps << " ulps, |d| " << err;
  }
  std::printf(
      "sparse attention (n %d, heads %d, d %d, k %d): %.2f %% of outputs bit-equal, max %d ulps, max |d| %.3g\n", n,
      heads, d, k, 100.0 * equal / got.size(), ulps_max, err_max);
  EXPECT_GE(equal, static_cast<int>(got.size() * 0.98));
  // A token alone gives the bits it gave among the n (a lone token's blocks are tiled for few
  // tokens: the sums must not depend on it).
  for (const int t : {0, n - 1}) {
    cuda::SparseAttnParams one = p;
    one.q += static_cast<int64_t>(t) * p.q_stride, one.idx += static_cast<int64_t>(t) * k, one.n = 1;
    uint16_t* dout1 = to_device(std::vector<uint16_t>(static_cast<size_t>(heads) * d, 0xFFFF));
    one.out = dout1;
    ASSERT_EQ(cuda::launch_sparse_attn(one), cudaSuccess);
    const std::vector<uint16_t> alone = from_device(dout1, static_cast<size_t>(heads) * d);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + static_cast<int64_t>(t) * heads * d))
        << "token " << t << " alone differs from itself among " << n;
    cudaFree(dout1);
  }
  for (void* v : {static_cast<void*>(dq), static_cast<void*>(dwin), static_cast<void*>(dcmp), static_cast<void*>(dout),
                  static_cast<void*>(didx), static_cast<void*>(dsink), static_cast<void*>(scores)})
    cudaFree(v);
}

TEST(CudaAttention, SparseAttnWithSinkOverWindowAndCompressedRows) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_sparse_attn(3, 64, 512, 128, 600, 640);  // V4.1-Flash decode
}

TEST(CudaAttention, SparseAttnOverSeveralTokenPassesAndPartialBlocks) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_sparse_attn(300, 2, 64, 40, 90, 70);      // more tokens than one pass; a 64-row block cut short
  check_sparse_attn(40, 64, 512, 128, 600, 640);  // a decode batch's full head groups
}

TEST(CudaAttention, IndexerScoresAreBitEqual) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  const int n = 3, heads = 32, d = 128, T = 1000;
  const std::vector<uint16_t> q = testing::random_bf16(static_cast<size_t>(n) * heads * d, 5),
                              keys = testing::random_bf16(static_cast<size_t>(T) * d, 6),
                              wt = testing::random_bf16(static_cast<size_t>(n) * heads, 7);
  const std::vector<int32_t> visible = {T, 517, 1};
  std::vector<float> want(static_cast<size_t>(n) * T);
  cpu.indexer_scores({TensorView::contiguous(const_cast<uint16_t*>(q.data()), DType::kBF16, {n, heads, d}),
                      TensorView::contiguous(const_cast<uint16_t*>(keys.data()), DType::kBF16, {T, d}),
                      TensorView::contiguous(const_cast<uint16_t*>(wt.data()), DType::kBF16, {n, heads}),
                      TensorView::contiguous(const_cast<int32_t*>(visible.data()), DType::kI32, {n}),
                      TensorView::contiguous(want.data(), DType::kF32, {n, T}), PagedTable{}, 0.0883883f});
  uint16_t *dq = to_device(q), *dkeys = to_device(keys), *dwt = to_device(wt);
  int32_t* dvis = to_device(visible);
  float* dout = to_device(std::vector<float>(want.size(), 12345.0f));
  cuda::IndexerScoresParams p;
  p.q = dq, p.q_stride = static_cast<int64_t>(heads) * d, p.keys = dkeys, p.weights = dwt, p.visible = dvis;
  p.out = dout, p.out_stride = T, p.n = n, p.heads = heads, p.d = d, p.T = T, p.weight_scale = 0.0883883f;
  ASSERT_EQ(cuda::launch_indexer_scores(p), cudaSuccess);
  EXPECT_EQ(from_device(dout, want.size()), want);
  for (void* v : {static_cast<void*>(dq), static_cast<void*>(dkeys), static_cast<void*>(dwt), static_cast<void*>(dvis),
                  static_cast<void*>(dout)})
    cudaFree(v);
}

}  // namespace
}  // namespace dsinfer
