// A warp's pieces of activation rows stored into the wgmma kernel's operand (wgmma_order.h's K
// order) as 16 contiguous bytes a lane: the permutation runs through shuffles, so that a warp
// writes whole sectors instead of 4-byte pieces spread over four times as many.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/linear/wgmma_order.h"

namespace dsinfer::cuda {

/// Lanes 8s .. 8s + 7 of the warp hold K indices 8q .. 8q + 7 (q = lane % 8) of one span of 64 of
/// a row, as four bf16 pairs; returns the operand's columns 8q .. 8q + 7 of that span. They hold
/// the pairs at K 16c + 4j + 2h (c = 0 .. 3, j = q / 2, h = q % 2), lane 2c + q / 4's pair q % 4.
/// Every lane of the warp calls it (the shuffles).
__device__ inline uint4 wgmma_operand_sixteen_bytes(const uint32_t (&pairs)[4]) {
  const int lane = static_cast<int>(threadIdx.x % 32), q = lane % 8;
  uint32_t got[4] = {};
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    // Round r: each lane offers its pair (r + its c) % 4 (its c being q / 2 as a source), and lane
    // q takes c = (q - r) % 4's offer, which is then that lane's pair q % 4.
    const int offer_at = (r + q / 2) & 3, c = (q - r) & 3;
    uint32_t offer = pairs[0];
#pragma unroll
    for (int v = 1; v < 4; ++v) offer = offer_at == v ? pairs[v] : offer;
    const uint32_t taken = __shfl_sync(0xffffffffu, offer, lane - q + 2 * c + q / 4);
#pragma unroll
    for (int v = 0; v < 4; ++v) got[v] = c == v ? taken : got[v];
  }
  return make_uint4(got[0], got[1], got[2], got[3]);
}

}  // namespace dsinfer::cuda
