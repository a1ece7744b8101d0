// Programmatic dependent launch (sm_90): a kernel launched by launch_kernel may be scheduled while
// the kernel before it in the stream is still running, so that its blocks' launch and start-up
// overlap the other's last blocks instead of following them (a decode step is ~1,650 kernels of a
// few microseconds each). The contract, for every kernel launched so:
//   - it calls after_prior_grids() before it reads anything an earlier kernel wrote or writes
//     anything an earlier kernel reads, in every block, on every path (the wait is what orders it
//     after the previous grid, and through that grid's own wait after every earlier one);
//   - before that call it only computes, and reads what no kernel writes (weights).
// Launched without the attribute (dependent_launches() off), the wait returns at once and the
// stream orders kernels as usual: the same code, for comparisons.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backends/cuda/common/launch_policy.h"

namespace dsinfer::cuda::common {

/// Waits until the grids this one depends on have completed and their writes are visible, then
/// lets the next kernel in the stream be scheduled (its blocks wait in their own call).
__device__ __forceinline__ void after_prior_grids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/// kernel<<<grid, block, smem, stream>>>(args...) in thread-block clusters of `cluster` blocks
/// along x (0: launched without the attribute), as a dependent launch where that is on.
template <typename... Params, typename... Args>
cudaError_t launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             unsigned cluster, Args&&... args) {
  cudaLaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (cluster > 0) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {cluster, 1, 1};
  }
  if (dependent_launches().load(std::memory_order_relaxed)) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = smem, config.stream = stream;
  config.attrs = attributes, config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

/// kernel<<<grid, block, smem, stream>>>(args...), as a dependent launch where that is on.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args&&... args) {
  return launch_clustered(kernel, grid, block, smem, stream, 0u, std::forward<Args>(args)...);
}

}  // namespace dsinfer::cuda::common
