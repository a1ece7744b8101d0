// The engine's greedy pick on the GPU (ops/args.h GreedyPickArgs): a row's first largest column,
// -1 for a row that is not all finite. Framework-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

struct GreedyPickParams {
  const float* logits = nullptr;  // [n, V], row stride row_stride
  int64_t row_stride = 0;
  int32_t* picks = nullptr;  // [n]
  int n = 0, V = 0;
  cudaStream_t stream = nullptr;
};

/// A block per row. cudaErrorInvalidValue for V < 1.
cudaError_t launch_greedy_pick(const GreedyPickParams& p);

}  // namespace dsinfer::cuda
