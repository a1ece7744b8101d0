// The MoE router on the GPU (spec §8.1) with the CPU backend's numerics: logits in double, the
// score function in fp32, top-k of score + bias (ties to the lower expert), weights from the
// unbiased scores, renormalised in torch's CPU summation order and scaled. Framework-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

enum class RouterScoreKind : int { kSoftmax, kSigmoid, kSqrtSoftplus };

struct RouterParams {
  const uint16_t* x = nullptr;  // [n, dim] bf16, row stride x_stride
  int64_t x_stride = 0;
  const void* weight = nullptr;  // [experts, dim] bf16 or f32, row stride w_stride
  bool weight_f32 = false;
  int64_t w_stride = 0;
  const float* bias = nullptr;        // [experts] or null
  const float* bias_vl = nullptr;     // [experts] for image tokens, or null
  const uint8_t* is_image = nullptr;  // [n] or null
  RouterScoreKind score = RouterScoreKind::kSqrtSoftplus;
  float gate_temp = 1, route_scale = 1;
  bool norm_topk_prob = true;
  bool given_indices = false;  // indices are an input (replayed selections)
  int32_t* indices = nullptr;  // [n, k]
  float* weights = nullptr;    // [n, k]
  float* logits = nullptr;     // workspace: [n, experts]
  int n = 0, dim = 0, experts = 0, k = 0;
  cudaStream_t stream = nullptr;
};

/// Two kernels: the logits (a block per token and expert), then the choice (a block per token).
/// cudaErrorInvalidValue unless 1 <= k <= experts <= 1024 and the workspace is given.
cudaError_t launch_router(const RouterParams& p);

/// One token's routed experts' outputs added into its fp32 row in ascending expert id (the order
/// of the per-expert scatter-adds), a thread per dim.
struct RoutedCombineParams {
  const uint16_t* o = nullptr;       // [k, dim] bf16: slot j's expert output
  const int32_t* indices = nullptr;  // [k] the slots' expert ids (distinct)
  float* acc = nullptr;              // [dim]
  int k = 0, dim = 0;
  cudaStream_t stream = nullptr;
};
/// cudaErrorInvalidValue unless 1 <= k <= 16.
cudaError_t launch_routed_combine(const RoutedCombineParams& p);

}  // namespace dsinfer::cuda
