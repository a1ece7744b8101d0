// Device helpers shared by the block-linear kernels (kernels/linear/*.cu only).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda::linear_detail {

/// e8m0 scale byte -> its power of two (2^-127 for 0, a subnormal float).
__device__ inline float e8m0_to_float(uint8_t e) {
  return e ? __uint_as_float(static_cast<uint32_t>(e) << 23) : __uint_as_float(0x00400000u);
}

/// An e4m3 code as a float (exact; subnormal codes included).
__device__ inline float e4m3_value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

/// An e2m1 code (low 4 bits; bit 3 the sign) as a float.
__device__ inline float e2m1_value(uint32_t nibble) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (nibble & 8u) ? -mag[nibble & 7u] : mag[nibble & 7u];
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

/// The sum over a warp's 32 lanes (every lane gets it).
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

/// Two e4m3 codes (the low 16 bits) as an f16 pair (exact).
__device__ inline uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

/// The fp4 table of a block's threads: entry [byte][lane] = the byte's two e2m1 codes (low nibble
/// first) as an f16 pair, one copy per lane so that lookups never share a bank. Ends with a barrier.
__device__ inline void fill_e2m1_table(uint32_t* lut) {
  for (int idx = threadIdx.x; idx < 256 * 32; idx += blockDim.x) {
    const uint32_t byte = static_cast<uint32_t>(idx / 32);
    const __half lo = __float2half_rn(e2m1_value(byte & 15u)), hi = __float2half_rn(e2m1_value(byte >> 4));
    lut[idx] = static_cast<uint32_t>(__half_as_ushort(lo)) | static_cast<uint32_t>(__half_as_ushort(hi)) << 16;
  }
  __syncthreads();
}

/// d += a * b on f16 tensor cores (mma.m16n8k16, f32 accumulators): a warp's A fragment (4 f16
/// pairs), B fragment (2) and D (4 floats) in the PTX ISA's lane layout.
__device__ inline void mma_f16(const uint32_t a[4], uint32_t b0, uint32_t b1, float d[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Group `group`'s weights and scales: its own, or in a routed call the chosen expert's from the
/// device table. false for an expert id outside [0, route_count) (the group's outputs are zeros).
__device__ inline bool group_weights(const BlockLinearParams& p, int group, const uint8_t*& w, const uint8_t*& sw) {
  w = p.op[group].w, sw = p.op[group].w_scales;
  if (!p.routes) return true;
  const int32_t e = p.routes[group / p.per_route];
  if (e < 0 || e >= p.route_count) return false;
  const RoutedWeight entry = p.route_table[e * p.per_route + group % p.per_route];
  w = entry.w, sw = entry.w_scales;
  return true;
}

/// Multiprocessors of the current device (read once).
inline int sm_count() {
  static const int count = [] {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return std::max(sms, 1);
  }();
  return count;
}

}  // namespace dsinfer::cuda::linear_detail
