// CUDA dense linear (bf16 weights, bf16 or f32 output, fp8 weights dequantised) against the CPU
// backend. Two kernels: the double sums (DenseLinearParams::exact, and wherever the tensor cores do
// not apply) equal the CPU's outputs but for the rare double-rounding difference of the summation
// order; the bf16 tensor-core kernel sums in fp32 in an order fixed by the matrix's shape, within
// the bound of expect_within_tensor_core_bound.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/linear/dense.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

namespace dsinfer {
namespace {

using testing::from_device;
using testing::to_device;

// A weight matrix on the host in one of the dense formats, fp8 codes drawn over every finite
// magnitude (subnormals included).
struct HostWeight {
  LinearFormat format;
  int64_t o, k;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> codes, scales;

  HostWeight(LinearFormat f, int64_t rows, int64_t cols, uint64_t seed) : format(f), o(rows), k(cols) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    if (fp8()) {
      codes.resize(o * k), scales.resize(((o + 31) / 32) * (k / 32));
      for (auto& b : codes) b = static_cast<uint8_t>((rng() & 0x80) | (rng() % 0x7F));
      for (auto& b : scales) b = static_cast<uint8_t>(120 + rng() % 10);
    } else {
      bf16 = testing::random_bf16(o * k, seed);
    }
  }
  bool fp8() const { return format == LinearFormat::kFp8AsBf16; }
  // The same matrix with every sign cleared: the CPU's linear of |W| and |x| gives each output's
  // sum of |products|, the scale of its rounding error.
  HostWeight magnitudes() const {
    HostWeight m = *this;
    for (auto& b : m.codes) b &= 0x7F;
    for (auto& v : m.bf16) v &= 0x7FFF;
    return m;
  }
  LinearWeight view() {
    return {format, o, k,
            fp8() ? TensorView::contiguous(codes.data(), DType::kU8, {o, k})
                  : TensorView::contiguous(bf16.data(), DType::kBF16, {o, k}),
            fp8() ? TensorView::contiguous(scales.data(), DType::kU8, {(o + 31) / 32, k / 32}) : TensorView{}};
  }
  void* weights_to_device() const { return fp8() ? static_cast<void*>(to_device(codes)) : to_device(bf16); }
};

float bf16_value(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The tensor-core kernel's bound, per output: within one bf16 step of the CPU's output (bf16
// outputs) plus 2^-16 of the output's sum of |products| (fp32 sums of up to a few thousand exact
// products in a different order), and for bf16 outputs at least 99 % bit-equal. Returns how many
// differ.
int expect_within_tensor_core_bound(const std::vector<float>& got, const std::vector<float>& want,
                                    const std::vector<float>& magnitude, bool bf16_out, const std::string& what) {
  int differ = 0;
  for (size_t j = 0; j < got.size(); ++j) {
    differ += got[j] != want[j];
    const double step = bf16_out ? std::ldexp(1.0, std::ilogb(want[j] == 0 ? 1e-30f : want[j]) - 7) : 0.0;
    EXPECT_LE(std::fabs(static_cast<double>(got[j]) - want[j]), step + std::ldexp(magnitude[j], -16) + 1e-30)
        << what << " output " << j << ": " << got[j] << " vs the CPU's " << want[j];
  }
  if (bf16_out) {
    EXPECT_LE(differ, static_cast<int>(got.size() / 100) + 1) << what;
  }
  return differ;
}

// x . W^T on the device with one of the kernels: n rows of bf16 x (or f32 with x_f32).
std::vector<float> run_dense(const HostWeight& w, void* dw, uint8_t* dws, const void* dx, bool x_f32, int n,
                             bool f32_out, bool exact) {
  double* scratch = nullptr;
  EXPECT_EQ(cudaMalloc(&scratch, cuda::dense_linear_scratch_bytes(n, static_cast<int>(w.k), 1)), cudaSuccess);
  void* dy = nullptr;
  EXPECT_EQ(cudaMalloc(&dy, n * w.o * 4), cudaSuccess);
  cuda::DenseLinearParams p;
  p.x = dx, p.x_f32 = x_f32, p.x_stride = w.k, p.exact = exact, p.x_f64 = scratch, p.fp8_weights = w.fp8();
  p.w = dw, p.w_stride = w.k, p.w_scales = dws, p.s_stride = w.k / 32, p.y = dy, p.y_f32 = f32_out;
  p.y_stride = w.o, p.n = n, p.k = static_cast<int>(w.k), p.out = static_cast<int>(w.o);
  EXPECT_EQ(cuda::dense_linear_on_tensor_cores(p), !exact && !x_f32);
  EXPECT_EQ(cuda::launch_dense_linear(p), cudaSuccess);
  std::vector<float> y(n * w.o);
  if (f32_out) {
    y = from_device(static_cast<float*>(dy), y.size());
  } else {
    const std::vector<uint16_t> h = from_device(static_cast<uint16_t*>(dy), y.size());
    for (size_t i = 0; i < h.size(); ++i) y[i] = bf16_value(h[i]);
  }
  cudaFree(scratch);
  cudaFree(dy);
  return y;
}

TEST(CudaDenseLinear, MatchesTheCpuBackend) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  std::mt19937 rng(3);
  struct Case {
    LinearFormat format;
    int64_t o, k;
  };
  // The head's format (f32 out) at a split K; bf16 and fp8 rows that end in a part tile.
  for (const Case c : {Case{LinearFormat::kBf16AsF32, 2048, 5120}, Case{LinearFormat::kBf16, 1000, 1024},
                       Case{LinearFormat::kFp8AsBf16, 1000, 1024}}) {
    const bool f32 = c.format == LinearFormat::kBf16AsF32;
    HostWeight w(c.format, c.o, c.k, 4), mag = w.magnitudes();
    LinearWeight lw = w.view(), lmag = mag.view();
    void* dw = w.weights_to_device();
    uint8_t* dws = w.fp8() ? to_device(w.scales) : nullptr;
    for (const int n : {1, 3, 5, 8, 37, 64, 70}) {
      std::vector<uint16_t> xb = testing::random_bf16(n * c.k, 10 + n, 2.0f), xabs = xb;
      for (auto& v : xabs) v &= 0x7FFF;
      std::vector<float> xf(n * c.k);  // f32 activations: the double sums only
      for (auto& v : xf) v = std::uniform_real_distribution<float>(-2, 2)(rng);
      const DType out_type = f32 ? DType::kF32 : DType::kBF16;
      const auto cpu_linear = [&](const void* x, DType xt, LinearWeight* lwp) {
        std::vector<float> y32(n * c.o);
        std::vector<uint16_t> y16(n * c.o);
        cpu.linear({TensorView::contiguous(const_cast<void*>(x), xt, {n, c.k}), lwp,
                    f32 ? TensorView::contiguous(y32.data(), out_type, {n, c.o})
                        : TensorView::contiguous(y16.data(), out_type, {n, c.o})});
        if (!f32)
          for (size_t i = 0; i < y16.size(); ++i) y32[i] = bf16_value(y16[i]);
        return y32;
      };
      const std::vector<float> want = cpu_linear(xb.data(), DType::kBF16, &lw);
      const std::vector<float> magnitude = cpu_linear(xabs.data(), DType::kBF16, &lmag);
      uint16_t* dx = to_device(xb);
      const std::string what = fmt::format("format {} n={}", static_cast<int>(c.format), n);

      const int tc = expect_within_tensor_core_bound(run_dense(w, dw, dws, dx, false, n, f32, false), want, magnitude,
                                                     !f32, what + " (tensor cores)");
      // The double sums: every output within one bf16 step (f32: 1e-6 relative), at most 0.1 % not equal.
      const auto expect_exact = [&](const std::vector<float>& got, const std::vector<float>& ref, const char* how) {
        int differ = 0;
        for (size_t j = 0; j < got.size(); ++j) {
          differ += got[j] != ref[j];
          const double tol =
              f32 ? 1e-6 * std::fabs(ref[j]) + 1e-30 : std::ldexp(1.0, std::ilogb(ref[j] == 0 ? 1e-30f : ref[j]) - 7);
          EXPECT_LE(std::fabs(static_cast<double>(got[j]) - ref[j]), tol) << what << how << " output " << j;
        }
        EXPECT_LE(differ, static_cast<int>(got.size() / 1000) + 1) << what << how;
        return differ;
      };
      const int ex = expect_exact(run_dense(w, dw, dws, dx, false, n, f32, true), want, " (double sums)");
      std::printf("dense %s: of %ld outputs, %d (tensor cores) and %d (double sums) differ from the CPU\n",
                  what.c_str(), static_cast<long>(n * c.o), tc, ex);
      if (f32) {  // f32 activations (the compressor's format): the double sums
        float* dxf = to_device(xf);
        const std::vector<float> want_f = cpu_linear(xf.data(), DType::kF32, &lw);
        expect_exact(run_dense(w, dw, dws, dxf, true, n, f32, false), want_f, " (f32 input)");
        cudaFree(dxf);
      }
      cudaFree(dx);
    }
    cudaFree(dw);
    cudaFree(dws);
  }
}

// The tensor-core kernel's bits for one activation row do not depend on the other rows of the
// launch, nor on the run (issue 18's batch invariance): at the head's shape (K not split), a
// split-K bf16 shape, and wo_a's eight fp8 groups.
TEST(CudaDenseLinear, TensorCoreRowsDoNotDependOnTheBatch) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  struct Case {
    LinearFormat format;
    int64_t o, k;
    int groups;
  };
  for (const Case c : {Case{LinearFormat::kBf16AsF32, 32768, 1024, 1}, Case{LinearFormat::kBf16, 4096, 5120, 1},
                       Case{LinearFormat::kFp8AsBf16, 1024, 4096, 8}}) {
    const bool f32 = c.format == LinearFormat::kBf16AsF32;
    std::vector<HostWeight> w;
    cuda::DenseLinearParams p;
    for (int g = 0; g < c.groups; ++g) {
      w.emplace_back(c.format, c.o, c.k, 40 + g);
      p.group_w[g] = w[g].weights_to_device();
      if (w[g].fp8()) p.group_scales[g] = to_device(w[g].scales);
    }
    const int64_t width = c.groups * c.k, out = c.groups * c.o;
    const std::vector<uint16_t> x = testing::random_bf16(64 * width, 7, 2.0f);
    uint16_t* dx = to_device(x);
    void* dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dy, 64 * out * 4), cudaSuccess);
    p.x = dx, p.x_stride = width, p.fp8_weights = w[0].fp8(), p.w = p.group_w[0], p.w_scales = p.group_scales[0];
    p.w_stride = c.k, p.s_stride = c.k / 32, p.y = dy, p.y_f32 = f32, p.y_stride = out, p.k = static_cast<int>(c.k);
    p.out = static_cast<int>(out), p.group_rows = c.groups > 1 ? static_cast<int>(c.o) : 0;
    const size_t bytes = f32 ? 4 : 2;
    const auto run = [&](int n, int first) {  // rows first .. first + n - 1 of x
      p.x = dx + first * width, p.n = n;
      EXPECT_TRUE(cuda::dense_linear_on_tensor_cores(p));
      EXPECT_EQ(cudaMemset(dy, 0, 64 * out * 4), cudaSuccess);
      EXPECT_EQ(cuda::launch_dense_linear(p), cudaSuccess);
      return from_device(static_cast<uint8_t*>(dy), n * out * bytes);
    };
    const std::vector<uint8_t> all = run(64, 0);
    EXPECT_EQ(run(64, 0), all) << "run to run";
    for (const int n : {1, 7, 8, 9, 63})
      for (const int first : {0, 64 - n}) {
        const std::vector<uint8_t> some = run(n, first);
        EXPECT_EQ(0, std::memcmp(some.data(), all.data() + first * out * bytes, some.size()))
            << "format " << static_cast<int>(c.format) << ": rows " << first << ".." << first + n - 1
            << " alone differ from the same rows among 64";
      }
    for (int g = 0; g < c.groups; ++g) {
      cudaFree(const_cast<void*>(p.group_w[g]));
      cudaFree(const_cast<uint8_t*>(p.group_scales[g]));
    }
    cudaFree(dx);
    cudaFree(dy);
  }
}

// A block-diagonal call (wo_a's groups in one launch, each group's matrix its own allocation)
// against the CPU's per-group linears: fp8 weights whose groups end in a part tile (the tensor
// cores) and bf16 weights of a width that is no multiple of 16 (the double sums, one weight at a
// time).
TEST(CudaDenseLinear, GroupedCallIsBlockDiagonal) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CpuBackend cpu(0);
  const int64_t n = 3, groups = 3, o = 40;
  for (const bool fp8 : {true, false}) {
    const int64_t k = fp8 ? 256 : 1000;
    const std::vector<uint16_t> x = testing::random_bf16(n * groups * k, 20, 2.0f);
    std::vector<uint16_t> want(n * groups * o);
    std::vector<HostWeight> w;
    cuda::DenseLinearParams p;
    for (int64_t g = 0; g < groups; ++g) {
      w.emplace_back(fp8 ? LinearFormat::kFp8AsBf16 : LinearFormat::kBf16, o, k, 30 + g);
      LinearWeight lw = w[g].view();
      p.group_w[g] = w[g].weights_to_device();
      if (fp8) p.group_scales[g] = to_device(w[g].scales);
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
    EXPECT_EQ(cuda::dense_linear_on_tensor_cores(p), fp8);
    ASSERT_EQ(cuda::launch_dense_linear(p), cudaSuccess);
    const std::vector<uint16_t> got = from_device(dy, want.size());
    int differ = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      differ += got[j] != want[j];
      ASSERT_LE(std::abs(static_cast<int>(got[j]) - static_cast<int>(want[j])), 1) << j;
    }
    EXPECT_LE(differ, 3) << (fp8 ? "fp8" : "bf16");
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
