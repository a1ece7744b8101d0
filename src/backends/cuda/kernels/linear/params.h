// Parameters of the block-scaled linear kernels (spec §3.6): plain pointers, POD.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

/// act_quant of the GEMM input, in the layout the linear kernels read.
struct QuantizeInputParams {
  const uint16_t* x = nullptr;  // [n, k] bf16, row stride x_stride elements
  int64_t x_stride = 0;
  uint16_t* values = nullptr;  // [n, k] fp16: the e4m3 code values, unscaled (exact in fp16); may be null
  uint8_t* codes = nullptr;    // [n, k] the e4m3 codes; may be null
  float* scales = nullptr;     // [n, k / 32] the power-of-two scales
  int n = 0, k = 0;            // k a multiple of 32
  cudaStream_t stream = nullptr;
};

/// One weight matrix with its input and output.
struct LinearOperands {
  const uint16_t* x_values = nullptr;  // [n, k] from QuantizeInputParams (CUDA-core kernel)
  const float* x_scales = nullptr;     // [n, k / 32]
  const uint8_t* w = nullptr;          // [out, k] e4m3 or [out, k / 2] packed e2m1
  const uint8_t* w_scales = nullptr;   // e8m0: [ceil(out / 32), k / 32] (fp8) or [out, k / 32] (fp4)
  uint16_t* y = nullptr;               // [n, out] bf16, row stride y_stride elements
  const uint8_t* x_codes = nullptr;    // [n, k] e4m3 codes from QuantizeInputParams (tensor-core kernel)
};

inline constexpr int kMaxLinearGroups = 16;

enum class LinearKernel {
  kAuto,  // kFma for n <= 4, kMma above (the faster of the two in docs/perf-notes.md)
  kFma,   // CUDA cores: one warp per output row, fp32 FMAs
  kMma,   // tensor cores: mma.sync e4m3, one K block per instruction
};

/// y = bf16(sum over K blocks b of (P_b * sx_b) * sw_b), P_b = sum of code products in block b,
/// for `groups` matrices of one shape in one launch (the experts of a token, or w1 and w3 that
/// share an input): small GEMMs alone are too short to reach the memory bandwidth.
struct BlockLinearParams {
  LinearOperands op[kMaxLinearGroups];
  int groups = 1;
  int n = 0, k = 0, out = 0;
  bool fp4 = false;         // e2m1 packed two per byte (scales per row) instead of e4m3 (scales per 32 rows)
  int64_t w_stride = 0;     // bytes per weight row
  int64_t s_stride = 0;     // bytes per scale row
  int64_t y_stride = 0;     // elements per output row
  LinearKernel kernel = LinearKernel::kAuto;
  int chunks_in_flight = 2;  // CUDA-core kernel: 16-byte weight loads each lane issues before using them: 1, 2, 4
  int blocks_per_sm = 4;     // CUDA-core kernel: blocks of 8 warps in the persistent grid, per SM
  cudaStream_t stream = nullptr;
};

}  // namespace dsinfer::cuda
