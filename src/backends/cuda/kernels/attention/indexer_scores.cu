// sm90_bf16_indexer_scores: the indexer's scores (spec §7.2), I[t, tau] = bf16(sum_h bf16(relu(
// bf16(q[t, h] . K[tau])) * w[t, h])), with the dot products on bf16 tensor cores.
//
// A block takes one token and a tile of keys. The token's q (the A operand: heads as rows, two m16
// tiles for up to 32 heads) and the tile's key rows (the B operand's columns, as they lie in
// memory) are staged once in shared memory; a warp takes 8 or 16 of the keys. A dot product is
// summed per 32 dims (two mma.m16n8k16 chained in fp32) and those parts in double, in d's order.
// The indexer's q and keys are fp4 values with a power-of-two scale per 32 dims (spec §7.1-7.2), so
// a part is a sum of 32 products of e2m1 magnitudes at one scale: an integer of at most 13 bits
// times that scale, exact on the tensor cores. The double sum of the parts is then the exact dot
// product, rounded once as the CPU rounds it, and the scores are the CPU's bits. For other bf16
// values a part may round (the per-op test states that bound). The head terms are bf16 and their
// sum in double is exact, so its order (a lane's heads, then the butterfly) does not matter.
//
// Nothing depends on the other tokens of the launch: a token's scores are the same alone or in a
// batch.
#include <algorithm>
#include <cmath>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/attention/config.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace attention_config;
using namespace attention_config::indexer_scores;

// bf16 a staged row: d plus 8, so that the fragments' lanes (rows g, words t) hit distinct banks.
__host__ __device__ constexpr int staged_stride(int d) {
  return d + 8;
}

__host__ __device__ constexpr int tile_keys(int key_tiles) {
  return kWarps * key_tiles * 8;
}

__host__ __device__ constexpr int shared_bytes(int key_tiles, int d) {
  return (kMaxHeads + tile_keys(key_tiles)) * staged_stride(d) * 2;
}

__device__ __forceinline__ uint32_t pair_at(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Block per (tile of keys, token); kKeyTiles n8 tiles of keys a warp.
template <int kKeyTiles>
__global__ void __launch_bounds__(kWarps* kWarp) sm90_bf16_indexer_scores(IndexerScoresParams p) {
  after_prior_grids();
  extern __shared__ __align__(16) uint16_t staged[];
  constexpr int kTileKeys = tile_keys(kKeyTiles);
  const int stride = staged_stride(p.d), chunks = p.d / 8;  // 16-byte pieces a row
  uint16_t* qs = staged;                                    // [kMaxHeads][stride]
  uint16_t* ks = staged + kMaxHeads * stride;               // [kTileKeys][stride]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  const int64_t t = blockIdx.y, tau0 = static_cast<int64_t>(blockIdx.x) * kTileKeys;
  const int64_t tau_end = min(static_cast<int64_t>(p.T), tau0 + kTileKeys);
  const int64_t visible = min(static_cast<int64_t>(p.visible[t]), tau_end);
  float* out = p.out + t * p.out_stride;
  if (tau0 >= visible) {  // none of the tile's keys is visible
    for (int64_t tau = tau0 + threadIdx.x; tau < tau_end; tau += blockDim.x) out[tau] = -INFINITY;
    return;
  }
  const int head_tiles = p.heads > 16 ? 2 : 1;
  const uint16_t* q = p.q + t * p.q_stride;
  for (int i = threadIdx.x; i < head_tiles * 16 * chunks; i += blockDim.x) {
    const int h = i / chunks, c = i - h * chunks;  // heads past p.heads as zeros
    cp_async16(qs + h * stride + c * 8, q + static_cast<int64_t>(min(h, p.heads - 1)) * p.d + c * 8, h < p.heads);
  }
  for (int i = threadIdx.x; i < kTileKeys * chunks; i += blockDim.x) {
    const int j = i / chunks, c = i - j * chunks;  // keys past the visible ones as zeros
    const int64_t tau = tau0 + j;
    const int64_t row = tau >= visible ? 0 : p.key_table.blocks ? p.key_table.row(t, tau) : tau;
    cp_async16(ks + j * stride + c * 8, p.keys + row * p.d + c * 8, tau < visible);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  const int key0 = warp * kKeyTiles * 8;
  double dots[2][kKeyTiles][4] = {};  // D of (head tile, key tile): rows g, g + 8, columns 2t4, 2t4 + 1
  if (tau0 + key0 < visible) {
    for (int k0 = 0; k0 < p.d; k0 += 32) {
      float part[2][kKeyTiles][4] = {};
      for (int kk = k0; kk < min(p.d, k0 + 32); kk += 16) {
        uint32_t b[kKeyTiles][2];
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n) {
          const uint16_t* key = ks + (key0 + 8 * n + g) * stride + kk + 2 * t4;
          b[n][0] = pair_at(key), b[n][1] = pair_at(key + 8);
        }
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          if (m >= head_tiles) break;
          const uint16_t* row = qs + (16 * m + g) * stride + kk + 2 * t4;
          const uint32_t a[4] = {pair_at(row), pair_at(row + 8 * stride), pair_at(row + 8),
                                 pair_at(row + 8 * stride + 8)};
#pragma unroll
          for (int n = 0; n < kKeyTiles; ++n) mma_bf16(a, b[n][0], b[n][1], part[m][n]);
        }
      }
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) dots[m][n][e] += part[m][n][e];
    }
  }

  float wt[2][2];  // the lane's heads 16m + 8 half + g: bf16(w * weight_scale), 0 past the heads
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = 16 * m + 8 * half + g;
      wt[m][half] = h < p.heads ? round_bf16(bf16_to_float(p.weights[t * p.heads + h]) * p.weight_scale) : 0.0f;
    }
#pragma unroll
  for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      double sum = 0;
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (16 * m + 8 * half + g >= p.heads) continue;
          const float dv = fmaxf(round_bf16(static_cast<float>(dots[m][n][2 * half + c])), 0.0f);  // bf16, then relu
          sum += round_bf16(dv * wt[m][half]);
        }
      for (int o = 4; o < kWarp; o <<= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);  // over g
      const int64_t tau = tau0 + key0 + 8 * n + 2 * t4 + c;
      if (g == 0 && tau < tau_end) out[tau] = tau < visible ? round_bf16(static_cast<float>(sum)) : -INFINITY;
    }
}

template <int kKeyTiles>
cudaError_t launch_tiles(const IndexerScoresParams& p) {
  static const cudaError_t opt_in = cudaFuncSetAttribute(
      sm90_bf16_indexer_scores<kKeyTiles>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes(kKeyTiles, kMaxD));
  if (opt_in != cudaSuccess) return opt_in;
  const unsigned tiles = static_cast<unsigned>((p.T + tile_keys(kKeyTiles) - 1) / tile_keys(kKeyTiles));
  for (int64_t t0 = 0; t0 < p.n; t0 += kMaxTokens) {  // grid.y bounds a launch's tokens
    IndexerScoresParams part = p;
    part.n = static_cast<int>(std::min<int64_t>(kMaxTokens, p.n - t0));
    part.q += t0 * p.q_stride;
    part.weights += t0 * p.heads;
    part.visible += t0;
    part.out += t0 * p.out_stride;
    if (part.key_table.blocks) part.key_table.blocks += t0 * p.key_table.blocks_stride;
    if (const cudaError_t e =
            launch_kernel(sm90_bf16_indexer_scores<kKeyTiles>, dim3(tiles, static_cast<unsigned>(part.n)),
                          kWarps * kWarp, shared_bytes(kKeyTiles, p.d), p.stream, part);
        e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_indexer_scores(const IndexerScoresParams& p) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (p.n < 0 || p.heads <= 0 || p.heads > kMaxHeads || p.d <= 0 || p.d % 16 != 0 || p.d > kMaxD || p.T < 0 ||
      p.q_stride % 8 != 0 || !aligned(p.q) || !aligned(p.keys) ||
      (p.key_table.blocks && p.key_table.rows_per_block <= 0))
    return cudaErrorInvalidValue;
  if (static_cast<int64_t>(p.n) * p.T == 0) return cudaSuccess;
  // A few tokens' keys in smaller tiles, so that their blocks fill the GPU (each key's sum is the same).
  return p.n < kFewTokens ? launch_tiles<kFewTokensKeyTiles>(p) : launch_tiles<kKeyTiles>(p);
}

}  // namespace dsinfer::cuda
