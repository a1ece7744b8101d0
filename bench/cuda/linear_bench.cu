// H200 per-kernel benchmark at V4.1-Flash decode shapes, next to the ceilings measured in the same
// run: device-to-device copy bandwidth (bytes read + written) and cuBLAS bf16 and fp8 matrix
// products. The block-scaled linear kernels (weights rotating over enough copies to miss the L2),
// the dense kernels (the head; wo_a's eight groups in one launch) and the sparse attention. The
// block-scaled rows are the library's kernels where the variant is what its dispatch runs, else
// the kernel lab's (bench/cuda/lab: wgmma, the other loads-in-flight counts and grids).
//   cuda_linear_bench [--batches 1,8,32,64 | --skip-block-scaled]   (from 65 rows: the wgmma kernel
//   against the weights dequantised for cuBLAS, as prefill chunks ran before it)
//   BENCH_QUICK=1: the library's kernels alone (tiled, mma, the gemv the dispatch would run), not
//   the lab's variants; BENCH_SLICES=20,40,...: the tiled kernel with K slices of at most that many blocks too;
//   BENCH_STAGED=8,32: the tiled kernel's 64-row passes with other parts of a slice staged at once;
//   below 65 rows "auto" is the dispatch's kernel (fp8: the wgmma kernel's decode tiles), and
//   BENCH_WGMMA=1 adds the wgmma kernel's prefill tiles forced
//   cuda_linear_bench check    the lab's variants against the CPU backend (exit status: failures)
//   cuda_linear_bench chain-bits    bf16 wgmma chains against mma.sync chains, bit for bit
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

#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/dense.h"
#include "backends/cuda/kernels/linear/dequant.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "event_timing.h"
#include "lab/lab.h"

namespace {

using dsinfer::bench::median_ms;

// Median microseconds per launch of `inner` back-to-back launches on the default stream.
double time_us(const std::function<void()>& fn, int inner = 20, int reps = 15) {
  return median_ms(
             nullptr,
             [&] {
               for (int i = 0; i < inner; ++i) fn();
             },
             reps) *
         1e3 / inner;
}

// Captures `inner` calls of fn on a stream into a graph and times its replays (as a decode step
// would run): median microseconds per call.
double graph_time_us(const std::function<void(cudaStream_t)>& fn, int inner = 20, int reps = 15) {
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < inner; ++i) fn(s);
  CHECK_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = median_ms(
      s, [&] { CHECK_CUDA(cudaGraphLaunch(exec, s)); }, reps);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return ms * 1e3 / inner;
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

// References for what a launch of this size can reach: an empty kernel (the per-launch floor in a
// graph) and a plain 16-byte-per-thread read of the same bytes.
__global__ void empty_kernel() {}

__global__ void read_kernel(const uint4* p, size_t count, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

struct Shape {
  const char* name;
  int out, k;
  bool fp4;
  int groups;  // matrices per launch (the experts of a token)
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "check") return dsinfer::cuda::lab::check() == 0 ? 0 : 1;
  if (argc == 2 && std::string(argv[1]) == "chain-bits") return dsinfer::cuda::lab::chain_bits() == 0 ? 0 : 1;
  std::vector<int> batches = {1, 8, 32, 64};
  if (argc == 2 && std::string(argv[1]) == "--skip-block-scaled") batches.clear();
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
  const Shape shapes[] = {{"shared w1 (fp8)", 2304, 5120, false, 1},
                          {"shared w1+w3 (fp8, x2)", 2304, 5120, false, 2},
                          {"shared w2 (fp8)", 5120, 2304, false, 1},
                          {"q_lora -> heads wq_b (fp8)", 32768, 1280, false, 1},
                          {"expert w1 (fp4)", 2304, 5120, true, 1},
                          {"6 experts w1+w3 (fp4, x12)", 2304, 5120, true, 12},
                          {"6 experts w2 (fp4, x6)", 5120, 2304, true, 6},
                          {"wkv (fp8)", 512, 5120, false, 1},
                          {"wq_a (fp8)", 1280, 5120, false, 1},
                          {"wo_b (fp8)", 5120, 8192, false, 1}};
  {
    unsigned* sink;
    CHECK_CUDA(cudaMalloc(&sink, 4));
    std::printf("empty kernel in a graph: %.2f us per launch\n",
                graph_time_us([&](cudaStream_t st) { empty_kernel<<<1, 32, 0, st>>>(); }));
    for (const size_t mb : {12, 71, 256}) {
      const size_t bytes = mb << 20;
      std::vector<uint4*> bufs(std::max<size_t>(2, 512 / mb));
      for (auto& b : bufs) CHECK_CUDA(cudaMalloc(&b, bytes));
      int turn = 0;
      const double us = graph_time_us([&](cudaStream_t st) {
        read_kernel<<<prop.multiProcessorCount * 8, 512, 0, st>>>(bufs[turn], bytes / 16, sink);
        turn = (turn + 1) % static_cast<int>(bufs.size());
      });
      std::printf("plain read of %zu MB: %.2f us, %.0f GB/s (%.1f%% of copy)\n", mb, us, bytes / us / 1e3,
                  100 * bytes / us / 1e3 / copy);
      for (auto& b : bufs) cudaFree(b);
    }
    cudaFree(sink);
  }
  std::printf("per call, from CUDA-graph replays of 20 calls over rotating weight copies (L2 misses)\n");
  std::printf("%-28s %5s %6s %5s %-16s %8s %8s %8s %7s\n", "kernel", "out", "k", "n", "variant", "us", "GB/s", "% copy",
              "TFLOP/s");
  const char* only = std::getenv("BENCH_ONLY");  // a shape's name contains it (for a profiler run)
  const bool quick = std::getenv("BENCH_QUICK") != nullptr;
  const auto int_list = [](const char* name) {
    std::vector<int> v;
    if (const char* s = std::getenv(name))
      for (std::string list = s; !list.empty();) {
        const size_t comma = list.find(',');
        v.push_back(std::stoi(list.substr(0, comma)));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
    return v;
  };
  const std::vector<int> slice_sweep = int_list("BENCH_SLICES"), staged_sweep = int_list("BENCH_STAGED");
  for (const Shape& s : shapes) {
    if (batches.empty()) break;
    if (only && !std::strstr(s.name, only)) continue;
    const size_t w_bytes = s.fp4 ? static_cast<size_t>(s.out) * s.k / 2 : static_cast<size_t>(s.out) * s.k;
    const size_t s_bytes =
        s.fp4 ? static_cast<size_t>(s.out) * (s.k / 32) : static_cast<size_t>((s.out + 31) / 32) * (s.k / 32);
    const int copies =
        static_cast<int>(std::max<size_t>(4, static_cast<size_t>(prop.l2CacheSize) * 8 / w_bytes + 1)) + s.groups;
    std::vector<uint8_t*> w(copies), ws(copies);
    for (int c = 0; c < copies; ++c) {
      CHECK_CUDA(cudaMalloc(&w[c], w_bytes));
      CHECK_CUDA(cudaMalloc(&ws[c], s_bytes));
      fill_random(w[c], w_bytes, 10 + c, s.fp4 ? 0xFF : 0x6F, s.fp4 ? 0 : 8);
      fill_random(ws[c], s_bytes, 50 + c, 0x07, 118);
    }
    for (const int n : batches) {
      uint16_t *x, *vals, *y;
      uint8_t* codes;
      float* xs;
      CHECK_CUDA(cudaMalloc(&x, static_cast<size_t>(n) * s.k * 2));
      CHECK_CUDA(cudaMalloc(&vals, static_cast<size_t>(n) * s.k * 2));
      CHECK_CUDA(cudaMalloc(&codes, static_cast<size_t>(n) * s.k));
      CHECK_CUDA(cudaMalloc(&xs, static_cast<size_t>(n) * s.k / 32 * 4));
      CHECK_CUDA(cudaMalloc(&y, static_cast<size_t>(n) * s.out * 2 * s.groups));
      fill_bf16_normal(x, static_cast<size_t>(n) * s.k, 7);
      dsinfer::cuda::QuantizeInputParams q;
      q.x = x, q.x_stride = s.k, q.values = vals, q.codes = codes, q.scales = xs, q.n = n, q.k = s.k;
      float* wgmma_ws = nullptr;
      {
        dsinfer::cuda::BlockLinearParams p;
        p.groups = s.groups, p.n = std::min(n, 8), p.k = s.k, p.out = s.out;
        dsinfer::cuda::lab::WgmmaKnobs knobs;
        knobs.ctas_per_sm = 16;  // the most
        CHECK_CUDA(cudaMalloc(&wgmma_ws, dsinfer::cuda::lab::block_linear_wgmma_workspace_bytes(p, knobs)));
      }
      // in_flight: 0 mma.sync, kTiledVariant the tiled kernel, -1 - v wgmma variant v (the lab), kGemvVariant + c the
      // gemv kernel with chunks_in_flight c, else the FMA kernel with that many loads in flight (the library's at its
      // defaults, else the lab's)
      constexpr int kGemvVariant = 100, kTiledVariant = -1000, kWgmmaForced = -2000;
      uint16_t* operand = nullptr;  // the wgmma kernel's activations (K order) where it is forced below its rows
      CHECK_CUDA(cudaMalloc(&operand, static_cast<size_t>(n) * s.k * 2));
      auto run = [&](bool quantize, int in_flight, int blocks_per_sm, int gemv_rows = 0, int slice_blocks = 0,
                     int staged_blocks = 0, bool auto_kernel = false) {
        int turn = 0;
        return graph_time_us([&](cudaStream_t stream) {
          q.stream = stream;
          if (quantize) CHECK_CUDA(dsinfer::cuda::launch_quantize_input(q));
          dsinfer::cuda::BlockLinearParams p;
          for (int g = 0; g < s.groups; ++g) {
            const int c = (turn + g) % copies;
            p.op[g] = {vals, xs, w[c], ws[c], y + static_cast<size_t>(g) * n * s.out, codes};
            p.op[g].x_operand = vals;  // the wgmma kernel's (its calls quantise into vals alone)
          }
          p.groups = s.groups, p.n = n, p.k = s.k, p.out = s.out, p.fp4 = s.fp4;
          p.w_stride = s.fp4 ? s.k / 2 : s.k, p.s_stride = s.k / 32, p.y_stride = s.out, p.stream = stream;
          p.kernel = in_flight == 0 ? dsinfer::cuda::LinearKernel::kMma : dsinfer::cuda::LinearKernel::kFma;
          p.gemv_rows = gemv_rows;
          if (auto_kernel) {  // the dispatch's own choice
            p.kernel = dsinfer::cuda::LinearKernel::kAuto;
            if (n < dsinfer::cuda::linear_config::wgmma_kernel::kMinRows)  // its decode tiles: the operand apart
              for (int g = 0; g < s.groups; ++g) p.op[g].x_operand = operand;
            CHECK_CUDA(dsinfer::cuda::launch_block_linear(p));
            turn = (turn + s.groups) % copies;
            return;
          }
          if (in_flight == kWgmmaForced) {
            for (int g = 0; g < s.groups; ++g) p.op[g].x_operand = operand;
            p.kernel = dsinfer::cuda::LinearKernel::kWgmma;
            CHECK_CUDA(dsinfer::cuda::launch_block_linear(p));
            turn = (turn + s.groups) % copies;
            return;
          }
          if (in_flight == kTiledVariant) {
            p.kernel = dsinfer::cuda::LinearKernel::kTiled, p.tiled_slice_blocks = slice_blocks;
            p.tiled_staged_blocks = staged_blocks;
            CHECK_CUDA(dsinfer::cuda::launch_block_linear(p));
            turn = (turn + s.groups) % copies;
            return;
          }
          dsinfer::cuda::lab::LinearKnobs knobs;
          knobs.chunks_in_flight = std::max(in_flight, 1), knobs.blocks_per_sm = blocks_per_sm;
          if (in_flight > kGemvVariant)
            p.kernel = dsinfer::cuda::LinearKernel::kGemv, knobs.chunks_in_flight = in_flight - kGemvVariant;
          const dsinfer::cuda::lab::LinearKnobs library;
          const bool lab = in_flight != 0 && (knobs.chunks_in_flight != library.chunks_in_flight ||
                                              knobs.blocks_per_sm != library.blocks_per_sm);
          if (in_flight < 0) {
            dsinfer::cuda::lab::WgmmaKnobs w;
            w.workspace = wgmma_ws, w.variant = -1 - in_flight, w.ctas_per_sm = blocks_per_sm;
            CHECK_CUDA(dsinfer::cuda::lab::block_linear_wgmma(p, w));
          } else if (lab && p.kernel == dsinfer::cuda::LinearKernel::kGemv) {
            CHECK_CUDA(dsinfer::cuda::lab::block_linear_gemv(p, knobs));
          } else if (lab) {
            CHECK_CUDA(dsinfer::cuda::lab::block_linear_fma(p, knobs));
          } else {
            CHECK_CUDA(dsinfer::cuda::launch_block_linear(p));
          }
          turn = (turn + s.groups) % copies;
        });
      };
      auto report = [&](const char* variant, double us) {
        const double gbs = s.groups * (w_bytes + s_bytes) / us / 1e3;
        std::printf("%-28s %5d %6d %5d %-16s %8.2f %8.0f %7.1f%% %7.2f\n", s.name, s.out, s.k, n, variant, us, gbs,
                    100 * gbs / copy, 2.0 * s.groups * n * s.out * s.k / us / 1e6);
      };
      if (n >= dsinfer::cuda::linear_config::wgmma_kernel::kMinRows) {                // a prefill chunk's rows
        q.values = nullptr, q.codes = nullptr, q.scales = nullptr, q.operand = vals;  // what the kernel reads
        CHECK_CUDA(dsinfer::cuda::launch_quantize_input(q));
        report("wgmma", run(false, 1, 0, 0, 0, 0, /*auto_kernel=*/true));
        report("quant + wgmma", run(true, 1, 0, 0, 0, 0, /*auto_kernel=*/true));
        // What the dispatch ran before the wgmma kernel: the weights dequantised to bf16 for each
        // call, then cuBLAS's bf16 GEMM on the activations' values (the input act_quant left out).
        uint16_t* wb = nullptr;
        CHECK_CUDA(cudaMalloc(&wb, static_cast<size_t>(s.out) * s.k * 2));
        int turn = 0;
        const double us = graph_time_us([&](cudaStream_t stream) {
          cublasSetStream(blas, stream);
          for (int g = 0; g < s.groups; ++g) {
            const int c = (turn + g) % copies;
            CHECK_CUDA(dsinfer::cuda::launch_dequant_weight({.codes = w[c],
                                                             .w_stride = s.fp4 ? s.k / 2 : s.k,
                                                             .scales = ws[c],
                                                             .s_stride = s.k / 32,
                                                             .fp4 = s.fp4,
                                                             .out = wb,
                                                             .rows = s.out,
                                                             .k = s.k,
                                                             .stream = stream}));
            const float one = 1.0f, zero = 0.0f;
            cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.out, n, s.k, &one, wb, CUDA_R_16BF, s.k, vals, CUDA_R_16BF,
                         s.k, &zero, y + static_cast<size_t>(g) * n * s.out, CUDA_R_16BF, s.out, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
          }
          turn = (turn + s.groups) % copies;
        });
        report("dequant + cuBLAS", us);
        cudaFree(wb);
        cudaFree(x), cudaFree(vals), cudaFree(codes), cudaFree(wgmma_ws), cudaFree(xs), cudaFree(y), cudaFree(operand);
        continue;
      }
      report("tiled", run(false, kTiledVariant, 0));
      for (const int slice : slice_sweep) {  // BENCH_SLICES: other splits
        char variant[32];
        std::snprintf(variant, sizeof variant, "tiled slice<=%d", slice);
        report(variant, run(false, kTiledVariant, 0, 0, slice));
      }
      for (const int staged : n > 32 ? staged_sweep : std::vector<int>{}) {  // BENCH_STAGED: other staged parts
        char variant[32];
        std::snprintf(variant, sizeof variant, "tiled staged %d", staged);
        report(variant, run(false, kTiledVariant, 0, 0, 0, staged));
      }
      report("quant + tiled", run(true, kTiledVariant, 0));
      if (s.k % 64 == 0) {  // the wgmma kernel's activations, quantised once, apart
        dsinfer::cuda::QuantizeInputParams qo = q;
        qo.values = nullptr, qo.codes = nullptr, qo.scales = nullptr, qo.operand = operand, qo.stream = nullptr;
        CHECK_CUDA(dsinfer::cuda::launch_quantize_input(qo));
      }
      report("auto", run(false, 1, 0, 0, 0, 0, /*auto_kernel=*/true));  // fp8: the wgmma kernel's decode tiles
      if (std::getenv("BENCH_WGMMA") && s.k % 64 == 0 &&
          s.groups <= dsinfer::cuda::linear_config::wgmma_kernel::kMaxParts)
        report("wgmma (forced)", run(false, kWgmmaForced, 0));
      if (quick) {
        if (n <= 4) report("gemv (library)", run(false, kGemvVariant + 2, 4));
        report("mma", run(false, 0, 4));
        cudaFree(x), cudaFree(vals), cudaFree(codes), cudaFree(wgmma_ws), cudaFree(xs), cudaFree(y), cudaFree(operand);
        continue;
      }
      if (n <= 8)  // the CUDA-core kernel's best variants, linear kernel alone
        for (const int in_flight : {2, 4}) {
          char variant[32];
          std::snprintf(variant, sizeof variant, "fma U%d", in_flight);
          report(variant, run(false, in_flight, 4));
        }
      if (n <= 8)  // the f16 tensor-core GEMV: steps in flight x CTAs per SM
        for (const int deep : {2, 4})
          for (const int ctas : {2, 3, 4, 8}) {
            char variant[32];
            std::snprintf(variant, sizeof variant, "gemv%s C%d", deep == 4 ? " deep" : "", ctas);
            report(variant, run(false, kGemvVariant + deep, ctas, 1));
          }
      if (n == 1)  // 8 rows a warp (the grid is one warp per 8 rows: no CTA count)
        for (const int deep : {2, 4}) report(deep == 4 ? "gemv8 deep" : "gemv8", run(false, kGemvVariant + deep, 4, 8));
      if (n <= 8)
        for (const int variant : {0, 1, 2, 3})
          for (const int ctas : {8, 16}) {
            char name[32];
            std::snprintf(name, sizeof name, "wgmma%d C%d", variant, ctas);
            report(name, run(false, -1 - variant, ctas));
          }
      if (n <= 8) report("quant + gemv C4", run(true, kGemvVariant + 2, 4));
      report("mma", run(false, 0, 4));
      report("quant + mma", run(true, 0, 4));
      if (n <= 8) report("quant + wgmma2 C16", run(true, -3, 16));  // the defaults
      cudaFree(x);
      cudaFree(vals);
      cudaFree(codes);
      cudaFree(wgmma_ws);
      cudaFree(xs);
      cudaFree(y);
      cudaFree(operand);
    }
    for (int c = 0; c < copies; ++c) {
      cudaFree(w[c]);
      cudaFree(ws[c]);
    }
  }
  // The dense kernels: bf16 tensor cores (fp32 sums, the default) and double sums (`exact`).
  const auto dense_kernel = [](bool exact) { return exact ? "double sums" : "tensor cores"; };
  {  // the head: bf16 [vocab, dim], f32 output
    const int out = 129280, k = 5120;
    const size_t w_bytes = static_cast<size_t>(out) * k * 2;
    void *w, *x, *y;
    double* x64;
    CHECK_CUDA(cudaMalloc(&w, w_bytes));
    CHECK_CUDA(cudaMalloc(&x, static_cast<size_t>(k) * 2 * 64));
    CHECK_CUDA(cudaMalloc(&x64, dsinfer::cuda::dense_linear_scratch_bytes(64, k, 1)));
    CHECK_CUDA(cudaMalloc(&y, static_cast<size_t>(out) * 4 * 64));
    fill_bf16_normal(w, static_cast<size_t>(out) * k, 90);
    fill_bf16_normal(x, static_cast<size_t>(k) * 64, 91);
    for (const int n : {1, 8, 64})
      for (const bool exact : {false, true}) {
        const double us = graph_time_us(
            [&](cudaStream_t st) {
              dsinfer::cuda::DenseLinearParams p;
              p.x = x, p.x_stride = k, p.exact = exact, p.x_f64 = x64, p.w = w, p.w_stride = k, p.y = y;
              p.y_f32 = true, p.y_stride = out, p.n = n, p.k = k, p.out = out, p.stream = st;
              CHECK_CUDA(dsinfer::cuda::launch_dense_linear(p));
            },
            3, 7);
        std::printf("%-28s %5d %6d %5d %-16s %8.2f %8.0f %7.1f%% %7.2f\n", "head (bf16, dense)", out, k, n,
                    dense_kernel(exact), us, w_bytes / us / 1e3, 100 * w_bytes / us / 1e3 / copy,
                    2.0 * n * out * k / us / 1e6);
      }
    cudaFree(w);
    cudaFree(x);
    cudaFree(x64);
    cudaFree(y);
  }
  {  // wo_a: eight fp8 [1024, 4096] groups read as bf16, one block-diagonal launch (rotating copies)
    const int groups = 8, rows = 1024, k = 4096, copies = 4;
    const size_t w_bytes = static_cast<size_t>(rows) * k, s_bytes = static_cast<size_t>(rows / 32) * (k / 32);
    std::vector<uint8_t*> w(groups * copies), ws(groups * copies);
    for (int c = 0; c < groups * copies; ++c) {
      CHECK_CUDA(cudaMalloc(&w[c], w_bytes));
      CHECK_CUDA(cudaMalloc(&ws[c], s_bytes));
      fill_random(w[c], w_bytes, 200 + c, 0x6F, 8);
      fill_random(ws[c], s_bytes, 300 + c, 0x07, 118);
    }
    void *x, *y;
    double* x64;
    CHECK_CUDA(cudaMalloc(&x, static_cast<size_t>(groups) * k * 2 * 64));
    CHECK_CUDA(cudaMalloc(&x64, dsinfer::cuda::dense_linear_scratch_bytes(64, k, groups)));
    CHECK_CUDA(cudaMalloc(&y, static_cast<size_t>(groups) * rows * 2 * 64));
    fill_bf16_normal(x, static_cast<size_t>(groups) * k * 64, 92);
    for (const int n : {1, 8, 64})
      for (const bool exact : {false, true}) {
        int turn = 0;
        const double us = graph_time_us([&](cudaStream_t st) {
          dsinfer::cuda::DenseLinearParams p;
          p.x = x, p.x_stride = groups * k, p.exact = exact, p.x_f64 = x64, p.fp8_weights = true, p.w_stride = k;
          p.s_stride = k / 32, p.y = y, p.y_stride = groups * rows, p.n = n, p.k = k, p.out = groups * rows;
          p.group_rows = rows, p.stream = st;
          for (int g = 0; g < groups; ++g)
            p.group_w[g] = w[turn * groups + g], p.group_scales[g] = ws[turn * groups + g];
          CHECK_CUDA(dsinfer::cuda::launch_dense_linear(p));
          turn = (turn + 1) % copies;
        });
        const double bytes = groups * static_cast<double>(w_bytes + s_bytes);
        std::printf("%-28s %5d %6d %5d %-16s %8.2f %8.0f %7.1f%% %7.2f\n", "wo_a 8 groups (fp8, dense)", groups * rows,
                    k, n, dense_kernel(exact), us, bytes / us / 1e3, 100 * bytes / us / 1e3 / copy,
                    2.0 * n * groups * rows * k / us / 1e6);
      }
    for (int c = 0; c < groups * copies; ++c) {
      cudaFree(w[c]);
      cudaFree(ws[c]);
    }
    cudaFree(x);
    cudaFree(x64);
    cudaFree(y);
  }
  {  // sparse attention: 64 heads of 512, 128 window rows + 512 selected compressed rows per query
    const int heads = 64, d = 512, n_win = 128, n_cmp = 4096, k = 640;
    std::printf("sparse attention (heads %d, d %d, %d KV rows a query): bytes = the rows once a query + q + out\n",
                heads, d, k);
    for (const int n : {1, 8, 64, 512}) {
      uint16_t *q, *win, *cmp, *out;
      int32_t* idx;
      float *sink, *scores;
      CHECK_CUDA(cudaMalloc(&q, static_cast<size_t>(n) * heads * d * 2));
      CHECK_CUDA(cudaMalloc(&out, static_cast<size_t>(n) * heads * d * 2));
      CHECK_CUDA(cudaMalloc(&win, static_cast<size_t>(n_win) * d * 2));
      CHECK_CUDA(cudaMalloc(&cmp, static_cast<size_t>(n_cmp) * d * 2));
      CHECK_CUDA(cudaMalloc(&sink, heads * 4));
      CHECK_CUDA(cudaMalloc(&idx, static_cast<size_t>(n) * k * 4));
      fill_bf16_normal(q, static_cast<size_t>(n) * heads * d, 93);
      fill_bf16_normal(win, static_cast<size_t>(n_win) * d, 94);
      fill_bf16_normal(cmp, static_cast<size_t>(n_cmp) * d, 95);
      CHECK_CUDA(cudaMemset(sink, 0, heads * 4));
      std::vector<int32_t> h_idx(static_cast<size_t>(n) * k);
      std::mt19937 rng(96);
      for (int t = 0; t < n; ++t)
        for (int j = 0; j < k; ++j) h_idx[t * k + j] = j < n_win ? j : n_win + static_cast<int32_t>(rng() % n_cmp);
      CHECK_CUDA(cudaMemcpy(idx, h_idx.data(), h_idx.size() * 4, cudaMemcpyHostToDevice));
      dsinfer::cuda::SparseAttnParams p;
      p.q = q, p.q_stride = static_cast<int64_t>(heads) * d, p.window = win, p.compressed = cmp, p.n_win = n_win;
      p.n_cmp = n_cmp, p.idx = idx, p.idx_stride = k, p.sink = sink, p.scale = 0.044f, p.out = out;
      p.out_stride = static_cast<int64_t>(heads) * d, p.n = n, p.heads = heads, p.d = d, p.k = k;
      CHECK_CUDA(cudaMalloc(&scores, dsinfer::cuda::sparse_attn_workspace_bytes(p)));
      p.scores = scores;
      const double us = graph_time_us(
          [&](cudaStream_t st) {
            p.stream = st;
            CHECK_CUDA(dsinfer::cuda::launch_sparse_attn(p));
          },
          n >= 64 ? 3 : 20, n >= 64 ? 5 : 15);
      const double bytes = static_cast<double>(n) * (k * d * 2 + 2 * heads * d * 2);
      std::printf("%-28s %5d %6d %5d %-16s %8.2f %8.0f %7.1f%% %7.2f\n", "sparse attention", heads, k, n,
                  "three passes", us, bytes / us / 1e3, 100 * bytes / us / 1e3 / copy,
                  4.0 * n * heads * k * d / us / 1e6);
      for (void* v : {static_cast<void*>(q), static_cast<void*>(out), static_cast<void*>(win), static_cast<void*>(cmp),
                      static_cast<void*>(sink), static_cast<void*>(idx), static_cast<void*>(scores)})
        cudaFree(v);
    }
  }
  CHECK_CUDA(cudaGetLastError());
  cublasDestroy(blas);
  return 0;
}
