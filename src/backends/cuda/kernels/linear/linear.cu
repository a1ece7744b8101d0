// launch_block_linear: the dispatch over the block-scaled linear kernels (kernels.h), and the
// CUDA-core kernel's launch (linear_fma.cuh).
#include <algorithm>

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
  if (p.expert_groups) return p.out == 0 ? cudaSuccess : launch_block_linear_mma(p);  // row counts on the device
  if (p.groups > kMaxLinearGroups) return cudaErrorInvalidValue;
  if (p.n == 0 || p.out == 0) return cudaSuccess;
  LinearKernel kernel = p.kernel;
  // Auto: the kernels that equal the CPU's exact block sums (gemv, fma and mma, bit for bit on over
  // 99 % of outputs), the fastest measured for the shape: gemv for one row (fp8: a row a warp; fp4:
  // 8 rows a warp, linear_gemv_rows.cuh; faster than fma on every decode shape), fma where gemv does
  // not apply, mma above.
  // (wgmma is fast from batch 1 to 8 but Hopper's fp8 tensor cores round inside a block's sum: 4-7 %
  // of outputs differ by 1-2 bf16 ulps, and end to end that takes a golden fixture past its
  // tolerance (docs/perf-notes.md): it lives in the kernel lab, bench/cuda/lab.) A forced kGemv
  // where it does not apply runs as kAuto would.
  if (kernel == LinearKernel::kGemv && !gemv_applies(p)) kernel = LinearKernel::kAuto;
  if (kernel == LinearKernel::kAuto)
    kernel = p.n > 1 ? LinearKernel::kMma : gemv_applies(p) ? LinearKernel::kGemv : LinearKernel::kFma;
  const bool routable = kernel == LinearKernel::kFma || kernel == LinearKernel::kGemv;
  if (p.routes && (!routable || !p.route_table || p.per_route < 1 || p.groups % p.per_route != 0))
    return cudaErrorInvalidValue;
  switch (kernel) {
    case LinearKernel::kGemv:
      return launch_block_linear_gemv(p);
    case LinearKernel::kFma:
      return launch_block_linear_fma(p);
    case LinearKernel::kMma:
      return launch_block_linear_mma(p);
    case LinearKernel::kAuto:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace dsinfer::cuda
