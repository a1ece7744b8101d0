// The CUDA backend's decision table for linears and the routed experts (linear_dispatch.h).
#include "backends/cuda/linear_dispatch.h"

#include <algorithm>

#include "backends/cuda/kernels/linear/dense.h"

namespace dsinfer::cuda {
namespace {

// cuBLAS takes bf16 inputs, bf16 or f32 outputs, K in whole blocks, and dense weights it can read
// as bf16 (fp8 ones dequantised first); a forced kernel keeps every batch off it.
bool tensor_cores_take(const LinearArgs& a, LinearKernel forced) {
  const LinearWeight& w = *a.w;
  return forced == LinearKernel::kAuto && a.x.dtype == DType::kBF16 && w.in % 32 == 0 &&
         (a.out.dtype == DType::kBF16 || a.out.dtype == DType::kF32) && !is_block_scaled(w.format) &&
         (w.format == LinearFormat::kFp8AsBf16 || w.weight.dtype == DType::kBF16);
}

// Block-scaled weights of one format and shape, inputs and outputs of one row count and stride:
// one launch (each distinct input quantised once).
bool one_block_scaled_launch(std::span<const LinearArgs> ops) {
  if (ops.size() < 2 || ops.size() > static_cast<size_t>(kMaxLinearGroups)) return false;
  const LinearArgs& o0 = ops[0];
  const LinearWeight& w0 = *o0.w;
  if (!is_block_scaled(w0.format) || o0.x.size(0) == 0) return false;
  for (const LinearArgs& op : ops) {
    const LinearWeight& w = *op.w;
    if (w.format != w0.format || w.in != w0.in || w.out != w0.out || w.weight.stride[0] != w0.weight.stride[0] ||
        w.scale.stride[0] != w0.scale.stride[0] || op.x.size(0) != o0.x.size(0) || op.x.size(1) != w.in ||
        op.out.size(0) != o0.x.size(0) || op.out.size(1) != w.out || op.out.stride[0] != o0.out.stride[0] ||
        op.x.stride[0] != o0.x.stride[0])
      return false;
  }
  return true;
}

// Dense weights of one shape and layout (small batches), each against the next columns of one
// input into the next columns of one output (wo_a's groups): one block-diagonal launch.
bool block_diagonal_dense(std::span<const LinearArgs> ops) {
  const LinearArgs& o0 = ops[0];
  const LinearWeight& w0 = *o0.w;
  const int64_t n = o0.x.size(0), k = w0.in, out = w0.out;
  if (is_block_scaled(w0.format) || n >= kTensorCoreRows || n == 0 ||
      ops.size() > static_cast<size_t>(DenseLinearParams::kMaxGroups))
    return false;
  const auto at = [](const TensorView& v, const TensorView& v0, int64_t elements) {
    return v.dtype == v0.dtype && v.stride[0] == v0.stride[0] &&
           v.as<const uint8_t>() == v0.as<const uint8_t>() + dtype_bytes(v0.dtype, elements);
  };
  for (size_t g = 0; g < ops.size(); ++g) {
    const LinearArgs& op = ops[g];
    const LinearWeight& w = *op.w;
    if (w.format != w0.format || w.in != k || w.out != out || op.x.size(0) != n ||
        w.weight.stride[0] != w0.weight.stride[0] || w.scale.ndim != w0.scale.ndim ||
        (w.scale.ndim && w.scale.stride[0] != w0.scale.stride[0]) || !at(op.x, o0.x, g * k) ||
        !at(op.out, o0.out, g * out))
      return false;
  }
  return true;
}

// A block-diagonal group of fp8 codes read as bf16 that the wgmma kernel's decode tiles take: up
// to kFewRows bf16 rows into bf16 outputs, at most kMaxParts groups, K in whole stages, weights the
// TMA can read (16-byte aligned rows), no kernel forced (kExact keeps the double sums).
bool block_diagonal_on_wgmma(std::span<const LinearArgs> ops, LinearKernel forced) {
  namespace wk = linear_config::wgmma_kernel;
  const LinearArgs& o0 = ops[0];
  const LinearWeight& w0 = *o0.w;
  if (forced != LinearKernel::kAuto || w0.format != LinearFormat::kFp8AsBf16 || w0.scale.ndim != 2 ||
      o0.x.size(0) > wk::kFewRows || ops.size() > static_cast<size_t>(wk::kMaxParts) || w0.in % wk::kStageK != 0 ||
      o0.x.dtype != DType::kBF16 || o0.out.dtype != DType::kBF16 || w0.weight.stride[0] % 16 != 0)
    return false;
  return std::all_of(ops.begin(), ops.end(),
                     [](const LinearArgs& op) { return reinterpret_cast<uintptr_t>(op.w->weight.data) % 16 == 0; });
}

}  // namespace

LinearPath linear_path(const LinearArgs& a, LinearKernel forced) {
  const int64_t n = a.x.size(0);
  if (n == 0) return LinearPath::kNothing;
  if (n >= kTensorCoreRows && tensor_cores_take(a, forced)) return LinearPath::kTensorCores;
  return is_block_scaled(a.w->format) ? LinearPath::kBlockScaled : LinearPath::kDense;
}

GroupPath group_path(std::span<const LinearArgs> ops, LinearKernel forced) {
  if (one_block_scaled_launch(ops)) return GroupPath::kBlockScaled;
  if (ops.size() > 1 && block_diagonal_dense(ops))
    return block_diagonal_on_wgmma(ops, forced) ? GroupPath::kBlockDiagonalWgmma : GroupPath::kBlockDiagonal;
  return GroupPath::kEach;
}

bool many_routed_tokens(int64_t n, LinearKernel forced) {
  return n >= kTensorCoreRows && forced == LinearKernel::kAuto;
}

bool few_routed_tokens(int64_t n, int64_t routed_tokens) {
  return n >= 1 && (n == 1 || n <= routed_tokens);
}

bool experts_on_device(const RoutedExpertsArgs& a) {
  const int64_t k = a.indices.size(1);
  if (a.experts.empty() || 2 * k > kMaxLinearGroups || a.x.dtype != DType::kBF16) return false;
  const LinearWeight &w1 = a.experts[0].w1, &w2 = a.experts[0].w2;
  if (!is_block_scaled(w1.format) || a.experts.size() > static_cast<size_t>(INT32_MAX / 3)) return false;
  for (const ExpertWeights& e : a.experts)
    for (const LinearWeight* w : {&e.w1, &e.w3, &e.w2}) {
      const LinearWeight& ref = w == &e.w2 ? w2 : w1;
      if (w->format != ref.format || w->in != ref.in || w->out != ref.out ||
          w->weight.stride[0] != ref.weight.stride[0] || w->scale.stride[0] != ref.scale.stride[0] ||
          w->weight.device != Device::kCuda || w->scale.device != Device::kCuda)
        return false;
    }
  return w2.format == w1.format && w2.in == w1.out;
}

}  // namespace dsinfer::cuda
