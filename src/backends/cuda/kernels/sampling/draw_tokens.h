// The engine's draws at temperature > 0 on the GPU (ops/args.h DrawTokensArgs): the token
// core/token_draw.h draws from a row, the host's bit for bit. Framework-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/token_draw.h"

namespace dsinfer::cuda {

struct DrawTokensParams {
  const float* logits = nullptr;  // [rows, V], row stride row_stride
  int64_t row_stride = 0;
  const RowDraw* draws = nullptr;  // [n], on the device
  int32_t* picks = nullptr;        // [rows]: picks[draws[i].row] written
  int n = 0, V = 0;
  cudaStream_t stream = nullptr;
};

/// A cluster of blocks per draw. cudaErrorInvalidValue for V outside [1, kMaxDrawVocab].
cudaError_t launch_draw_tokens(const DrawTokensParams& p);

}  // namespace dsinfer::cuda
