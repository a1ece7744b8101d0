// The MoE router on the GPU (spec §8.1) with the CPU backend's numerics: logits in double, the
// score function in fp32, top-k of score + bias (ties to the lower expert), weights from the
// unbiased scores, renormalised in torch's CPU summation order and scaled. Framework-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/linear/params.h"

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

/// Two kernels: the logits (a block per token and expert; in larger steps per 64 tokens and 32
/// experts on the fp64 tensor cores), then the choice (a block per token).
/// cudaErrorInvalidValue unless 1 <= k <= experts <= 1024 and the workspace is given.
cudaError_t launch_router(const RouterParams& p);

/// Tokens' routed experts' outputs added into their fp32 rows in ascending expert id (the order of
/// the per-expert scatter-adds), a thread per token and dim.
struct RoutedCombineParams {
  const uint16_t* o = nullptr;       // bf16 rows of `dim`: slot j of token t is row rows[t * k + j]
  const int32_t* rows = nullptr;     // [n * k], or null: row t * k + j; a row < 0 adds nothing
  const int32_t* indices = nullptr;  // [n, k] the slots' expert ids (distinct within a token)
  float* acc = nullptr;              // [n, dim]
  int n = 1, k = 0, dim = 0;
  cudaStream_t stream = nullptr;
};
inline constexpr int64_t kMaxCombineTokens = 65535;  // a launch's tokens (the grid's y)
/// cudaErrorInvalidValue unless 1 <= k <= 16 and n <= kMaxCombineTokens.
cudaError_t launch_routed_combine(const RoutedCombineParams& p);

/// A step's routed slots (token t's choice j is slot t * k + j) sorted by expert, on the device,
/// in ascending expert and then ascending slot, so that each used expert's slots are consecutive
/// rows, listed in `groups` in ascending expert id (count 0 after the last). An id outside
/// [0, experts) takes no row (its slot's row is -1).
struct GroupRoutesParams {
  const int32_t* indices = nullptr;  // [n, k]
  const float* weights = nullptr;    // [n, k]
  int32_t* token = nullptr;          // [n * k] out: the token of sorted position i
  float* weight = nullptr;           // [n * k] out: its routing weight
  int32_t* row = nullptr;            // [n * k] out: the sorted position of slot s, or -1
  ExpertGroup* groups = nullptr;     // [max_groups] out
  int n = 0, k = 0, experts = 0, max_groups = 0;
  cudaStream_t stream = nullptr;
};
/// One block, in time linear in n * k. cudaErrorInvalidValue unless 1 <= k <= 16 and 1 <= experts
/// <= 1024 (moe_config::kMaxGroupExperts).
cudaError_t launch_group_routes(const GroupRoutesParams& p);

}  // namespace dsinfer::cuda
