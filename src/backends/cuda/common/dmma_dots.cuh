// Dot products of a tile of token rows (bf16) against a tile of weight rows (f32 or bf16) on the
// fp64 tensor cores (mma.m8n8k4.f64): the router's logits and the hyper-connection mixes'
// projections of a prefill chunk. bf16 x f32 products are exact in double, so a sum differs from
// the CPU's sequential double sum only in the order of its additions (its last double bits), and
// the fp32 value made of it almost never.
//
// A block of kDotWarps warps takes kDotWarps * 8 * kMTiles tokens (kMTiles m8 tiles a warp) and
// kDotOutputs weight rows (four n8 tiles); the columns stream through a ring of kDotStages pieces
// of kDotPiece columns in shared memory (cp.async, raw bf16 and f32). A piece's weights are widened
// to double once for all warps; a warp widens its own tokens' values as it loads its A fragments,
// each used for the four n8 tiles. Each token's sum is fixed by the columns' order alone (pieces in
// order; in a piece two groups of 16 columns; in a group four k4 steps, step s adding columns s,
// s + 4, s + 8, s + 12 to the accumulator): not by the other tokens, the outputs or the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/async_copy.cuh"

namespace dsinfer::cuda::common {

inline constexpr int kDotWarps = 8, kDotThreads = kDotWarps * 32;
inline constexpr int kDotOutputs = 32, kDotPiece = 32, kDotStages = 3;
// Row strides in shared memory, padded so that a fragment's loads spread over the banks.
inline constexpr int kDotXStrideBytes = kDotPiece * 2 + 16;  // bf16 tokens' values
inline constexpr int kDotWideStride = kDotPiece + 2;         // the weights widened to double

/// Tokens a block takes with kMTiles m8 tiles a warp.
template <int kMTiles>
__host__ __device__ constexpr int dot_tile_tokens() {
  return kDotWarps * 8 * kMTiles;
}

/// Dynamic shared memory of a dmma_dots block (weights of W: float or uint16_t bf16).
template <int kMTiles, class W>
__host__ __device__ constexpr int dmma_dots_smem_bytes() {
  return kDotStages * (dot_tile_tokens<kMTiles>() * kDotXStrideBytes + kDotOutputs * kDotPiece * int(sizeof(W))) +
         kDotOutputs * kDotWideStride * 8;
}

/// Whether rows at `p` with a stride of `stride` elements of `bytes` each are 16-byte aligned
/// (what dmma_dots asks of the tokens' rows and the weights).
inline bool dmma_dots_aligned(const void* p, int64_t stride, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride * bytes % 16 == 0;
}

/// d += a * b on the fp64 tensor cores. Lane (g, t) = (lane / 4, lane % 4) holds A[g][t], B[t][g]
/// and D[g][2t], D[g][2t + 1].
__device__ inline void mma_f64(double a, double b, double (&d)[2]) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a), "d"(b));
}

__device__ inline double widen(float v) {
  return static_cast<double>(v);
}
__device__ inline double widen(uint16_t bf16) {
  return static_cast<double>(__uint_as_float(static_cast<uint32_t>(bf16) << 16));
}

/// acc[m][n] += the products of the warp's tokens (m tile m) and weight rows n * 8.. over columns
/// [begin, end); with `squares`, sq[m] also adds the squares of the tokens' values (each lane its
/// columns: reduce over the four lanes of a token). Token i's row is x + i * x_stride (i < tokens;
/// the others are zeros), weight row o's w + o * w_stride (o < outputs). Lane (g, t) ends holding
/// acc[m][n] = the sums of token m * 8 + g (of the warp's) and weight rows n * 8 + 2t, 2t + 1. Asks:
/// rows as dmma_dots_aligned says, begin and end multiples of 8, every thread of the block
/// (kDotWarps warps) calling with the same arguments, `smem` of dmma_dots_smem_bytes (16-byte
/// aligned).
template <int kMTiles, class W>
__device__ inline void dmma_dots(const uint16_t* x, int64_t x_stride, int tokens, const W* w, int64_t w_stride,
                                 int outputs, int64_t begin, int64_t end, bool squares, uint8_t* smem,
                                 double (&acc)[kMTiles][4][2], double (&sq)[kMTiles]) {
  constexpr int kTokens = dot_tile_tokens<kMTiles>();
  constexpr int kXBytes = kTokens * kDotXStrideBytes, kWBytes = kDotOutputs * kDotPiece * int(sizeof(W));
  constexpr int kXChunks = kTokens * kDotPiece * 2 / 16, kWChunks = kDotOutputs * kDotPiece * int(sizeof(W)) / 16;
  constexpr int kWPerChunk = 16 / int(sizeof(W));
  uint8_t* xs = smem;
  uint8_t* ws = smem + kDotStages * kXBytes;
  double* wide = reinterpret_cast<double*>(ws + kDotStages * kWBytes);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int pieces = static_cast<int>((end - begin + kDotPiece - 1) / kDotPiece);
  const auto load = [&](int piece) {
    const int stage = piece % kDotStages;
    const int64_t c0 = begin + static_cast<int64_t>(piece) * kDotPiece;
    for (int i = static_cast<int>(threadIdx.x); i < kXChunks; i += kDotThreads) {
      const int r = i / (kDotPiece / 8), c = i % (kDotPiece / 8) * 8;
      const bool in = r < tokens && c0 + c < end;
      cp_async16(xs + stage * kXBytes + r * kDotXStrideBytes + c * 2, x + (in ? r * x_stride + c0 + c : 0), in);
    }
    for (int i = static_cast<int>(threadIdx.x); i < kWChunks; i += kDotThreads) {
      const int o = i / (kDotPiece / kWPerChunk), c = i % (kDotPiece / kWPerChunk) * kWPerChunk;
      const bool in = o < outputs && c0 + c < end;
      cp_async16(ws + stage * kWBytes + (o * kDotPiece + c) * int(sizeof(W)), w + (in ? o * w_stride + c0 + c : 0), in);
    }
  };
#pragma unroll
  for (int s = 0; s < kDotStages - 1; ++s) {
    if (s < pieces) load(s);
    cp_async_commit();
  }
  const int live_tiles = (outputs + 7) / 8;
  for (int piece = 0; piece < pieces; ++piece) {
    const int stage = piece % kDotStages;
    cp_async_wait<kDotStages - 2>();  // this thread's copies of the piece
    __syncthreads();                  // everyone's; and every warp is done with the last piece
    if (piece + kDotStages - 1 < pieces) load(piece + kDotStages - 1);
    cp_async_commit();
    const W* raw = reinterpret_cast<const W*>(ws + stage * kWBytes);
    for (int i = static_cast<int>(threadIdx.x); i < kDotOutputs * kDotPiece; i += kDotThreads)
      wide[i / kDotPiece * kDotWideStride + i % kDotPiece] = widen(raw[i]);
    __syncthreads();
    const uint8_t* xp = xs + stage * kXBytes + (warp * 8 * kMTiles + g) * kDotXStrideBytes + t * 8;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // two groups of 16 columns
      double a[kMTiles][4];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        const uint2 v = *reinterpret_cast<const uint2*>(xp + m * 8 * kDotXStrideBytes + h * 32);
        a[m][0] = widen(static_cast<uint16_t>(v.x & 0xFFFF)), a[m][1] = widen(static_cast<uint16_t>(v.x >> 16));
        a[m][2] = widen(static_cast<uint16_t>(v.y & 0xFFFF)), a[m][3] = widen(static_cast<uint16_t>(v.y >> 16));
        if (squares) {
#pragma unroll
          for (int s = 0; s < 4; ++s) sq[m] = fma(a[m][s], a[m][s], sq[m]);
        }
      }
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        if (n >= live_tiles) break;  // no weight row in the tile: nothing to add
        const double* bp = wide + (n * 8 + g) * kDotWideStride + h * 16 + t * 4;
        const double2 b01 = *reinterpret_cast<const double2*>(bp), b23 = *reinterpret_cast<const double2*>(bp + 2);
        const double b[4] = {b01.x, b01.y, b23.x, b23.y};
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) mma_f64(a[m][s], b[s], acc[m][n]);
      }
    }
  }
  cp_async_wait<0>();
}

}  // namespace dsinfer::cuda::common
