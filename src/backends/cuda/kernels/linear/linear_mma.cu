// sm90_fp8_block_linear_mma: block-scaled linear on the tensor cores, any number of activation
// rows, with per-row results that do not depend on how many rows share the launch (a decode
// step's sequences: batch invariance).
//
// A K block (32 weights, one scale) of 16 weight rows is the A operand of two mma.m16n8k16
// (f16 x f16 -> f32), each activation tile of 8 rows the B operand, so D is that block's exact
// partial sum for 16 rows x 8 activation rows; it is scaled ((P * sx) * sw, the reference's
// order, rounded step by step as the CPU does) and chained in fp32 per thread. Each weight is
// converted to f16 once (fp8: cvt; fp4: byte permutes to e4m3, then cvt) and serves every tile;
// the activations come as f16 values from the input quantisation, so they need no conversion.
//
// A CTA takes 16 rows of one matrix and all activation rows (passes of up to 8 tiles); its warps
// split the K blocks (warp w takes w, w + W, ...) and meet in shared memory at the end, in warp
// order. Within a block the K order is free as long as A and B agree: thread (g, t) holds K
// 8t..8t+7 of rows g and g + 8 (one load each), the first mma takes K 8t..8t+3 and the second
// 8t+4..8t+7, and activation row g is read at the same K. A row's sum depends only on the
// matrix's shape, never on the rows beside it: the tiles are independent columns of the mma.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/kernels/linear/block_fragments.cuh"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/device_helpers.cuh"
#include "backends/cuda/kernels/linear/kernels.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace linear_config;
using namespace linear_config::mma_kernel;
using namespace linear_detail;

// acc + (d * sx) * sw, each step rounded (no contraction into an fma): the CPU's order.
__device__ inline float chain(float acc, float d, float sx, float sw) {
  return __fadd_rn(acc, __fmul_rn(__fmul_rn(d, sx), sw));
}

template <int NT>  // activation tiles of 8 in this pass
__device__ void tile_pass(const BlockLinearParams& p, const LinearOperands& op, int n, int r0, int n0, float* red) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int blocks = p.k / 32;
  float acc[NT][4] = {};
  for (int b0 = warp; b0 < blocks; b0 += kWarps * kInFlight) {
    uint32_t raw[kInFlight][4], sws[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int b = b0 + u * kWarps;
      if (b < blocks) load_raw(p, op.w, r0, b, g, t, raw[u]), sws[u] = load_scales(p, op.w_scales, r0, b, g);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int b = b0 + u * kWarps;
      if (b >= blocks) break;  // warp-uniform
      uint32_t a0[4], a1[4];
      raw_to_a(p.fp4, raw[u], a0, a1);
      const float sw_g = e8m0_to_float(static_cast<uint8_t>(sws[u]));
      const float sw_g8 = e8m0_to_float(static_cast<uint8_t>(sws[u] >> 8));
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int row_b = n0 + j * 8 + g;   // activation row this thread feeds to B
        const int c0 = n0 + j * 8 + 2 * t;  // activation rows of d[0], d[2] (c0) and d[1], d[3] (c0 + 1)
        const uint4 bx = row_b < n ? __ldg(reinterpret_cast<const uint4*>(
                                         op.x_values + static_cast<int64_t>(row_b) * p.k + b * 32 + t * 8))
                                   : make_uint4(0, 0, 0, 0);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_f16(a0, bx.x, bx.y, d);
        mma_f16(a1, bx.z, bx.w, d);
        const float sx0 = c0 < n ? op.x_scales[static_cast<int64_t>(c0) * blocks + b] : 0.0f;
        const float sx1 = c0 + 1 < n ? op.x_scales[static_cast<int64_t>(c0 + 1) * blocks + b] : 0.0f;
        acc[j][0] = chain(acc[j][0], d[0], sx0, sw_g);
        acc[j][1] = chain(acc[j][1], d[1], sx1, sw_g);
        acc[j][2] = chain(acc[j][2], d[2], sx0, sw_g8);
        acc[j][3] = chain(acc[j][3], d[3], sx1, sw_g8);
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
        for (int w = 0; w < kWarps; ++w) s = __fadd_rn(s, red[((w * NT + j) * 4 + e) * kWarp + lane]);
        const int row = r0 + g + (e >= 2 ? 8 : 0), col = n0 + j * 8 + 2 * t + (e & 1);
        if (row < p.out && col < n) op.y[static_cast<int64_t>(col) * p.y_stride + row] = float_to_bf16(s);
      }
  }
  __syncthreads();  // red is reused by the next pass
}

__global__ void __launch_bounds__(kWarps* kWarp) sm90_fp8_block_linear_mma(BlockLinearParams p) {
  after_prior_grids();
  extern __shared__ float red[];  // [kWarps][tiles][4][32]
  const int tiles_per_matrix = (p.out + kTileRows - 1) / kTileRows, group = blockIdx.x / tiles_per_matrix;
  const int r0 = (blockIdx.x % tiles_per_matrix) * kTileRows;
  LinearOperands op;
  int n = p.n;
  if (!p.expert_groups)
    op = p.op[group];
  else if (!expert_group_operands(p, group, op, n))
    return;  // the whole CTA
  for (int n0 = 0; n0 < n; n0 += kMaxNTiles * 8) {
    const int tiles = min(kMaxNTiles, (n - n0 + 7) / 8);
    switch (tiles) {
      case 1:
        tile_pass<1>(p, op, n, r0, n0, red);
        break;
      case 2:
        tile_pass<2>(p, op, n, r0, n0, red);
        break;
      case 3:
        tile_pass<3>(p, op, n, r0, n0, red);
        break;
      case 4:
        tile_pass<4>(p, op, n, r0, n0, red);
        break;
      case 5:
        tile_pass<5>(p, op, n, r0, n0, red);
        break;
      case 6:
        tile_pass<6>(p, op, n, r0, n0, red);
        break;
      case 7:
        tile_pass<7>(p, op, n, r0, n0, red);
        break;
      default:
        tile_pass<8>(p, op, n, r0, n0, red);
        break;
    }
  }
}

}  // namespace

cudaError_t launch_block_linear_mma(const BlockLinearParams& p) {
  if (p.routes || !operands_given(p)) return cudaErrorInvalidValue;  // a routed call is the GEMV kernels'
  const bool grouped = p.expert_groups != nullptr;
  // A grouped call's row counts are on the device: room for a full pass.
  const int tiles = grouped ? kMaxNTiles : std::min(kMaxNTiles, (p.n + 7) / 8);
  const int smem = kWarps * tiles * 4 * kWarp * static_cast<int>(sizeof(float));
  static const cudaError_t attr =
      cudaFuncSetAttribute(sm90_fp8_block_linear_mma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kWarps * kMaxNTiles * 4 * kWarp * static_cast<int>(sizeof(float)));
  if (attr != cudaSuccess) return attr;
  const int64_t ctas = static_cast<int64_t>(p.groups) * ((p.out + kTileRows - 1) / kTileRows);
  if (ctas > INT32_MAX) return cudaErrorInvalidValue;
  return launch_kernel(sm90_fp8_block_linear_mma, static_cast<unsigned>(ctas), kWarps * kWarp, smem, p.stream, p);
}

}  // namespace dsinfer::cuda
