// Launchers of the block-scaled linear (GEMV / small-batch GEMM) kernels. Framework-free (nvcc
// compiles this header in .cu files); the backend wraps the cudaError_t into a Status.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda {

/// act_quant (spec §3.4) of each row of x in groups of 32; cudaErrorInvalidValue unless k % 32 == 0.
cudaError_t launch_quantize_input(const QuantizeInputParams& p);

/// One warp per output row, lanes over 16-byte chunks of the weights, every activation row
/// against each weight chunk while it is in registers. The block partials are summed in fp32 (the
/// CPU sums them exactly; results agree to rounding). cudaErrorInvalidValue unless k % 32 == 0.
cudaError_t launch_block_linear(const BlockLinearParams& p);

}  // namespace dsinfer::cuda
