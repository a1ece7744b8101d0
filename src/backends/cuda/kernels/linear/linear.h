// Launchers of the block-scaled linear (GEMV / small-batch GEMM) kernels. Framework-free (nvcc
// compiles this header in .cu files); the backend wraps the cudaError_t into a Status.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/linear/params.h"

namespace dsinfer::cuda {

// The operands' x_values, x_codes and x_scales come from launch_quantize_input
// (kernels/act_quant/act_quant.h), or the kernel quantises the bf16 input itself where
// tiled_quantises_input says so.

/// Whether launch_block_linear runs this call (its kernel, rows and kind) on the tiled kernel with
/// one activation tile (at most 8 rows, not grouped by expert), which then takes the operands'
/// inputs as bf16 (x_bf16: 16-byte aligned rows) and quantises them as it stages them, the codes
/// and scales launch_quantize_input would give: a launch fewer per linear of a decode step.
bool tiled_quantises_input(const BlockLinearParams& p);

/// Whether bf16 rows from `x`, `stride` values apart, suit the tiled kernel's input loads (16-byte
/// aligned starts).
inline bool bf16_rows_aligned(const void* x, int64_t stride) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && stride % 8 == 0;
}

/// The block partials come from fp32 FMAs on the CUDA cores (one warp per output row) or from the
/// tensor cores (f16 mma.sync on the codes' values), as p.kernel says. The CPU sums them exactly;
/// results agree to rounding. cudaErrorInvalidValue unless k % 32 == 0 and 1 <= groups <=
/// kMaxLinearGroups (a grouped call, p.expert_groups: any number of groups, on the mma kernel).
cudaError_t launch_block_linear(const BlockLinearParams& p);

/// Whether launch_block_linear runs the wgmma kernel for this call (its kernel, shape and row
/// count: under kAuto from kMinRows rows, and a decode step's plain fp8 calls of up to kFewRows):
/// its activations are then wanted as LinearOperands::x_operand (QuantizeInputParams::operand).
bool wgmma_takes(const BlockLinearParams& p);

/// The TMA tensor map (kTensorMapBytes at `map`) through which the wgmma kernel reads weights [out,
/// k] (fp8, or fp4 [out, k / 2]) with rows w_stride bytes apart: what a grouped call's
/// route_maps hold. false where the TMA cannot read them (alignment, strides).
bool wgmma_weight_map(void* map, const uint8_t* w, int out, int k, int64_t w_stride, bool fp4);

}  // namespace dsinfer::cuda
