// CUDA device queries, and the CUDA error helpers of cuda_check.h.
#include "backends/cuda/device.h"

#include <fmt/format.h>

#include "backends/cuda/cuda_check.h"

namespace dsinfer::cuda {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return {};
  const ErrorKind kind = err == cudaErrorMemoryAllocation ? ErrorKind::kResourceExhausted : ErrorKind::kInternal;
  return error(kind, fmt::format("CUDA {}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err)));
}

void check_cuda(cudaError_t err, const char* what) {
  DSINFER_CHECK(err == cudaSuccess, "CUDA {}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

Result<DeviceInfo> device_info(int ordinal) {
  cudaDeviceProp p{};
  DSINFER_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, ordinal));
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = p.name;
  d.sm_major = p.major, d.sm_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.global_memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  d.l2_bytes = p.l2CacheSize;
  return d;
}

}  // namespace dsinfer::cuda
