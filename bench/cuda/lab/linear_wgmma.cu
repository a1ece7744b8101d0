// sm90_fp8_block_linear_wgmma: block-scaled linear on Hopper's fp8 tensor-core instruction (wgmma,
// QGMMA in SASS) for batches of up to 8 activation rows. In the kernel lab: fast from batch 1 to 8,
// but the fp8 tensor cores round inside a block's sum (4-7 % of outputs differ from the CPU's
// exact block sums by 1-2 bf16 ulps, which takes a golden fixture past its tolerance:
// docs/perf-notes.md), so the library's dispatch never runs it.
//
// A warpgroup (4 warps) takes 64 weight rows and a slice of the K blocks. Per K block one
// wgmma.m64n8k32 (e4m3) multiplies the weights (A, from registers, in the fragment layout of
// mma.m16n8k32 per warp) by the activation codes (B, 8 x 32 bytes in shared memory, staged once per
// CTA) with a zero accumulator, so its result is the block's partial sum, scaled ((P * sx) * sw) and
// accumulated in fp32 registers. The K slices of a matrix run in separate CTAs (enough CTAs to fill
// the GPU even for 2304-row matrices); each writes its fp32 partial to a workspace and a second
// kernel sums the slices in a fixed order, so results do not depend on scheduling.
//
// Within a block the K order is free as long as A and B agree: thread (g, t) of a warp loads bytes
// 8t..8t+7 of rows g and g + 8 (one 8-byte load each) into the k slots 4t..4t+3 and 16+4t..16+4t+3;
// the activation bytes are staged into shared memory in that same slot order.
#include <cuda_bf16.h>

#include <algorithm>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/kernels/linear/device_helpers.cuh"
#include "lab/lab.h"

namespace dsinfer::cuda::lab {
namespace {

using namespace common;
using namespace linear_detail;

constexpr int kWarp = 32;
constexpr int kThreads = 128;  // one warpgroup
constexpr int kTileRows = 64;
constexpr int kBBytesPerBlock = 8 * 32;

// Shared-memory matrix descriptor, no swizzle: B of one block is two 8 x 16-byte core matrices
// (k slots 0-15, then 16-31). The leading-byte offset (bits 16-29) is the step between core
// matrices along K: 128 bytes; the stride-byte offset (bits 32-45), between core matrices along N,
// is unused with N = 8. (Measured: the swapped reading runs off the end of shared memory.)
__device__ inline uint64_t b_descriptor(const void* smem) {
  constexpr uint64_t kLead = 128, kStride = 256;
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (kLead >> 4) << 16 | (kStride >> 4) << 32;
}

__device__ inline void wgmma_e4m3(const uint32_t a[4], uint64_t b_desc, float d[4]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

struct SliceContext {
  const BlockLinearParams* p;
  const LinearOperands* op;
  const uint8_t* b_smem;
  const uint8_t *wg, *wg8;  // this thread's two weight rows
  int b_begin, b_end, blocks, r0, rg, rg8, t;
};

// What a thread needs for U K blocks, loaded together so that one memory latency covers all: the
// raw weight words of its two rows (fp4: 4 bytes a row, fp8: 8), their scales and the scales of
// its two activation columns.
template <int U>
struct Step {
  uint32_t raw[U][4];
  float sw[U][2];  // rows g and g + 8
  float sx[U][2];  // activation rows 2t and 2t + 1
};

template <int U>
__device__ inline void load_step(const SliceContext& c, int b0, Step<U>& s) {
  const BlockLinearParams& p = *c.p;
  const LinearOperands& op = *c.op;
  const int c0 = 2 * c.t;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int b = min(b0 + u, c.b_end - 1);  // past the end: a repeat, never used
    if (p.fp4) {
      s.raw[u][0] = __ldg(reinterpret_cast<const uint32_t*>(c.wg + b * 16 + c.t * 4));
      s.raw[u][1] = __ldg(reinterpret_cast<const uint32_t*>(c.wg8 + b * 16 + c.t * 4));
      s.sw[u][0] = e8m0_to_float(op.w_scales[min(c.rg, p.out - 1) * p.s_stride + b]);
      s.sw[u][1] = e8m0_to_float(op.w_scales[min(c.rg8, p.out - 1) * p.s_stride + b]);
    } else {
      const uint2 lo = __ldg(reinterpret_cast<const uint2*>(c.wg + b * 32 + c.t * 8));
      const uint2 hi = __ldg(reinterpret_cast<const uint2*>(c.wg8 + b * 32 + c.t * 8));
      s.raw[u][0] = lo.x, s.raw[u][1] = hi.x, s.raw[u][2] = lo.y, s.raw[u][3] = hi.y;
      s.sw[u][0] = s.sw[u][1] = e8m0_to_float(op.w_scales[(c.r0 / 32) * p.s_stride + b]);
    }
    s.sx[u][0] = c0 < p.n ? op.x_scales[static_cast<int64_t>(c0) * c.blocks + b] : 0.0f;
    s.sx[u][1] = c0 + 1 < p.n ? op.x_scales[static_cast<int64_t>(c0 + 1) * c.blocks + b] : 0.0f;
  }
}

// The wgmmas of U blocks (one commit group), then their scaled partials into acc.
template <int U>
__device__ inline void multiply_step(const SliceContext& c, int b0, const Step<U>& s, float (&acc)[4]) {
  uint32_t a[U][4];  // all fragments ready before the first wgmma reads registers
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (c.p->fp4) {
      a[u][0] = e2m1x4_to_e4m3x4(s.raw[u][0]), a[u][2] = e2m1x4_to_e4m3x4(s.raw[u][0] >> 16);
      a[u][1] = e2m1x4_to_e4m3x4(s.raw[u][1]), a[u][3] = e2m1x4_to_e4m3x4(s.raw[u][1] >> 16);
    } else {
      a[u][0] = s.raw[u][0], a[u][1] = s.raw[u][1], a[u][2] = s.raw[u][2], a[u][3] = s.raw[u][3];
    }
  }
  float d[U][4];
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int bl = min(b0 + u, c.b_end - 1) - c.b_begin;
    wgmma_e4m3(a[u], b_descriptor(c.b_smem + bl * kBBytesPerBlock), d[u]);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (b0 + u >= c.b_end) break;
    acc[0] += (d[u][0] * s.sx[u][0]) * s.sw[u][0];  // d[0]: row g, column 2t; d[1]: row g, 2t + 1
    acc[1] += (d[u][1] * s.sx[u][1]) * s.sw[u][0];
    acc[2] += (d[u][2] * s.sx[u][0]) * s.sw[u][1];  // d[2], d[3]: row g + 8
    acc[3] += (d[u][3] * s.sx[u][1]) * s.sw[u][1];
  }
}

// U: K blocks per wgmma group; kDoubleBuffer: the next group's loads are issued before this
// group's wgmmas (two register buffers; the loop is unrolled by two so they stay registers).
template <int U, bool kDoubleBuffer>
__global__ void __launch_bounds__(kThreads)
    sm90_fp8_block_linear_wgmma(BlockLinearParams p, float* partials, int slices) {
  extern __shared__ __align__(128) uint8_t b_smem[];  // [blocks of this slice][256]
  const int tiles = (p.out + kTileRows - 1) / kTileRows;
  const int tile = blockIdx.x % tiles, slice = blockIdx.y;
  const LinearOperands& op = p.op[blockIdx.x / tiles];
  const int blocks = p.k / 32;
  const int b_begin = static_cast<int>(static_cast<int64_t>(blocks) * slice / slices);
  const int b_end = static_cast<int>(static_cast<int64_t>(blocks) * (slice + 1) / slices);
  const int nb = b_end - b_begin;

  // Stage B: activation row r (r < 8; zeros past n), bytes 8t..8t+3 -> slot 4t.., 8t+4.. -> slot 16+4t..
  for (int idx = threadIdx.x; idx < nb * 8 * 8; idx += kThreads) {
    const int bl = idx / 64, r = (idx / 8) % 8, piece = idx % 8;  // piece: 4-byte group of the row's 32 bytes
    const int t = piece / 2, half = piece % 2;
    uint32_t v = 0;
    if (r < p.n)
      v = *reinterpret_cast<const uint32_t*>(op.x_codes + static_cast<int64_t>(r) * p.k + (b_begin + bl) * 32 +
                                             piece * 4);
    const int slot = half * 16 + 4 * t;  // core matrix `half`, 4 bytes at column 4t of row r
    *reinterpret_cast<uint32_t*>(b_smem + bl * kBBytesPerBlock + (slot / 16) * 128 + r * 16 + slot % 16) = v;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int r0 = tile * kTileRows + warp * 16;  // this warp's 16 rows
  const int rg = r0 + g, rg8 = r0 + g + 8;
  const uint8_t* wg = op.w + static_cast<int64_t>(min(rg, p.out - 1)) * p.w_stride;
  const uint8_t* wg8 = op.w + static_cast<int64_t>(min(rg8, p.out - 1)) * p.w_stride;
  const SliceContext ctx{&p, &op, b_smem, wg, wg8, b_begin, b_end, blocks, r0, rg, rg8, t};
  float acc[4] = {};
  if constexpr (kDoubleBuffer) {
    Step<U> s0, s1;
    load_step<U>(ctx, b_begin, s0);
    for (int b0 = b_begin; b0 < b_end; b0 += 2 * U) {
      if (b0 + U < b_end) load_step<U>(ctx, b0 + U, s1);
      multiply_step<U>(ctx, b0, s0, acc);
      if (b0 + 2 * U < b_end) load_step<U>(ctx, b0 + 2 * U, s0);
      if (b0 + U < b_end) multiply_step<U>(ctx, b0 + U, s1, acc);
    }
  } else {
    for (int b0 = b_begin; b0 < b_end; b0 += U) {
      Step<U> s;
      load_step<U>(ctx, b0, s);
      multiply_step<U>(ctx, b0, s, acc);
    }
  }
  // partials [slices][groups * out][8]: this slice's sums, activation row fastest.
  const int64_t row_base = static_cast<int64_t>(blockIdx.x / tiles) * p.out;
  float* dst = partials + static_cast<int64_t>(slice) * p.groups * p.out * 8;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int row = e < 2 ? rg : rg8, col = 2 * t + (e & 1);
    if (row < p.out) dst[(row_base + row) * 8 + col] = acc[e];
  }
}

// y[col][row] = bf16(sum over slices in order of the partials).
__global__ void sm90_fp8_block_linear_wgmma_finish(BlockLinearParams p, const float* partials, int slices) {
  const int64_t rows = static_cast<int64_t>(p.groups) * p.out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / p.n;
    const int col = static_cast<int>(i % p.n);
    float s = 0.0f;
    for (int sl = 0; sl < slices; ++sl) s += partials[(sl * rows + row) * 8 + col];
    const LinearOperands& op = p.op[row / p.out];
    op.y[static_cast<int64_t>(col) * p.y_stride + row % p.out] = float_to_bf16(s);
  }
}

// K slices per matrix: about k.ctas_per_sm CTAs per SM, each slice at least 8 K blocks.
int wgmma_slices(const BlockLinearParams& p, const WgmmaKnobs& k) {
  const int tiles = p.groups * ((p.out + kTileRows - 1) / kTileRows);
  const int blocks = p.k / 32;
  const int ctas_per_sm = std::max(k.ctas_per_sm, 1);
  return std::clamp((ctas_per_sm * sm_count() + tiles - 1) / tiles, 1, std::min(64, std::max(blocks / 8, 1)));
}

template <int U, bool kDoubleBuffer>
cudaError_t launch_variant(const BlockLinearParams& p, dim3 grid, int smem, float* workspace, int slices) {
  static const cudaError_t attr = cudaFuncSetAttribute(sm90_fp8_block_linear_wgmma<U, kDoubleBuffer>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  if (attr != cudaSuccess) return attr;
  sm90_fp8_block_linear_wgmma<U, kDoubleBuffer><<<grid, kThreads, smem, p.stream>>>(p, workspace, slices);
  return cudaGetLastError();
}

}  // namespace

size_t block_linear_wgmma_workspace_bytes(const BlockLinearParams& p, const WgmmaKnobs& k) {
  return p.n >= 1 && p.n <= 8 ? static_cast<size_t>(wgmma_slices(p, k)) * p.groups * p.out * 8 * sizeof(float) : 0;
}

cudaError_t block_linear_wgmma(const BlockLinearParams& p, const WgmmaKnobs& k) {
  float* workspace = k.workspace;
  if (p.k % 32 != 0 || p.k <= 0 || p.n < 0 || p.n > 8 || p.out < 0 || p.groups < 1 || p.groups > kMaxLinearGroups ||
      !workspace)
    return cudaErrorInvalidValue;
  if (p.n == 0 || p.out == 0) return cudaSuccess;
  const int tiles = p.groups * ((p.out + kTileRows - 1) / kTileRows);
  const int blocks = p.k / 32;
  const int slices = wgmma_slices(p, k);
  const int max_blocks_per_slice = (blocks + slices - 1) / slices;
  const int smem = max_blocks_per_slice * kBBytesPerBlock;
  if (smem > 200 * 1024) return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorInvalidValue;
  switch (k.variant) {
    case 0:
      e = launch_variant<4, false>(p, dim3(tiles, slices), smem, workspace, slices);
      break;
    case 1:
      e = launch_variant<4, true>(p, dim3(tiles, slices), smem, workspace, slices);
      break;
    case 2:
      e = launch_variant<2, true>(p, dim3(tiles, slices), smem, workspace, slices);
      break;
    case 3:
      e = launch_variant<8, false>(p, dim3(tiles, slices), smem, workspace, slices);
      break;
  }
  if (e != cudaSuccess) return e;
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t outputs = static_cast<int64_t>(p.groups) * p.out * p.n;
  const int finish_blocks = static_cast<int>(std::min<int64_t>((outputs + 255) / 256, 4 * sm_count()));
  sm90_fp8_block_linear_wgmma_finish<<<finish_blocks, 256, 0, p.stream>>>(p, workspace, slices);
  return cudaGetLastError();
}

}  // namespace dsinfer::cuda::lab
