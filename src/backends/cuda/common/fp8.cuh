// fp8 on the device: e4m3 codes (the activations' and the weights' values) and e8m0 scale bytes
// (powers of two), decoded exactly; act_quant's rounding to e4m3 (saturating, ties to even).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace dsinfer::cuda::common {

/// An e8m0 scale byte as its power of two (2^-127 for 0, a subnormal float).
__device__ inline float e8m0_to_float(uint8_t e) {
  return e ? __uint_as_float(static_cast<uint32_t>(e) << 23) : __uint_as_float(0x00400000u);
}

/// The biased exponent of 2^ceil(log2(x)) for a positive normal float x, from its bits: x's
/// exponent, plus one if any mantissa bit is set (the e8m0 byte of the smallest power of two >= x).
__device__ inline unsigned e8m0_ceil(float x) {
  const unsigned t = __float_as_uint(x);
  return ((t >> 23) & 0xFFu) + ((t & 0x7FFFFFu) ? 1u : 0u);
}

/// An e4m3 code as a float (exact; subnormal codes included).
__device__ inline float e4m3_to_float(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

/// An e4m3 code as the bits of the f16 of the same value (exact).
__device__ inline uint16_t e4m3_to_f16_bits(__nv_fp8_storage_t code) {
  return __nv_cvt_fp8_to_halfraw(code, __NV_E4M3).x;
}

/// Two e4m3 codes (the low 16 bits) as an f16 pair (exact).
__device__ inline uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

/// v rounded to e4m3, ties to even, saturating at +-448 (NaN stays NaN).
__device__ inline __nv_fp8_storage_t float_to_e4m3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

}  // namespace dsinfer::cuda::common
