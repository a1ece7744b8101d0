// Parameters of the act_quant kernels (spec §3.4, §3.5): plain pointers, POD.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

struct ActQuantParams {
  const uint16_t* x = nullptr;  // [n] bf16 input
  uint16_t* fake = nullptr;     // [n] bf16 fake-quantised output (may alias x); nullptr: not wanted
  uint8_t* codes = nullptr;     // [n] e4m3 codes; nullptr: not wanted
  uint8_t* scales = nullptr;    // [n / 32] e8m0 scale bytes; nullptr: not wanted
  int64_t n = 0;                // multiple of 32
  cudaStream_t stream = nullptr;
};

/// act_quant of a block-scaled linear's input, in the layout the linear kernels read
/// (kernels/linear/params.h: LinearOperands).
struct QuantizeInputParams {
  const uint16_t* x = nullptr;  // [n, k] bf16, row stride x_stride elements
  int64_t x_stride = 0;
  const int32_t* x_rows = nullptr;  // [n] where not null: output row i quantises x's row x_rows[i] (a gather)
  uint16_t* values = nullptr;       // [n, k] fp16: the e4m3 code values, unscaled (exact in fp16); may be null
  uint8_t* codes = nullptr;         // [n, k] the e4m3 codes; may be null
  float* scales = nullptr;          // [n, k / 32] the power-of-two scales; may be null
  // [n, k] bf16 code * scale (exact) in the wgmma kernel's K order (kernels/linear/wgmma_order.h;
  // k a multiple of its span); may be null
  uint16_t* operand = nullptr;
  // The operand alone, of x's bf16 values as they are (no quantisation: the input of a bf16 GEMM on
  // the wgmma kernel, wo_a's); values, codes and scales must be null.
  bool unquantised = false;
  int n = 0, k = 0;  // k a multiple of 32
  cudaStream_t stream = nullptr;
};

/// fp4 fake quantisation in place (spec §3.5): groups of 16 with e4m3 scales (the compressed KV)
/// or of 32 with e8m0 scales (the indexer).
struct Fp4FakeQuantParams {
  uint16_t* x = nullptr;  // [n, d] bf16, row stride `stride`; d a multiple of `group`
  int64_t stride = 0;
  int n = 0, d = 0;
  int group = 32;           // 16 or 32
  bool e4m3_scale = false;  // true: e4m3 scales (group 16 in V4.1), false: e8m0
  cudaStream_t stream = nullptr;
};

}  // namespace dsinfer::cuda
