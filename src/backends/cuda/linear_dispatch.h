// Which path a linear, a group of linears or the routed experts take on the CUDA backend: every
// decision in one place, made from the arguments and the forced kernel alone (no device state).
// The adapters in linear.cc and routed_experts.cc follow it; inside a block-scaled launch the
// choice of kernel by shape continues in launch_block_linear (kernels/linear/linear.cu).
#pragma once

#include <cstdint>
#include <span>

#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/params.h"
#include "ops/args.h"

namespace dsinfer::cuda {

/// Batches of at least this many rows (prefill chunks) with dense weights run on cuBLAS's bf16
/// tensor-core GEMM (fp8 read as bf16: dequantised to bf16 first, exact), the products summed in
/// fp32 in cuBLAS's order; block-scaled weights take launch_block_linear's wgmma kernel from the
/// same row count (wgmma_kernel::kMinRows). So the sums are not the exact block sums of the
/// small-batch kernels: an output may differ from the CPU backend's in its last bf16 bit (the
/// reference's own GEMMs sum in the tensor cores' order; a decode step's fp8 linears do too, on
/// the wgmma kernel's decode tiles).
inline constexpr int64_t kTensorCoreRows = linear_config::wgmma_kernel::kMinRows;  // more than a decode step of 64

enum class LinearPath {
  kNothing,      // no rows
  kTensorCores,  // cuBLAS (dense weights, kTensorCoreRows and more, a layout it takes, no kernel forced)
  kBlockScaled,  // the block-scaled kernels (fp8 / fp4 weights; launch_block_linear picks one)
  kDense,        // bf16 weights, or fp8 read as bf16: bf16 tensor cores (double sums with kExact)
};
LinearPath linear_path(const LinearArgs& a, LinearKernel forced);

enum class GroupPath {
  kBlockScaled,    // block-scaled weights of one format and shape, equal rows: one launch
  kBlockDiagonal,  // dense weights of one shape, op g on the g-th column block of op 0's input and output: one launch
  // The same of fp8 weights read as bf16 (their codes and scales as stored), a decode step's rows
  // (up to kFewRows) and K in whole wgmma stages, no kernel forced (wo_a's groups at decode): one
  // launch of the wgmma kernel's decode tiles on the input as it is (reordered, not quantised).
  kBlockDiagonalWgmma,
  kEach,  // one linear_path each
};
GroupPath group_path(std::span<const LinearArgs> ops, LinearKernel forced = LinearKernel::kAuto);

/// The routed experts of a step of `n` tokens may run on the device's choice of experts (sorted
/// by expert on the device, or token after token: the GEMVs read the ids from device memory)
/// rather than grouped on the host (the choice read back).
bool few_routed_tokens(int64_t n, int64_t routed_tokens);
/// A step of `n` tokens (a prefill chunk) whose routed experts run grouped on the device on the
/// wgmma kernel (picked by the token count alone: no kernel forced).
bool many_routed_tokens(int64_t n, LinearKernel forced);
/// Whether these experts can run on the device's choice at all: block-scaled, every expert of one
/// format and shape in device memory, a token's 2k w1/w3 matrices within one launch's groups.
/// Decided once per table of experts (routed_experts.h).
bool experts_on_device(const RoutedExpertsArgs& a);

}  // namespace dsinfer::cuda
