// A decode step's routed experts alone, as grouped_routed_experts launches them (the library's
// dispatch: the wgmma kernel's expert tiles), at V4.1-Flash shapes: --experts experts (default 64)
// of fp4 w1 and w3 (2304 x 5120) and w2 (5120 x 2304), each token's 6 distinct experts drawn at
// random (seeded), the expert-sorted rows quantised once before the timing. Per batch: us a call
// of w1 + w3 (one launch, two parts) and of w2, the weight bytes of the experts used and their
// rate, next to the device-to-device copy measured in the same run (bytes read + written). The L2
// is overwritten before each timed call, so that it reads its weights from memory as a step does. Small enough for a
// profiler (ncu) to replay a call in seconds, where the decode benchmark first writes and loads a 62 GB model:
// scripts/device_checks.sh experts, eprofile.
//   cuda_experts_bench [--batches 1,8,64] [--experts 64] [--reps 20]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "event_timing.h"

namespace {

namespace cuda = dsinfer::cuda;

constexpr int kDim = 5120, kFf = 2304, kTopK = 6;

// A hash of element i and a seed.
__device__ inline uint32_t mix(size_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) * 0x85EBCA77u ^ seed;
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12, h *= 0x297A2D39u, h ^= h >> 15;
  return h;
}

// Byte i: lo + mix(i) % span.
__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, uint32_t lo, uint32_t span) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint8_t>(lo + mix(i, seed) % span);
}

// bf16 values in [-2, 2) (truncated floats).
__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint16_t>(__float_as_uint(static_cast<float>(mix(i, seed)) * 0x1p-30f - 2.0f) >> 16);
}

template <typename T>
T* device_alloc(size_t count) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, count * sizeof(T)));
  return p;
}

template <typename T>
T* to_device(const std::vector<T>& h) {
  T* p = device_alloc<T>(h.size());
  CHECK_CUDA(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Median us of `reps` timed runs of `region` on the legacy stream (event_timing.h).
double median_us(
    const std::function<void()>& region, int reps, const std::function<void()>& before = [] {}) {
  return 1000.0 * dsinfer::bench::median_ms(nullptr, region, reps, before);
}

// One fp4 matrix of every expert: codes [experts][out][in / 2], e8m0 scales [experts][out][in / 32]
// (2^-9 .. 2^0: the folded multiply's range, as real checkpoints' scales).
struct Fp4Weights {
  int out = 0, in = 0, experts = 0;
  uint8_t *w = nullptr, *s = nullptr;
  size_t w_bytes() const { return static_cast<size_t>(out) * in / 2; }
  size_t s_bytes() const { return static_cast<size_t>(out) * in / 32; }
  Fp4Weights(int out_, int in_, int experts_, uint32_t seed) : out(out_), in(in_), experts(experts_) {
    w = device_alloc<uint8_t>(w_bytes() * experts), s = device_alloc<uint8_t>(s_bytes() * experts);
    fill_bytes<<<1024, 256>>>(w, w_bytes() * experts, seed, 0, 256);
    fill_bytes<<<1024, 256>>>(s, s_bytes() * experts, seed + 1, 118, 10);
    CHECK_CUDA(cudaGetLastError());
  }
};

struct Args {
  std::vector<int> batches = {1, 8, 64};
  int experts = 64, reps = 20;
};

std::vector<int> int_list(const std::string& s) {
  std::vector<int> v;
  for (size_t at = 0; at < s.size();) {
    const size_t comma = s.find(',', at);
    v.push_back(std::stoi(s.substr(at, comma - at)));
    at = comma == std::string::npos ? s.size() : comma + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--batches")
      args.batches = int_list(argv[i + 1]);
    else if (k == "--experts")
      args.experts = std::stoi(argv[i + 1]);
    else if (k == "--reps")
      args.reps = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "unknown option %s (usage: cuda_experts_bench [--batches 1,8,64] [--experts 64] [--reps 20])\n",
                   k.c_str());
      return 2;
    }
  }
  if (args.experts < kTopK || args.reps < 1 ||
      std::any_of(args.batches.begin(), args.batches.end(), [](int b) { return b < 1 || b > 64; })) {
    std::fprintf(stderr, "cuda_experts_bench: --experts at least %d, --reps at least 1, batches 1 .. 64\n", kTopK);
    return 2;
  }
  const int experts = args.experts;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  {  // the copy bandwidth of the same run
    const size_t bytes = size_t{1} << 30;
    uint8_t *src = device_alloc<uint8_t>(bytes), *dst = device_alloc<uint8_t>(bytes);
    const double us = median_us([&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 9);
    std::printf("device: %s, %d SMs; device-to-device copy %.2f TB/s (read + write counted)\n", prop.name,
                prop.multiProcessorCount, 2.0 * bytes / us / 1e6);
    cudaFree(src), cudaFree(dst);
  }
  // The route table as the engine's (ExpertTables): w1 and w3 of expert e at 2e, 2e + 1; w2 at
  // 2 * experts + e; the tensor maps alike.
  const Fp4Weights w1(kFf, kDim, experts, 11), w3(kFf, kDim, experts, 13), w2(kDim, kFf, experts, 17);
  std::vector<cuda::RoutedWeight> table(3 * static_cast<size_t>(experts));
  struct alignas(64) Map {
    uint8_t bytes[cuda::kTensorMapBytes];
  };
  std::vector<Map> maps(table.size());
  for (int e = 0; e < experts; ++e)
    for (const auto& [w, at] : {std::pair{&w1, 2 * e}, {&w3, 2 * e + 1}, {&w2, 2 * experts + e}}) {
      table[at] = {w->w + e * w->w_bytes(), w->s + e * w->s_bytes()};
      if (!cuda::wgmma_weight_map(maps[at].bytes, table[at].w, w->out, w->in, w->in / 2, /*fp4=*/true)) {
        std::fprintf(stderr, "cuda_experts_bench: no tensor map for expert %d\n", e);
        return 1;
      }
    }
  const cuda::RoutedWeight* dtable = to_device(table);
  const Map* dmaps = to_device(maps);
  // Written before each timed call, so that no call finds its weights in the L2 (50 MB on an
  // H100; a batch-1 call's w2 is 35 MB).
  const size_t flush_bytes = size_t{256} << 20;
  uint8_t* flush = device_alloc<uint8_t>(flush_bytes);
  const auto evict = [&] { CHECK_CUDA(cudaMemsetAsync(flush, 0, flush_bytes)); };
  std::mt19937 rng(7);
  std::printf(
      "\n| batch | experts used | w1 + w3 us | w1 + w3 GB/s | w2 us | w2 GB/s |\n| --- | --- | --- | --- | --- | --- "
      "|\n");
  for (const int n : args.batches) {
    // Each token's experts, then the rows sorted by expert (token order within), as group_routes.
    const int m = n * kTopK, max_groups = std::min(experts, m);
    std::vector<std::vector<int32_t>> rows_of(experts);
    std::vector<int> ids(experts);
    for (int t = 0; t < n; ++t) {
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int j = 0; j < kTopK; ++j) rows_of[ids[j]].push_back(t);
    }
    std::vector<int32_t> token;  // sorted row i is token token[i]'s
    std::vector<cuda::ExpertGroup> groups;
    for (int e = 0; e < experts; ++e) {
      if (rows_of[e].empty()) continue;
      groups.push_back({e, static_cast<int32_t>(token.size()), static_cast<int32_t>(rows_of[e].size())});
      token.insert(token.end(), rows_of[e].begin(), rows_of[e].end());
    }
    const int used = static_cast<int>(groups.size());
    groups.resize(max_groups, {0, m, 0});  // the unused entries
    int32_t* dtoken = to_device(token);
    cuda::ExpertGroup* dgroups = to_device(groups);
    uint16_t *x = device_alloc<uint16_t>(size_t{1} * n * kDim), *act = device_alloc<uint16_t>(size_t{1} * m * kFf);
    fill_bf16<<<256, 256>>>(x, size_t{1} * n * kDim, 23);
    fill_bf16<<<256, 256>>>(act, size_t{1} * m * kFf, 29);
    uint16_t *op1 = device_alloc<uint16_t>(size_t{1} * m * kDim), *op2 = device_alloc<uint16_t>(size_t{1} * m * kFf);
    CHECK_CUDA(
        cuda::launch_quantize_input({.x = x, .x_stride = kDim, .x_rows = dtoken, .operand = op1, .n = m, .k = kDim}));
    CHECK_CUDA(cuda::launch_quantize_input({.x = act, .x_stride = kFf, .operand = op2, .n = m, .k = kFf}));
    uint16_t *y1 = device_alloc<uint16_t>(size_t{1} * m * kFf), *y3 = device_alloc<uint16_t>(size_t{1} * m * kFf),
             *y2 = device_alloc<uint16_t>(size_t{1} * m * kDim);
    const auto params = [&](const Fp4Weights& w, int first, int parts) {
      cuda::BlockLinearParams p;
      p.groups = max_groups * parts, p.n = m, p.k = w.in, p.out = w.out, p.fp4 = true;
      p.w_stride = w.in / 2, p.s_stride = w.in / 32, p.y_stride = w.out;
      p.route_table = dtable + first, p.route_maps = dmaps + first, p.per_route = parts, p.route_count = experts;
      p.expert_groups = dgroups, p.max_group_rows = n;
      return p;
    };
    cuda::BlockLinearParams up = params(w1, 0, 2), down = params(w2, 2 * experts, 1);
    up.op[0] = {.y = y1, .x_operand = op1}, up.op[1] = {.y = y3, .x_operand = op1};
    down.op[0] = {.y = y2, .x_operand = op2};
    if (!cuda::wgmma_applies(up) || !cuda::wgmma_applies(down)) {
      std::fprintf(stderr, "cuda_experts_bench: the wgmma kernel does not take batch %d's calls\n", n);
      return 1;
    }
    const double up_us = median_us([&] { CHECK_CUDA(cuda::launch_block_linear(up)); }, args.reps, evict);
    const double down_us = median_us([&] { CHECK_CUDA(cuda::launch_block_linear(down)); }, args.reps, evict);
    const double up_bytes = 2.0 * used * (w1.w_bytes() + w1.s_bytes()),
                 down_bytes = 1.0 * used * (w2.w_bytes() + w2.s_bytes());
    std::printf("| %d | %d | %.1f | %.0f | %.1f | %.0f |\n", n, used, up_us, up_bytes / up_us / 1e3, down_us,
                down_bytes / down_us / 1e3);
    for (void* p : {static_cast<void*>(dtoken), static_cast<void*>(dgroups), static_cast<void*>(x),
                    static_cast<void*>(act), static_cast<void*>(op1), static_cast<void*>(op2), static_cast<void*>(y1),
                    static_cast<void*>(y3), static_cast<void*>(y2)})
      cudaFree(p);
  }
  return 0;
}
