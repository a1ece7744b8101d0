// Asynchronous copies from global to shared memory (cp.async, sm_80+): a thread's copies are
// grouped by commit and waited for by group; the CTA then meets at a barrier before any thread
// reads what another copied.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda::common {

/// Starts copying 16 bytes (both addresses 16-byte aligned); !valid: writes 16 zero bytes and
/// reads nothing (src must still be a global address).
__device__ inline void cp_async16(void* dst, const void* src, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}

/// Starts copying 4 bytes (both addresses 4-byte aligned); !valid: writes 4 zero bytes and reads
/// nothing (src must still be a global address).
__device__ inline void cp_async4(void* dst, const void* src, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(src), "r"(valid ? 4 : 0));
}

/// Closes the thread's group of copies started since the last commit.
__device__ inline void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

/// Waits until at most kPending of the thread's committed groups are still in flight.
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace dsinfer::cuda::common
