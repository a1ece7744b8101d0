// Launchers of the sparse attention and indexer-score kernels, with the CPU backend's numerics:
// dot products in double, the reference kernel's 64-row online-softmax blocks, P cast to bf16
// before P.V (spec §5.3); results equal the CPU's except where expf differs in its last bit.
// Framework-free; cudaErrorInvalidValue on bad shapes.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/attention/params.h"

namespace dsinfer::cuda {

/// Two kernels per pass of up to 256 tokens: the scores of every (head, KV slot) into the
/// workspace, then the softmax and the value sums per (token, head). d a multiple of 8, at most
/// 1024; q, the KV rows and the workspace 16-byte aligned.
cudaError_t launch_sparse_attn(const SparseAttnParams& p);
size_t sparse_attn_workspace_bytes(const SparseAttnParams& p);
/// One warp per (token, key), a lane per head (heads <= 32); launches of a bounded grid over
/// consecutive tokens, so any n x T fits.
cudaError_t launch_indexer_scores(const IndexerScoresParams& p);
/// The indexer's selections on the device (select.cu): a block per query row, radix selection
/// of the k-th largest key, then the row compacted in column order.
cudaError_t launch_topk(const TopkParams& p);
cudaError_t launch_candidate_blocks(const CandidateBlocksParams& p);
cudaError_t launch_candidate_mask(const CandidateMaskParams& p);
cudaError_t launch_paged_rows(const PagedRowsParams& p);

}  // namespace dsinfer::cuda
