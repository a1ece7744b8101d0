// What a per-op test needs to run an op on every backend: the CPU reference always, the CUDA
// backend where the build has it and a device is visible (the GPU leg of a test skips otherwise),
// and host data copied into a backend's memory and back. One file per op family holds both legs:
// the CPU against a loop written in the test, the GPU against the CPU.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/device_array.h"
#ifdef DSINFER_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device.h"
#endif

namespace dsinfer::testing {

/// The CUDA backend on GPU 0, or null (no CUDA in this build, or no device).
inline std::unique_ptr<Backend> gpu_backend() {
#ifdef DSINFER_WITH_CUDA
  if (cuda::device_count() > 0) return std::make_unique<CudaBackend>();
#endif
  return nullptr;
}

/// Skips the rest of a test when there is no GPU backend.
#define DSINFER_GPU_OR_SKIP(be) \
  if (!(be)) GTEST_SKIP() << "no CUDA device (or no CUDA backend in this build)"

/// Host data in a backend's memory.
template <typename T>
DeviceArray<T> on(Backend& be, const std::vector<T>& host) {
  return DeviceArray<T>(be, std::span<const T>(host));
}

}  // namespace dsinfer::testing
