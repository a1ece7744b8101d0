// The process's kernel launch policy, in plain C++: the CUDA backend sets it from its options, the
// launches (common/dependent_launch.cuh) read it.
#pragma once

#include <atomic>

namespace dsinfer::cuda::common {

/// Whether kernels launch as programmatic dependents of the kernel before them in their stream
/// (common/dependent_launch.cuh). On unless turned off (CudaBackendOptions::dependent_launches).
inline std::atomic<bool>& dependent_launches() {
  static std::atomic<bool> on{true};
  return on;
}

}  // namespace dsinfer::cuda::common
