// launch_block_linear_gemv: the f16 tensor-core GEMV's launch for the dispatch (the kernel:
// linear_gemv.cuh), and where one token's GEMV takes 8 rows a warp (linear_gemv_rows.cu).
#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear_gemv.cuh"

namespace dsinfer::cuda {
namespace {

using namespace linear_config;
using namespace linear_config::gemv_kernel;
using linear_detail::gemv_kernel::launch;

// The instances the dispatch runs (config.h: the fastest measured; the lab measures the others).
template <bool kFp4>
cudaError_t launch_n(const BlockLinearParams& p) {
  switch (p.n) {
    case 1:
      return launch<kFp4, kStepsInFlight, 1>(p, kBlocksPerSm);
    case 2:
      return launch<kFp4, kStepsInFlight, 2>(p, kBlocksPerSm);
    case 3:
      return launch<kFp4, kStepsInFlight, 3>(p, kBlocksPerSm);
    case 4:
      return launch<kFp4, kStepsInFlight, 4>(p, kBlocksPerSm);
  }
  return cudaErrorInvalidValue;
}

bool a_row_a_warp_applies(const BlockLinearParams& p) {
  return p.n >= 1 && p.n <= kMaxN && p.k % kPartK == 0;
}

}  // namespace

int gemv_split(int out, int k) {
  // Enough warps for the GPU (~2048) from one matrix's rows, each keeping 4 or more steps; the
  // split depends on the matrix's shape alone, so grouping matrices does not change their sums.
  const int steps = (k + kStepK - 1) / kStepK;
  int split = 1;
  // Equal ranges: the CTA's warps meet at a barrier after each row.
  while (split < kWarps && out * split < 2048 && steps / (split * 2) >= 4 && steps % (split * 2) == 0) split *= 2;
  return split;
}

bool gemv_applies(const BlockLinearParams& p) {
  return gemv_rows_applies(p) || a_row_a_warp_applies(p);
}

bool gemv_takes_rows(const BlockLinearParams& p) {
  // One token: 8 rows a warp where that applies and is asked for, or by default for fp4 (every
  // shape measured faster) and for fp8 with many rows (docs/perf-notes.md).
  return gemv_rows_applies(p) && (!a_row_a_warp_applies(p) || p.gemv_rows == 8 ||
                                  (p.gemv_rows == 0 && (p.fp4 || p.groups * p.out >= kRowsWarpFp8Rows)));
}

cudaError_t launch_block_linear_gemv(const BlockLinearParams& p) {
  if (gemv_takes_rows(p)) return launch_block_linear_gemv_rows(p);
  if (!a_row_a_warp_applies(p)) return cudaErrorInvalidValue;
  return p.fp4 ? launch_n<true>(p) : launch_n<false>(p);
}

}  // namespace dsinfer::cuda
