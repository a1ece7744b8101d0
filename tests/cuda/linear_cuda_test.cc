// CUDA block-scaled linear against the CPU backend at V4.1-Flash shapes (skipped without a GPU).
// The CPU sums each block's code products exactly and chains the blocks in order; the GPU in fp32.
// Every kernel's outputs agree within 2 bf16 ulps (or 1e-3 of the RMS where a sum cancels to near
// zero). The exact kernels (fma, gemv, mma: the CPU's order) are nearly all bit for bit; the tiled
// kernel sums each block on e4m3 tensor cores and adds its K slices' sums in another order, so at
// least kTiledBitEqual of its outputs are.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/linear/dequant.h"
#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "core/float_formats.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

namespace dsinfer {
namespace {

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

constexpr double kExactBitEqual = 0.95, kTiledBitEqual = 0.60;
// The wgmma kernel multiplies exactly (bf16 operands) and sums all of K in fp32 in the tensor
// cores' order, not block by block: an output may round to the neighbouring bf16 of the exact
// block sums', where its sum cancels by up to 1e-3 of the outputs' RMS.
constexpr double kWgmmaBitEqual = 0.95, kWgmmaRmsTolerance = 1e-3;

int ulps(uint16_t a, uint16_t b) {
  const auto key = [](uint16_t x) { return x & 0x8000 ? -static_cast<int>(x & 0x7FFF) : static_cast<int>(x); };
  return std::abs(key(a) - key(b));
}

struct Agreement {
  int worst = 0, equal = 0, outside = 0;
  double max_rel = 0;  // largest |error| over the outputs' RMS
};
// Outputs within 2 bf16 ulps, or (where sums cancel to near zero) within 1e-3 of the outputs' RMS,
// count as agreeing; `outside` counts the others.
Agreement agreement(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, double rms_tolerance = 1e-3) {
  double sq = 0;
  for (uint16_t v : want) sq += static_cast<double>(bf16_to_f32(v)) * bf16_to_f32(v);
  const double rms = std::sqrt(sq / want.size());
  Agreement a;
  for (size_t j = 0; j < got.size(); ++j) {
    const int u = ulps(got[j], want[j]);
    a.worst = std::max(a.worst, u);
    a.equal += got[j] == want[j];
    const double err = std::fabs(bf16_to_f32(got[j]) - bf16_to_f32(want[j])) / rms;
    a.max_rel = std::max(a.max_rel, err);
    a.outside += u > 2 && err > rms_tolerance;
  }
  return a;
}

TEST(CudaLinear, MatchesTheCpuBackendAtFlashShapes) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  std::mt19937 rng(11);
  struct Shape {
    int out, k;
    bool fp4;
  };
  for (const Shape s :
       {Shape{2304, 5120, false}, Shape{5120, 2304, false}, Shape{1280, 5120, false}, Shape{2304, 5120, true},
        Shape{5120, 2304, true}, Shape{1000, 1024, false}, Shape{1000, 1024, true},  // 1000: a partial 16-row tile
        Shape{1000, 1056, true}, Shape{1000, 1056, false}}) {  // 33 scale blocks: a partial last gemv8 step
    const int64_t o = s.out, k = s.k;
    std::vector<uint8_t> w(s.fp4 ? o * k / 2 : o * k), ws(s.fp4 ? o * k / 32 : ((o + 31) / 32) * (k / 32));
    for (auto& b : w)  // fp8: normal codes of both signs (as quantised weights are); fp4: any byte
      b = s.fp4 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>((rng() & 0x80) | (8 + rng() % 0x70));
    for (auto& b : ws) b = static_cast<uint8_t>(112 + rng() % 12);
    LinearWeight lw{s.fp4 ? LinearFormat::kFp4 : LinearFormat::kFp8, o, k,
                    TensorView::contiguous(w.data(), DType::kU8, {o, s.fp4 ? k / 2 : k}),
                    TensorView::contiguous(ws.data(), DType::kU8, {s.fp4 ? o : (o + 31) / 32, k / 32})};
    DeviceBuffer<uint8_t> dw(w.size()), dws(ws.size());
    ASSERT_EQ(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dws.p, ws.data(), ws.size(), cudaMemcpyHostToDevice), cudaSuccess);
    for (const int n : {1, 3, 4, 8, 13, 20, 37}) {  // the tiled kernel's instances: 1, 2, 4 and 8 tiles
      const std::vector<uint16_t> x = testing::random_bf16(n * k, 100 + n, 2.0f);
      std::vector<uint16_t> want(n * o), got(n * o, 0xFFFF);  // the poison: every output must be written
      cpu.linear({TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBF16, {n, k}), &lw,
                  TensorView::contiguous(want.data(), DType::kBF16, {n, o})});
      DeviceBuffer<uint16_t> dx(x.size()), dvals(x.size()), dop(x.size()), dy(got.size());
      DeviceBuffer<uint8_t> dcodes(x.size());
      DeviceBuffer<float> dxs(n * k / 32);
      ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      cuda::QuantizeInputParams q;
      q.x = dx.p, q.x_stride = k, q.values = dvals.p, q.codes = dcodes.p, q.scales = dxs.p, q.n = n,
      q.k = static_cast<int>(k);
      ASSERT_EQ(cuda::launch_quantize_input(q), cudaSuccess);
      cuda::QuantizeInputParams qo{.x = dx.p, .x_stride = k, .operand = dop.p, .n = n, .k = static_cast<int>(k)};
      if (k % 64 == 0) {  // the wgmma kernel's operand (auto takes it for fp8)
        ASSERT_EQ(cuda::launch_quantize_input(qo), cudaSuccess);
      }
      // Every kernel the dispatch can pick, by itself and forced (the kernel lab's variants: its own
      // check, cuda_linear_bench check).
      struct Variant {
        cuda::LinearKernel kernel;
        const char* name;
        int gemv_rows = 0;
      };
      for (const Variant v : {Variant{cuda::LinearKernel::kAuto, "auto"},
                              {cuda::LinearKernel::kTiled, "tiled"},
                              {cuda::LinearKernel::kMma, "mma"},
                              {cuda::LinearKernel::kFma, "fma"},
                              {cuda::LinearKernel::kGemv, "gemv"},
                              {cuda::LinearKernel::kGemv, "gemv1", 1},
                              {cuda::LinearKernel::kGemv, "gemv8", 8}}) {
        if (v.kernel == cuda::LinearKernel::kGemv && n > 4) continue;  // it runs only up to 4 rows
        ASSERT_EQ(cudaMemcpy(dy.p, got.data(), got.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);  // poison
        cuda::BlockLinearParams p;
        p.op[0] = {dvals.p, dxs.p, dw.p, dws.p, dy.p, dcodes.p};
        p.op[0].x_operand = dop.p;
        p.n = n, p.k = static_cast<int>(k), p.fp4 = s.fp4, p.w_stride = s.fp4 ? k / 2 : k, p.s_stride = k / 32;
        p.out = static_cast<int>(o), p.y_stride = o;
        p.kernel = v.kernel, p.gemv_rows = v.gemv_rows;
        // auto: the wgmma kernel's few-rows tiles for fp8 (K a multiple of 64), else the tiled kernel
        const bool wgmma = cuda::wgmma_takes(p);
        EXPECT_EQ(wgmma, v.kernel == cuda::LinearKernel::kAuto && !s.fp4 && k % 64 == 0) << v.name;
        ASSERT_EQ(cuda::launch_block_linear(p), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<uint16_t> out(got.size());
        ASSERT_EQ(cudaMemcpy(out.data(), dy.p, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        const Agreement a = agreement(out, want, wgmma ? kWgmmaRmsTolerance : 1e-3);
        const int worst = a.worst, equal = a.equal;
        EXPECT_EQ(a.outside, 0) << (s.fp4 ? "fp4 " : "fp8 ") << o << "x" << k << " n=" << n << " " << v.name;
        const bool tiled = v.kernel == cuda::LinearKernel::kAuto || v.kernel == cuda::LinearKernel::kTiled;
        EXPECT_GE(equal, static_cast<int>(out.size() * (wgmma   ? kWgmmaBitEqual
                                                        : tiled ? kTiledBitEqual
                                                                : kExactBitEqual)))
            << o << "x" << k << " n=" << n << " " << v.name;
        std::printf("%s %5ld x %5ld n=%d %-9s: %5.1f %% bit-equal, max %d ulp, max |error| / rms %.2g\n",
                    s.fp4 ? "fp4" : "fp8", static_cast<long>(o), static_cast<long>(k), n, wgmma ? "wgmma" : v.name,
                    100.0 * equal / out.size(), worst, a.max_rel);
        if (v.kernel != cuda::LinearKernel::kTiled) continue;
        // Up to 8 rows the tiled kernel also takes the bf16 input (here rows k + 8 apart) and
        // quantises it itself: the same bits as from launch_quantize_input's codes.
        ASSERT_EQ(cuda::tiled_quantises_input(p), n <= 8);
        if (n > 8) continue;
        DeviceBuffer<uint16_t> padded(static_cast<size_t>(n) * (k + 8));
        ASSERT_EQ(cudaMemcpy2D(padded.p, (k + 8) * 2, dx.p, k * 2, k * 2, n, cudaMemcpyDeviceToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(dy.p, got.data(), got.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);  // poison
        p.op[0] = {.w = dw.p, .w_scales = dws.p, .y = dy.p, .x_bf16 = padded.p};
        p.x_bf16_stride = k + 8;
        ASSERT_EQ(cuda::launch_block_linear(p), cudaSuccess);
        std::vector<uint16_t> fused(got.size());
        ASSERT_EQ(cudaMemcpy(fused.data(), dy.p, fused.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(fused, out) << (s.fp4 ? "fp4 " : "fp8 ") << o << "x" << k << " n=" << n << " bf16 input";
        p.x_bf16_stride = k + 4;  // rows not 16-byte aligned: refused
        EXPECT_EQ(cuda::launch_block_linear(p), cudaErrorInvalidValue);
      }
    }
  }
  // Several matrices in one launch give each one's result bit for bit.
  for (const int n : {1, 2}) {
    const int o = 2304, k = 5120, groups = 3;
    std::vector<uint8_t> w(static_cast<size_t>(groups) * o * k / 2), ws(static_cast<size_t>(groups) * o * (k / 32));
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    for (auto& b : ws) b = static_cast<uint8_t>(112 + rng() % 12);
    const std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(groups) * n * k, 7, 2.0f);
    DeviceBuffer<uint8_t> dw(w.size()), dws(ws.size());
    DeviceBuffer<uint16_t> dx(x.size()), dvals(x.size()), dy(static_cast<size_t>(groups) * n * o * 2);
    DeviceBuffer<float> dxs(x.size() / 32);
    DeviceBuffer<uint8_t> dcodes(x.size());
    ASSERT_EQ(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dws.p, ws.data(), ws.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::QuantizeInputParams q;
    q.x = dx.p, q.x_stride = k, q.values = dvals.p, q.codes = dcodes.p, q.scales = dxs.p, q.n = groups * n, q.k = k;
    ASSERT_EQ(cuda::launch_quantize_input(q), cudaSuccess);
    for (const cuda::LinearKernel kernel :
         {cuda::LinearKernel::kTiled, cuda::LinearKernel::kMma, cuda::LinearKernel::kFma, cuda::LinearKernel::kGemv}) {
      cuda::BlockLinearParams p;
      p.kernel = kernel;
      p.n = n, p.k = k, p.out = o, p.fp4 = true, p.w_stride = k / 2, p.s_stride = k / 32, p.y_stride = o;
      auto operands = [&](int g, uint16_t* y) {
        return cuda::LinearOperands{dvals.p + static_cast<size_t>(g) * n * k,
                                    dxs.p + static_cast<size_t>(g) * n * (k / 32),
                                    dw.p + static_cast<size_t>(g) * o * k / 2,
                                    dws.p + static_cast<size_t>(g) * o * (k / 32),
                                    y,
                                    dcodes.p + static_cast<size_t>(g) * n * k};
      };
      for (int g = 0; g < groups; ++g) p.op[g] = operands(g, dy.p + static_cast<size_t>(g) * n * o);
      p.groups = groups;
      ASSERT_EQ(cuda::launch_block_linear(p), cudaSuccess);
      for (int g = 0; g < groups; ++g) {
        p.op[0] = operands(g, dy.p + static_cast<size_t>(groups + g) * n * o);
        p.groups = 1;
        ASSERT_EQ(cuda::launch_block_linear(p), cudaSuccess);
      }
      std::vector<uint16_t> y(static_cast<size_t>(groups) * n * o * 2);
      ASSERT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(std::equal(y.begin(), y.begin() + y.size() / 2, y.begin() + y.size() / 2))
          << static_cast<int>(kernel) << " n=" << n;
    }
  }
  cuda::BlockLinearParams bad;
  bad.k = 33;
  EXPECT_EQ(cuda::launch_block_linear(bad), cudaErrorInvalidValue);
}

// Batch invariance: an activation row's outputs from the tiled and the mma kernel are the same bits
// whether it is alone or one of 8, 24 or 64 rows (a decode step's sequences), fp8 and fp4; 1000 rows
// end in a partial tile; fp8 K 2048 is split over a cluster, fp4 K 5120 in two slices of 80 blocks
// staged in parts (of 32 blocks for a few rows, of 8 for 64).
TEST(CudaLinear, RowsDoNotDependOnTheBatch) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  for (const auto& [kernel, fp4, k] : {std::tuple{cuda::LinearKernel::kTiled, false, 2048},
                                       {cuda::LinearKernel::kTiled, true, 2048},
                                       {cuda::LinearKernel::kTiled, true, 5120},
                                       {cuda::LinearKernel::kMma, false, 2048},
                                       {cuda::LinearKernel::kMma, true, 2048}}) {
    const int o = 1000, batch = 64;
    std::vector<uint8_t> w(fp4 ? o * k / 2 : o * k), ws(fp4 ? o * k / 32 : ((o + 31) / 32) * (k / 32));
    for (auto& b : w) b = fp4 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>((rng() & 0x80) | (8 + rng() % 0x70));
    for (auto& b : ws) b = static_cast<uint8_t>(112 + rng() % 12);
    const std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(batch) * k, 3, 2.0f);
    DeviceBuffer<uint8_t> dw(w.size()), dws(ws.size()), dcodes(x.size());
    DeviceBuffer<uint16_t> dx(x.size()), dvals(x.size()), dy(static_cast<size_t>(batch) * o);
    DeviceBuffer<float> dxs(x.size() / 32);
    ASSERT_EQ(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dws.p, ws.data(), ws.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::QuantizeInputParams q;
    q.x = dx.p, q.x_stride = k, q.values = dvals.p, q.codes = dcodes.p, q.scales = dxs.p, q.n = batch, q.k = k;
    ASSERT_EQ(cuda::launch_quantize_input(q), cudaSuccess);
    const auto run = [&](int first, int n) {
      cuda::BlockLinearParams p;
      p.kernel = kernel;
      p.op[0] = {
          dvals.p + static_cast<size_t>(first) * k, dxs.p + static_cast<size_t>(first) * (k / 32), dw.p, dws.p, dy.p,
          dcodes.p + static_cast<size_t>(first) * k};
      p.n = n, p.k = k, p.out = o, p.fp4 = fp4, p.w_stride = fp4 ? k / 2 : k, p.s_stride = k / 32, p.y_stride = o;
      EXPECT_EQ(cuda::launch_block_linear(p), cudaSuccess);
      std::vector<uint16_t> y(static_cast<size_t>(n) * o);
      EXPECT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      return y;
    };
    const std::vector<uint16_t> all = run(0, batch), eight = run(8, 8), some = run(8, 24);
    for (const int r : {0, 9, 15, 37, 63}) {
      const std::vector<uint16_t> alone = run(r, 1);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + static_cast<size_t>(r) * o))
          << (fp4 ? "fp4" : "fp8") << " k " << k << " kernel " << static_cast<int>(kernel) << " row " << r
          << " alone differs from the batch of 64";
      if (r >= 8 && r < 32) {
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), some.begin() + static_cast<size_t>(r - 8) * o))
            << (fp4 ? "fp4" : "fp8") << " k " << k << " kernel " << static_cast<int>(kernel) << " row " << r
            << " alone differs from the batch of 24";
      }
      if (r >= 8 && r < 16) {
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), eight.begin() + static_cast<size_t>(r - 8) * o))
            << (fp4 ? "fp4" : "fp8") << " k " << k << " kernel " << static_cast<int>(kernel) << " row " << r
            << " alone differs from the batch of 8";
      }
    }
  }
}

// Weights of `count` matrices of one shape, as the tests above make them.
struct RandomWeights {
  std::vector<uint8_t> w, ws;
  int64_t s_stride, w_bytes, s_bytes;  // one matrix's
  RandomWeights(std::mt19937& rng, int count, int64_t o, int64_t k, bool fp4)
      : s_stride(k / 32), w_bytes(fp4 ? o * k / 2 : o * k), s_bytes(fp4 ? o * s_stride : ((o + 31) / 32) * s_stride) {
    w.resize(count * w_bytes), ws.resize(count * s_bytes);
    for (auto& b : w) b = fp4 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>((rng() & 0x80) | (8 + rng() % 0x70));
    for (auto& b : ws) b = static_cast<uint8_t>(112 + rng() % 12);
  }
};

// The wgmma kernel (a prefill chunk's linears, from kMinRows rows) against the CPU at Flash
// shapes and at shapes that end in a partial tile (1000 weight rows; K 1152 and 1216: 18 and 19
// stages, the odd one's last stage after the kernel's pairs; a few scales past the folded
// multiply's range), within
// its bound (kWgmmaBitEqual); a row's outputs are the same bits whatever rows share its call
// (alone in a forced call, among 65 or 300, at any place in a 128-row tile).
TEST(CudaLinear, ManyRowsOnWarpgroupTensorCores) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  std::mt19937 rng(31);
  struct Shape {
    int out, k;
    bool fp4;
  };
  for (const Shape s : {Shape{2304, 5120, false}, Shape{1280, 5120, false}, Shape{2304, 5120, true},
                        Shape{5120, 2304, true}, Shape{1000, 1152, false}, Shape{1000, 1216, true}}) {
    const int64_t o = s.out, k = s.k, rows = 300;
    RandomWeights rw(rng, 1, o, k, s.fp4);
    if (!s.fp4)  // zeros and subnormal codes too (the kernel decodes them by their bits)
      for (size_t i = 0; i < rw.w.size(); i += 7) rw.w[i] = static_cast<uint8_t>((rng() & 0x80) | rng() % 8);
    if (s.out == 1000)  // a few scales too large to fold with the codes' 2^120: their warps' stages take two multiplies
      for (size_t i = 0; i < rw.ws.size(); i += 97) rw.ws[i] = static_cast<uint8_t>((s.fp4 ? 129 : 135) + rng() % 4);
    LinearWeight lw{
        s.fp4 ? LinearFormat::kFp4 : LinearFormat::kFp8, o, k,
        TensorView::contiguous(const_cast<uint8_t*>(rw.w.data()), DType::kU8, {o, s.fp4 ? k / 2 : k}),
        TensorView::contiguous(const_cast<uint8_t*>(rw.ws.data()), DType::kU8, {s.fp4 ? o : (o + 31) / 32, k / 32})};
    uint8_t *dw = testing::to_device(rw.w), *dws = testing::to_device(rw.ws);
    const std::vector<uint16_t> x = testing::random_bf16(rows * k, 300 + s.out, 2.0f);
    DeviceBuffer<uint16_t> dx(x.size()), dop(x.size()), dy(rows * o);
    ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::QuantizeInputParams q;
    q.x = dx.p, q.x_stride = k, q.operand = dop.p, q.n = static_cast<int>(rows), q.k = static_cast<int>(k);
    ASSERT_EQ(cuda::launch_quantize_input(q), cudaSuccess);
    const auto run = [&](int64_t first, int64_t n, cuda::LinearKernel kernel) {
      ASSERT_EQ(cudaMemset(dy.p, 0xFF, rows * o * 2), cudaSuccess);  // the poison: every output must be written
      cuda::BlockLinearParams p;
      p.op[0] = {.w = dw, .w_scales = dws, .y = dy.p, .x_operand = dop.p + first * k};
      p.n = static_cast<int>(n), p.k = static_cast<int>(k), p.fp4 = s.fp4, p.w_stride = s.fp4 ? k / 2 : k;
      p.s_stride = rw.s_stride, p.out = static_cast<int>(o), p.y_stride = o, p.kernel = kernel;
      ASSERT_TRUE(cuda::wgmma_applies(p));
      ASSERT_EQ(cuda::launch_block_linear(p), cudaSuccess);
    };
    const auto rows_of = [&](int64_t n) { return testing::from_device(dy.p, n * o); };
    const char* name = s.fp4 ? "fp4" : "fp8";
    run(0, rows, cuda::LinearKernel::kAuto);  // from kMinRows rows the dispatch's choice
    const std::vector<uint16_t> all = rows_of(rows);
    for (const int64_t n : {int64_t{65}, int64_t{131}}) {  // one row tile and a partial one; two and a partial
      std::vector<uint16_t> want(n * o);
      cpu.linear({TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBF16, {n, k}), &lw,
                  TensorView::contiguous(want.data(), DType::kBF16, {n, o})});
      const std::vector<uint16_t> got(all.begin(), all.begin() + n * o);
      const Agreement a = agreement(got, want, kWgmmaRmsTolerance);
      EXPECT_EQ(a.outside, 0) << name << " " << o << "x" << k << " n=" << n;
      EXPECT_GE(a.equal, static_cast<int>(got.size() * kWgmmaBitEqual)) << name << " " << o << "x" << k;
      std::printf("%s %5ld x %5ld n=%ld wgmma   : %5.1f %% bit-equal, max %d ulp, max |error| / rms %.2g\n", name,
                  static_cast<long>(o), static_cast<long>(k), static_cast<long>(n), 100.0 * a.equal / got.size(),
                  a.worst, a.max_rel);
    }
    for (const auto& [first, n, kernel] : {std::tuple{int64_t{0}, int64_t{65}, cuda::LinearKernel::kAuto},
                                           {int64_t{37}, int64_t{200}, cuda::LinearKernel::kAuto},
                                           {int64_t{130}, int64_t{1}, cuda::LinearKernel::kWgmma}}) {
      run(first, n, kernel);
      const std::vector<uint16_t> some = rows_of(n);
      EXPECT_TRUE(std::equal(some.begin(), some.end(), all.begin() + first * o))
          << name << " " << o << "x" << k << ": rows " << first << " .. " << first + n - 1
          << " differ from the call of " << rows;
    }
    cudaFree(dw), cudaFree(dws);
  }
}

// A decode step's fp8 linears on the wgmma kernel (the dispatch's choice up to kFewRows rows: one
// tile of 64 rows, K split over a cluster by the matrix's shape, the slices' sums added in rank
// order): within the kernel's bound of the CPU, and a row's outputs the same bits alone, among 8 or
// 24, or in a step of 64. Shapes: K split 8 (512 x 5120), 4 (5120 x 2304; 1000 x 1152 in slices of
// 5, 5, 5, 3 stages; 1000 x 1216 with scales past the folded multiply's range) and 1 (18000 x 1280:
// the tiles alone fill the GPU).
TEST(CudaLinear, DecodeRowsOnWarpgroupTensorCores) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  std::mt19937 rng(47);
  for (const auto& [o, k] :
       {std::pair<int64_t, int64_t>{512, 5120}, {5120, 2304}, {1000, 1152}, {1000, 1216}, {18000, 1280}}) {
    const int64_t batch = 64, checked = 9;  // rows checked against the CPU
    RandomWeights rw(rng, 1, o, k, /*fp4=*/false);
    if (k == 1216)
      for (size_t i = 0; i < rw.ws.size(); i += 97) rw.ws[i] = static_cast<uint8_t>(135 + rng() % 4);
    LinearWeight lw{LinearFormat::kFp8, o, k,
                    TensorView::contiguous(const_cast<uint8_t*>(rw.w.data()), DType::kU8, {o, k}),
                    TensorView::contiguous(const_cast<uint8_t*>(rw.ws.data()), DType::kU8, {(o + 31) / 32, k / 32})};
    uint8_t *dw = testing::to_device(rw.w), *dws = testing::to_device(rw.ws);
    const std::vector<uint16_t> x = testing::random_bf16(batch * k, 500 + o, 2.0f);
    DeviceBuffer<uint16_t> dx(x.size()), dop(x.size()), dy(batch * o);
    ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::QuantizeInputParams q{
        .x = dx.p, .x_stride = k, .operand = dop.p, .n = static_cast<int>(batch), .k = static_cast<int>(k)};
    ASSERT_EQ(cuda::launch_quantize_input(q), cudaSuccess);
    const auto run = [&](int64_t first, int64_t n) {
      EXPECT_EQ(cudaMemset(dy.p, 0xFF, batch * o * 2), cudaSuccess);  // the poison: every output must be written
      cuda::BlockLinearParams p;
      p.op[0] = {.w = dw, .w_scales = dws, .y = dy.p, .x_operand = dop.p + first * k};
      p.n = static_cast<int>(n), p.k = static_cast<int>(k), p.w_stride = k, p.s_stride = rw.s_stride;
      p.out = static_cast<int>(o), p.y_stride = o;
      EXPECT_TRUE(cuda::wgmma_applies(p));
      EXPECT_EQ(cuda::launch_block_linear(p), cudaSuccess);
      return testing::from_device(dy.p, n * o);
    };
    const std::vector<uint16_t> all = run(0, batch);
    std::vector<uint16_t> want(checked * o);
    cpu.linear({TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBF16, {checked, k}), &lw,
                TensorView::contiguous(want.data(), DType::kBF16, {checked, o})});
    const Agreement a = agreement({all.begin(), all.begin() + checked * o}, want, kWgmmaRmsTolerance);
    EXPECT_EQ(a.outside, 0) << o << "x" << k;
    EXPECT_GE(a.equal, static_cast<int>(want.size() * kWgmmaBitEqual)) << o << "x" << k;
    std::printf("fp8 %5ld x %5ld n=%ld wgmma (decode): %5.1f %% bit-equal, max %d ulp, max |error| / rms %.2g\n",
                static_cast<long>(o), static_cast<long>(k), static_cast<long>(batch), 100.0 * a.equal / want.size(),
                a.worst, a.max_rel);
    for (const auto& [first, n] : {std::pair<int64_t, int64_t>{0, 1}, {37, 1}, {63, 1}, {8, 8}, {8, 24}, {40, 24}}) {
      const std::vector<uint16_t> some = run(first, n);
      EXPECT_TRUE(std::equal(some.begin(), some.end(), all.begin() + first * o))
          << o << "x" << k << ": rows " << first << " .. " << first + n - 1 << " differ from the step of " << batch;
    }
    cudaFree(dw), cudaFree(dws);
  }
}

// The routed experts of a prefill chunk: one wgmma launch over every expert's rows (sorted by
// expert, counts in device memory) gives each expert's rows the bits of a call of their own; w1
// and w3 share the launch (two parts), and entries without rows, or with an id outside the table,
// write nothing.
TEST(CudaLinear, ExpertsGroupedOnWarpgroupTensorCores) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(41);
  const int64_t o = 1000, k = 1152, experts = 4;
  const RandomWeights rw(rng, 2 * experts, o, k, /*fp4=*/true);
  uint8_t *dw = testing::to_device(rw.w), *dws = testing::to_device(rw.ws);
  std::vector<cuda::RoutedWeight> table(2 * experts);
  for (int64_t m = 0; m < 2 * experts; ++m) table[m] = {dw + m * rw.w_bytes, dws + m * rw.s_bytes};
  cuda::RoutedWeight* dtable = testing::to_device(table);
  std::vector<uint8_t> maps(2 * experts * cuda::kTensorMapBytes + 64);  // the TMA's maps, 64-byte aligned
  uint8_t* map0 = maps.data() + (64 - reinterpret_cast<uintptr_t>(maps.data()) % 64) % 64;
  for (int64_t m = 0; m < 2 * experts; ++m)
    ASSERT_TRUE(cuda::wgmma_weight_map(map0 + m * cuda::kTensorMapBytes, dw + m * rw.w_bytes, static_cast<int>(o),
                                       static_cast<int>(k), k / 2, /*fp4=*/true));
  uint8_t* dmaps = testing::to_device(std::vector<uint8_t>(map0, map0 + 2 * experts * cuda::kTensorMapBytes));
  // Entries: expert 2 with 70 rows, an empty one, expert 0 with 200, expert 9 (outside), expert 3 with 5.
  const std::vector<cuda::ExpertGroup> entries = {{2, 0, 70}, {1, 70, 0}, {0, 70, 200}, {9, 270, 3}, {3, 273, 5}};
  const int64_t rows = 278;
  cuda::ExpertGroup* dentries = testing::to_device(entries);
  const std::vector<uint16_t> x = testing::random_bf16(rows * k, 77, 2.0f);
  DeviceBuffer<uint16_t> dx(x.size()), dop(x.size()), dy(2 * rows * o), dalone(rows * o);
  ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  cuda::QuantizeInputParams q;
  q.x = dx.p, q.x_stride = k, q.operand = dop.p, q.n = static_cast<int>(rows), q.k = static_cast<int>(k);
  ASSERT_EQ(cuda::launch_quantize_input(q), cudaSuccess);
  ASSERT_EQ(cudaMemset(dy.p, 0xFF, 2 * rows * o * 2), cudaSuccess);
  cuda::BlockLinearParams p;
  p.n = static_cast<int>(rows), p.k = static_cast<int>(k), p.out = static_cast<int>(o), p.fp4 = true;
  p.w_stride = k / 2, p.s_stride = rw.s_stride, p.y_stride = o;
  p.route_table = dtable, p.route_maps = dmaps, p.per_route = 2, p.route_count = static_cast<int>(experts);
  p.expert_groups = dentries, p.groups = static_cast<int>(2 * entries.size()), p.max_group_rows = 4096;
  p.op[0] = {.y = dy.p, .x_operand = dop.p};
  p.op[1] = {.y = dy.p + rows * o, .x_operand = dop.p};
  ASSERT_TRUE(cuda::wgmma_applies(p));
  ASSERT_EQ(cuda::launch_block_linear(p), cudaSuccess);
  const std::vector<uint16_t> grouped = testing::from_device(dy.p, 2 * rows * o);
  for (const cuda::ExpertGroup& e : entries)
    for (int part = 0; part < 2; ++part) {
      if (e.count == 0) continue;
      const int64_t at = part * rows * o + e.first * o;
      if (e.expert >= experts) {  // nothing written: the poison stays
        EXPECT_TRUE(std::all_of(grouped.begin() + at, grouped.begin() + at + e.count * o,
                                [](uint16_t v) { return v == 0xFFFF; }));
        continue;
      }
      cuda::BlockLinearParams alone;
      alone.n = e.count, alone.k = p.k, alone.out = p.out, alone.fp4 = true, alone.w_stride = p.w_stride;
      alone.s_stride = p.s_stride, alone.y_stride = o, alone.kernel = cuda::LinearKernel::kWgmma;
      const int64_t m = 2 * e.expert + part;
      alone.op[0] = {
          .w = dw + m * rw.w_bytes, .w_scales = dws + m * rw.s_bytes, .y = dalone.p, .x_operand = dop.p + e.first * k};
      ASSERT_EQ(cuda::launch_block_linear(alone), cudaSuccess);
      const std::vector<uint16_t> want = testing::from_device(dalone.p, e.count * o);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), grouped.begin() + at))
          << "expert " << e.expert << " part " << part;
    }
  cudaFree(dw), cudaFree(dws), cudaFree(dtable), cudaFree(dentries), cudaFree(dmaps);
}

// A decode step's routed experts on the wgmma kernel (grouped fp4 calls up to kFewRows tokens:
// tiles of kExpertRows of an expert's rows, K split by K alone; their input quantised with the
// rows gathered as by their sort, the same bits as without): within the kernel's bound of the
// CPU; a row's outputs the same bits whatever else the step routes to its expert or to others
// (alone as one token's call, among its expert's 37 rows, in a step of 64); entries without rows,
// or with an id outside the table, write nothing. Shapes: K split 2 (2304 x 5120: w1 and w3 as two
// parts), 4 (256 x 8192), 1 (1000 x 2304; 1000 x 1216, some scales past the folded multiply's range).
TEST(CudaLinear, ExpertRowsOfADecodeStep) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  std::mt19937 rng(53);
  for (const auto& [o, k] : {std::pair<int64_t, int64_t>{2304, 5120}, {256, 8192}, {1000, 2304}, {1000, 1216}}) {
    const int64_t experts = 4, parts = 2, rows = 64;
    RandomWeights rw(rng, static_cast<int>(parts * experts), o, k, /*fp4=*/true);
    if (k == 1216)
      for (size_t i = 0; i < rw.ws.size(); i += 97) rw.ws[i] = static_cast<uint8_t>(129 + rng() % 4);
    uint8_t *dw = testing::to_device(rw.w), *dws = testing::to_device(rw.ws);
    std::vector<cuda::RoutedWeight> table(parts * experts);
    for (int64_t m = 0; m < parts * experts; ++m) table[m] = {dw + m * rw.w_bytes, dws + m * rw.s_bytes};
    cuda::RoutedWeight* dtable = testing::to_device(table);
    std::vector<uint8_t> maps(parts * experts * cuda::kTensorMapBytes + 64);  // the TMA's maps, 64-byte aligned
    uint8_t* map0 = maps.data() + (64 - reinterpret_cast<uintptr_t>(maps.data()) % 64) % 64;
    for (int64_t m = 0; m < parts * experts; ++m)
      ASSERT_TRUE(cuda::wgmma_weight_map(map0 + m * cuda::kTensorMapBytes, dw + m * rw.w_bytes, static_cast<int>(o),
                                         static_cast<int>(k), k / 2, /*fp4=*/true));
    uint8_t* dmaps = testing::to_device(std::vector<uint8_t>(map0, map0 + parts * experts * cuda::kTensorMapBytes));
    const std::vector<uint16_t> x = testing::random_bf16(rows * k, 600 + k, 2.0f);
    DeviceBuffer<uint16_t> dx(x.size()), dop(x.size()), dy(parts * rows * o);
    ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::QuantizeInputParams q{
        .x = dx.p, .x_stride = k, .operand = dop.p, .n = static_cast<int>(rows), .k = static_cast<int>(k)};
    ASSERT_EQ(cuda::launch_quantize_input(q), cudaSuccess);
    {  // the rows gathered as they are quantised (the experts' inputs in expert order): the same bits
      std::vector<int32_t> reversed(rows);
      for (int64_t i = 0; i < rows; ++i) reversed[i] = static_cast<int32_t>(rows - 1 - i);
      int32_t* drows = testing::to_device(reversed);
      DeviceBuffer<uint16_t> dgathered(x.size());
      cuda::QuantizeInputParams g = q;
      g.x_rows = drows, g.operand = dgathered.p;
      ASSERT_EQ(cuda::launch_quantize_input(g), cudaSuccess);
      const std::vector<uint16_t> direct = testing::from_device(dop.p, x.size()),
                                  gathered = testing::from_device(dgathered.p, x.size());
      for (int64_t i = 0; i < rows; ++i)
        ASSERT_TRUE(
            std::equal(gathered.begin() + i * k, gathered.begin() + (i + 1) * k, direct.begin() + (rows - 1 - i) * k))
            << "gathered row " << i;
      cudaFree(drows);
    }
    // The step's entries (expert, first row, rows), sorted by expert as the device groups them.
    using Entries = std::vector<cuda::ExpertGroup>;
    const auto run = [&](const Entries& entries, int64_t step_rows) {
      EXPECT_EQ(cudaMemset(dy.p, 0xFF, parts * rows * o * 2), cudaSuccess);  // the poison
      cuda::ExpertGroup* dentries = testing::to_device(entries);
      cuda::BlockLinearParams p;
      p.n = static_cast<int>(step_rows), p.k = static_cast<int>(k), p.out = static_cast<int>(o), p.fp4 = true;
      p.w_stride = k / 2, p.s_stride = rw.s_stride, p.y_stride = o;
      p.route_table = dtable, p.route_maps = dmaps, p.per_route = static_cast<int>(parts);
      p.route_count = static_cast<int>(experts), p.expert_groups = dentries;
      p.groups = static_cast<int>(parts * entries.size()), p.max_group_rows = static_cast<int>(step_rows);
      for (int64_t part = 0; part < parts; ++part) p.op[part] = {.y = dy.p + part * rows * o, .x_operand = dop.p};
      EXPECT_TRUE(cuda::wgmma_applies(p));
      EXPECT_EQ(cuda::launch_block_linear(p), cudaSuccess);
      cudaFree(dentries);
      return testing::from_device(dy.p, parts * rows * o);
    };
    const Entries step = {{1, 0, 20}, {3, 20, 0}, {2, 20, 1}, {0, 21, 37}, {9, 58, 2}, {3, 60, 4}};
    const std::vector<uint16_t> all = run(step, rows);
    const auto output = [&](const std::vector<uint16_t>& y, int64_t part, int64_t row) {
      return std::vector<uint16_t>(y.begin() + (part * rows + row) * o, y.begin() + (part * rows + row + 1) * o);
    };
    std::vector<uint16_t> got, want;
    for (const cuda::ExpertGroup& e : step)
      for (int64_t part = 0; part < parts; ++part)
        for (int64_t row = e.first; row < e.first + e.count; ++row) {
          const std::vector<uint16_t> y = output(all, part, row);
          if (e.expert >= experts) {  // nothing written: the poison stays
            EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](uint16_t v) { return v == 0xFFFF; })) << "row " << row;
            continue;
          }
          if (row > e.first + 2) continue;  // three rows an expert against the CPU
          const int64_t m = parts * e.expert + part;
          LinearWeight lw{LinearFormat::kFp4, o, k,
                          TensorView::contiguous(rw.w.data() + m * rw.w_bytes, DType::kU8, {o, k / 2}),
                          TensorView::contiguous(rw.ws.data() + m * rw.s_bytes, DType::kU8, {o, k / 32})};
          std::vector<uint16_t> cpu_row(o);
          cpu.linear({TensorView::contiguous(const_cast<uint16_t*>(x.data() + row * k), DType::kBF16, {1, k}), &lw,
                      TensorView::contiguous(cpu_row.data(), DType::kBF16, {1, o})});
          got.insert(got.end(), y.begin(), y.end()), want.insert(want.end(), cpu_row.begin(), cpu_row.end());
        }
    const Agreement a = agreement(got, want, kWgmmaRmsTolerance);
    EXPECT_EQ(a.outside, 0) << o << "x" << k;
    EXPECT_GE(a.equal, static_cast<int>(want.size() * kWgmmaBitEqual)) << o << "x" << k;
    std::printf("fp4 %5ld x %5ld experts (decode): %5.1f %% bit-equal, max %d ulp, max |error| / rms %.2g\n",
                static_cast<long>(o), static_cast<long>(k), 100.0 * a.equal / want.size(), a.worst, a.max_rel);
    // Row 30 (expert 0's) as one token's call, its expert's rows alone, and row 20 (expert 2's only).
    for (const auto& [entries, step_rows, row] : {std::tuple{Entries{{0, 30, 1}}, int64_t{31}, int64_t{30}},
                                                  {Entries{{0, 21, 37}}, rows, int64_t{30}},
                                                  {Entries{{2, 20, 1}, {0, 21, 37}}, rows, int64_t{20}}})
      for (int64_t part = 0; part < parts; ++part)
        EXPECT_EQ(output(run(entries, step_rows), part, row), output(all, part, row))
            << o << "x" << k << ": row " << row << " part " << part << " differs from the step of " << rows;
    cudaFree(dw), cudaFree(dws), cudaFree(dtable), cudaFree(dmaps);
  }
}

// The weights as bf16 for cuBLAS (a prefill chunk's linears): every code (but e4m3's NaN) times its
// block's scale, exactly, for fp8 and fp4, from aligned rows and from rows at an odd offset.
TEST(CudaDequant, WeightsAsBf16AreExact) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(21);
  for (const bool fp4 : {false, true})
    for (const int offset : {0, 1}) {
      const int rows = 96, k = 320, row_bytes = fp4 ? k / 2 : k, stride = row_bytes + offset;
      const int scale_rows = fp4 ? rows : (rows + 31) / 32;
      std::vector<uint8_t> codes(static_cast<size_t>(rows) * stride + offset), scales(scale_rows * (k / 32));
      for (uint8_t& c : codes) {
        c = static_cast<uint8_t>(rng());
        if (!fp4 && (c & 0x7F) == 0x7F) c ^= 1;  // every e4m3 code but NaN (no checkpoint holds one)
      }
      for (uint8_t& e : scales) e = static_cast<uint8_t>(rng() % 255);  // 0 .. 254: no NaN scale
      scales[0] = 0, scales[1] = 254;
      std::vector<uint16_t> want(static_cast<size_t>(rows) * k);
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < k; ++j) {
          const uint8_t* row = codes.data() + offset + static_cast<size_t>(r) * stride;
          const float v = fp4 ? e2m1_to_f32(e2m1_packed_code(row, j)) : e4m3_to_f32(row[j]);
          want[static_cast<size_t>(r) * k + j] =
              f32_to_bf16(v * e8m0_to_f32(scales[(fp4 ? r : r / 32) * (k / 32) + j / 32]));
        }
      uint8_t *dcodes = testing::to_device(codes), *dscales = testing::to_device(scales);
      uint16_t* dout = testing::to_device(std::vector<uint16_t>(want.size(), 0xFFFF));
      ASSERT_EQ(cuda::launch_dequant_weight({.codes = dcodes + offset,
                                             .w_stride = stride,
                                             .scales = dscales,
                                             .s_stride = k / 32,
                                             .fp4 = fp4,
                                             .out = dout,
                                             .rows = rows,
                                             .k = k}),
                cudaSuccess);
      EXPECT_EQ(testing::from_device(dout, want.size()), want) << (fp4 ? "fp4" : "fp8") << ", offset " << offset;
      cudaFree(dcodes), cudaFree(dscales), cudaFree(dout);
    }
}

}  // namespace
}  // namespace dsinfer
