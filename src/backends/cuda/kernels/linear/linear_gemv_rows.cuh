// sm90_fp8_block_linear_gemv_rows: one token's block-scaled GEMV on f16 tensor cores, eight weight rows a warp
// (fp4: the routed experts at decode; fp8: the large matrices). The kernel template and its
// launch, for linear_gemv_rows.cu (the instances the dispatch runs) and the kernel lab
// (bench/cuda/lab: deeper prefetch).
//
// A step covers four scale blocks (128 K) of each row: lane (g, t) loads block t of row g (fp4:
// 16 bytes, fp8: 32), so the warp reads 64 or 128 contiguous bytes of each of its 8 rows. The
// lane's 32 weights (fp4: an f16 pair per byte from the shared-memory table; fp8: cvt to f16
// pairs) are its B fragments of 8 mma.m16n8k16: B
// column n = row n, and every K slot of lane t holds block t. The A operand carries block t's
// activations in row t at lane t's K slots and zeros elsewhere, so after the 8 mmas D[m][n] is
// exactly block m's partial sum for row n (m < 4), held by lane (m, n / 2). Those lanes scale it
// ((P * sx) * sw, as the CPU), and lane n / 2 of the first four adds the four blocks to its rows'
// chains in block order: the same fp32 operations in the same order as the CPU backend.
//
// Why: at one token the FMA kernel spends most of its instructions on conversions and a serial
// add chain per block, and the one-row tensor-core kernel (linear_gemv.cuh) re-reads the
// activations for every row; here a step's activations (64 bytes, loaded by 4 lanes) serve 8 rows.
// fp8 scales are per 32 x 32 tile: a warp's 8 rows share them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/device_helpers.cuh"

namespace dsinfer::cuda::linear_detail::gemv_rows_kernel {
namespace {  // each includer's own instances

using namespace common;
using namespace linear_config;
using namespace linear_config::gemv_rows_kernel;

constexpr int kLutWords = kE2m1TableWords;
constexpr unsigned kFull = 0xFFFFFFFFu;

// The 32 activations (f16 codes) of block b, or zeros.
struct BlockX {
  uint4 v[4];
};
__device__ inline BlockX load_x(const uint16_t* x, int b, bool wanted) {
  BlockX r = {};
  if (wanted) {
    const uint4* p = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(b) * 32);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.v[i] = __ldg(p + i);
  }
  return r;
}

// A lane's step: block 4s + t of row g (fp4: the first 4 words).
struct Weights {
  uint32_t w[8];
};

template <bool kFp4, int U>
__global__ void __launch_bounds__(kWarps* kWarp) sm90_fp8_block_linear_gemv_rows(BlockLinearParams p) {
  after_prior_grids();
  extern __shared__ uint32_t lut[];          // fp4: [256][32] f16 pairs
  if constexpr (kFp4) fill_e2m1_table(lut);  // the kernel's only barrier
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int octets = p.out / kRows, task = blockIdx.x * kWarps + warp;
  if (task >= p.groups * octets) return;
  const int group = task / octets, r0 = (task % octets) * kRows;
  const LinearOperands& op = p.op[group];
  uint16_t* y = op.y + r0;
  const uint8_t *w, *sw;
  if (!group_weights(p, group, w, sw)) {  // no such expert: zeros
    if (lane < kRows) y[lane] = 0;
    return;
  }
  constexpr int kBlockBytes = kFp4 ? 16 : 32, kStepBytes = kStepBlocks * kBlockBytes;
  const int blocks = p.k / 32, steps = (blocks + kStepBlocks - 1) / kStepBlocks;
  const uint8_t* wl = w + static_cast<int64_t>(r0 + g) * p.w_stride + t * kBlockBytes;  // block 4s + t of row g
  // Lanes (m, n) with m < 4 scale block 4s + m of rows 2n, 2n + 1 (fp8: one tile row for all 8).
  const uint8_t* sw0 = sw + static_cast<int64_t>(kFp4 ? r0 + 2 * t : r0 / 32) * p.s_stride + g;
  const uint8_t* sw1 = kFp4 ? sw0 + p.s_stride : sw0;
  const uint32_t* lut_lane = lut + lane;
  const bool x_lane = g == t;  // lane t of row group t: block t's activations in A row t

  const auto load_w = [&](int s) {
    Weights r = {};
    if (kStepBlocks * s + t < blocks) {
      const uint4* q = reinterpret_cast<const uint4*>(wl + static_cast<int64_t>(s) * kStepBytes);
      const uint4 a = __ldcs(q);
      r.w[0] = a.x, r.w[1] = a.y, r.w[2] = a.z, r.w[3] = a.w;
      if constexpr (!kFp4) {
        const uint4 b = __ldcs(q + 1);
        r.w[4] = b.x, r.w[5] = b.y, r.w[6] = b.z, r.w[7] = b.w;
      }
    }
    return r;
  };
  Weights ring[U];
#pragma unroll
  for (int u = 0; u < U; ++u) ring[u] = u < steps ? load_w(u) : Weights{};
  BlockX x = load_x(op.x_values, t, x_lane && t < blocks);
  float acc0 = 0.0f, acc1 = 0.0f;  // rows 2t, 2t + 1 (lanes 0..3)
  for (int s0 = 0; s0 < steps; s0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u;
      if (s >= steps) break;
      const Weights cur = ring[u];
      if (s + U < steps) ring[u] = load_w(s + U);
      const BlockX xs = x;
      const int next = kStepBlocks * (s + 1) + t;
      x = load_x(op.x_values, next, x_lane && next < blocks);
      const uint32_t xw[16] = {xs.v[0].x, xs.v[0].y, xs.v[0].z, xs.v[0].w, xs.v[1].x, xs.v[1].y, xs.v[1].z, xs.v[1].w,
                               xs.v[2].x, xs.v[2].y, xs.v[2].z, xs.v[2].w, xs.v[3].x, xs.v[3].y, xs.v[3].z, xs.v[3].w};
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 8; ++j) {  // weights 4j .. 4j + 3 of the lane's block
        uint32_t b0, b1;
        if constexpr (kFp4) {
          const uint32_t half = cur.w[j / 2] >> (16 * (j % 2));
          b0 = lut_lane[(half & 0xFFu) * kWarp], b1 = lut_lane[((half >> 8) & 0xFFu) * kWarp];
        } else {
          b0 = e4m3x2_to_f16x2(cur.w[j] & 0xFFFFu), b1 = e4m3x2_to_f16x2(cur.w[j] >> 16);
        }
        const uint32_t a[4] = {xw[2 * j], 0u, xw[2 * j + 1], 0u};
        mma_f16(a, b0, b1, d);
      }
      const int b = kStepBlocks * s + g;
      float q0 = 0.0f, q1 = 0.0f;
      if (g < kStepBlocks && b < blocks) {
        const float sx = __ldg(op.x_scales + b);
        q0 = (d[0] * sx) * e8m0_to_float(__ldg(sw0 + kStepBlocks * s));
        q1 = (d[1] * sx) * e8m0_to_float(__ldg(sw1 + kStepBlocks * s));
      }
#pragma unroll
      for (int m = 0; m < kStepBlocks; ++m) {  // block order, as the CPU's chain
        const float v0 = __shfl_sync(kFull, q0, 4 * m + t), v1 = __shfl_sync(kFull, q1, 4 * m + t);
        if (kStepBlocks * s + m < blocks) acc0 += v0, acc1 += v1;
      }
    }
  }
  if (lane < kRows / 2) {
    y[2 * lane] = float_to_bf16(acc0);
    y[2 * lane + 1] = float_to_bf16(acc1);
  }
}

// U steps of loads in flight a warp; a warp per 8 rows.
template <bool kFp4, int U>
cudaError_t launch(const BlockLinearParams& p) {
  constexpr size_t kSmem = kFp4 ? kLutWords * 4 : 0;
  static const cudaError_t attr = cudaFuncSetAttribute(
      sm90_fp8_block_linear_gemv_rows<kFp4, U>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  if (attr != cudaSuccess) return attr;
  const int tasks = p.groups * (p.out / kRows);
  return launch_kernel(sm90_fp8_block_linear_gemv_rows<kFp4, U>, (tasks + kWarps - 1) / kWarps, kWarps * kWarp, kSmem,
                       p.stream, p);
}

}  // namespace
}  // namespace dsinfer::cuda::linear_detail::gemv_rows_kernel
