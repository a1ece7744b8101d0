// fp8 on the device: e4m3 codes (the activations' and the weights' values) and e8m0 scale bytes
// (powers of two), decoded exactly; act_quant's rounding to e4m3 (saturating, ties to even).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/common/bf16.cuh"

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

/// act_quant of a group of 32 values held by four consecutive lanes, eight each (every lane of the
/// warp calls it: the group's amax comes by two xor shuffles). Returns the scale's e8m0 byte (the
/// scale 2^ceil(log2(max(amax, 1e-4) / 448)), from the fp32 bits) and sets the lane's eight e4m3
/// codes, value v in byte v % 4 of codes[v / 4]. x / s is computed as x times 1 / s, exact (both
/// powers of two, normal): the division's rounding. Every kernel that quantises activations calls
/// this, so their codes are the same bits.
__device__ inline unsigned act_quant_eight(const float (&x)[8], uint32_t (&codes)[2]) {
  float amax = 0.0f;
#pragma unroll
  for (int v = 0; v < 8; ++v) amax = fmaxf(amax, fabsf(x[v]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const unsigned e = e8m0_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
  const float inverse = __uint_as_float((254u - e) << 23);
  codes[0] = codes[1] = 0;
#pragma unroll
  for (int v = 0; v < 8; ++v)
    codes[v / 4] |= static_cast<uint32_t>(float_to_e4m3(fminf(fmaxf(x[v] * inverse, -448.0f), 448.0f)))
                    << (8 * (v % 4));
  return e;
}

/// act_quant_eight's eight values as bf16, each code times the scale 2^(e - 127) (exact in bf16):
/// values 2v, 2v + 1 in the low and high half of pairs[v].
__device__ inline void act_quant_eight_bf16(const uint32_t (&codes)[2], unsigned e, uint32_t (&pairs)[4]) {
  const float s = __uint_as_float(e << 23);
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    pairs[v] = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto q = static_cast<__nv_fp8_storage_t>(codes[v / 2] >> (8 * (2 * (v % 2) + h)));
      pairs[v] |= static_cast<uint32_t>(float_to_bf16(e4m3_to_float(q) * s)) << (16 * h);
    }
  }
}

}  // namespace dsinfer::cuda::common
