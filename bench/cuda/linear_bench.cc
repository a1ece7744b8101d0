// H200 per-kernel benchmark of the block-scaled linear kernels at V4.1-Flash decode shapes, next to
// the ceilings measured in the same run: device-to-device copy bandwidth (bytes read + written) and
// cuBLAS bf16 and fp8 matrix products. Weights rotate over enough copies to miss the L2.
//   linear_bench [--batches 1,8,32,64]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/linear/linear.h"

namespace {

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    const cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

// Median of `reps` timed calls (each `inner` launches), in microseconds per launch.
double time_us(const std::function<void()>& fn, int inner = 20, int reps = 15) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(a));
    for (int i = 0; i < inner; ++i) fn();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2] * 1e3 / inner;
}

void fill_random(void* p, size_t bytes, uint32_t seed, uint8_t mask = 0xFF, uint8_t offset = 0) {
  std::vector<uint8_t> h(bytes);
  std::mt19937 rng(seed);
  for (auto& b : h) b = static_cast<uint8_t>(((rng() & mask) + offset) | (rng() & 0x80 & ~mask));
  CHECK_CUDA(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice));
}

void fill_bf16_normal(void* p, size_t count, uint32_t seed) {
  std::vector<uint16_t> h(count);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : h) {
    const float f = d(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  CHECK_CUDA(cudaMemcpy(p, h.data(), count * 2, cudaMemcpyHostToDevice));
}

double copy_gbs() {
  const size_t bytes = static_cast<size_t>(2) << 30;
  void *src, *dst;
  CHECK_CUDA(cudaMalloc(&src, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  CHECK_CUDA(cudaMemset(src, 1, bytes));
  const double us = time_us([&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 5, 9);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * bytes / us / 1e3;
}

double bf16_matmul_tflops(cublasHandle_t h) {
  const int m = 8192;
  void *a, *b, *c;
  CHECK_CUDA(cudaMalloc(&a, static_cast<size_t>(m) * m * 2));
  CHECK_CUDA(cudaMalloc(&b, static_cast<size_t>(m) * m * 2));
  CHECK_CUDA(cudaMalloc(&c, static_cast<size_t>(m) * m * 2));
  fill_bf16_normal(a, static_cast<size_t>(m) * m, 1);  // random data: zeros run faster than real data
  fill_bf16_normal(b, static_cast<size_t>(m) * m, 2);
  const float alpha = 1, beta = 0;
  const double us = time_us(
      [&] {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &alpha, a, CUDA_R_16BF, m, b, CUDA_R_16BF, m, &beta, c,
                     CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      },
      3, 7);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * m * m * m / us / 1e6;
}

// fp8 e4m3 x e4m3 -> bf16 through cublasLt (A transposed, as its fp8 path requires); -1 if refused.
double fp8_matmul_tflops() {
  const int m = 8192;
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return -1;
  void *a, *b, *c, *ws;
  const size_t ws_bytes = static_cast<size_t>(64) << 20;
  CHECK_CUDA(cudaMalloc(&a, static_cast<size_t>(m) * m));
  CHECK_CUDA(cudaMalloc(&b, static_cast<size_t>(m) * m));
  CHECK_CUDA(cudaMalloc(&c, static_cast<size_t>(m) * m * 2));
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  fill_random(a, static_cast<size_t>(m) * m, 3, 0x3F, 0x20);
  fill_random(b, static_cast<size_t>(m) * m, 4, 0x3F, 0x20);
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, m, m, m);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, m, m, m);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, m, m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  double tflops = -1;
  if (cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found) == CUBLAS_STATUS_SUCCESS &&
      found > 0) {
    const float alpha = 1, beta = 0;
    const double us = time_us(
        [&] { cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &heur.algo, ws, ws_bytes, nullptr); },
        3, 7);
    tflops = 2.0 * m * m * m / us / 1e6;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(ws);
  return tflops;
}

struct Shape {
  const char* name;
  int out, k;
  bool fp4;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches = {1, 8, 32, 64};
  if (argc == 3 && std::string(argv[1]) == "--batches") {
    batches.clear();
    for (std::string s = argv[2]; !s.empty();) {
      const size_t comma = s.find(',');
      batches.push_back(std::stoi(s.substr(0, comma)));
      s = comma == std::string::npos ? "" : s.substr(comma + 1);
    }
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cublasHandle_t blas;
  cublasCreate(&blas);
  const double copy = copy_gbs(), bf16 = bf16_matmul_tflops(blas), fp8 = fp8_matmul_tflops();
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("ceilings: d2d copy %.0f GB/s (read + write), cuBLAS bf16 %.0f TFLOP/s, cuBLASLt fp8 %.0f TFLOP/s\n",
              copy, bf16, fp8);
  const Shape shapes[] = {{"wq_a / shared w1,w3 (fp8)", 2304, 5120, false},
                          {"shared w2 (fp8)", 5120, 2304, false},
                          {"q_lora -> heads wq_b (fp8)", 32768, 1280, false},
                          {"expert w1,w3 (fp4)", 2304, 5120, true},
                          {"expert w2 (fp4)", 5120, 2304, true}};
  std::printf("%-28s %5s %6s %5s %9s %9s %8s %7s\n", "kernel", "out", "k", "n", "us", "GB/s", "% copy", "TFLOP/s");
  for (const Shape& s : shapes) {
    const size_t w_bytes = s.fp4 ? static_cast<size_t>(s.out) * s.k / 2 : static_cast<size_t>(s.out) * s.k;
    const size_t s_bytes = s.fp4 ? static_cast<size_t>(s.out) * (s.k / 32) : static_cast<size_t>((s.out + 31) / 32) * (s.k / 32);
    const int copies = static_cast<int>(std::max<size_t>(4, (static_cast<size_t>(prop.l2CacheSize) * 8) / w_bytes + 1));
    std::vector<uint8_t*> w(copies), ws(copies);
    for (int c = 0; c < copies; ++c) {
      CHECK_CUDA(cudaMalloc(&w[c], w_bytes));
      CHECK_CUDA(cudaMalloc(&ws[c], s_bytes));
      fill_random(w[c], w_bytes, 10 + c, s.fp4 ? 0xFF : 0x6F, s.fp4 ? 0 : 8);
      fill_random(ws[c], s_bytes, 50 + c, 0x07, 118);
    }
    for (const int n : batches) {
      uint16_t *x, *vals, *y;
      float* xs;
      CHECK_CUDA(cudaMalloc(&x, static_cast<size_t>(n) * s.k * 2));
      CHECK_CUDA(cudaMalloc(&vals, static_cast<size_t>(n) * s.k * 2));
      CHECK_CUDA(cudaMalloc(&xs, static_cast<size_t>(n) * s.k / 32 * 4));
      CHECK_CUDA(cudaMalloc(&y, static_cast<size_t>(n) * s.out * 2));
      fill_bf16_normal(x, static_cast<size_t>(n) * s.k, 7);
      dsinfer::cuda::QuantizeInputParams q;
      q.x = x, q.x_stride = s.k, q.values = vals, q.scales = xs, q.n = n, q.k = s.k;
      int turn = 0;
      const double us = time_us([&] {
        CHECK_CUDA(dsinfer::cuda::launch_quantize_input(q));
        dsinfer::cuda::BlockLinearParams p;
        p.x_values = vals, p.x_scales = xs, p.n = n, p.k = s.k, p.fp4 = s.fp4;
        p.w = w[turn], p.w_stride = s.fp4 ? s.k / 2 : s.k, p.w_scales = ws[turn], p.s_stride = s.k / 32;
        p.out = s.out, p.y = y, p.y_stride = s.out;
        CHECK_CUDA(dsinfer::cuda::launch_block_linear(p));
        turn = (turn + 1) % copies;
      });
      const double gbs = (w_bytes + s_bytes) / us / 1e3;
      std::printf("%-28s %5d %6d %5d %9.2f %9.0f %7.1f%% %7.2f\n", s.name, s.out, s.k, n, us, gbs, 100 * gbs / copy,
                  2.0 * n * s.out * s.k / us / 1e6);
      cudaFree(x);
      cudaFree(vals);
      cudaFree(xs);
      cudaFree(y);
    }
    for (int c = 0; c < copies; ++c) {
      cudaFree(w[c]);
      cudaFree(ws[c]);
    }
  }
  CHECK_CUDA(cudaGetLastError());
  cublasDestroy(blas);
  return 0;
}
