// The library's CUDA-core and f16 tensor-core GEMV kernels (kernels/linear/*.cuh) at the knobs'
// other values: instances of the same templates, compiled here (the library compiles only those
// its dispatch runs).
#include <algorithm>

#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "backends/cuda/kernels/linear/linear_fma.cuh"
#include "backends/cuda/kernels/linear/linear_gemv.cuh"
#include "backends/cuda/kernels/linear/linear_gemv_rows.cuh"
#include "lab/lab.h"

namespace dsinfer::cuda::lab {
namespace {

namespace fma_kernel = linear_detail::fma_kernel;
namespace gemv_kernel = linear_detail::gemv_kernel;
namespace gemv_rows_kernel = linear_detail::gemv_rows_kernel;

bool valid(const BlockLinearParams& p) {
  return p.k % 32 == 0 && p.k > 0 && p.n >= 0 && p.out >= 0 && p.groups >= 1 && p.groups <= kMaxLinearGroups &&
         !p.routes;
}

template <bool kFp4>
cudaError_t gemv_n(const BlockLinearParams& p, bool deep, int blocks_per_sm) {
  switch (p.n) {
    case 1:
      return deep ? gemv_kernel::launch<kFp4, 8, 1>(p, blocks_per_sm)
                  : gemv_kernel::launch<kFp4, 4, 1>(p, blocks_per_sm);
    case 2:  // deeper prefetch only at one token (more rows' registers would spill)
      return gemv_kernel::launch<kFp4, 4, 2>(p, blocks_per_sm);
    case 3:
      return gemv_kernel::launch<kFp4, 4, 3>(p, blocks_per_sm);
    case 4:
      return gemv_kernel::launch<kFp4, 4, 4>(p, blocks_per_sm);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t block_linear_fma(const BlockLinearParams& p, const LinearKnobs& k) {
  if (!valid(p)) return cudaErrorInvalidValue;
  if (p.n == 0 || p.out == 0) return cudaSuccess;
  switch (k.chunks_in_flight) {
    case 2:
      return fma_kernel::launch<2>(p, k.blocks_per_sm);
    case 4:
      return fma_kernel::launch<4>(p, k.blocks_per_sm);
  }
  return cudaErrorInvalidValue;
}

cudaError_t block_linear_gemv(const BlockLinearParams& p, const LinearKnobs& k) {
  if (!valid(p)) return cudaErrorInvalidValue;
  if (p.n == 0 || p.out == 0) return cudaSuccess;
  if (!gemv_applies(p)) {
    BlockLinearParams forced = p;
    forced.kernel = LinearKernel::kGemv;
    return launch_block_linear(forced);
  }
  if (k.chunks_in_flight != 2 && k.chunks_in_flight != 4) return cudaErrorInvalidValue;
  const bool deep = k.chunks_in_flight == 4;
  if (gemv_takes_rows(p)) {
    if (p.fp4) return deep ? gemv_rows_kernel::launch<true, 4>(p) : gemv_rows_kernel::launch<true, 2>(p);
    return deep ? gemv_rows_kernel::launch<false, 4>(p) : gemv_rows_kernel::launch<false, 2>(p);
  }
  return p.fp4 ? gemv_n<true>(p, deep, k.blocks_per_sm) : gemv_n<false>(p, deep, k.blocks_per_sm);
}

}  // namespace dsinfer::cuda::lab
