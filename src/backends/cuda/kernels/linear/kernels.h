// The block-linear kernels behind launch_block_linear, one per file (internal to kernels/linear and
// the kernel lab, bench/cuda/lab).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda {

cudaError_t launch_block_linear_fma(const BlockLinearParams& p);    // linear.cu
cudaError_t launch_block_linear_mma(const BlockLinearParams& p);    // linear_mma.cu
cudaError_t launch_block_linear_tiled(const BlockLinearParams& p);  // linear_tiled.cu
int tiled_split(int out, int k, bool fp4);                          // K slices (a cluster) a row tile
cudaError_t launch_block_linear_wgmma(const BlockLinearParams& p);  // linear_wgmma.cu, wgmma_applies(p)
bool wgmma_applies(const BlockLinearParams& p);                     // wgmma_takes(p), the operands given and aligned
cudaError_t launch_block_linear_gemv(const BlockLinearParams& p);   // linear_gemv.cu, gemv_applies(p)
bool gemv_applies(const BlockLinearParams& p);                      // gemv_rows_applies, or n <= 4, k % 64 == 0
bool gemv_takes_rows(const BlockLinearParams& p);                   // gemv_applies(p): 8 rows a warp, else a row
cudaError_t launch_block_linear_gemv_rows(const BlockLinearParams& p);  // linear_gemv_rows.cu, gemv_rows_applies(p)
bool gemv_rows_applies(const BlockLinearParams& p);                     // n == 1, out % 8 == 0
int gemv_split(int out, int k);                                         // warps sharing a row's K

}  // namespace dsinfer::cuda
