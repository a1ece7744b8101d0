// Parameters of the attention kernels (spec §5.3, §7.2): plain pointers, POD; bf16 as uint16_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

/// Position p of query row i lies at row base + blocks[i * blocks_stride + p / per] * per + p % per
/// of its pool (per = rows_per_block); blocks_stride 0: one table for every row.
struct PagedTableParams {
  const int32_t* blocks = nullptr;
  int64_t blocks_stride = 0;
  int rows_per_block = 0;
  int64_t base = 0;
  __device__ int64_t row(int64_t i, int64_t p) const {
    return base + int64_t{blocks[i * blocks_stride + p / rows_per_block]} * rows_per_block + p % rows_per_block;
  }
};

/// Attention of each query over its own list of KV rows with a sink: index i < n_win reads
/// window[i], else compressed[i - n_win]; -1 is an empty slot.
struct SparseAttnParams {
  const uint16_t* q = nullptr;  // [n, heads, d], token stride q_stride, head stride d
  int64_t q_stride = 0;
  const uint16_t* window = nullptr;      // [n_win, d]
  const uint16_t* compressed = nullptr;  // [n_cmp, d] (may be null when n_cmp = 0)
  int n_win = 0, n_cmp = 0;
  const int32_t* idx = nullptr;  // [n, k], row stride idx_stride
  int64_t idx_stride = 0;
  const float* sink = nullptr;  // [heads]
  float scale = 0;
  uint16_t* out = nullptr;  // [n, heads, d], token stride out_stride
  int64_t out_stride = 0;
  float* scores = nullptr;  // workspace of sparse_attn_workspace_bytes(): a pass of tokens' scores, alpha and l
  int n = 0, heads = 0, d = 0, k = 0;
  cudaStream_t stream = nullptr;
};

/// I[t, tau] = bf16(sum_h bf16(relu(bf16(q[t,h] . K[tau])) * w[t,h])), -inf for tau >= visible[t].
struct IndexerScoresParams {
  const uint16_t* q = nullptr;  // [n, heads, d], token stride q_stride
  int64_t q_stride = 0;
  const uint16_t* keys = nullptr;     // [T, d], or a pool of rows read through a block table
  PagedTableParams key_table;         // no blocks: key tau is row tau of keys
  const uint16_t* weights = nullptr;  // [n, heads]
  const int32_t* visible = nullptr;   // [n]
  float* out = nullptr;               // [n, T], row stride out_stride
  int64_t out_stride = 0;
  float weight_scale = 1.0f;  // each weight is bf16(weight * weight_scale) before use
  int n = 0, heads = 0, d = 0, T = 0;
  cudaStream_t stream = nullptr;
};

/// The indexer's top-k of each score row (ties: the lower column; mask 0 scores -inf), by
/// ascending column, columns >= visible as -1.
struct TopkParams {
  const float* scores = nullptr;  // [n, T], row stride score_stride
  int64_t score_stride = 0;
  const uint8_t* mask = nullptr;  // [n, T] or null, row stride mask_stride
  int64_t mask_stride = 0;
  const int32_t* visible = nullptr;  // [n]
  int32_t* out = nullptr;            // [n, k], row stride out_stride
  int64_t out_stride = 0;
  int n = 0, T = 0, k = 0;
  cudaStream_t stream = nullptr;
};

/// The candidate pool: blocks of block_size columns by their maximum, the block of column
/// visible - 1 pinned, the best topk_blocks kept (ties: the lower block), -inf blocks dropped;
/// written as the kept blocks' numbers, ascending, then -1s.
struct CandidateBlocksParams {
  const float* scores = nullptr;  // [n, T], row stride score_stride
  int64_t score_stride = 0;
  const int32_t* visible = nullptr;  // [n]
  int32_t* blocks = nullptr;         // [n, kb], row stride blocks_stride; kb = min(topk_blocks, blocks of T)
  int64_t blocks_stride = 0;
  int n = 0, T = 0, block_size = 0, topk_blocks = 0;
  cudaStream_t stream = nullptr;
};

/// mask[i][c] = 1 where column c lies in one of the blocks numbered in row i of blocks (-1: none).
struct CandidateMaskParams {
  const int32_t* blocks = nullptr;  // [n, kb], row stride blocks_stride
  int64_t blocks_stride = 0;
  uint8_t* mask = nullptr;  // [n, T], row stride mask_stride
  int64_t mask_stride = 0;
  int n = 0, T = 0, kb = 0, block_size = 0;
  cudaStream_t stream = nullptr;
};

/// out[i][j] = positions[i][j] < 0 ? -1 : base + blocks[p / per] * per + p % per.
struct PagedRowsParams {
  const int32_t* positions = nullptr;  // [n, k], row stride pos_stride
  int64_t pos_stride = 0;
  PagedTableParams table;
  int32_t* out = nullptr;  // [n, k], row stride out_stride
  int64_t out_stride = 0;
  int n = 0, k = 0;
  cudaStream_t stream = nullptr;
};

}  // namespace dsinfer::cuda
