// Weights as bf16 for cuBLAS's tensor-core GEMM (the large-batch path of CudaBackend::linear for
// fp8 read as bf16: wo_a), and fp4 ones for the kernel benchmark's comparison.
// Framework-free (nvcc compiles it in .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

struct DequantWeightParams {
  const uint8_t* codes = nullptr;   // [out, k] e4m3 codes, or [out, k / 2] packed e2m1 (fp4)
  int64_t w_stride = 0;             // bytes between rows
  const uint8_t* scales = nullptr;  // e8m0: fp8 [ceil(out / 32), k / 32], fp4 [out, k / 32]
  int64_t s_stride = 0;
  bool fp4 = false;
  uint16_t* out = nullptr;  // [out, k] bf16, contiguous
  int rows = 0, k = 0;      // k a multiple of 32
  cudaStream_t stream = nullptr;
};

/// out = code value * scale in bf16: exact (3 or 1 mantissa bits times a power of two).
cudaError_t launch_dequant_weight(const DequantWeightParams& p);

}  // namespace dsinfer::cuda
