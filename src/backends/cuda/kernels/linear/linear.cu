// launch_block_linear: the dispatch over the block-scaled linear kernels (kernels.h), and the
// CUDA-core kernel's launch (linear_fma.cuh).
#include <algorithm>

#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "backends/cuda/kernels/linear/linear_fma.cuh"

namespace dsinfer::cuda {

// The instance the dispatch runs (config.h: the fastest measured; the lab measures the others).
cudaError_t launch_block_linear_fma(const BlockLinearParams& p) {
  namespace config = linear_config::fma_kernel;
  return linear_detail::fma_kernel::launch<config::kChunksInFlight>(p, config::kBlocksPerSm);
}

cudaError_t launch_block_linear(const BlockLinearParams& p) {
  if (p.k % 32 != 0 || p.k <= 0 || p.n < 0 || p.out < 0 || p.groups < 1) return cudaErrorInvalidValue;
  // Auto: from wgmma_kernel::kMinRows rows (a grouped call: tokens), and for a decode step's plain
  // fp8 calls, the wgmma kernel where it takes the shape, else the tiled kernel; each one's row
  // sums do not depend on the other rows.
  if (wgmma_takes(p)) return launch_block_linear_wgmma(p);
  if (p.kernel == LinearKernel::kWgmma) return cudaErrorInvalidValue;
  if (p.expert_groups) {  // row counts on the device
    if (p.out == 0) return cudaSuccess;
    const bool exact = p.kernel == LinearKernel::kMma || p.kernel == LinearKernel::kExact;
    return exact ? launch_block_linear_mma(p) : launch_block_linear_tiled(p);
  }
  if (p.groups > kMaxLinearGroups) return cudaErrorInvalidValue;
  if (p.n == 0 || p.out == 0) return cudaSuccess;
  LinearKernel kernel = p.kernel;
  // Auto below kMinRows: the tiled kernel for every row count, so that a row's sums are the same
  // whatever the batch (one kernel, split by shape). gemv, fma and mma equal the CPU's exact block
  // sums and stay for comparisons (DSINFER_CUDA_LINEAR); a forced kGemv where it does not apply runs
  // as kExact would.
  if (kernel == LinearKernel::kGemv && !gemv_applies(p)) kernel = LinearKernel::kExact;
  if (kernel == LinearKernel::kExact)
    kernel = p.n > 1 ? LinearKernel::kMma : gemv_applies(p) ? LinearKernel::kGemv : LinearKernel::kFma;
  if (kernel == LinearKernel::kAuto) kernel = LinearKernel::kTiled;
  const bool routable = kernel == LinearKernel::kFma || kernel == LinearKernel::kGemv || kernel == LinearKernel::kTiled;
  if (p.routes && (!routable || !p.route_table || p.per_route < 1 || p.groups % p.per_route != 0))
    return cudaErrorInvalidValue;
  switch (kernel) {
    case LinearKernel::kGemv:
      return launch_block_linear_gemv(p);
    case LinearKernel::kFma:
      return launch_block_linear_fma(p);
    case LinearKernel::kMma:
      return launch_block_linear_mma(p);
    case LinearKernel::kTiled:
      return launch_block_linear_tiled(p);
    case LinearKernel::kAuto:
    case LinearKernel::kExact:
    case LinearKernel::kWgmma:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace dsinfer::cuda
