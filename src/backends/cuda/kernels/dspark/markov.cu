// sm90_f64_markov_bias: row j's Markov bias over a tile of the vocabulary, added to the head's
// logits, and the tile's best column; sm90_i32_markov_pick: a draft block's best over its tiles,
// the next token of its chain. A column's value never depends on the other draft blocks.
#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/kernels/dspark/markov.h"

namespace dsinfer::cuda {
namespace {

using namespace common;

constexpr int kThreads = 256;  // columns a tile
constexpr int kChunk = 32;     // head values staged a row at a time
constexpr int kPass = 16;      // draft blocks a pass over the head

struct Best {
  float value;
  int index;
};

// The better of two candidates: the larger value, on equal values the lower column (torch's argmax).
__device__ inline Best better(Best a, Best b) {
  if (b.index < 0) return a;
  if (a.index < 0) return b;
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

__device__ inline Best block_best(Best mine, Best* shared) {
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = better(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  return shared[0];
}

// A block per tile of kThreads columns, a thread per column; every draft block's bias of the
// column in one pass over the head's rows (staged kChunk values at a time, read once per pass of
// kPass draft blocks, coalesced), each dot product in double in the rank's order.
__global__ void __launch_bounds__(kThreads) sm90_f64_markov_bias(MarkovDraftParams p, int j) {
  after_prior_grids();
  extern __shared__ float e[];                     // [kPass, r]: the embeddings of the pass's blocks' token j
  __shared__ uint16_t tile[kThreads][kChunk + 2];  // the tile's head rows, kChunk values (padded: no bank conflicts)
  __shared__ Best best[kThreads];
  const int tiles = gridDim.x, v0 = blockIdx.x * kThreads, v = v0 + threadIdx.x;
  for (int b0 = 0; b0 < p.blocks; b0 += kPass) {
    const int pass = min(kPass, p.blocks - b0);
    __syncthreads();  // the previous pass's reads of e are done
    for (int k = threadIdx.x; k < pass * p.r; k += kThreads) {
      const int b = b0 + k / p.r, i = k % p.r;
      const uint16_t value = p.embed[static_cast<int64_t>(p.tokens[b * p.tokens_stride + j]) * p.embed_stride + i];
      e[k] = bf16_to_float(value);
      if (blockIdx.x == 0) p.embeds[(static_cast<int64_t>(b) * p.J + j) * p.embeds_stride + i] = value;
    }
    double dot[kPass];
    for (int b = 0; b < kPass; ++b) dot[b] = 0;
    for (int i0 = 0; i0 < p.r; i0 += kChunk) {
      const int len = min(kChunk, p.r - i0);
      __syncthreads();  // e is written; the previous chunk's tile is read
      for (int k = threadIdx.x; k < kThreads * kChunk; k += kThreads) {  // row k / kChunk, value k % kChunk
        const int row = k / kChunk, i = k % kChunk;
        tile[row][i] = v0 + row < p.V && i < len ? p.head[static_cast<int64_t>(v0 + row) * p.head_stride + i0 + i] : 0;
      }
      __syncthreads();
      for (int i = 0; i < len; ++i) {
        const double h = bf16_to_float(tile[threadIdx.x][i]);
#pragma unroll
        for (int b = 0; b < kPass; ++b)
          if (b < pass) dot[b] += static_cast<double>(e[b * p.r + i0 + i]) * h;
      }
    }
    for (int b = 0; b < pass; ++b) {
      Best mine{0.0f, -1};
      if (v < p.V) {
        float* base = p.base + (b0 + b) * p.block_stride + j * p.row_stride;
        const float value = base[v] + static_cast<float>(dot[b]);
        base[v] = value;
        mine = {value, v};
      }
      const Best tile_best = block_best(mine, best);
      if (threadIdx.x == 0) static_cast<Best*>(p.workspace)[(b0 + b) * tiles + blockIdx.x] = tile_best;
      __syncthreads();  // best is read before the next block's reduction writes it
    }
  }
}

__global__ void __launch_bounds__(kThreads) sm90_i32_markov_pick(MarkovDraftParams p, int j, int tiles) {
  after_prior_grids();
  __shared__ Best best[kThreads];
  const int b = blockIdx.x;
  const Best* part = static_cast<const Best*>(p.workspace) + b * tiles;
  Best mine{0.0f, -1};
  for (int t = threadIdx.x; t < tiles; t += kThreads) mine = better(mine, part[t]);
  const Best all = block_best(mine, best);
  if (threadIdx.x == 0) p.tokens[b * p.tokens_stride + j + 1] = all.index;
}

int tiles_of(const MarkovDraftParams& p) {
  return (p.V + kThreads - 1) / kThreads;
}

}  // namespace

size_t markov_draft_workspace_bytes(const MarkovDraftParams& p) {
  return sizeof(Best) * static_cast<size_t>(p.blocks) * tiles_of(p);
}

cudaError_t launch_markov_draft(const MarkovDraftParams& p) {
  const int tiles = tiles_of(p);
  if (p.r < 1 || p.r > 256 || p.V < 1 || !p.workspace) return cudaErrorInvalidValue;  // e: 16 KB at most
  if (p.blocks == 0 || p.J == 0) return cudaSuccess;
  for (int j = 0; j < p.J; ++j) {
    if (const cudaError_t e =
            launch_kernel(sm90_f64_markov_bias, tiles, kThreads, kPass * p.r * sizeof(float), p.stream, p, j);
        e != cudaSuccess)
      return e;
    if (const cudaError_t e = launch_kernel(sm90_i32_markov_pick, p.blocks, kThreads, 0, p.stream, p, j, tiles);
        e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

}  // namespace dsinfer::cuda
