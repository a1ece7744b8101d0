// CudaBackend's memory (memory.h), and the backend's memory calls on it.
#include "backends/cuda/memory.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <utility>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "core/check.h"

namespace dsinfer {
namespace cuda {

void keep_freed_memory() {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaGetDevice(&device), "device");
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, device), "memory pool");
  uint64_t keep_all = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all), "memory pool");
}

StagingRing::StagingRing(size_t half_bytes) : half_bytes_(half_bytes) {
  check_cuda(cudaMallocHost(&host_, 2 * half_bytes_), "pinned staging");
  for (cudaEvent_t& e : done_) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
}

void StagingRing::grow(size_t bytes, cudaStream_t stream) {
  // Every copy from the old ring done first: the current half's, then the other's (recorded when
  // the ring last moved off it).
  check_cuda(cudaEventRecord(done_[half_], stream), "copy to device");
  for (cudaEvent_t e : done_) check_cuda(cudaEventSynchronize(e), "copy to device");
  check_cuda(cudaFreeHost(std::exchange(host_, nullptr)), "pinned staging");
  half_bytes_ = std::min(std::bit_ceil(bytes), kMaxHalfBytes);
  check_cuda(cudaMallocHost(&host_, 2 * half_bytes_), "pinned staging");
  half_ = 0, used_ = 0;
}

StagingRing::~StagingRing() {
  cudaFreeHost(host_);
  for (cudaEvent_t e : done_) cudaEventDestroy(e);
}

void StagingRing::upload(void* dst, const void* host_src, size_t bytes, cudaStream_t stream) {
  if (bytes > half_bytes_ && bytes <= kMaxHalfBytes) grow(bytes, stream);
  if (bytes > half_bytes_) {  // from pageable memory: returns once the source is staged
    check_cuda(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream), "copy to device");
    return;
  }
  if (used_ + bytes > half_bytes_) {  // move to the other half once its copies are done
    check_cuda(cudaEventRecord(done_[half_], stream), "copy to device");
    half_ ^= 1, used_ = 0;
    check_cuda(cudaEventSynchronize(done_[half_]), "copy to device");
  }
  uint8_t* staged = host_ + half_ * half_bytes_ + used_;
  std::memcpy(staged, host_src, bytes);
  check_cuda(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream), "copy to device");
  used_ += (bytes + 255) / 256 * 256;
}

Scratch::~Scratch() {
  cudaFree(data_);
}

void Scratch::allocate(size_t bytes) {
  check_cuda(cudaMalloc(&data_, bytes), "scratch allocation");
  bytes_ = bytes;
}

}  // namespace cuda

void* CudaBackend::scratch(cuda::Scratch& s, size_t bytes) {
  return s.at_least(bytes, [this](void* old) { graphs_.retire(old); });
}

CudaBackend::Quantized CudaBackend::quant_scratch(int64_t rows, int64_t k) {
  return {static_cast<uint16_t*>(scratch(scratch_->quant_values, rows * k * 2)),
          static_cast<uint8_t*>(scratch(scratch_->quant_codes, rows * k)),
          static_cast<float*>(scratch(scratch_->quant_scales, rows * (k / 32) * 4))};
}

CudaBackend::Quantized CudaBackend::quantize_rows(const uint16_t* x, int64_t rows, int64_t k, const char* what,
                                                  bool wgmma, const int32_t* x_rows, int64_t x_stride) {
  const Quantized q = quant_scratch(rows, k);
  cuda::QuantizeInputParams p{.x = x,
                              .x_stride = x_rows ? x_stride : k,
                              .x_rows = x_rows,
                              .n = static_cast<int>(rows),
                              .k = static_cast<int>(k),
                              .stream = stream_};
  if (wgmma)
    p.operand = q.values;
  else
    p.values = q.values, p.codes = q.codes, p.scales = q.scales;
  launched(cuda::launch_quantize_input(p), what);
  return q;
}

// Memory. During a capture the step's temporaries come from the recorder's arena and the ops'
// from scratch buffers: an allocation that still reaches the backend is a graph allocation.
void* CudaBackend::allocate(size_t bytes) {
  ++stats_.allocations;
  void* p = nullptr;
  cuda::check_cuda(cudaMallocAsync(&p, bytes ? bytes : 1, stream_), "allocation");
  if (graphs_.capturing()) graphs_.graph_allocation(p);
  return p;
}

void CudaBackend::deallocate(void* p) {
  if (graphs_.takes_free(p)) return;
  cuda::check_cuda(cudaFreeAsync(p, stream_), "free");
}

void CudaBackend::zero(void* p, size_t bytes) {
  cuda::check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "memset");
}

void CudaBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  ++stats_.uploads;
  if (graphs_.capturing()) {
    if (graphs_.upload(dst, host_src, bytes)) return;
    DSINFER_CHECK(staging_.fits(bytes), "CudaBackend: a captured step's uploads must fit the pinned ring's half");
  }
  staging_.upload(dst, host_src, bytes, stream_);
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  DSINFER_CHECK(!graphs_.capturing(), "CudaBackend: a captured step may not read device memory back");
  ++stats_.downloads;
  const auto t0 = std::chrono::steady_clock::now();
  cuda::check_cuda(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
  cuda::check_cuda(cudaStreamSynchronize(stream_), "copy to host");
  stats_.download_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CudaBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
  ++stats_.device_copies;
  cuda::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy on device");
}

}  // namespace dsinfer
