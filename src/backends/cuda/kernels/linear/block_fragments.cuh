// The A fragments of a 16-row weight tile's K block for two f16 mma.m16n8k16 (the tensor-core
// kernels linear_mma.cu and linear_tiled.cu), loaded straight from the checkpoint's layout.
// Within a block the K order is free as long as A and B agree: thread (g, t) holds K 8t..8t+7 of
// rows g and g + 8 (one load each), the first mma takes K 8t..8t+3 and the second 8t+4..8t+7, and
// the activations are read at the same K.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda::linear_detail {

using common::e2m1x4_to_e4m3x4;
using common::e4m3x2_to_f16x2;

__device__ inline uint2 load8(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint2*>(p));
}

// fp4 rows load 4 bytes (8 codes) per thread per block; they are widened only after the loads of
// all kInFlight blocks are issued, so the raw words are what stays in flight.
__device__ inline void load_raw(const BlockLinearParams& p, const uint8_t* w, int r0, int b, int g, int t,
                                uint32_t raw[4]) {
  const int rg = r0 + g, rg8 = r0 + g + 8;
  if (p.fp4) {
    raw[0] = rg < p.out ? __ldg(reinterpret_cast<const uint32_t*>(w + rg * p.w_stride + b * 16 + t * 4)) : 0;
    raw[1] = rg8 < p.out ? __ldg(reinterpret_cast<const uint32_t*>(w + rg8 * p.w_stride + b * 16 + t * 4)) : 0;
  } else {
    const uint2 lo = rg < p.out ? load8(w + rg * p.w_stride + b * 32 + t * 8) : make_uint2(0, 0);
    const uint2 hi = rg8 < p.out ? load8(w + rg8 * p.w_stride + b * 32 + t * 8) : make_uint2(0, 0);
    raw[0] = lo.x, raw[1] = hi.x, raw[2] = lo.y, raw[3] = hi.y;
  }
}

// The raw words of a block (fp8: rows g, g + 8 at K 8t..8t+3, then at 8t+4..8t+7; fp4: rows g,
// g + 8 at K 8t..8t+7) as the A fragments of the block's two f16 mmas.
__device__ inline void raw_to_a(bool fp4, const uint32_t raw[4], uint32_t a0[4], uint32_t a1[4]) {
  uint32_t c[4];  // e4m3 codes: row g K 8t..+3, row g + 8 K 8t..+3, row g K 8t+4..+7, row g + 8 K 8t+4..+7
  if (fp4) {
    c[0] = e2m1x4_to_e4m3x4(raw[0]), c[2] = e2m1x4_to_e4m3x4(raw[0] >> 16);
    c[1] = e2m1x4_to_e4m3x4(raw[1]), c[3] = e2m1x4_to_e4m3x4(raw[1] >> 16);
  } else {
    c[0] = raw[0], c[1] = raw[1], c[2] = raw[2], c[3] = raw[3];
  }
  // A fragment: {row g K slots 2t, 2t+1; row g + 8 the same; row g slots 2t+8, 2t+9; row g + 8}.
  a0[0] = e4m3x2_to_f16x2(c[0] & 0xFFFFu), a0[1] = e4m3x2_to_f16x2(c[1] & 0xFFFFu);
  a0[2] = e4m3x2_to_f16x2(c[0] >> 16), a0[3] = e4m3x2_to_f16x2(c[1] >> 16);
  a1[0] = e4m3x2_to_f16x2(c[2] & 0xFFFFu), a1[1] = e4m3x2_to_f16x2(c[3] & 0xFFFFu);
  a1[2] = e4m3x2_to_f16x2(c[2] >> 16), a1[3] = e4m3x2_to_f16x2(c[3] >> 16);
}

// The block's weight scales of rows g and g + 8 (e8m0 bytes 0 and 1). fp8: one per 32 rows (a
// 16-row tile never straddles two); fp4: one per row.
__device__ inline uint32_t load_scales(const BlockLinearParams& p, const uint8_t* sw, int r0, int b, int g) {
  if (!p.fp4) {
    const uint32_t s = __ldg(sw + (r0 / 32) * p.s_stride + b);
    return s | s << 8;
  }
  return __ldg(sw + min(r0 + g, p.out - 1) * p.s_stride + b) |
         static_cast<uint32_t>(__ldg(sw + min(r0 + g + 8, p.out - 1) * p.s_stride + b)) << 8;
}

}  // namespace dsinfer::cuda::linear_detail
