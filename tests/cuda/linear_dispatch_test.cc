// The CUDA backend's decision table (linear_dispatch.h): which path a linear, a group of linears
// and the routed experts take. Views only (nothing is read), so it runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "backends/cuda/kernels/linear/wgmma_order.h"
#include "backends/cuda/linear_dispatch.h"
#include "backends/cuda/options.h"

namespace dsinfer {
namespace {

using cuda::GroupPath;
using cuda::LinearKernel;
using cuda::LinearPath;

// Fake device addresses: the decisions compare and offset them, never read them.
uint8_t* at(uintptr_t offset) {
  return reinterpret_cast<uint8_t*>(uintptr_t{1} << 40) + offset;
}

TensorView view(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(data, dtype, shape, Device::kCuda);
}

LinearWeight weight(LinearFormat f, int64_t out, int64_t in, uintptr_t where) {
  const bool scaled = is_block_scaled(f) || f == LinearFormat::kFp8AsBf16;
  const DType dt = f == LinearFormat::kFp8 || f == LinearFormat::kFp8AsBf16 ? DType::kF8E4M3
                   : f == LinearFormat::kFp4                                ? DType::kU8
                                                                            : DType::kBF16;
  const int64_t cols = f == LinearFormat::kFp4 ? in / 2 : in;
  LinearWeight w{f, out, in, view(at(where), dt, {out, cols}), {}};
  if (scaled)
    w.scale = view(at(where + (1 << 24)), DType::kU8, {f == LinearFormat::kFp4 ? out : (out + 31) / 32, in / 32});
  return w;
}

LinearArgs args(const LinearWeight& w, int64_t n, uintptr_t x = 0, uintptr_t y = 1 << 28,
                DType x_dtype = DType::kBF16) {
  return {view(at(x), x_dtype, {n, w.in}), &w, view(at(y), DType::kBF16, {n, w.out})};
}

TEST(LinearDispatch, OneLinear) {
  const LinearWeight fp8 = weight(LinearFormat::kFp8, 256, 512, 0), bf16 = weight(LinearFormat::kBf16, 256, 512, 0);
  EXPECT_EQ(cuda::linear_path(args(fp8, 0), LinearKernel::kAuto), LinearPath::kNothing);
  EXPECT_EQ(cuda::linear_path(args(fp8, 1), LinearKernel::kAuto), LinearPath::kBlockScaled);
  EXPECT_EQ(cuda::linear_path(args(fp8, cuda::kTensorCoreRows - 1), LinearKernel::kAuto), LinearPath::kBlockScaled);
  EXPECT_EQ(cuda::linear_path(args(fp8, cuda::kTensorCoreRows), LinearKernel::kAuto), LinearPath::kBlockScaled)
      << "a prefill chunk: the wgmma kernel, the weights as stored";
  const LinearWeight fp8_as_bf16 = weight(LinearFormat::kFp8AsBf16, 256, 512, 0);
  EXPECT_EQ(cuda::linear_path(args(fp8_as_bf16, cuda::kTensorCoreRows), LinearKernel::kAuto), LinearPath::kTensorCores);
  EXPECT_EQ(cuda::linear_path(args(fp8_as_bf16, 64), LinearKernel::kAuto), LinearPath::kDense);
  EXPECT_EQ(cuda::linear_path(args(fp8, 512), LinearKernel::kMma), LinearPath::kBlockScaled) << "a forced kernel";
  EXPECT_EQ(cuda::linear_path(args(bf16, 1), LinearKernel::kAuto), LinearPath::kDense);
  EXPECT_EQ(cuda::linear_path(args(bf16, 64), LinearKernel::kAuto), LinearPath::kDense) << "a decode step of 64";
  EXPECT_EQ(cuda::linear_path(args(bf16, cuda::kTensorCoreRows), LinearKernel::kAuto), LinearPath::kTensorCores);
  EXPECT_EQ(cuda::linear_path(args(bf16, cuda::kTensorCoreRows, 0, 1 << 28, DType::kF32), LinearKernel::kAuto),
            LinearPath::kDense)
      << "cuBLAS takes bf16 inputs only";
}

TEST(LinearDispatch, GroupsOfLinears) {
  const LinearWeight w1 = weight(LinearFormat::kFp4, 256, 512, 0), w3 = weight(LinearFormat::kFp4, 256, 512, 1 << 20);
  const LinearWeight other = weight(LinearFormat::kFp4, 128, 512, 2 << 20);
  const std::vector<LinearArgs> pair = {args(w1, 1, 0, 1 << 28), args(w3, 1, 0, 2 << 28)};
  EXPECT_EQ(cuda::group_path(pair), GroupPath::kBlockScaled);
  const std::vector<LinearArgs> large = {args(w1, cuda::kTensorCoreRows, 0, 1 << 28),
                                         args(w3, cuda::kTensorCoreRows, 0, 2 << 28)};
  EXPECT_EQ(cuda::group_path(large), GroupPath::kBlockScaled) << "one wgmma launch";
  const std::vector<LinearArgs> mixed = {args(w1, 1, 0, 1 << 28), args(other, 1, 0, 2 << 28)};
  EXPECT_EQ(cuda::group_path(mixed), GroupPath::kEach);
  EXPECT_EQ(cuda::group_path(std::vector<LinearArgs>{pair[0]}), GroupPath::kEach);

  // Dense weights of one shape on consecutive column blocks of one input and one output.
  const LinearWeight d0 = weight(LinearFormat::kBf16, 64, 128, 0), d1 = weight(LinearFormat::kBf16, 64, 128, 1 << 20);
  const auto block = [](const LinearWeight& w, int g, int64_t groups, int64_t n) {
    TensorView x = view(at(g * w.in * 2), DType::kBF16, {n, w.in}),
               y = view(at((1 << 28) + g * w.out * 2), DType::kBF16, {n, w.out});
    x.stride[0] = groups * w.in, y.stride[0] = groups * w.out;
    return LinearArgs{x, &w, y};
  };
  const std::vector<LinearArgs> diagonal = {block(d0, 0, 2, 3), block(d1, 1, 2, 3)};
  EXPECT_EQ(cuda::group_path(diagonal), GroupPath::kBlockDiagonal);
  const std::vector<LinearArgs> apart = {block(d0, 0, 2, 3), block(d1, 0, 2, 3)};
  EXPECT_EQ(cuda::group_path(apart), GroupPath::kEach);
  const std::vector<LinearArgs> prefill = {block(d0, 0, 2, cuda::kTensorCoreRows),
                                           block(d1, 1, 2, cuda::kTensorCoreRows)};
  EXPECT_EQ(cuda::group_path(prefill), GroupPath::kEach);
  // fp8 weights read as bf16 (wo_a's groups): a decode step's rows on the wgmma kernel's decode
  // tiles, unless a kernel is forced (kExact: the double sums), K is no whole number of its stages,
  // there are more groups than its parts, or the rows are a prefill chunk's.
  const LinearWeight f0 = weight(LinearFormat::kFp8AsBf16, 256, 1024, 0),
                     f1 = weight(LinearFormat::kFp8AsBf16, 256, 1024, 1 << 20);
  for (const int64_t n : {int64_t{1}, int64_t{64}})
    EXPECT_EQ(cuda::group_path(std::vector<LinearArgs>{block(f0, 0, 2, n), block(f1, 1, 2, n)}),
              GroupPath::kBlockDiagonalWgmma)
        << n;
  const std::vector<LinearArgs> fp8 = {block(f0, 0, 2, 3), block(f1, 1, 2, 3)};
  EXPECT_EQ(cuda::group_path(fp8, LinearKernel::kExact), GroupPath::kBlockDiagonal);
  EXPECT_EQ(cuda::group_path(std::vector<LinearArgs>{block(f0, 0, 2, 65), block(f1, 1, 2, 65)}), GroupPath::kEach);
  const LinearWeight g0 = weight(LinearFormat::kFp8AsBf16, 256, 992, 0),
                     g1 = weight(LinearFormat::kFp8AsBf16, 256, 992, 1 << 20);
  EXPECT_EQ(cuda::group_path(std::vector<LinearArgs>{block(g0, 0, 2, 3), block(g1, 1, 2, 3)}),
            GroupPath::kBlockDiagonal)
      << "K of 992: no whole number of 64-wide stages";
  std::vector<LinearWeight> nine;
  for (int g = 0; g < 9; ++g) nine.push_back(weight(LinearFormat::kFp8AsBf16, 256, 1024, uintptr_t{1} << (20 + g)));
  std::vector<LinearArgs> many;
  for (int g = 0; g < 9; ++g) many.push_back(block(nine[g], g, 9, 3));
  EXPECT_EQ(cuda::group_path(many), GroupPath::kBlockDiagonal) << "more groups than the wgmma kernel's parts";
  EXPECT_EQ(cuda::group_path(diagonal), GroupPath::kBlockDiagonal) << "bf16 weights";
}

TEST(LinearDispatch, RoutedExperts) {
  EXPECT_FALSE(cuda::few_routed_tokens(0, 8));
  EXPECT_TRUE(cuda::few_routed_tokens(1, 0)) << "one token always may";
  EXPECT_TRUE(cuda::few_routed_tokens(8, 8));
  EXPECT_FALSE(cuda::few_routed_tokens(9, 8));
  EXPECT_FALSE(cuda::many_routed_tokens(cuda::kTensorCoreRows - 1, LinearKernel::kAuto));
  EXPECT_TRUE(cuda::many_routed_tokens(cuda::kTensorCoreRows, LinearKernel::kAuto)) << "a prefill chunk";
  EXPECT_FALSE(cuda::many_routed_tokens(4096, LinearKernel::kMma)) << "a forced kernel";

  std::vector<ExpertWeights> experts(4);
  for (size_t e = 0; e < experts.size(); ++e) {
    experts[e].w1 = weight(LinearFormat::kFp4, 256, 512, e * (3 << 20));
    experts[e].w3 = weight(LinearFormat::kFp4, 256, 512, e * (3 << 20) + (1 << 20));
    experts[e].w2 = weight(LinearFormat::kFp4, 512, 256, e * (3 << 20) + (2 << 20));
  }
  const auto routed = [&](int64_t k) {
    return RoutedExpertsArgs{view(at(0), DType::kBF16, {1, 512}),
                             view(at(0), DType::kI32, {1, k}),
                             view(at(0), DType::kF32, {1, k}),
                             experts,
                             0.0f,
                             view(at(0), DType::kF32, {1, 512})};
  };
  EXPECT_TRUE(cuda::experts_on_device(routed(6)));
  EXPECT_FALSE(cuda::experts_on_device(routed(9))) << "2k GEMVs past one launch";
  experts[2].w3.weight.device = Device::kCpu;
  EXPECT_FALSE(cuda::experts_on_device(routed(6)));
  experts[2].w3 = weight(LinearFormat::kFp8, 256, 512, 0);
  EXPECT_FALSE(cuda::experts_on_device(routed(6))) << "experts of two formats";
}

// DSINFER_CUDA_LINEAR as the CLI reads it: each kernel by name, anything else (wgmma, which auto
// picks by the row count, a typo) or nothing is auto.
TEST(LinearDispatch, KernelSwitch) {
  const auto kernel = [](const char* value) {
    return CudaBackendOptions::from_switches(
               [value](const char* name) { return std::string_view(name) == "DSINFER_CUDA_LINEAR" ? value : nullptr; })
        .linear_kernel;
  };
  EXPECT_EQ(kernel("tiled"), LinearKernel::kTiled);
  EXPECT_EQ(kernel("exact"), LinearKernel::kExact);
  EXPECT_EQ(kernel("mma"), LinearKernel::kMma);
  EXPECT_EQ(kernel("gemv"), LinearKernel::kGemv);
  EXPECT_EQ(kernel("fma"), LinearKernel::kFma);
  EXPECT_EQ(kernel("wgmma"), LinearKernel::kAuto);
  EXPECT_EQ(kernel(nullptr), LinearKernel::kAuto);
}

// The wgmma kernel's K order: within each 64 a permutation (every column once), an even K index
// and the next in adjacent columns (act_quant writes them as one word), and a thread's run of 4
// codes at K 16c + 4j landing in wgmma's A-fragment columns 2c, 2c + 1, 2c + 8, 2c + 9 of step j.
TEST(WgmmaOrder, EachSpanPermutedAsTheFragmentsRead) {
  const int span = cuda::kWgmmaOrderSpan;
  for (const int base : {0, span, 7 * span}) {
    std::vector<int> seen(span, 0);
    for (int k = base; k < base + span; ++k) {
      const int col = cuda::wgmma_operand_column(k);
      ASSERT_GE(col, base);
      ASSERT_LT(col, base + span);
      ++seen[col - base];
      if (k % 2 == 0) {
        EXPECT_EQ(cuda::wgmma_operand_column(k + 1), col + 1);
      }
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    for (int c = 0; c < 4; ++c)
      for (int j = 0; j < 4; ++j) {
        const int k = base + 16 * c + 4 * j, step = base + 16 * j;
        EXPECT_EQ(cuda::wgmma_operand_column(k), step + 2 * c);
        EXPECT_EQ(cuda::wgmma_operand_column(k + 2), step + 2 * c + 8);
      }
  }
}

}  // namespace
}  // namespace dsinfer
