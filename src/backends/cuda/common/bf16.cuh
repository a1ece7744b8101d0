// bf16 on the device: tensors hold bf16 as uint16_t bit patterns (two to a 32-bit word when packed).
// Every kernel converts through these, so the rounding is written once: --fmad=false and these
// conversions are what make a kernel's bits the CPU backend's.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace dsinfer::cuda::common {

/// A bf16 bit pattern as the float it is (exact).
__device__ inline float bf16_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

/// The low (first) bf16 of a packed pair as a float (exact).
__device__ inline float bf16x2_lo_to_float(uint32_t two) {
  return __uint_as_float(two << 16);
}

/// The high (second) bf16 of a packed pair as a float (exact).
__device__ inline float bf16x2_hi_to_float(uint32_t two) {
  return __uint_as_float(two & 0xFFFF0000u);
}

/// f rounded to the nearest bf16 (ties to even), as its bit pattern.
__device__ inline uint16_t float_to_bf16(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/// f rounded to the nearest bf16 (ties to even), as a float.
__device__ inline float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}

}  // namespace dsinfer::cuda::common
