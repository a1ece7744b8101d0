// The fold of the ranks' gathered parts in rank order: the device side of NcclCommunicator's sum,
// which gathers rather than reduces so that every rank and every batch size sees the same order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

/// out[i] = ((parts[0][i] + parts[1][i]) + ...) + parts[ranks - 1][i], in f32, with parts
/// [ranks][n] and out [n] f32, or bf16 (then each part widened and the sum rounded once).
cudaError_t launch_rank_fold(const void* parts, int ranks, int64_t n, bool bf16, void* out, cudaStream_t stream);

}  // namespace dsinfer::cuda
