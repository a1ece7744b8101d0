// The backend the golden-style model tests run on: the CPU (golden_test) or, built with
// DSINFER_GOLDEN_ON_CUDA, the CUDA backend with the DSINFER_CUDA_* switches as the CLI reads them
// (golden_cuda_test; scripts/device_checks.sh runs it with each DSINFER_CUDA_LINEAR kernel).
#pragma once

#include <cstdlib>
#include <memory>

#include "backends/cpu/cpu_backend.h"
#ifdef DSINFER_GOLDEN_ON_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device.h"
#endif

namespace dsinfer::testing {

inline std::unique_ptr<Backend> make_test_backend() {
#ifdef DSINFER_GOLDEN_ON_CUDA
  return std::make_unique<CudaBackend>(CudaBackendOptions::from_switches(std::getenv));
#else
  return std::make_unique<CpuBackend>(2);
#endif
}

/// false where the backend needs a GPU and there is none (the tests skip themselves).
inline bool test_backend_available() {
#ifdef DSINFER_GOLDEN_ON_CUDA
  return cuda::device_count() > 0;
#else
  return true;
#endif
}

}  // namespace dsinfer::testing
