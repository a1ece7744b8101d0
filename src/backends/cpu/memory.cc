// CpuBackend memory: host memory, 64-byte aligned for the SIMD kernels; copies are memcpy; the ops'
// order (side_queue).
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/check.h"

namespace dsinfer {

void* CpuBackend::allocate(size_t bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded ? rounded : kAlign);
  DSINFER_CHECK(p, "out of host memory allocating {} bytes", bytes);
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
  // NaN bytes in every float and bf16: a read of memory no op wrote shows up in the results.
  std::memset(p, 0xFF, rounded);
#endif
  return p;
}

void CpuBackend::deallocate(void* p) {
  std::free(p);
}

void CpuBackend::zero(void* p, size_t bytes) {
  std::memset(p, 0, bytes);
}

void CpuBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  std::memcpy(dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  std::memcpy(host_dst, src, bytes);
}

void CpuBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
}

// Every op runs as it is called, so side work is done before the ops after it.
void CpuBackend::side_queue(const SideQueueArgs&) {}

}  // namespace dsinfer
