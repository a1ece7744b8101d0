// sm90_f32_greedy_pick: a block per row of logits; each thread keeps the best of its strided
// columns (the larger value, on equal values the lower column) and whether it saw a NaN or an
// infinity, then the block reduces those. The result is the row's first maximum whatever the
// reduction's order, so it is the CPU's pick.
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/kernels/sampling/greedy_pick.h"

namespace dsinfer::cuda {
namespace {

using common::after_prior_grids;
using common::launch_kernel;

constexpr int kThreads = 512;
constexpr int kWarp = 32;

struct Best {
  float value;
  int index;  // -1: none yet
  bool finite;
};

__device__ inline Best better(Best a, Best b) {
  const bool finite = a.finite && b.finite;
  if (b.index < 0) return {a.value, a.index, finite};
  if (a.index < 0) return {b.value, b.index, finite};
  const bool take_b = b.value > a.value || (b.value == a.value && b.index < a.index);
  return take_b ? Best{b.value, b.index, finite} : Best{a.value, a.index, finite};
}

__device__ inline Best shuffle_down(Best x, int offset) {
  return {__shfl_down_sync(0xffffffffu, x.value, offset), __shfl_down_sync(0xffffffffu, x.index, offset),
          __shfl_down_sync(0xffffffffu, static_cast<int>(x.finite), offset) != 0};
}

__global__ void __launch_bounds__(kThreads) sm90_f32_greedy_pick(GreedyPickParams p) {
  after_prior_grids();
  __shared__ Best warps[kThreads / kWarp];
  const float* row = p.logits + static_cast<int64_t>(blockIdx.x) * p.row_stride;
  Best mine{0.0f, -1, true};
  for (int v = threadIdx.x; v < p.V; v += kThreads) {
    const float x = __ldg(row + v);
    mine.finite = mine.finite && isfinite(x);
    if (mine.index < 0 || x > mine.value) mine.value = x, mine.index = v;  // columns ascend: ties keep the first
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) mine = better(mine, shuffle_down(mine, offset));
  if (threadIdx.x % kWarp == 0) warps[threadIdx.x / kWarp] = mine;
  __syncthreads();
  if (threadIdx.x >= kWarp) return;
  mine = threadIdx.x < kThreads / kWarp ? warps[threadIdx.x] : Best{0.0f, -1, true};
  for (int offset = kWarp / 2; offset > 0; offset /= 2) mine = better(mine, shuffle_down(mine, offset));
  if (threadIdx.x == 0) p.picks[blockIdx.x] = mine.finite ? mine.index : -1;
}

}  // namespace

cudaError_t launch_greedy_pick(const GreedyPickParams& p) {
  if (p.V < 1) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  return launch_kernel(sm90_f32_greedy_pick, p.n, kThreads, 0, p.stream, p);
}

}  // namespace dsinfer::cuda
