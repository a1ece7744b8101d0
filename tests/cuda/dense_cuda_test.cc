// CUDA dense linear (bf16 weights, bf16 or f32 output, fp8 weights dequantised) against the CPU
// backend: both sum exact products in double, so outputs agree bit for bit but for the rare
// double-rounding difference of the summation order.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/linear/dense.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

namespace dsinfer {
namespace {

using testing::from_device;
using testing::to_device;

TEST(CudaDenseLinear, MatchesTheCpuBackend) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  std::mt19937 rng(3);
  for (const LinearFormat format : {LinearFormat::kBf16, LinearFormat::kBf16AsF32, LinearFormat::kFp8AsBf16}) {
    const bool fp8 = format == LinearFormat::kFp8AsBf16, f32 = format == LinearFormat::kBf16AsF32;
    const int64_t o = fp8 ? 1000 : 4096, k = fp8 ? 1024 : 5120;
    std::vector<uint16_t> wb;
    std::vector<uint8_t> w8, ws;
    if (fp8) {
      w8.resize(o * k), ws.resize(((o + 31) / 32) * (k / 32));
      for (auto& b : w8) b = static_cast<uint8_t>((rng() & 0x80) | (rng() % 0x7F));
      for (auto& b : ws) b = static_cast<uint8_t>(120 + rng() % 10);
    } else {
      wb = testing::random_bf16(o * k, 4);
    }
    LinearWeight lw{format, o, k,
                    fp8 ? TensorView::contiguous(w8.data(), DType::kU8, {o, k})
                        : TensorView::contiguous(wb.data(), DType::kBF16, {o, k}),
                    fp8 ? TensorView::contiguous(ws.data(), DType::kU8, {(o + 31) / 32, k / 32}) : TensorView{}};
    void* dw = fp8 ? static_cast<void*>(to_device(w8)) : static_cast<void*>(to_device(wb));
    uint8_t* dws = fp8 ? to_device(ws) : nullptr;
    for (const int n : {1, 3, 5}) {
      const std::vector<uint16_t> xb = testing::random_bf16(n * k, 10 + n, 2.0f);
      std::vector<float> xf(n * k);
      for (size_t i = 0; i < xf.size(); ++i) xf[i] = std::uniform_real_distribution<float>(-2, 2)(rng);
      std::vector<uint16_t> want16(n * o);
      std::vector<float> want32(n * o);
      const TensorView x = f32 ? TensorView::contiguous(xf.data(), DType::kF32, {n, k})
                               : TensorView::contiguous(const_cast<uint16_t*>(xb.data()), DType::kBF16, {n, k});
      cpu.linear({x, &lw,
                  f32 ? TensorView::contiguous(want32.data(), DType::kF32, {n, o})
                      : TensorView::contiguous(want16.data(), DType::kBF16, {n, o})});
      void* dx = f32 ? static_cast<void*>(to_device(xf)) : static_cast<void*>(to_device(xb));
      double* scratch = nullptr;
      ASSERT_EQ(cudaMalloc(&scratch, cuda::dense_linear_scratch_bytes(n, static_cast<int>(k), 1)), cudaSuccess);
      void* dy = nullptr;
      ASSERT_EQ(cudaMalloc(&dy, n * o * 4), cudaSuccess);
      cuda::DenseLinearParams p;
      p.x = dx, p.x_f32 = f32, p.x_stride = k, p.x_f64 = scratch, p.fp8_weights = fp8, p.w = dw, p.w_stride = k;
      p.w_scales = dws, p.s_stride = k / 32, p.y = dy, p.y_f32 = f32, p.y_stride = o, p.n = n,
      p.k = static_cast<int>(k);
      p.out = static_cast<int>(o);
      ASSERT_EQ(cuda::launch_dense_linear(p), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      int differ = 0;
      if (f32) {
        std::vector<float> got(n * o);
        ASSERT_EQ(cudaMemcpy(got.data(), dy, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t j = 0; j < got.size(); ++j) {
          differ += got[j] != want32[j];
          ASSERT_NEAR(got[j], want32[j], 1e-6 * std::fabs(want32[j]) + 1e-30) << j;
        }
      } else {
        std::vector<uint16_t> got(n * o);
        ASSERT_EQ(cudaMemcpy(got.data(), dy, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t j = 0; j < got.size(); ++j) {
          differ += got[j] != want16[j];
          ASSERT_LE(std::abs(static_cast<int>(got[j]) - static_cast<int>(want16[j])), 1) << j;
        }
      }
      EXPECT_LE(differ, static_cast<int>(n * o / 1000) + 1) << static_cast<int>(format) << " n=" << n;
      std::printf("dense format %d n=%d: %d of %ld outputs differ from the CPU\n", static_cast<int>(format), n, differ,
                  static_cast<long>(n * o));
      cudaFree(dx);
      cudaFree(scratch);
      cudaFree(dy);
    }
    cudaFree(dw);
    cudaFree(dws);
  }
}

// A block-diagonal call (wo_a's groups in one launch, each group's matrix its own allocation)
// against the CPU's per-group linears, with fp8 weights and with bf16 weights of a width that is
// no multiple of 16 (the kernel's one-weight-at-a-time path).
TEST(CudaDenseLinear, GroupedCallIsBlockDiagonal) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  std::mt19937 rng(5);
  const int64_t n = 3, groups = 3, o = 64;
  for (const bool fp8 : {true, false}) {
    const int64_t k = fp8 ? 256 : 1000;
    const std::vector<uint16_t> x = testing::random_bf16(n * groups * k, 20, 2.0f);
    std::vector<uint16_t> want(n * groups * o), wb[groups];
    std::vector<uint8_t> w8[groups], ws[groups];
    cuda::DenseLinearParams p;
    for (int64_t g = 0; g < groups; ++g) {
      LinearWeight lw{fp8 ? LinearFormat::kFp8AsBf16 : LinearFormat::kBf16, o, k, {}, {}};
      if (fp8) {
        w8[g].resize(o * k), ws[g].resize((o / 32) * (k / 32));
        for (auto& b : w8[g]) b = static_cast<uint8_t>((rng() & 0x80) | (rng() % 0x7F));
        for (auto& b : ws[g]) b = static_cast<uint8_t>(120 + rng() % 10);
        lw.weight = TensorView::contiguous(w8[g].data(), DType::kU8, {o, k});
        lw.scale = TensorView::contiguous(ws[g].data(), DType::kU8, {o / 32, k / 32});
        p.group_w[g] = to_device(w8[g]), p.group_scales[g] = to_device(ws[g]);
      } else {
        wb[g] = testing::random_bf16(o * k, 30 + g);
        lw.weight = TensorView::contiguous(wb[g].data(), DType::kBF16, {o, k});
        p.group_w[g] = to_device(wb[g]);
      }
      TensorView xg = TensorView::contiguous(const_cast<uint16_t*>(x.data()) + g * k, DType::kBF16, {n, k});
      TensorView yg = TensorView::contiguous(want.data() + g * o, DType::kBF16, {n, o});
      xg.stride[0] = groups * k, yg.stride[0] = groups * o;
      cpu.linear({xg, &lw, yg});
    }
    uint16_t* dx = to_device(x);
    uint16_t* dy = to_device(std::vector<uint16_t>(want.size(), 0xFFFF));
    double* scratch = nullptr;
    ASSERT_EQ(cudaMalloc(&scratch, cuda::dense_linear_scratch_bytes(n, static_cast<int>(k), groups)), cudaSuccess);
    p.x = dx, p.x_stride = groups * k, p.x_f64 = scratch, p.fp8_weights = fp8, p.w_stride = k, p.s_stride = k / 32;
    p.y = dy, p.y_stride = groups * o, p.n = n, p.k = static_cast<int>(k), p.out = static_cast<int>(groups * o);
    p.group_rows = static_cast<int>(o);
    ASSERT_EQ(cuda::launch_dense_linear(p), cudaSuccess);
    const std::vector<uint16_t> got = from_device(dy, want.size());
    int differ = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      differ += got[j] != want[j];
      ASSERT_LE(std::abs(static_cast<int>(got[j]) - static_cast<int>(want[j])), 1) << j;
    }
    EXPECT_LE(differ, 1) << (fp8 ? "fp8" : "bf16");
    for (int64_t g = 0; g < groups; ++g) {
      cudaFree(const_cast<void*>(p.group_w[g]));
      cudaFree(const_cast<uint8_t*>(p.group_scales[g]));
    }
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(scratch);
  }
}

}  // namespace
}  // namespace dsinfer
