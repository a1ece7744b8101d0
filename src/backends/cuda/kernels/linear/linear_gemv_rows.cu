// launch_block_linear_gemv_rows: the 8-rows-a-warp GEMV's launch for the dispatch (the kernel:
// linear_gemv_rows.cuh).
#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear_gemv_rows.cuh"

namespace dsinfer::cuda {

using namespace linear_config::gemv_rows_kernel;

bool gemv_rows_applies(const BlockLinearParams& p) {
  return p.n == 1 && p.out % kRows == 0 && p.k % 32 == 0;
}

cudaError_t launch_block_linear_gemv_rows(const BlockLinearParams& p) {
  if (!gemv_rows_applies(p)) return cudaErrorInvalidValue;
  // The instances the dispatch runs: 2 steps of loads in flight a warp (fp4: 76 registers, 3 CTAs
  // an SM), measured faster than 4 (94 registers) and 8 (124) on the expert shapes
  // (docs/perf-notes.md; the lab measures 4).
  using linear_detail::gemv_rows_kernel::launch;
  return p.fp4 ? launch<true, kStepsInFlight>(p) : launch<false, kStepsInFlight>(p);
}

}  // namespace dsinfer::cuda
