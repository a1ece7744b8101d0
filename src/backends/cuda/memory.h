// CudaBackend's memory: the device's stream-ordered pool (what the ops' arrays come from), the
// pinned ring uploads go through, and the grow-only scratch buffers the kernels work in.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace dsinfer::cuda {

/// Makes the current device's default pool keep what is freed: cudaMallocAsync then costs no
/// device allocation once the pool has grown, so a warmed-up step's temporaries are free.
void keep_freed_memory();

/// Uploads through a pinned ring in two halves, so that they are asynchronous (a copy from
/// pageable memory may wait for the device, and runs at a fraction of the pinned rate); a half is
/// reused once its copies have finished. The halves grow (once the device has caught up) to take
/// an upload of up to kMaxHalfBytes: a prefill chunk's looked-up Engram rows are tens of MB.
class StagingRing {
 public:
  static constexpr size_t kMaxHalfBytes = size_t{64} << 20;

  explicit StagingRing(size_t half_bytes = size_t{16} << 20);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  /// Queues the copy on `stream`; host_src may be reused once it returns. Larger than
  /// kMaxHalfBytes: copied from pageable memory.
  void upload(void* dst, const void* host_src, size_t bytes, cudaStream_t stream);
  /// Whether `bytes` go into the current half without moving to the other one (which waits for
  /// the device: not allowed while a stream is captured).
  bool fits(size_t bytes) const { return used_ + bytes <= half_bytes_; }

 private:
  /// Halves of bit_ceil(bytes) (at most kMaxHalfBytes), once the old ring's copies are done.
  void grow(size_t bytes, cudaStream_t stream);

  uint8_t* host_ = nullptr;
  size_t half_bytes_, used_ = 0;
  int half_ = 0;
  cudaEvent_t done_[2] = {nullptr, nullptr};
};

/// A device buffer that only grows: an op's temporary, the same memory for every call once it has
/// grown to the largest (cudaMalloc'ed apart from the pool, so a kept graph may name it).
class Scratch {
 public:
  Scratch() = default;
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  /// The buffer, of at least `bytes`. To grow, the old one is handed to `retire(void*)` (which
  /// frees it now, or once the work that names it has run) before the larger one is allocated.
  template <typename Retire>
  void* at_least(size_t bytes, Retire&& retire) {
    if (bytes > bytes_) {
      retire(std::exchange(data_, nullptr));
      allocate(bytes);
    }
    return data_;
  }

 private:
  void allocate(size_t bytes);
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dsinfer::cuda
