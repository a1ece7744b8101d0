// CUDA sparse attention and indexer scores against the CPU backend at V4.1-Flash shapes (skipped
// without a GPU): the indexer bit for bit on the model's fp4 values, attention within 1 bf16 ulp and
// 98 % bit-equal (its fp32 sums and expf against the CPU's exact sums and std::exp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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
// And batch-invariant: a token alone gives the same bits (from 128 tokens a call takes the fused
// kernel, a token alone the three passes: the same bits either way).
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
    float* scores1 = nullptr;  // its own workspace: a call of many tokens takes the fused kernel, which needs none
    ASSERT_EQ(cudaMalloc(&scores1, cuda::sparse_attn_workspace_bytes(one)), cudaSuccess);
    one.out = dout1, one.scores = scores1;
    ASSERT_EQ(cuda::launch_sparse_attn(one), cudaSuccess);
    const std::vector<uint16_t> alone = from_device(dout1, static_cast<size_t>(heads) * d);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + static_cast<int64_t>(t) * heads * d))
        << "token " << t << " alone differs from itself among " << n;
    cudaFree(dout1);
    cudaFree(scores1);
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
  check_sparse_attn(300, 2, 64, 40, 90, 70);       // more tokens than one pass; a 64-row block cut short
  check_sparse_attn(40, 64, 512, 128, 600, 640);   // a decode batch's full head groups
  check_sparse_attn(130, 64, 512, 128, 600, 640);  // a prefill chunk's (the fused kernel)
  check_sparse_attn(129, 20, 128, 64, 300, 200);   // the fused kernel's other head sizes, a part head group
  check_sparse_attn(128, 64, 256, 64, 300, 190);
}

// The CUDA indexer scores of n queries against T keys (some queries see fewer), each query reading
// its keys through its own block table of a shuffled pool, against the CPU's. fp4-valued q and
// keys (the model's: spec §7.1-7.2) give the CPU's bits; any other bf16 values (a 32-dim part of a
// dot product may then round on the tensor cores) 99 % of them, the rest within 2^-6 of the row's
// largest |score| (a head term one bf16 ulp off).
void check_indexer_scores(int n, int heads, int d, int T, bool fp4) {
  CpuBackend cpu(0);
  constexpr int kRowsPerBlock = 16;
  const int blocks = (T + kRowsPerBlock - 1) / kRowsPerBlock, pool_rows = blocks * kRowsPerBlock;
  std::vector<uint16_t> q = testing::random_bf16(static_cast<size_t>(n) * heads * d, 5),
                        keys = testing::random_bf16(static_cast<size_t>(pool_rows) * d, 6),
                        wt = testing::random_bf16(static_cast<size_t>(n) * heads, 7);
  if (fp4) {
    cpu.fake_quant({TensorView::contiguous(q.data(), DType::kBF16, {n * heads, d}), FakeQuant::kFp4E8M0Group32});
    cpu.fake_quant({TensorView::contiguous(keys.data(), DType::kBF16, {pool_rows, d}), FakeQuant::kFp4E8M0Group32});
  }
  std::vector<int32_t> visible(n), table(static_cast<size_t>(n) * blocks);
  for (int t = 0; t < n; ++t) {
    visible[t] = t % 3 == 0 ? T : t % 3 == 1 ? std::max(1, T / 2 + t) : 1 + t % 7;
    for (int b = 0; b < blocks; ++b)
      table[t * blocks + b] = (b * 11 + t) % blocks;  // 11: prime to the block counts used
  }
  const float scale = 0.0883883f;
  std::vector<float> want(static_cast<size_t>(n) * T);
  cpu.indexer_scores({TensorView::contiguous(q.data(), DType::kBF16, {n, heads, d}),
                      TensorView::contiguous(keys.data(), DType::kBF16, {pool_rows, d}),
                      TensorView::contiguous(wt.data(), DType::kBF16, {n, heads}),
                      TensorView::contiguous(visible.data(), DType::kI32, {n}),
                      TensorView::contiguous(want.data(), DType::kF32, {n, T}),
                      {TensorView::contiguous(table.data(), DType::kI32, {n, blocks}), kRowsPerBlock, 0},
                      scale});
  uint16_t *dq = to_device(q), *dkeys = to_device(keys), *dwt = to_device(wt);
  int32_t *dvis = to_device(visible), *dtable = to_device(table);
  float* dout = to_device(std::vector<float>(want.size(), 12345.0f));
  cuda::IndexerScoresParams p;
  p.q = dq, p.q_stride = static_cast<int64_t>(heads) * d, p.keys = dkeys, p.weights = dwt, p.visible = dvis;
  p.key_table = {.blocks = dtable, .blocks_stride = blocks, .rows_per_block = kRowsPerBlock, .base = 0};
  p.out = dout, p.out_stride = T, p.n = n, p.heads = heads, p.d = d, p.T = T, p.weight_scale = scale;
  ASSERT_EQ(cuda::launch_indexer_scores(p), cudaSuccess);
  const std::vector<float> got = from_device(dout, want.size());
  if (fp4) {
    EXPECT_EQ(got, want);
  } else {
    size_t equal = 0;
    for (int t = 0; t < n; ++t) {
      float row_max = 0;
      for (int j = 0; j < T; ++j)
        if (std::isfinite(want[t * T + j])) row_max = std::max(row_max, std::fabs(want[t * T + j]));
      for (int j = 0; j < T; ++j) {
        const float w = want[t * T + j], g = got[t * T + j];
        equal += std::memcmp(&w, &g, sizeof w) == 0;
        if (!std::isfinite(w))
          EXPECT_EQ(g, w) << "query " << t << " key " << j;
        else
          EXPECT_LE(std::fabs(g - w), 0x1p-6f * row_max) << "query " << t << " key " << j;
      }
    }
    EXPECT_GE(equal, want.size() * 99 / 100);
  }
  for (void* v : {static_cast<void*>(dq), static_cast<void*>(dkeys), static_cast<void*>(dwt), static_cast<void*>(dvis),
                  static_cast<void*>(dtable), static_cast<void*>(dout)})
    cudaFree(v);
}

TEST(CudaAttention, IndexerScoresOfFp4ValuesAreBitEqual) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_indexer_scores(3, 32, 128, 1000, true);   // V4.1-Flash, a few tokens' smaller tiles
  check_indexer_scores(40, 32, 128, 1000, true);  // a decode batch
  check_indexer_scores(33, 4, 64, 300, true);     // the tiny models' one head tile
}

TEST(CudaAttention, IndexerScoresOfOtherValuesAreWithinTheBound) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_indexer_scores(40, 32, 128, 1000, false);
}

}  // namespace
}  // namespace dsinfer
