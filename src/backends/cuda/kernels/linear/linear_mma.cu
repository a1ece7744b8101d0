// sm90_fp8_block_linear_mma: block-scaled linear on the tensor cores, for decode and small batches.
//
// One mma.sync.m16n8k32 (e4m3 x e4m3 -> f32) covers exactly one 32-wide K block of 16 weight rows
// against 8 activation rows, so its result is that block's partial sum, which is scaled
// ((P * sx) * sw, the reference's order) and accumulated in fp32 per thread. The tensor cores do the
// arithmetic, which leaves the memory stream: no per-weight conversions on the CUDA cores (those
// capped the FMA kernel at about a third of the bandwidth). fp4 weights are widened to e4m3 in
// registers with byte permutes.
//
// A CTA takes 16 rows of one matrix and all activation rows (in tiles of 8); its warps split the
// K blocks (warp w takes w, w + W, ...) and meet in shared memory at the end. Within a block the
// K order is free as long as A and B agree: thread (g, t) holds bytes 8t..8t+7 of the block for
// rows g and g + 8 (an 8-byte load each) and the same bytes of activation row g.
#include <cuda_bf16.h>

#include <algorithm>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/device_helpers.cuh"
#include "backends/cuda/kernels/linear/kernels.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace linear_config;
using namespace linear_config::mma_kernel;
using namespace linear_detail;

__device__ inline void mma_e4m3(const uint32_t a[4], uint32_t b0, uint32_t b1, float d[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

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

__device__ inline void raw_to_a(bool fp4, const uint32_t raw[4], uint32_t a[4]) {
  if (fp4) {
    a[0] = e2m1x4_to_e4m3x4(raw[0]), a[2] = e2m1x4_to_e4m3x4(raw[0] >> 16);
    a[1] = e2m1x4_to_e4m3x4(raw[1]), a[3] = e2m1x4_to_e4m3x4(raw[1] >> 16);
  } else {
    a[0] = raw[0], a[1] = raw[1], a[2] = raw[2], a[3] = raw[3];
  }
}

template <int NT>  // activation tiles of 8 in this pass
__device__ void tile_pass(const BlockLinearParams& p, const LinearOperands& op, int r0, int n0, float* red) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int blocks = p.k / 32;
  float acc[NT][4] = {};
  for (int b0 = warp; b0 < blocks; b0 += kWarps * kInFlight) {
    uint32_t raw[kInFlight][4];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int b = b0 + u * kWarps;
      if (b < blocks) load_raw(p, op.w, r0, b, g, t, raw[u]);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int b = b0 + u * kWarps;
      if (b >= blocks) break;  // warp-uniform
      uint32_t a[4];
      raw_to_a(p.fp4, raw[u], a);
      // fp8: one scale per 32 rows (a 16-row tile never straddles two); fp4: one per row.
      const float sw_g = e8m0_to_float(p.fp4 ? op.w_scales[min(r0 + g, p.out - 1) * p.s_stride + b]
                                             : op.w_scales[(r0 / 32) * p.s_stride + b]);
      const float sw_g8 = p.fp4 ? e8m0_to_float(op.w_scales[min(r0 + g + 8, p.out - 1) * p.s_stride + b]) : sw_g;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int row_b = n0 + j * 8 + g;  // activation row this thread feeds to B
        const uint2 bx =
            row_b < p.n ? load8(op.x_codes + static_cast<int64_t>(row_b) * p.k + b * 32 + t * 8) : make_uint2(0, 0);
        float d[4];
        mma_e4m3(a, bx.x, bx.y, d);
        const int c0 = n0 + j * 8 + 2 * t;  // activation rows of d[0], d[2] (c0) and d[1], d[3] (c0 + 1)
        const float sx0 = c0 < p.n ? op.x_scales[static_cast<int64_t>(c0) * blocks + b] : 0.0f;
        const float sx1 = c0 + 1 < p.n ? op.x_scales[static_cast<int64_t>(c0 + 1) * blocks + b] : 0.0f;
        acc[j][0] += (d[0] * sx0) * sw_g;
        acc[j][1] += (d[1] * sx1) * sw_g;
        acc[j][2] += (d[2] * sx0) * sw_g8;
        acc[j][3] += (d[3] * sx1) * sw_g8;
      }
    }
  }
  // Sum the warps' K slices in shared memory; warp 0 writes the tile.
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[((warp * NT + j) * 4 + e) * kWarp + lane] = acc[j][e];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float s = 0.0f;
        for (int w = 0; w < kWarps; ++w) s += red[((w * NT + j) * 4 + e) * kWarp + lane];
        const int row = r0 + g + (e >= 2 ? 8 : 0), col = n0 + j * 8 + 2 * t + (e & 1);
        if (row < p.out && col < p.n) op.y[static_cast<int64_t>(col) * p.y_stride + row] = float_to_bf16(s);
      }
  }
  __syncthreads();  // red is reused by the next pass
}

__global__ void __launch_bounds__(kWarps* kWarp) sm90_fp8_block_linear_mma(BlockLinearParams p) {
  extern __shared__ float red[];  // [kWarps][tiles][4][32]
  const int tiles_per_matrix = (p.out + kTileRows - 1) / kTileRows;
  const LinearOperands& op = p.op[blockIdx.x / tiles_per_matrix];
  const int r0 = (blockIdx.x % tiles_per_matrix) * kTileRows;
  for (int n0 = 0; n0 < p.n; n0 += kMaxNTiles * 8) {
    const int tiles = min(kMaxNTiles, (p.n - n0 + 7) / 8);
    switch (tiles) {
      case 1:
        tile_pass<1>(p, op, r0, n0, red);
        break;
      case 2:
        tile_pass<2>(p, op, r0, n0, red);
        break;
      case 3:
        tile_pass<3>(p, op, r0, n0, red);
        break;
      case 4:
        tile_pass<4>(p, op, r0, n0, red);
        break;
      case 5:
        tile_pass<5>(p, op, r0, n0, red);
        break;
      case 6:
        tile_pass<6>(p, op, r0, n0, red);
        break;
      case 7:
        tile_pass<7>(p, op, r0, n0, red);
        break;
      default:
        tile_pass<8>(p, op, r0, n0, red);
        break;
    }
  }
}

}  // namespace

cudaError_t launch_block_linear_mma(const BlockLinearParams& p) {
  for (int g = 0; g < p.groups; ++g)
    if (!p.op[g].x_codes || !p.op[g].x_scales || !p.op[g].w || !p.op[g].w_scales || !p.op[g].y)
      return cudaErrorInvalidValue;
  const int tiles = std::min(kMaxNTiles, (p.n + 7) / 8);
  const int smem = kWarps * tiles * 4 * kWarp * static_cast<int>(sizeof(float));
  static const cudaError_t attr =
      cudaFuncSetAttribute(sm90_fp8_block_linear_mma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kWarps * kMaxNTiles * 4 * kWarp * static_cast<int>(sizeof(float)));
  if (attr != cudaSuccess) return attr;
  const int ctas = p.groups * ((p.out + kTileRows - 1) / kTileRows);
  sm90_fp8_block_linear_mma<<<ctas, kWarps * kWarp, smem, p.stream>>>(p);
  return cudaGetLastError();
}

}  // namespace dsinfer::cuda
