// sm90_fp8_block_linear_gemv: the block-scaled GEMV of decode (n <= 4 activation rows) on f16 tensor cores. The
// kernel template and its launch, for linear_gemv.cu (the instances the dispatch runs) and the
// kernel lab (bench/cuda/lab: deeper prefetch, other grids).
//
// A warp owns one weight row; a step covers 512 K of it, split in 8 parts of 64 (two scale blocks
// each): lane (g, t) loads 16 weights of part g at K 16t..16t+15 of the part (16 bytes of fp8 or
// 8 of fp4), so one load instruction reads 512 (fp8) or 256 (fp4) contiguous bytes of the row:
// whole 128-byte lines. The weights are the B operand of mma.m16n8k16 (column n = part g, four K
// slots per lane), the activations at the same K the A operand: A row g carries them in the slots
// of part g's first block (t < 2), A row g + 8 in those of its second block (t >= 2). After four
// mmas D[g][g] and D[g + 8][g] are exactly part g's two block partials (the other columns of D
// mix parts and are ignored); lane (g, g / 2) holds them. Within a block the K order is free as
// long as A and B agree, which is what lets each lane read 16 contiguous bytes.
//
// Why this shape: the FMA kernel spends most instructions converting weights to fp32 (e4m3 ->
// f16 -> f32); here a weight is converted once (fp8: cvt to f16x2; fp4: a shared-memory table of
// byte -> f16 pair) and the tensor core does the multiply-adds. Each warp walks its rows as one
// stream of steps with U steps of loads (and their block scales) in flight across row boundaries;
// short matrices split a row's K over the warps of a CTA. Measured (docs/perf-notes.md): 10-25 %
// faster than the FMA kernel on every fp8 decode shape at n = 1, slower on fp4 (the table
// lookups), and still far from the bandwidth: the step costs too many instructions.
//
// Sums: the block partials are exact f32 sums of exact products (as the CPU's); each owner lane
// chains acc = acc + (P * sx) * sw over its part's blocks, and the lanes' chains and then the
// CTA's K ranges are added in a fixed order. Only those last associations differ from the CPU
// (which chains all blocks), so a few outputs differ from it in the last bf16 bit. The split
// depends only on the matrix's shape, so a result does not depend on what shares the launch.
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
#include "backends/cuda/kernels/linear/kernels.h"

namespace dsinfer::cuda::linear_detail::gemv_kernel {
namespace {  // each includer's own instances

using namespace common;
using namespace linear_config;
using namespace linear_config::gemv_kernel;

constexpr int kLutWords = kE2m1TableWords;

// One step of a lane: its weights (fp8 all four words, fp4 the first two) and its part's two
// block scales (loaded with the weights, so no step waits on a scale).
struct Frag {
  uint32_t w[4];
  uint32_t scales;
};

// Where a warp's current row lives, at this lane's offsets: its weights and their scales, its
// group's input (values and scales) and output.
struct RowSource {
  const uint8_t* w = nullptr;
  const uint8_t* sw = nullptr;
  const uint16_t* x = nullptr;
  const float* sx = nullptr;
  uint16_t* y = nullptr;
  bool live = false;  // a row of the launch whose weights exist (a routed id out of range: zeros)
  bool in_range = false;
};

template <bool kFp4>
__device__ inline Frag load_step(const RowSource& r, int s, bool in_k) {
  constexpr int kStepBytes = kFp4 ? kStepK / 2 : kStepK;
  Frag f = {};
  if (!r.live || !in_k) return f;
  const uint8_t* p = r.w + static_cast<int64_t>(s) * kStepBytes;
  if constexpr (kFp4) {
    const uint2 v = __ldcs(reinterpret_cast<const uint2*>(p));  // streamed: keep L1 for x
    f.w[0] = v.x, f.w[1] = v.y;
  } else {
    const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
    f.w[0] = v.x, f.w[1] = v.y, f.w[2] = v.z, f.w[3] = v.w;
  }
  f.scales = __ldg(reinterpret_cast<const uint16_t*>(r.sw + static_cast<int64_t>(s) * (kStepK / 32)));
  return f;
}

// The two f16 pairs of mma m's B fragment (K slots 2t, 2t + 1 and 2t + 8, 2t + 9 = the lane's
// weights 4m .. 4m + 3).
template <bool kFp4>
__device__ inline void b_fragment(const Frag& f, int m, const uint32_t* lut_lane, uint32_t& b0, uint32_t& b1) {
  if constexpr (kFp4) {
    const uint32_t word = f.w[m / 2], half = word >> (16 * (m % 2));
    b0 = lut_lane[(half & 0xFFu) * kWarp];
    b1 = lut_lane[((half >> 8) & 0xFFu) * kWarp];
  } else {
    b0 = e4m3x2_to_f16x2(f.w[m] & 0xFFFFu);
    b1 = e4m3x2_to_f16x2(f.w[m] >> 16);
  }
}

// A warp's walk: rows first_row, first_row + stride, ... below `rows`, each over steps [s0, s1).
struct Walk {
  int first_row, stride, rows, s0, s1;
};

template <bool kFp4>
__device__ inline RowSource row_source(const BlockLinearParams& p, const Walk& walk, int item, int lane) {
  constexpr int kStepBytes = kFp4 ? kStepK / 2 : kStepK;
  RowSource r;
  const int at = walk.first_row + item * walk.stride;
  if (at >= walk.rows) return r;
  const int group = at / p.out, row = at % p.out, g = lane / 4, t = lane % 4;
  const LinearOperands& op = p.op[group];
  r.in_range = true;
  r.x = op.x_values + g * kPartK + t * 16;
  r.sx = op.x_scales + 2 * g;
  r.y = op.y + row;
  const uint8_t *w, *sw;
  if (!group_weights(p, group, w, sw)) return r;  // not live: zeros
  r.live = true;
  r.w = w + static_cast<int64_t>(row) * p.w_stride + lane * (kStepBytes / 32);
  // fp8: one scale per 32 x 32 tile; fp4: per row and block. Lane (g, t) reads part g's pair.
  r.sw = sw + static_cast<int64_t>(kFp4 ? row : row / 32) * p.s_stride + 2 * g;
  return r;
}

// The warp's rows as one stream of steps: U steps of loads stay in flight across row boundaries,
// so a row of a few steps does not wait for its first load. A row's sum is reduced over the
// warp (lane (g, g / 2) holds part g's chain) and, with split > 1, over the CTA's warps of that
// row in K order; `sums` holds the warps' sums [kWarps][N].
template <bool kFp4, int U, int N>
__device__ void walk_rows(const BlockLinearParams& p, const Walk& walk, int items, int split, const uint32_t* lut_lane,
                          float* sums) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const bool first_block = t < 2, owner = t == g / 2;
  const int parts = p.k / kPartK, blocks = p.k / 32, steps = walk.s1 - walk.s0;
  const int total = items * steps;
  // The prefetch cursor (item, step) and the processing cursor.
  int load_item = 0, load_step_i = 0;
  RowSource load_src = row_source<kFp4>(p, walk, 0, lane);
  const auto issue = [&]() {
    const int s = walk.s0 + load_step_i;
    const Frag f = load_step<kFp4>(load_src, s, s * 8 + g < parts);
    if (++load_step_i == steps) {
      load_step_i = 0;
      load_src = row_source<kFp4>(p, walk, ++load_item, lane);
    }
    return f;
  };
  Frag ring[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < total) ring[u] = issue();

  int item = 0, step_i = 0;
  RowSource src = row_source<kFp4>(p, walk, 0, lane);
  float acc[N] = {};
  for (int q0 = 0; q0 < total; q0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (q0 + u >= total) break;
      const Frag cur = ring[u];
      if (q0 + u + U < total) ring[u] = issue();
      const int s = walk.s0 + step_i;
      const bool in_k = s * 8 + g < parts;  // a part past K (in the last step) has zero weights
      if (src.live) {                       // warp-uniform: mma.sync needs every lane
        uint32_t b[8];
#pragma unroll
        for (int m = 0; m < 4; ++m) b_fragment<kFp4>(cur, m, lut_lane, b[2 * m], b[2 * m + 1]);
        const float sw_lo = e8m0_to_float(cur.scales & 0xFFu), sw_hi = e8m0_to_float(cur.scales >> 8);
#pragma unroll
        for (int tok = 0; tok < N; ++tok) {
          const uint4* xp = reinterpret_cast<const uint4*>(src.x + static_cast<int64_t>(tok) * p.k +
                                                           static_cast<int64_t>(s) * kStepK);
          const uint4 x0 = in_k ? __ldg(xp) : make_uint4(0, 0, 0, 0), x1 = in_k ? __ldg(xp + 1) : x0;
          const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
          float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            // A: row g (the part's first block) or g + 8 (its second) holds activations 4m .. 4m + 3.
            const uint32_t lo = xw[2 * m], hi = xw[2 * m + 1];
            const uint32_t a[4] = {first_block ? lo : 0u, first_block ? 0u : lo, first_block ? hi : 0u,
                                   first_block ? 0u : hi};
            mma_f16(a, b[2 * m], b[2 * m + 1], d);
          }
          if (owner && in_k) {
            const float2 xs =
                __ldg(reinterpret_cast<const float2*>(src.sx + static_cast<int64_t>(tok) * blocks + s * (kStepK / 32)));
            acc[tok] += ((g % 2 ? d[1] : d[0]) * xs.x) * sw_lo;
            acc[tok] += ((g % 2 ? d[3] : d[2]) * xs.y) * sw_hi;
          }
        }
      }
      if (++step_i == steps) {  // the row is done: its sum, then the next row
#pragma unroll
        for (int tok = 0; tok < N; ++tok) {
          const float v = warp_sum(acc[tok]);
          acc[tok] = 0.0f;
          if (split == 1) {
            if (lane == tok && src.in_range) src.y[static_cast<int64_t>(tok) * p.y_stride] = float_to_bf16(v);
          } else if (lane == 0) {
            sums[warp * N + tok] = v;
          }
        }
        if (split > 1) {
          __syncthreads();
          if (warp % split == 0 && lane < N && src.in_range) {  // the K ranges' sums in order
            float y = sums[warp * N + lane];
            for (int r = 1; r < split; ++r) y += sums[(warp + r) * N + lane];
            src.y[static_cast<int64_t>(lane) * p.y_stride] = float_to_bf16(y);
          }
          __syncthreads();
        }
        step_i = 0;
        src = row_source<kFp4>(p, walk, ++item, lane);
      }
    }
  }
}

template <bool kFp4, int U, int N>
// Three CTAs an SM for the single-token kernel (80 registers), two for the rest (no spills).
__global__ void __launch_bounds__(kWarps* kWarp, N == 1 && U == 4 ? 3 : 2)
    sm90_fp8_block_linear_gemv(BlockLinearParams p, int split) {
  after_prior_grids();
  extern __shared__ uint32_t smem[];  // fp4: the table [256][32]; then the warps' sums [8][N]
  uint32_t* lut = smem;
  float* sums = reinterpret_cast<float*>(smem + (kFp4 ? kLutWords : 0));
  if constexpr (kFp4) fill_e2m1_table(lut);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int per_cta = kWarps / split, part = warp % split;
  const int rows = p.groups * p.out, steps = (p.k + kStepK - 1) / kStepK;
  const int first = blockIdx.x * per_cta, stride = gridDim.x * per_cta;
  // Every warp of a CTA walks the same number of rows (the barriers of split > 1 need it).
  const int items = first < rows ? (rows - 1 - first) / stride + 1 : 0;
  const Walk walk{first + warp / split, stride, rows, part * steps / split, (part + 1) * steps / split};
  walk_rows<kFp4, U, N>(p, walk, items, split, lut + lane, sums);
}

// U steps of loads in flight a warp, N activation rows; a grid of at most blocks_per_sm CTAs an SM.
template <bool kFp4, int U, int N>
cudaError_t launch(const BlockLinearParams& p, int blocks_per_sm) {
  const size_t smem = (kFp4 ? kLutWords * 4 : 0) + kWarps * N * sizeof(float);
  static const cudaError_t attr = cudaFuncSetAttribute(
      sm90_fp8_block_linear_gemv<kFp4, U, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  const int split = gemv_split(p.out, p.k);
  const int per_cta = kWarps / split, rows = p.groups * p.out;
  const int ctas = std::min((rows + per_cta - 1) / per_cta, sm_count() * std::max(blocks_per_sm, 1));
  return launch_kernel(sm90_fp8_block_linear_gemv<kFp4, U, N>, ctas, kWarps * kWarp, smem, p.stream, p, split);
}

}  // namespace
}  // namespace dsinfer::cuda::linear_detail::gemv_kernel
