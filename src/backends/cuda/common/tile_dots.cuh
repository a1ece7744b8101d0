// Dot products of a tile of token rows against many weight rows, in double (bf16 x f32 products
// are exact in double): the router's logits and the hyper-connection mixes' projections of a
// prefill chunk or a large batch. A block of kTileWarps warps takes kTileTokens tokens and up to
// kTileOutputs weight rows; a piece of their columns at a time, the tokens' values and the weights
// are staged in shared memory (every load of a piece issued at once, 4 values a load), so each is
// read from memory once per block and the sums wait on no load. The kernels this replaces (a block
// per token and weight row) read a token's row again for every weight row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/common/bf16.cuh"

namespace dsinfer::cuda::common {

inline constexpr int kTileTokens = 8, kTileWarps = 8, kTileOutputsPerWarp = 4, kTilePiece = 256;
inline constexpr int kTileOutputs = kTileWarps * kTileOutputsPerWarp;  // a block's weight rows
inline constexpr int kTileThreads = kTileWarps * 32;

/// The shared memory of tile_dots: one piece of the tokens' values (widened once for all warps)
/// and of the weights (48 KiB in all, the static limit).
struct TileDotsStage {
  double x[kTileTokens][kTilePiece];
  float w[kTileOutputs][kTilePiece];
};

/// Whether rows at `p` with a stride of `stride` elements of `bytes` each can be read 4 values a
/// load (what tile_dots asks of the tokens' rows and the weights).
inline bool tile_dots_aligned(const void* p, int64_t stride, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % (4 * bytes) == 0 && stride % 4 == 0;
}

/// The four bf16 values at p (8-byte aligned), widened.
__device__ inline float4 bf16x4(const uint16_t* p) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  return make_float4(
      bf16_to_float(static_cast<uint16_t>(v.x & 0xFFFF)), bf16_to_float(static_cast<uint16_t>(v.x >> 16)),
      bf16_to_float(static_cast<uint16_t>(v.y & 0xFFFF)), bf16_to_float(static_cast<uint16_t>(v.y >> 16)));
}

/// Adds to acc[i][t] the products x[t][j] * w(o_i, j) for columns j in [begin, end), where warp
/// w's outputs are o_i = first + i * kTileWarps + w (those < outputs count; the others add
/// nothing), token t's row is x + t * x_stride (t < tokens; rows past it add nothing), and the
/// output `square` (if any) sums x[t][j]^2 instead. weights4(o, j) gives w(o, j .. j + 3) as a
/// float4. Each lane adds its own columns' products in column order (fma: the products are exact,
/// so it adds what a product then a sum would); warp_sum finishes a sum. Asks: x's rows as
/// tile_dots_aligned says, begin and end multiples of 4, every thread of the block (kTileWarps
/// warps) calling with the same arguments.
template <class Weights4>
__device__ inline void tile_dots(const uint16_t* x, int64_t x_stride, int tokens, int64_t begin, int64_t end, int first,
                                 int outputs, int square, Weights4 weights4, TileDotsStage& stage,
                                 double (&acc)[kTileOutputsPerWarp][kTileTokens]) {
  constexpr int kXLoads = kTileTokens * kTilePiece / 4 / kTileThreads;  // 4 values a load
  constexpr int kWLoads = kTileOutputs * kTilePiece / 4 / kTileThreads;
  static_assert(kXLoads * 4 * kTileThreads == kTileTokens * kTilePiece &&
                kWLoads * 4 * kTileThreads == kTileOutputs * kTilePiece);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t c0 = begin; c0 < end; c0 += kTilePiece) {
    const int len = static_cast<int>(end - c0 < kTilePiece ? end - c0 : kTilePiece);
    float4 xs[kXLoads], ws[kWLoads];
#pragma unroll
    for (int r = 0; r < kXLoads; ++r) {
      const int q = r * kTileThreads + static_cast<int>(threadIdx.x), t = q / (kTilePiece / 4),
                c = q % (kTilePiece / 4) * 4;
      xs[r] = t < tokens && c < len ? bf16x4(x + t * x_stride + c0 + c) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int r = 0; r < kWLoads; ++r) {
      const int q = r * kTileThreads + static_cast<int>(threadIdx.x), o = q / (kTilePiece / 4),
                c = q % (kTilePiece / 4) * 4;
      ws[r] =
          first + o < outputs && first + o != square && c < len ? weights4(first + o, c0 + c) : make_float4(0, 0, 0, 0);
    }
    __syncthreads();  // the previous piece's sums are done with the stage
#pragma unroll
    for (int r = 0; r < kXLoads; ++r) {
      const int q = r * kTileThreads + static_cast<int>(threadIdx.x), t = q / (kTilePiece / 4),
                c = q % (kTilePiece / 4) * 4;
      double* to = &stage.x[t][c];
      to[0] = xs[r].x, to[1] = xs[r].y, to[2] = xs[r].z, to[3] = xs[r].w;
    }
#pragma unroll
    for (int r = 0; r < kWLoads; ++r) {
      const int q = r * kTileThreads + static_cast<int>(threadIdx.x), o = q / (kTilePiece / 4),
                c = q % (kTilePiece / 4) * 4;
      *reinterpret_cast<float4*>(&stage.w[o][c]) = ws[r];
    }
    __syncthreads();
    for (int c = lane; c < len; c += 32) {
      double xv[kTileTokens];
#pragma unroll
      for (int t = 0; t < kTileTokens; ++t) xv[t] = stage.x[t][c];
#pragma unroll
      for (int i = 0; i < kTileOutputsPerWarp; ++i) {
        const int o = i * kTileWarps + warp;
        if (first + o >= outputs) continue;
        const bool squares = first + o == square;
        const double w = stage.w[o][c];
#pragma unroll
        for (int t = 0; t < kTileTokens; ++t) acc[i][t] = fma(squares ? xv[t] : w, xv[t], acc[i][t]);
      }
    }
  }
}

}  // namespace dsinfer::cuda::common
