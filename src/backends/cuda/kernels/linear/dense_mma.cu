// sm90_dense_mma: y = x . W^T for dense weights (bf16, or wo_a's fp8 read as bf16) on bf16 tensor
// cores (mma.m16n8k16, fp32 accumulators), 1-64 activation rows a pass.
//
// The order of the sums, which is what issue 18's contract asks of a decode kernel: a warp takes 16
// weight rows and one K slice and chains its mmas over the slice's chunks in K order; the slices of
// a row tile are warps of one CTA, whose partial sums the slice-0 warp adds in slice order. The
// split depends on the matrix's shape alone and each activation row is its own column of the B
// operand, so an output's bits do not depend on how many rows share the launch.
//
// Operands: in a 64-wide K chunk lane (g, q) loads K 16q .. 16q + 15 of weight rows g and g + 8 and
// of activation row g of each 8-row tile; mma step s takes K 16q + 4s .. 16q + 4s + 3 of those as its
// K slots 2q, 2q + 1, 2q + 8, 2q + 9. A and B agree, so each step sums the same products as in natural
// order, and every load is 16 bytes. The products of bf16 values are exact in fp32; fp8 weights are
// decoded exactly (e4m3 times a power of two has at most 4 significant bits).
#include <algorithm>

#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/dense.h"

namespace dsinfer::cuda {
namespace {

using common::after_prior_grids;
using common::launch_kernel;

using namespace linear_config;
using namespace linear_config::dense_mma_kernel;
using common::e8m0_to_float;
using common::mma_bf16;
using common::pack_bf16x2;

// Four e4m3 codes times the block's scale as two bf16 pairs, exactly: a code's bits shifted into a
// float are its value times 2^-120 (subnormal codes included), so times 2^120 it is the code's value
// (as e4m3_to_float), then times the power of two.
__device__ inline void e4m3x4_to_bf16(uint32_t codes, float scale, uint32_t& lo, uint32_t& hi) {
  float f[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t b = codes >> (8 * i);
    f[i] = __uint_as_float(((b & 0x7Fu) << 20) | ((b & 0x80u) << 24)) * 0x1p120f * scale;
  }
  lo = pack_bf16x2(f[0], f[1]), hi = pack_bf16x2(f[2], f[3]);
}

// A lane's 16 K of one weight row in a chunk: the raw bytes (fp8 codes and their scale, or bf16),
// loaded kDepth chunks ahead, and as 8 bf16 pairs once they have arrived.
struct RawRow {
  uint4 a, b;
  float scale;
};
struct RowWords {
  uint32_t w[8];
};

struct Tile {
  const void* weights;
  const uint8_t* scales;
  int rows;     // the tile's group's rows
  int r0;       // the tile's first row within its group
  int64_t col;  // the group's first column of x
  int64_t y0;   // the tile's first output column
};

__device__ inline Tile tile_of(const DenseLinearParams& p, int tile) {
  const int rows = p.group_rows ? p.group_rows : p.out, per_group = (rows + kTileRows - 1) / kTileRows;
  const int g = tile / per_group, r0 = tile % per_group * kTileRows;
  return {p.group_rows ? p.group_w[g] : p.w,
          p.group_rows ? p.group_scales[g] : p.w_scales,
          rows,
          r0,
          static_cast<int64_t>(g) * p.k,
          static_cast<int64_t>(g) * rows + r0};
}

// Zeros past the group's rows.
template <bool kFp8>
__device__ inline RawRow load_row(const DenseLinearParams& p, const Tile& t, int row, int kk) {
  RawRow v{};
  if (row >= t.rows) return v;
  if constexpr (kFp8) {
    v.a = __ldcs(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(t.weights) +
                                                static_cast<int64_t>(row) * p.w_stride + kk));
    v.scale = e8m0_to_float(t.scales[static_cast<int64_t>(row / kScaleBlock) * p.s_stride + kk / kScaleBlock]);
  } else {
    const uint4* q = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(t.weights) +
                                                    static_cast<int64_t>(row) * p.w_stride + kk);
    v.a = __ldcs(q), v.b = __ldcs(q + 1);
  }
  return v;
}

template <bool kFp8>
__device__ inline RowWords words_of(const RawRow& v) {
  RowWords r;
  if constexpr (kFp8) {
    e4m3x4_to_bf16(v.a.x, v.scale, r.w[0], r.w[1]);
    e4m3x4_to_bf16(v.a.y, v.scale, r.w[2], r.w[3]);
    e4m3x4_to_bf16(v.a.z, v.scale, r.w[4], r.w[5]);
    e4m3x4_to_bf16(v.a.w, v.scale, r.w[6], r.w[7]);
  } else {
    r = {v.a.x, v.a.y, v.a.z, v.a.w, v.b.x, v.b.y, v.b.z, v.b.w};
  }
  return r;
}

// Activation row `row` (of the pass), K kk .. kk + 15 of the tile's group, zeros past n.
__device__ inline RowWords load_x(const DenseLinearParams& p, const Tile& t, int i0, int row, int kk) {
  RowWords v{};
  if (i0 + row >= p.n) return v;
  const uint4* q = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.x) +
                                                  static_cast<int64_t>(i0 + row) * p.x_stride + t.col + kk);
  const uint4 a = __ldg(q), b = __ldg(q + 1);
  return {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
}

// The four mma steps of one chunk for one 8-row activation tile.
__device__ inline void chunk_mma(const RowWords& lo, const RowWords& hi, const RowWords& x, float d[4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t a[4] = {lo.w[2 * s], hi.w[2 * s], lo.w[2 * s + 1], hi.w[2 * s + 1]};
    mma_bf16(a, x.w[2 * s], x.w[2 * s + 1], d);
  }
}

// Chunks of weights a lane has loading (fp8 16 bytes a row each, bf16 32). One activation tile
// (a decode step of up to 8 sequences) has few warps an SM to cover the memory's latency, so each
// keeps several chunks loading; more tiles spend the registers on their accumulators. The chunks
// are summed in K order either way.
__host__ __device__ constexpr int load_depth(bool fp8, int tiles) {
  return tiles == 1 ? (fp8 ? 4 : 2) : 1;
}

template <int NT, bool kFp8>
__global__ void __launch_bounds__(kWarps* kWarp, kMinCtas)
    sm90_dense_mma(DenseLinearParams p, int i0, int split, int tiles) {
  after_prior_grids();
  constexpr int kDepth = load_depth(kFp8, NT);
  extern __shared__ float partial[];  // [kWarps][NT * 4][kWarp] when split > 1
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, q = lane % 4;
  const int tile = blockIdx.x * (kWarps / split) + warp / split, slice = warp % split;
  const int chunks = p.k / kChunk, c0 = chunks * slice / split, c1 = chunks * (slice + 1) / split;
  float d[NT][4] = {};
  if (tile < tiles) {
    const Tile t = tile_of(p, tile);
    RawRow raw_lo[kDepth], raw_hi[kDepth];
#pragma unroll
    for (int i = 0; i < kDepth; ++i)
      if (c0 + i < c1) {
        const int kk = (c0 + i) * kChunk + 16 * q;
        raw_lo[i] = load_row<kFp8>(p, t, t.r0 + g, kk), raw_hi[i] = load_row<kFp8>(p, t, t.r0 + g + 8, kk);
      }
    for (int c = c0; c < c1; c += kDepth) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        if (c + i >= c1) break;
        const int kk = (c + i) * kChunk + 16 * q;
        const RowWords lo = words_of<kFp8>(raw_lo[i]), hi = words_of<kFp8>(raw_hi[i]);
        if (c + i + kDepth < c1) {  // this slot's next chunk loads while the others' mmas run
          const int next = kk + kDepth * kChunk;
          raw_lo[i] = load_row<kFp8>(p, t, t.r0 + g, next), raw_hi[i] = load_row<kFp8>(p, t, t.r0 + g + 8, next);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) chunk_mma(lo, hi, load_x(p, t, i0, 8 * j + g, kk), d[j]);
      }
    }
  }
  // The slices' partial sums, added in slice order by the slice-0 warp (same lane, same outputs).
  if (split > 1) {
    if (slice > 0)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) partial[(warp * NT * 4 + 4 * j + e) * kWarp + lane] = d[j][e];
    __syncthreads();
    if (slice > 0) return;
    for (int s = 1; s < split; ++s)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[j][e] += partial[((warp + s) * NT * 4 + 4 * j + e) * kWarp + lane];
  }
  if (tile >= tiles) return;
  // D's lane layout: rows g and g + 8 of the tile, activation rows 2q and 2q + 1 of each 8-row tile.
  const Tile t = tile_of(p, tile);
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = t.r0 + g + (e >= 2 ? 8 : 0), xr = i0 + 8 * j + 2 * q + e % 2;
      if (row >= t.rows || xr >= p.n) continue;
      const int64_t at = static_cast<int64_t>(xr) * p.y_stride + t.y0 + (row - t.r0);
      if (p.y_f32)
        static_cast<float*>(p.y)[at] = d[j][e];
      else
        static_cast<uint16_t*>(p.y)[at] = __bfloat16_as_ushort(__float2bfloat16_rn(d[j][e]));
    }
}

template <int NT>
cudaError_t launch_pass(const DenseLinearParams& p, int i0, int split, int tiles) {
  const int per_cta = kWarps / split, blocks = (tiles + per_cta - 1) / per_cta;
  const size_t shared = split > 1 ? sizeof(float) * kWarps * NT * 4 * kWarp : 0;
  if (p.fp8_weights)
    return launch_kernel(sm90_dense_mma<NT, true>, blocks, kWarps * kWarp, shared, p.stream, p, i0, split, tiles);
  return launch_kernel(sm90_dense_mma<NT, false>, blocks, kWarps * kWarp, shared, p.stream, p, i0, split, tiles);
}

// K slices a row tile: a function of the matrix's shape alone (the sums' order).
int dense_mma_split(int tiles, int k) {
  int split = 1;
  while (split < kWarps && tiles * split < kTargetWarps && k / kChunk >= 2 * split * kMinSliceChunks) split *= 2;
  return split;
}

}  // namespace

bool dense_linear_on_tensor_cores(const DenseLinearParams& p) {
  if (p.exact || p.x_f32 || p.k % kChunk != 0 || p.x_stride % 8 != 0 || reinterpret_cast<uintptr_t>(p.x) % 16 != 0 ||
      (p.w_stride * (p.fp8_weights ? 1 : 2)) % 16 != 0)
    return false;
  const int groups = p.group_rows ? p.out / p.group_rows : 1;
  for (int g = 0; g < groups; ++g)
    if (reinterpret_cast<uintptr_t>(p.group_rows ? p.group_w[g] : p.w) % 16 != 0) return false;
  return true;
}

cudaError_t launch_dense_mma(const DenseLinearParams& p) {
  const int rows = p.group_rows ? p.group_rows : p.out, groups = p.out / rows;
  const int tiles = groups * ((rows + kTileRows - 1) / kTileRows), split = dense_mma_split(tiles, p.k);
  for (int i0 = 0; i0 < p.n; i0 += 8 * kMaxNTiles) {
    const int nt = (std::min(p.n - i0, 8 * kMaxNTiles) + 7) / 8;
    const cudaError_t e = nt == 1   ? launch_pass<1>(p, i0, split, tiles)
                          : nt == 2 ? launch_pass<2>(p, i0, split, tiles)
                          : nt <= 4 ? launch_pass<4>(p, i0, split, tiles)
                                    : launch_pass<8>(p, i0, split, tiles);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace dsinfer::cuda
