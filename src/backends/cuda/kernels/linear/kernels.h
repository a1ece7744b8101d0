// The block-linear kernels behind launch_block_linear, one per file (internal to kernels/linear).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda {

cudaError_t launch_block_linear_fma(const BlockLinearParams& p);        // linear.cu
cudaError_t launch_block_linear_mma(const BlockLinearParams& p);        // linear_mma.cu
cudaError_t launch_block_linear_wgmma(const BlockLinearParams& p);      // linear_wgmma.cu, n <= 8
cudaError_t launch_block_linear_gemv(const BlockLinearParams& p);       // linear_gemv.cu, gemv_applies(p)
bool gemv_applies(const BlockLinearParams& p);                          // gemv_rows_applies, or n <= 4, k % 64 == 0
cudaError_t launch_block_linear_gemv_rows(const BlockLinearParams& p);  // linear_gemv_rows.cu, gemv_rows_applies(p)
bool gemv_rows_applies(const BlockLinearParams& p);                     // n == 1, out % 8 == 0
int gemv_split(int out, int k);                                         // warps sharing a row's K
size_t block_linear_wgmma_workspace_bytes(const BlockLinearParams& p);

}  // namespace dsinfer::cuda
