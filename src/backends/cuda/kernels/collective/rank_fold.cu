// launch_rank_fold (rank_fold.h): an element a thread, the ranks summed in order.
#include <cuda_bf16.h>

#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/kernels/collective/rank_fold.h"

namespace dsinfer::cuda {
namespace {

using common::after_prior_grids;
using common::launch_kernel;

template <bool kBf16>
__global__ void rank_fold_kernel(const void* parts, int ranks, int64_t n, void* out) {
  after_prior_grids();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = 0.0f;
  for (int r = 0; r < ranks; ++r) {
    float v;
    if constexpr (kBf16)
      v = __bfloat162float(static_cast<const __nv_bfloat16*>(parts)[r * n + i]);
    else
      v = static_cast<const float*>(parts)[r * n + i];
    sum = r == 0 ? v : sum + v;
  }
  if constexpr (kBf16)
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(sum);
  else
    static_cast<float*>(out)[i] = sum;
}

}  // namespace

cudaError_t launch_rank_fold(const void* parts, int ranks, int64_t n, bool bf16, void* out, cudaStream_t stream) {
  if (ranks < 1 || n < 0 || (n > 0 && (!parts || !out))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  if (bf16) return launch_kernel(rank_fold_kernel<true>, blocks, kThreads, 0, stream, parts, ranks, n, out);
  return launch_kernel(rank_fold_kernel<false>, blocks, kThreads, 0, stream, parts, ranks, n, out);
}

}  // namespace dsinfer::cuda
