// Dense linear layers (spec §3.6): bf16 weights (or fp8 weights dequantised exactly, wo_a) times
// an unquantised input, summed in double (products exact, as on the CPU) and rounded once to fp32,
// then to bf16 unless the output is f32 (the head, the ratio-2 compressor). Framework-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

struct DenseLinearParams {
  const void* x = nullptr;  // [n, k] bf16 (uint16_t bits) or f32, row stride x_stride
  bool x_f32 = false;
  int64_t x_stride = 0;
  double* x_f64 = nullptr;   // [n, k] scratch the launcher fills (n * k doubles of device memory)
  bool fp8_weights = false;  // e4m3 [out, k] with e8m0 scales [ceil(out/32), k/32], else bf16
  const void* w = nullptr;   // [out, k], row stride w_stride (elements)
  int64_t w_stride = 0;
  const uint8_t* w_scales = nullptr;  // fp8 only
  int64_t s_stride = 0;
  void* y = nullptr;  // [n, out] bf16 or f32, row stride y_stride
  bool y_f32 = false;
  int64_t y_stride = 0;
  int n = 0, k = 0, out = 0;
  cudaStream_t stream = nullptr;
};

/// One warp per output row and up to 4 activation rows per pass. cudaErrorInvalidValue for
/// fp8 weights with k % 32 != 0, or a missing scratch.
cudaError_t launch_dense_linear(const DenseLinearParams& p);

}  // namespace dsinfer::cuda
