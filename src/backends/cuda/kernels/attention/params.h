// Parameters of the attention kernels (spec §5.3, §7.2): plain pointers, POD; bf16 as uint16_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

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
  float* scores = nullptr;  // workspace of sparse_attn_workspace_bytes(): the scores of a pass of tokens
  int n = 0, heads = 0, d = 0, k = 0;
  cudaStream_t stream = nullptr;
};

/// I[t, tau] = bf16(sum_h bf16(relu(bf16(q[t,h] . K[tau])) * w[t,h])), -inf for tau >= visible[t].
struct IndexerScoresParams {
  const uint16_t* q = nullptr;  // [n, heads, d], token stride q_stride
  int64_t q_stride = 0;
  const uint16_t* keys = nullptr;     // [T, d], or a pool of rows read through key_rows
  const int32_t* key_rows = nullptr;  // [T] or null: key tau is row key_rows[tau] of keys
  const uint16_t* weights = nullptr;  // [n, heads]
  const int32_t* visible = nullptr;   // [n]
  float* out = nullptr;               // [n, T], row stride out_stride
  int64_t out_stride = 0;
  float weight_scale = 1.0f;  // each weight is bf16(weight * weight_scale) before use
  int n = 0, heads = 0, d = 0, T = 0;
  cudaStream_t stream = nullptr;
};

}  // namespace dsinfer::cuda
