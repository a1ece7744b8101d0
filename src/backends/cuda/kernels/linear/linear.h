// Launchers of the block-scaled linear (GEMV / small-batch GEMM) kernels. Framework-free (nvcc
// compiles this header in .cu files); the backend wraps the cudaError_t into a Status.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda {

// The operands' x_values, x_codes and x_scales come from launch_quantize_input
// (kernels/act_quant/act_quant.h).

/// The block partials come from fp32 FMAs on the CUDA cores (one warp per output row) or from the
/// tensor cores (mma.sync or wgmma on e4m3, one K block per instruction, fp4 weights widened to
/// e4m3 in registers), as p.kernel says. The CPU sums them exactly; results agree to rounding (the
/// fp8 tensor cores' own accumulation inside a block is coarser: docs/perf-notes.md).
/// cudaErrorInvalidValue unless k % 32 == 0, 1 <= groups <= kMaxLinearGroups, and for kWgmma
/// n <= 8 and a workspace.
cudaError_t launch_block_linear(const BlockLinearParams& p);
/// Device memory the wgmma path needs for these shapes (its K slices' fp32 partials).
size_t block_linear_workspace_bytes(const BlockLinearParams& p);

}  // namespace dsinfer::cuda
