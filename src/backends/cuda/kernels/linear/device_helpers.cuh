// Device helpers of the block-linear kernels (kernels/linear/ and the lab only); the number
// formats and reductions every kernel shares are in backends/cuda/common/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda::linear_detail {

/// d += a * b on f16 tensor cores (mma.m16n8k16, f32 accumulators): a warp's A fragment (4 f16
/// pairs), B fragment (2) and D (4 floats) in the PTX ISA's lane layout.
__device__ inline void mma_f16(const uint32_t a[4], uint32_t b0, uint32_t b1, float d[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Group `group`'s weights and scales: its own, or in a routed call the chosen expert's from the
/// device table. false for an expert id outside [0, route_count) (the group's outputs are zeros).
__device__ inline bool group_weights(const BlockLinearParams& p, int group, const uint8_t*& w, const uint8_t*& sw) {
  w = p.op[group].w, sw = p.op[group].w_scales;
  if (!p.routes) return true;
  const int32_t e = p.routes[group / p.per_route];
  if (e < 0 || e >= p.route_count) return false;
  const RoutedWeight entry = p.route_table[e * p.per_route + group % p.per_route];
  w = entry.w, sw = entry.w_scales;
  return true;
}

/// Multiprocessors of the current device (read once).
inline int sm_count() {
  static const int count = [] {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return std::max(sms, 1);
  }();
  return count;
}

}  // namespace dsinfer::cuda::linear_detail
