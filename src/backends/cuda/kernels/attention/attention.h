// Launchers of the sparse attention and indexer-score kernels, with the CPU backend's numerics:
// dot products in double, the reference kernel's 64-row online-softmax blocks, P cast to bf16
// before P.V (spec §5.3); results equal the CPU's except where expf differs in its last bit.
// Framework-free; cudaErrorInvalidValue on bad shapes.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/attention/params.h"

namespace dsinfer::cuda {

/// One warp per (token, head); each lane owns d / 32 channels (d a multiple of 32, at most 1024).
cudaError_t launch_sparse_attn(const SparseAttnParams& p);
/// One warp per (token, key), a lane per head (heads <= 32).
cudaError_t launch_indexer_scores(const IndexerScoresParams& p);

}  // namespace dsinfer::cuda
