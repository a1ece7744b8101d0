// sm90_f32_draw_tokens: core/token_draw.h's draw, a block per drawn row, its masses computed once
// into a workspace row. Each cut is the host's radix selection (a byte of the key a pass, from the
// high one), its counts or masses binned by each warp in shared memory of its own and then summed
// bin by bin; the draw sums the kept masses of a chunk of consecutive tokens a thread, scans the
// chunks, and the thread whose chunk holds the target finds the token in it. Every sum is of
// integers, so it is the host's whatever the order; the weights are draw_weight's, whose every
// rounding is fixed. So the token is the host's.
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/kernels/sampling/draw_tokens.h"

namespace dsinfer::cuda {
namespace {

using common::after_prior_grids;
using common::launch_kernel;

constexpr int kThreads = 512;
constexpr int kWarp = 32;
constexpr int kWarps = kThreads / kWarp;
constexpr int kBins = 256;

struct Shared {
  unsigned long long bins[kWarps * kBins];  // a warp's histogram each
  unsigned long long totals[kBins];
  unsigned long long warp_sums[kWarps];
  unsigned long long above;
  uint32_t warp_max[kWarps];
  int byte;
};

struct Row {
  const float* x;
  uint64_t* mass;  // the row's masses once top-k has cut: the workspace's row
  int V;
  float max, temperature;
  __device__ uint32_t key(int t) const { return draw_key(x[t]); }
};

__device__ inline float float_of_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}

__device__ uint64_t block_sum(uint64_t v, Shared& s) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % kWarp == 0) s.warp_sums[threadIdx.x / kWarp] = v;
  __syncthreads();
  uint64_t total = 0;
  for (int w = 0; w < kWarps; ++w) total += s.warp_sums[w];
  __syncthreads();  // warp_sums are written again by the next sum
  return total;
}

// The largest key v >= floor whose tokens at or above it (and at or above floor) weigh `target`
// together, weight(t, key) a token's count or mass: core/token_draw.cc's largest_key_reaching.
template <typename Weight>
__device__ uint32_t largest_key_reaching(const Row& r, uint32_t floor, uint64_t target, Weight weight, Shared& s) {
  uint32_t prefix = 0;
  uint64_t above = 0;
  unsigned long long* mine = s.bins + threadIdx.x / kWarp * kBins;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t high = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int i = threadIdx.x; i < kWarps * kBins; i += kThreads) s.bins[i] = 0;
    __syncthreads();
    // A thread's tokens mostly fall in few bins (most logits share the key's high bytes): a run
    // of them in one bin is added at once, which spares the shared atomics most of their conflicts.
    int run_bin = 0;
    unsigned long long run = 0;
    for (int t = threadIdx.x; t < r.V; t += kThreads) {
      const uint32_t k = r.key(t);
      if (k < floor || (k & high) != prefix) continue;
      const int bin = (k >> shift) & 255;
      if (bin != run_bin && run != 0) atomicAdd(&mine[run_bin], run), run = 0;
      run_bin = bin;
      run += weight(t);
    }
    if (run != 0) atomicAdd(&mine[run_bin], run);
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      unsigned long long sum = 0;
      for (int w = 0; w < kWarps; ++w) sum += s.bins[w * kBins + b];
      s.totals[b] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int byte = kBins - 1;
      while (byte > 0 && above + s.totals[byte] < target) above += s.totals[byte--];
      s.byte = byte;
      s.above = above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(s.byte) << shift;
    above = s.above;
    __syncthreads();  // s.byte and s.above are written again at the next byte
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sm90_f32_draw_tokens(DrawTokensParams p) {
  after_prior_grids();
  __shared__ Shared s;
  const DrawRow d = p.draws[blockIdx.x];
  Row r{p.logits + static_cast<int64_t>(d.row) * p.row_stride, p.masses + static_cast<int64_t>(blockIdx.x) * p.V, p.V,
        0.0f, d.params.temperature};
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;

  uint32_t top = 0;
  bool finite = true;
  for (int t = threadIdx.x; t < r.V; t += kThreads) {
    const float x = r.x[t];
    finite = finite && isfinite(x);
    top = max(top, draw_key(x));
  }
  if (!__syncthreads_and(finite)) {
    if (threadIdx.x == 0) p.picks[d.row] = -1;
    return;
  }
  top = __reduce_max_sync(0xffffffffu, top);
  if (lane == 0) s.warp_max[warp] = top;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) top = max(top, s.warp_max[w]);
  r.max = float_of_key(top);

  uint32_t cut = 0;
  if (d.params.top_k > 0 && d.params.top_k < r.V)
    cut = largest_key_reaching(
        r, 0, static_cast<uint64_t>(d.params.top_k), [](int) { return uint64_t{1}; }, s);
  // The masses of the tokens top-k keeps (the others' 0), each exp once.
  uint64_t kept = 0;
  for (int t = threadIdx.x; t < r.V; t += kThreads)
    kept += r.mass[t] = r.key(t) >= cut ? draw_mass(draw_weight(r.x[t], r.max, r.temperature)) : 0;
  if (d.params.top_p < 1.0f) {
    kept = block_sum(kept, s);
    cut = largest_key_reaching(
        r, cut, draw_nucleus_mass(d.params.top_p, kept), [&](int t) { return r.mass[t]; }, s);
  }
  __syncthreads();  // the masses written above are read below by other threads

  // The kept masses summed in id order: a chunk of consecutive tokens a thread, the chunks scanned.
  const auto kept_mass = [&](int t) -> uint64_t {
    const uint64_t m = r.mass[t];
    if (m == 0 || r.key(t) < cut) return 0;
    return draw_weight(r.x[t], r.max, r.temperature) >= d.params.min_p ? m : 0;
  };
  const int chunk = (r.V + kThreads - 1) / kThreads;
  const int begin = min(r.V, static_cast<int>(threadIdx.x) * chunk), end = min(r.V, begin + chunk);
  uint64_t mine = 0;
  for (int t = begin; t < end; ++t) mine += kept_mass(t);
  uint64_t inclusive = mine;
  for (int o = 1; o < kWarp; o *= 2) {
    const uint64_t v = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += v;
  }
  if (lane == kWarp - 1) s.warp_sums[warp] = inclusive;
  __syncthreads();
  uint64_t before = 0, total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += s.warp_sums[w];
    total += s.warp_sums[w];
  }
  const uint64_t first = before + inclusive - mine;  // the masses before this chunk
  const uint64_t target = draw_target(d.params.bits, total);
  if (first <= target && target < first + mine) {
    uint64_t sum = first;
    for (int t = begin; t < end; ++t)
      if ((sum += kept_mass(t)) > target) {
        p.picks[d.row] = t;
        break;
      }
  }
}

}  // namespace

cudaError_t launch_draw_tokens(const DrawTokensParams& p) {
  if (p.V < 1 || p.V > kMaxDrawVocab) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  return launch_kernel(sm90_f32_draw_tokens, p.n, kThreads, 0, p.stream, p);
}

}  // namespace dsinfer::cuda
