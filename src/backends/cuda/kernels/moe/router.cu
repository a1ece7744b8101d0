// sm90_router: one block per token; warps take experts, lanes the dim; one thread picks the top-k.
#include <cmath>

#include "backends/cuda/kernels/moe/router.h"

namespace dsinfer::cuda {
namespace {

constexpr int kThreads = 256, kWarp = 32, kMaxExperts = 1024, kMaxK = 16;

__global__ void __launch_bounds__(kThreads) sm90_router(RouterParams p) {
  __shared__ float s[kMaxExperts];
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const uint16_t* x = p.x + t * p.x_stride;
  for (int e = warp; e < p.experts; e += kThreads / kWarp) {
    double dot = 0;
    for (int j = lane; j < p.dim; j += kWarp) {
      const float wv =
          p.weight_f32 ? static_cast<const float*>(p.weight)[e * p.w_stride + j]
                       : __uint_as_float(
                             static_cast<uint32_t>(static_cast<const uint16_t*>(p.weight)[e * p.w_stride + j]) << 16);
      dot += static_cast<double>(__uint_as_float(static_cast<uint32_t>(x[j]) << 16)) * wv;
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xFFFFFFFFu, dot, o);
    if (lane == 0) s[e] = static_cast<float>(dot) / p.gate_temp;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  // The score function, the top-k and the weights: small, sequential, in the CPU's order.
  if (p.score == RouterScoreKind::kSqrtSoftplus) {
    for (int e = 0; e < p.experts; ++e) s[e] = sqrtf(s[e] > 20.0f ? s[e] : log1pf(expf(s[e])));
  } else if (p.score == RouterScoreKind::kSigmoid) {
    for (int e = 0; e < p.experts; ++e) s[e] = 1.0f / (1.0f + expf(-s[e]));
  } else {
    float mx = s[0];
    for (int e = 1; e < p.experts; ++e) mx = fmaxf(mx, s[e]);
    float sum = 0;
    for (int e = 0; e < p.experts; ++e) s[e] = expf(s[e] - mx), sum += s[e];
    for (int e = 0; e < p.experts; ++e) s[e] = s[e] / sum;
  }
  const float* bias = p.is_image && p.is_image[t] && p.bias_vl ? p.bias_vl : p.bias;
  int32_t* idx = p.indices + t * p.k;
  float* w = p.weights + t * p.k;
  // The choice runs on shared memory and registers: reading the chosen ids back from global
  // memory inside the selection loop cost ~1,000 dependent L2 round trips (~350 us a call).
  __shared__ float key[kMaxExperts];
  __shared__ bool taken[kMaxExperts];
  int chosen[kMaxK];
  for (int e = 0; e < p.experts; ++e) key[e] = bias ? s[e] + bias[e] : s[e], taken[e] = false;
  if (p.given_indices) {
    for (int j = 0; j < p.k; ++j) chosen[j] = idx[j];
  } else {
    for (int j = 0; j < p.k; ++j) {  // the j-th largest key, ties to the lower expert
      int best = -1;
      float best_key = 0;
      for (int e = 0; e < p.experts; ++e)
        if (!taken[e] && (best < 0 || key[e] > best_key)) best = e, best_key = key[e];
      chosen[j] = best, taken[best] = true;
      idx[j] = best;
    }
  }
  float wl[kMaxK];
  for (int j = 0; j < p.k; ++j) wl[j] = s[chosen[j]];  // unbiased scores
  if (p.norm_topk_prob && p.k > 1) {
    float sum = 0;
    if (p.k == 6)  // torch's CPU order for 6 terms (as the CPU backend)
      sum = ((((wl[0] + wl[4]) + wl[5]) + wl[1]) + wl[2]) + wl[3];
    else
      for (int j = 0; j < p.k; ++j) sum = sum + wl[j];
    for (int j = 0; j < p.k; ++j) wl[j] = wl[j] / (sum + 1e-20f);
  }
  for (int j = 0; j < p.k; ++j) w[j] = wl[j] * p.route_scale;
}

}  // namespace

cudaError_t launch_router(const RouterParams& p) {
  if (p.n < 0 || p.dim <= 0 || p.k < 1 || p.k > kMaxK || p.k > p.experts || p.experts > kMaxExperts)
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  sm90_router<<<static_cast<unsigned>(p.n), kThreads, 0, p.stream>>>(p);
  return cudaGetLastError();
}

}  // namespace dsinfer::cuda
