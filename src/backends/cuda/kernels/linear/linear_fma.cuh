// sm90_fp8_block_linear_fma: the block-scaled GEMMs of decode (small n) on the CUDA cores, one or several
// matrices of one shape per launch (their input: launch_quantize_input, kernels/act_quant).
// The kernel template and its launch, for linear.cu (the instance the dispatch runs) and the kernel
// lab (bench/cuda/lab: the other loads-in-flight counts).
//
// Bytes and work per call: the weights are read once (out * k bytes for fp8, half that for fp4,
// plus 1/1024 or 1/32 of that in scales); x and its scales are small and stay in L1/L2. At batch 1
// this is a memory-bound stream; the kernels keep the per-byte instruction count low enough for the
// H200's ~4.3 TB/s (about 16 bytes per SM per clock).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/device_helpers.cuh"
#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda::linear_detail::fma_kernel {
namespace {  // each includer's own instances

using namespace common;
using namespace linear_config;
using namespace linear_config::fma_kernel;

__device__ inline float2 half2_bits_to_float2(uint32_t bits) {
  __half2 h;
  memcpy(&h, &bits, 4);
  return __half22float2(h);
}

// fp8: a warp covers 32 chunks of 16 codes per step, U steps loaded before any is used; lanes 2m
// and 2m + 1 hold the two halves of one block.
template <int NB, int U>
__device__ void fp8_row(const BlockLinearParams& p, const LinearOperands& g, int row, int i0, int lane) {
  const uint8_t* wr = g.w + static_cast<int64_t>(row) * p.w_stride;
  const uint8_t* sr = g.w_scales + static_cast<int64_t>(row / 32) * p.s_stride;
  const int chunks = p.k / 16, blocks = p.k / 32;
  float acc[NB] = {};
  for (int base = 0; base < chunks; base += kWarp * U) {
    uint4 wv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * kWarp + lane;
      wv[u] = c < chunks ? __ldg(reinterpret_cast<const uint4*>(wr) + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * kWarp + lane;
      const bool valid = c < chunks;  // chunks is even: both lanes of a block agree
      float wf[16];
      const uint32_t words[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 a = half2_bits_to_float2(e4m3x2_to_f16x2(words[q] & 0xFFFFu));
        const float2 d = half2_bits_to_float2(e4m3x2_to_f16x2(words[q] >> 16));
        wf[4 * q] = a.x, wf[4 * q + 1] = a.y, wf[4 * q + 2] = d.x, wf[4 * q + 3] = d.y;
      }
      const int b = c / 2;
      const float sw = valid ? e8m0_to_float(sr[b]) : 0.0f;
#pragma unroll
      for (int i = 0; i < NB; ++i) {
        float part = 0.0f;
        if (valid) {
          const uint4* xp = reinterpret_cast<const uint4*>(g.x_values + static_cast<int64_t>(i0 + i) * p.k) + 2 * c;
          const uint4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
          const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            const float2 xf = half2_bits_to_float2(xw[q]);
            part = __fmaf_rn(wf[2 * q], xf.x, part);
            part = __fmaf_rn(wf[2 * q + 1], xf.y, part);
          }
        }
        part = warp_sum(part, 2);  // the block's two halves (lanes 2m, 2m + 1)
        if (valid && !(lane & 1)) acc[i] += (part * g.x_scales[static_cast<int64_t>(i0 + i) * blocks + b]) * sw;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == 0) g.y[static_cast<int64_t>(i0 + i) * p.y_stride + row] = float_to_bf16(s);
  }
}

// fp4: a lane holds one whole block (16 bytes, 32 weights); U blocks are loaded before any is
// used. The codes become fp16 pairs through a table of all 256 bytes, one copy per lane so that
// the lookups never share a bank. fp4 times an e4m3 value is exact in fp16 (at most 6 * 448, at
// least 2^-10).
template <int NB, int U>
__device__ void fp4_row(const BlockLinearParams& p, const LinearOperands& g, int row, int i0, int lane,
                        const uint32_t* lut) {
  const uint8_t* wr = g.w + static_cast<int64_t>(row) * p.w_stride;
  const uint8_t* sr = g.w_scales + static_cast<int64_t>(row) * p.s_stride;
  const int blocks = p.k / 32;
  float acc[NB] = {};
  for (int base = 0; base < blocks; base += kWarp * U) {
    uint4 wv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * kWarp + lane;
      wv[u] = c < blocks ? __ldg(reinterpret_cast<const uint4*>(wr) + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * kWarp + lane;
      if (c >= blocks) break;
      uint32_t wh[16];  // fp16 pairs: elements 2j, 2j + 1
      const uint32_t words[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int byte = 0; byte < 4; ++byte) wh[4 * q + byte] = lut[((words[q] >> (8 * byte)) & 0xFFu) * kWarp + lane];
      const float sw = e8m0_to_float(sr[c]);
#pragma unroll
      for (int i = 0; i < NB; ++i) {
        const uint4* xp = reinterpret_cast<const uint4*>(g.x_values + static_cast<int64_t>(i0 + i) * p.k) + 4 * c;
        float part = 0.0f;
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const uint4 xv = __ldg(xp + v);
          const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            __half2 w2, x2;
            memcpy(&w2, &wh[4 * v + q], 4);
            memcpy(&x2, &xw[q], 4);
            const float2 prod = __half22float2(__hmul2(w2, x2));  // exact
            part += prod.x;
            part += prod.y;
          }
        }
        acc[i] += (part * g.x_scales[static_cast<int64_t>(i0 + i) * blocks + c]) * sw;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == 0) g.y[static_cast<int64_t>(i0 + i) * p.y_stride + row] = float_to_bf16(s);
  }
}

template <int NB, int U>
__device__ void one_row(const BlockLinearParams& p, int row, int i0, int lane, const uint32_t* lut) {
  const int group = row / p.out;
  LinearOperands g = p.op[group];
  if (!group_weights(p, group, g.w, g.w_scales)) {
    if (lane == 0)
      for (int i = 0; i < NB; ++i) g.y[static_cast<int64_t>(i0 + i) * p.y_stride + row % p.out] = 0;
    return;
  }
  if (p.fp4)
    fp4_row<NB, U>(p, g, row % p.out, i0, lane, lut);
  else
    fp8_row<NB, U>(p, g, row % p.out, i0, lane);
}

template <int U>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) sm90_fp8_block_linear_fma(BlockLinearParams p) {
  after_prior_grids();
  extern __shared__ uint32_t lut[];  // fp4 only: [256][32] fp16 pairs
  if (p.fp4) fill_e2m1_table(lut);
  const int lane = threadIdx.x % kWarp;
  const int warps = gridDim.x * kWarpsPerBlock;
  const int rows = p.groups * p.out;
  for (int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp; row < rows; row += warps) {
    int i0 = 0;
    for (; i0 + kRowsPerPass <= p.n; i0 += kRowsPerPass) one_row<kRowsPerPass, U>(p, row, i0, lane, lut);
    for (; i0 < p.n; ++i0) one_row<1, U>(p, row, i0, lane, lut);
  }
}

// U: the 16-byte weight loads each lane issues before using them; a persistent grid of
// blocks_per_sm blocks of 8 warps an SM.
template <int U>
cudaError_t launch(const BlockLinearParams& p, int blocks_per_sm) {
  constexpr int kLutBytes = 256 * kWarp * 4;
  static const cudaError_t attr =
      cudaFuncSetAttribute(sm90_fp8_block_linear_fma<U>, cudaFuncAttributeMaxDynamicSharedMemorySize, kLutBytes);
  if (attr != cudaSuccess) return attr;
  // A persistent grid: a few blocks per SM walk the rows (the fp4 table is built once per block).
  const int rows_blocks = (p.groups * p.out + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int blocks = std::min(rows_blocks, sm_count() * std::max(blocks_per_sm, 1));
  return launch_kernel(sm90_fp8_block_linear_fma<U>, blocks, kWarpsPerBlock * kWarp, p.fp4 ? kLutBytes : 0, p.stream,
                       p);
}

}  // namespace
}  // namespace dsinfer::cuda::linear_detail::fma_kernel
