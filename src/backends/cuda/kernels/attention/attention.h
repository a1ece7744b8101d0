// Launchers of the sparse attention, the indexer's scores and its selections. Framework-free;
// cudaErrorInvalidValue on bad shapes.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/attention/params.h"

namespace dsinfer::cuda {

/// Calls of 128 tokens or more (d a multiple of 32, at most 512): one kernel, a block per token and
/// 64 heads, no workspace. Others: three kernels per pass of up to 256 tokens (the scores of every
/// (head, KV slot) into the workspace, the softmax, the value sums), with the same bits. d a
/// multiple of 8, at most 1024; q, the KV rows and the workspace 16-byte aligned.
cudaError_t launch_sparse_attn(const SparseAttnParams& p);
size_t sparse_attn_workspace_bytes(const SparseAttnParams& p);
/// The indexer's scores on bf16 tensor cores (indexer_scores.cu): the CPU's bits for fp4-valued q
/// and keys (the model's), a block per (tile of keys, token). heads <= 32, d a multiple of 16 of
/// at most 256, q (with its token stride) and keys 16-byte aligned; launches of a bounded grid
/// over consecutive tokens, so any n x T fits.
cudaError_t launch_indexer_scores(const IndexerScoresParams& p);
/// The indexer's selections on the device (select.cu): a block per query row, radix selection
/// of the k-th largest key, then the row compacted in column order.
cudaError_t launch_topk(const TopkParams& p);
cudaError_t launch_candidate_blocks(const CandidateBlocksParams& p);
cudaError_t launch_candidate_mask(const CandidateMaskParams& p);
cudaError_t launch_paged_rows(const PagedRowsParams& p);

}  // namespace dsinfer::cuda
