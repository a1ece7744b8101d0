// CUDA act_quant against the CPU quantiser, bit for bit (skipped without a GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/linear/wgmma_order.h"
#include "core/float_formats.h"
#include "core/quant.h"
#include "test_util.h"

namespace dsinfer {
namespace {

// On 16-byte aligned memory (the kernel's vector path) and one value off it (a value at a time),
// with groups of tiny and huge values (quotients near fp32's subnormals, scales far from 1).
TEST(CudaActQuant, MatchesTheCpuBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 32 * 5120 + 32 * 7;  // a V4.1 row count and an odd remainder of groups
  std::vector<uint16_t> x = testing::random_bf16(n, 99, 3.0f);
  for (int64_t i = 0; i < 32; ++i) {
    x[64 + i] = f32_to_bf16((i % 3 - 1) * 1e-30f * static_cast<float>(i + 1));
    x[128 + i] = f32_to_bf16((i % 2 ? -3e30f : 2e25f) / static_cast<float>(i + 1));
    x[192 + i] = f32_to_bf16(i == 5 ? 1000.0f : 1e-38f * static_cast<float>(i));
  }
  std::vector<uint8_t> codes(n), scales(n / 32);
  act_quant(x, codes, scales);
  std::vector<uint16_t> fake = x;
  act_quant_inplace(fake);

  uint16_t *dx = nullptr, *dfake = nullptr;
  uint8_t *dcodes = nullptr, *dscales = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, (n + 1) * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dfake, (n + 1) * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dcodes, n + 1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dscales, n / 32), cudaSuccess);
  for (int off : {0, 1}) {
    ASSERT_EQ(cudaMemcpy(dx + off, x.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::ActQuantParams p;
    p.x = dx + off, p.fake = dfake + off, p.codes = dcodes + off, p.scales = dscales, p.n = n;
    ASSERT_EQ(cuda::launch_act_quant(p), cudaSuccess);
    std::vector<uint16_t> got_fake(n);
    std::vector<uint8_t> got_codes(n), got_scales(n / 32);
    ASSERT_EQ(cudaMemcpy(got_fake.data(), dfake + off, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got_codes.data(), dcodes + off, n, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got_scales.data(), dscales, n / 32, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got_codes, codes) << "offset " << off;
    EXPECT_EQ(got_scales, scales) << "offset " << off;
    EXPECT_EQ(got_fake, fake) << "offset " << off;
    p.n = 33;
    EXPECT_EQ(cuda::launch_act_quant(p), cudaErrorInvalidValue);
  }
  for (void* q :
       {static_cast<void*>(dx), static_cast<void*>(dfake), static_cast<void*>(dcodes), static_cast<void*>(dscales)})
    cudaFree(q);
}

// The wgmma kernel's operand: each row's act_quant (or, unquantised, its values) at the columns
// wgmma_order.h gives, rows gathered from a strided input, the last spans' threads past k idle.
TEST(CudaActQuant, OperandIsTheRowsInTheWgmmaOrder) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int rows = 5, k = 64 * 21, stride = k + 8;  // 21 spans: a row's last block of threads part idle
  const std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(rows) * stride, 98, 3.0f);
  const std::vector<int32_t> gather = {4, 0, 3, 3, 1};
  uint16_t *dx = nullptr, *dop = nullptr;
  int32_t* drows = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dop, static_cast<size_t>(rows) * k * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&drows, rows * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(drows, gather.data(), rows * 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (const bool unquantised : {false, true}) {
    SCOPED_TRACE(unquantised ? "unquantised" : "act_quant");
    cuda::QuantizeInputParams p{.x = dx, .x_stride = stride, .x_rows = drows, .operand = dop, .n = rows, .k = k};
    p.unquantised = unquantised;
    ASSERT_EQ(cuda::launch_quantize_input(p), cudaSuccess);
    std::vector<uint16_t> got(static_cast<size_t>(rows) * k);
    ASSERT_EQ(cudaMemcpy(got.data(), dop, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int r = 0; r < rows; ++r) {
      std::vector<uint16_t> want(x.begin() + gather[r] * stride, x.begin() + gather[r] * stride + k);
      if (!unquantised) act_quant_inplace(want);
      for (int c = 0; c < k; ++c)
        ASSERT_EQ(got[static_cast<size_t>(r) * k + cuda::wgmma_operand_column(c)], want[c])
            << "row " << r << " K " << c;
    }
  }
  cuda::QuantizeInputParams misaligned{.x = dx, .x_stride = stride, .operand = dop + 4, .n = 1, .k = k};
  EXPECT_EQ(cuda::launch_quantize_input(misaligned), cudaErrorInvalidValue);  // the operand's rows 16-byte aligned
  cudaFree(dx), cudaFree(dop), cudaFree(drows);
}

}  // namespace
}  // namespace dsinfer

namespace dsinfer {
namespace {

// fp4 fake quantisation (both V4.1 kinds) against the CPU quantiser, bit for bit, on rows whose
// length is not a multiple of the warp (groups of 16 straddle warps' ends).
TEST(CudaFp4FakeQuant, MatchesTheCpuBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const bool e4m3 : {true, false}) {
    const int group = e4m3 ? 16 : 32, n = 7, d = e4m3 ? 512 + 16 : 128;
    std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(n) * d, 5 + e4m3, 2.0f);
    for (size_t i = 0; i < x.size(); i += 97) x[i] = 0x8000;  // a few negative zeros
    std::vector<uint16_t> want = x;
    for (int r = 0; r < n; ++r)
      fp4_act_quant_inplace(std::span(want).subspan(static_cast<size_t>(r) * d, d), group,
                            e4m3 ? Fp4ScaleKind::kE4M3 : Fp4ScaleKind::kE8M0);
    uint16_t* dx = nullptr;
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::Fp4FakeQuantParams p;
    p.x = dx, p.stride = d, p.n = n, p.d = d, p.group = group, p.e4m3_scale = e4m3;
    ASSERT_EQ(cuda::launch_fp4_fake_quant(p), cudaSuccess);
    std::vector<uint16_t> got(x.size());
    ASSERT_EQ(cudaMemcpy(got.data(), dx, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(dx);
    EXPECT_EQ(got, want) << (e4m3 ? "e4m3 / 16" : "e8m0 / 32");
    p.group = 8;
    EXPECT_EQ(cuda::launch_fp4_fake_quant(p), cudaErrorInvalidValue);
  }
}

}  // namespace
}  // namespace dsinfer
