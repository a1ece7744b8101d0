// fp4 (e2m1) on the device: a code's value, e2m1 widened to e4m3 in registers (the mma kernel) or
// placed in e4m3 bits scaled by 2^-6 (the tiled kernel), the shared-memory table of byte -> f16
// pair (the f16 kernels), and the rounding of the fp4 fake quantisation.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda::common {

/// An e2m1 code (low 4 bits; bit 3 the sign) as a float.
__device__ inline float e2m1_to_float(uint32_t nibble) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (nibble & 8u) ? -mag[nibble & 7u] : mag[nibble & 7u];
}

/// The e2m1 magnitude (0, 0.5, ..., 6) nearest a in [0, 6], ties to the even code (as f32_to_e2m1
/// on the CPU).
__device__ inline float e2m1_round(float a) {
  if (a < 2.0f) return rintf(a * 2.0f) * 0.5f;
  if (a < 4.0f) return rintf(a);
  return rintf(a * 0.5f) * 2.0f;
}

__device__ inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

/// Four e2m1 codes (the low 16 bits of w, element j in nibble j) -> four e4m3 bytes. A selector
/// nibble with bit 3 set makes prmt replicate the selected byte's sign (0 here), so one permute
/// yields the positive codes and one on the flipped codes the negative ones; a byte add then sets
/// the sign bit of every nonzero negative magnitude.
__device__ inline uint32_t e2m1x4_to_e4m3x4(uint32_t w) {
  constexpr uint32_t kLo = 0x3C383000u;  // magnitudes 0, 0.5, 1, 1.5 as e4m3
  constexpr uint32_t kHi = 0x4C484440u;  // 2, 3, 4, 6
  const uint32_t pos = prmt(kLo, kHi, w);
  const uint32_t neg = prmt(kLo, kHi, w ^ 0x8888u);
  return pos | neg | ((neg + 0x7F7F7F7Fu) & 0x80808080u);
}

/// Eight e2m1 codes (element j in nibble j of w) as e4m3 bytes times 2^-6: `even` holds elements
/// 0, 2, 4, 6 and `odd` elements 1, 3, 5, 7, a byte each in that order. A code s e1 e0 m becomes the
/// byte s 0 0 e1 e0 m 0 0: e1 e0 m read with e4m3's bias (7 where e2m1's is 1), subnormals alike,
/// so 0.5 becomes the e4m3 subnormal 2^-7 (exact; the caller scales by 2^6). Nine integer
/// instructions for eight codes and no conversion: the tiled kernel's fp8 mma takes the bytes.
__device__ inline void e2m1x8_to_e4m3x8_scaled(uint32_t w, uint32_t& even, uint32_t& odd) {
  const uint32_t e = w & 0x0F0F0F0Fu, o = (w >> 4) & 0x0F0F0F0Fu;  // a code a byte
  // A byte's code c = 8s + m to 4 (c + 3 (c & 8)) = 128 s + 4 m (at most 156: no carry between bytes).
  even = (e + (e & 0x08080808u) * 3u) << 2;
  odd = (o + (o & 0x08080808u) * 3u) << 2;
}

/// The fp4 table of a block's threads: entry [byte][lane] = the byte's two e2m1 codes (low nibble
/// first) as an f16 pair, one copy per lane so that lookups never share a bank. Ends with a barrier.
__device__ inline void fill_e2m1_table(uint32_t* lut) {
  for (int idx = threadIdx.x; idx < 256 * 32; idx += blockDim.x) {
    const uint32_t byte = static_cast<uint32_t>(idx / 32);
    const __half lo = __float2half_rn(e2m1_to_float(byte & 15u)), hi = __float2half_rn(e2m1_to_float(byte >> 4));
    lut[idx] = static_cast<uint32_t>(__half_as_ushort(lo)) | static_cast<uint32_t>(__half_as_ushort(hi)) << 16;
  }
  __syncthreads();
}

}  // namespace dsinfer::cuda::common
