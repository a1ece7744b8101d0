// The DSpark drafter's Markov chain on the GPU (spec §10.4) with the CPU backend's numerics: each
// bias value a dot product in double over the rank in order, rounded once to fp32 and added to
// the head's logit; the drafts the first of equal maxima. Framework-free.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dsinfer::cuda {

struct MarkovDraftParams {
  float* base = nullptr;  // [blocks, J, V]: block b's row j at base + b * block_stride + j * row_stride
  int64_t block_stride = 0, row_stride = 0;
  const uint16_t* embed = nullptr;  // [V, r] bf16, row stride embed_stride
  int64_t embed_stride = 0;
  const uint16_t* head = nullptr;  // [V, r] bf16, row stride head_stride
  int64_t head_stride = 0;
  int32_t* tokens = nullptr;  // [blocks, J + 1], row stride tokens_stride: column 0 in, the rest out
  int64_t tokens_stride = 0;
  uint16_t* embeds = nullptr;  // [blocks * J, r] bf16 out, row stride embeds_stride
  int64_t embeds_stride = 0;
  void* workspace = nullptr;  // markov_draft_workspace_bytes
  int blocks = 0, J = 0, V = 0, r = 0;
  cudaStream_t stream = nullptr;
};

size_t markov_draft_workspace_bytes(const MarkovDraftParams& p);

/// Two kernels a row j: the bias and each tile's best column (a block per 256 columns, every draft
/// block), then each draft block's best over its tiles. cudaErrorInvalidValue unless 1 <= r <= 256
/// and the workspace is given.
cudaError_t launch_markov_draft(const MarkovDraftParams& p);

}  // namespace dsinfer::cuda
