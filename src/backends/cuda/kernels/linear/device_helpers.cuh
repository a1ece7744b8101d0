// Device helpers of the block-linear kernels (kernels/linear/ and the lab only); the number
// formats and reductions every kernel shares are in backends/cuda/common/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda::linear_detail {

using common::mma_f16;

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

/// Launch group `group` of a call grouped by expert: its expert's rows of the sorted activations
/// and outputs (from row e.first, n = e.count) with that expert's weights from the device table.
/// false for an unused entry or an expert id outside the table: nothing to compute or write.
__device__ inline bool expert_group_operands(const BlockLinearParams& p, int group, LinearOperands& op, int& n) {
  const ExpertGroup e = p.expert_groups[group / p.per_route];
  const int part = group % p.per_route;
  if (e.count <= 0 || e.expert < 0 || e.expert >= p.route_count) return false;
  const LinearOperands& sorted = p.op[part];
  const RoutedWeight w = p.route_table[e.expert * p.per_route + part];
  op = {.x_values = sorted.x_values + static_cast<int64_t>(e.first) * p.k,
        .x_scales = sorted.x_scales + static_cast<int64_t>(e.first) * (p.k / 32),
        .w = w.w,
        .w_scales = w.w_scales,
        .y = sorted.y + static_cast<int64_t>(e.first) * p.y_stride,
        .x_codes = sorted.x_codes ? sorted.x_codes + static_cast<int64_t>(e.first) * p.k : nullptr,
        .x_operand = sorted.x_operand ? sorted.x_operand + static_cast<int64_t>(e.first) * p.k : nullptr};
  n = e.count;
  return true;
}

/// Whether a launch names what its groups read and write: a grouped call a table and each part's
/// activations and outputs, a routed one a table, any other each group's weights too; `codes`: the
/// activations' e4m3 codes as well, or their bf16 (the tiled kernel reads them).
inline bool operands_given(const BlockLinearParams& p, bool codes = false) {
  const bool grouped = p.expert_groups != nullptr;
  if (grouped && (!p.route_table || p.per_route < 1 || p.per_route > kMaxLinearGroups || p.groups % p.per_route != 0))
    return false;
  if (p.routes && (!p.route_table || p.per_route < 1 || p.groups % p.per_route != 0)) return false;
  for (int g = 0; g < (grouped ? p.per_route : p.groups); ++g) {
    const LinearOperands& op = p.op[g];
    const bool quantised = op.x_values && op.x_scales && (!codes || op.x_codes);
    const bool bf16 = codes && !grouped && op.x_bf16;  // the tiled kernel quantises it (tiled_quantises_input)
    if (!(quantised || bf16) || !op.y || (!grouped && !p.routes && (!op.w || !op.w_scales))) return false;
  }
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
