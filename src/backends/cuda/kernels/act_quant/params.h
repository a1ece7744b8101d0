// Parameters of the fp8 act_quant kernel (spec §3.4): plain pointers, POD.
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

}  // namespace dsinfer::cuda
