// CudaBackend: the Backend interface on device memory, one kernel launch (or two) per op on one
// stream. Every view must live on the GPU. Scratch buffers (quantised GEMM inputs, the wgmma
// partial sums) grow to the largest call and are then reused, so a warmed-up step allocates
// nothing. Checked against CpuBackend op by op (tests/cuda/cuda_backend_test.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backends/cuda/kernels/linear/params.h"
#include "ops/backend.h"

namespace dsinfer {

class CudaBackend final : public Backend {
 public:
  /// On the current device; `stream` may be null (the default stream).
  explicit CudaBackend(cudaStream_t stream = nullptr);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  cudaStream_t stream() const { return stream_; }

  // Stream-ordered (cudaMallocAsync) from the device's pool, which keeps what is freed: after the
  // first step a forward pass's temporaries come from the pool without a device allocation.
  void* allocate(size_t bytes) override;
  void deallocate(void* p) override;
  void zero(void* p, size_t bytes) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;

  void embed(const EmbedArgs& a) override;
  void rms_norm(const RmsNormArgs& a) override;
  void linear(const LinearArgs& a) override;
  void rope(const RopeArgs& a) override;
  void fake_quant(const FakeQuantArgs& a) override;
  void hc_mixes(const HcMixesArgs& a) override;
  void hc_pre(const HcPreArgs& a) override;
  void hc_post(const HcPostArgs& a) override;
  void sparse_attn(const SparseAttnArgs& a) override;
  void indexer_scores(const IndexerScoresArgs& a) override;
  void swiglu(const SwigluArgs& a) override;
  void router(const RouterArgs& a) override;
  void compress_pool(const CompressPoolArgs& a) override;
  void engram_gate(const EngramGateArgs& a) override;
  void gather_rows(const GatherRowsArgs& a) override;
  void scatter_add(const ScatterAddArgs& a) override;

 private:
  // A device buffer that only grows.
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };
  void* scratch(Scratch& s, size_t bytes);

  cudaStream_t stream_;
  // DSINFER_CUDA_LINEAR=fma|mma|wgmma forces one block-scaled GEMM kernel (for accuracy and speed
  // comparisons); unset or auto: the fastest measured for each shape.
  cuda::LinearKernel linear_kernel_ = cuda::LinearKernel::kAuto;
  Scratch quant_values_, quant_codes_, quant_scales_, wgmma_, dense_x_;
};

}  // namespace dsinfer
