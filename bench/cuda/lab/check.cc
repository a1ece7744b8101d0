// cuda_linear_bench check: the kernel lab's variants against the CPU backend at the shapes of the
// library's test (tests/cuda/linear_cuda_test.cc), with its tolerances, and the variants of the
// library's kernels bit for bit against the library's (their knobs change how loads are issued and
// the grid, not the sums). Compiled by the host compiler: the CPU backend's headers use fmt.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "core/float_formats.h"
#include "lab/lab.h"

namespace dsinfer::cuda::lab {
namespace {

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) {
    if (cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// As testing::random_bf16: normal values, 1 % zeros and 1 % a thousand times larger.
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const int p = pick(rng);
    x = f32_to_bf16(p == 0 ? 0.0f : p == 1 ? normal(rng) * 1000.0f : normal(rng));
  }
  return v;
}

int ulps(uint16_t a, uint16_t b) {
  const auto key = [](uint16_t x) { return x & 0x8000 ? -static_cast<int>(x & 0x7FFF) : static_cast<int>(x); };
  return std::abs(key(a) - key(b));
}

struct Agreement {
  int worst = 0, equal = 0, outside = 0;
  double max_rel = 0;
};
// As the library's test: within 2 bf16 ulps, or within rms_tolerance of the outputs' RMS.
Agreement agreement(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, double rms_tolerance) {
  double sq = 0;
  for (uint16_t v : want) sq += static_cast<double>(bf16_to_f32(v)) * bf16_to_f32(v);
  const double rms = std::sqrt(sq / static_cast<double>(want.size()));
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

struct Variant {
  const char* name;
  LinearKernel library;  // the library kernel it must equal bit for bit (kAuto: none, wgmma)
  LinearKnobs knobs;
  int gemv_rows = 0;
  int wgmma_variant = -1;  // >= 0: the wgmma kernel
};

}  // namespace

int check() {
  CpuBackend cpu(0);
  std::mt19937 rng(11);
  struct Shape {
    int out, k;
    bool fp4;
  };
  const std::vector<Variant> variants = {
      {"fma U4", LinearKernel::kFma, {4, 4}},         {"gemv deep", LinearKernel::kGemv, {4, 4}},
      {"gemv1 C2", LinearKernel::kGemv, {2, 2}, 1},   {"gemv1 C8", LinearKernel::kGemv, {2, 8}, 1},
      {"gemv1 deep", LinearKernel::kGemv, {4, 4}, 1}, {"gemv8 deep", LinearKernel::kGemv, {4, 4}, 8},
      {"wgmma0", LinearKernel::kAuto, {}, 0, 0},      {"wgmma1", LinearKernel::kAuto, {}, 0, 1},
      {"wgmma2", LinearKernel::kAuto, {}, 0, 2},      {"wgmma3", LinearKernel::kAuto, {}, 0, 3},
  };
  int failures = 0;
  const auto fail = [&](bool ok, const std::string& what) {
    if (!ok) std::printf("FAILED: %s\n", what.c_str()), ++failures;
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
    cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dws.p, ws.data(), ws.size(), cudaMemcpyHostToDevice);
    for (const int n : {1, 3, 4, 8}) {
      const std::vector<uint16_t> x = random_bf16(static_cast<size_t>(n * k), 100 + n, 2.0f);
      std::vector<uint16_t> want(n * o);
      const std::vector<uint16_t> poison(n * o, 0xFFFF);  // every output must be written
      cpu.linear({TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBF16, {n, k}), &lw,
                  TensorView::contiguous(want.data(), DType::kBF16, {n, o})});
      DeviceBuffer<uint16_t> dx(x.size()), dvals(x.size()), dy(want.size());
      DeviceBuffer<uint8_t> dcodes(x.size());
      DeviceBuffer<float> dxs(n * k / 32);
      cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
      QuantizeInputParams q;
      q.x = dx.p, q.x_stride = k, q.values = dvals.p, q.codes = dcodes.p, q.scales = dxs.p, q.n = n;
      q.k = static_cast<int>(k);
      fail(launch_quantize_input(q) == cudaSuccess, "quantize input");
      BlockLinearParams p;
      p.op[0] = {dvals.p, dxs.p, dw.p, dws.p, dy.p, dcodes.p};
      p.n = n, p.k = static_cast<int>(k), p.fp4 = s.fp4, p.w_stride = s.fp4 ? k / 2 : k, p.s_stride = k / 32;
      p.out = static_cast<int>(o), p.y_stride = o;
      const auto run = [&](const auto& launch) {
        cudaMemcpy(dy.p, poison.data(), poison.size() * 2, cudaMemcpyHostToDevice);
        const cudaError_t e = launch();
        std::vector<uint16_t> out(poison.size());
        if (e != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(out.data(), dy.p, out.size() * 2, cudaMemcpyDeviceToHost) != cudaSuccess)
          out.clear();
        return out;
      };
      for (const Variant& v : variants) {
        const bool wgmma = v.wgmma_variant >= 0;
        if (wgmma ? n > 8 || k % 256 != 0 : v.library == LinearKernel::kGemv && n > 4) continue;  // as the test
        char label[96];
        std::snprintf(label, sizeof label, "%s %5ld x %5ld n=%d %-10s", s.fp4 ? "fp4" : "fp8", static_cast<long>(o),
                      static_cast<long>(k), n, v.name);
        p.gemv_rows = v.gemv_rows;
        std::vector<uint16_t> got;
        if (wgmma) {
          WgmmaKnobs knobs;
          knobs.variant = v.wgmma_variant, knobs.ctas_per_sm = 4 << v.wgmma_variant;
          DeviceBuffer<float> workspace(block_linear_wgmma_workspace_bytes(p, knobs) / 4);
          knobs.workspace = workspace.p;
          got = run([&] { return block_linear_wgmma(p, knobs); });
        } else {
          got = run([&] {
            return v.library == LinearKernel::kFma ? block_linear_fma(p, v.knobs) : block_linear_gemv(p, v.knobs);
          });
        }
        fail(!got.empty(), std::string(label) + ": launch");
        if (got.empty()) continue;
        // Hopper's fp8 tensor cores keep fewer bits while summing a block's 32 products.
        const Agreement a = agreement(got, want, wgmma ? 1e-2 : 1e-3);
        fail(a.outside == 0, std::string(label) + ": outputs outside the tolerance");
        fail(a.equal >= static_cast<int>(got.size() * (wgmma ? 0.9 : 0.95)),
             std::string(label) + ": too few bit-equal");
        bool same = true;
        if (!wgmma) {
          p.kernel = v.library;
          same = run([&] { return launch_block_linear(p); }) == got;
          p.kernel = LinearKernel::kAuto;
          fail(same, std::string(label) + ": differs from the library's kernel");
        }
        std::printf("%s: %5.1f %% bit-equal to the CPU, max %d ulp, max |error| / rms %.2g%s\n", label,
                    100.0 * a.equal / static_cast<double>(got.size()), a.worst, a.max_rel,
                    wgmma  ? ""
                    : same ? ", the library's bits"
                           : ", NOT the library's bits");
      }
    }
  }
  BlockLinearParams bad;
  bad.k = 33;
  WgmmaKnobs none;
  fail(block_linear_wgmma(bad, none) == cudaErrorInvalidValue && block_linear_fma(bad, {}) == cudaErrorInvalidValue,
       "k = 33 refused");
  std::printf("lab check: %d failure(s)\n", failures);
  return failures;
}

}  // namespace dsinfer::cuda::lab
