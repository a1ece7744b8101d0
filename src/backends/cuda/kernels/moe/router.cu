// sm90_bf16_router_logits + sm90_f32_router_select: the gate's dot products spread over the GPU (a block per
// token and expert: at batch 1 one block per token left the gate's weights to one SM, 180 us a
// call), then per token the score function, the top-k and the weights. sm90_f32_routed_combine: the
// routed experts' outputs of a token added up in expert order; sm90_i32_group_routes: a step's
// routed slots sorted by expert (the grouped experts' rows).
#include <cmath>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/dmma_dots.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/kernels/moe/config.h"
#include "backends/cuda/kernels/moe/router.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace moe_config;

constexpr unsigned kFull = 0xFFFFFFFFu;

// logits[t, e] = fp32(x[t] . W[e]) / gate_temp, the dot product in double (exact products).
__global__ void __launch_bounds__(kThreads) sm90_bf16_router_logits(RouterParams p) {
  after_prior_grids();
  __shared__ double part[kWarps];
  const int64_t t = blockIdx.x;  // tokens on grid.x: a prefill's may pass grid.y's 65,535
  const int e = blockIdx.y;
  const uint16_t* x = p.x + t * p.x_stride;
  double dot = 0;
  for (int j = threadIdx.x; j < p.dim; j += kThreads) {
    const float wv = p.weight_f32 ? static_cast<const float*>(p.weight)[e * p.w_stride + j]
                                  : bf16_to_float(static_cast<const uint16_t*>(p.weight)[e * p.w_stride + j]);
    dot += static_cast<double>(bf16_to_float(x[j])) * wv;
  }
  dot = warp_sum(dot);  // then the warps' in order, on thread 0 (the only one that needs the total)
  if (threadIdx.x % kWarp == 0) part[threadIdx.x / kWarp] = dot;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += part[w];
    p.logits[t * p.experts + e] = static_cast<float>(sum) / p.gate_temp;
  }
}

// The same logits for a tile of tokens and kDotOutputs experts a block on the fp64 tensor cores
// (common/dmma_dots.cuh): x read once for all those experts, each weight once for all the tokens.
// Prefill chunks take it; the products are exact and summed in double either way (in another
// order: a logit can differ from the other kernel's in its last fp32 bit in rare cases).
constexpr int kRouterMTiles = 1;  // m8 tiles of tokens a warp: 64-token tiles, more blocks
constexpr int kRouterTileTokens = dot_tile_tokens<kRouterMTiles>();

template <class W>
__global__ void __launch_bounds__(kDotThreads) sm90_bf16_router_logits_tiled(RouterParams p) {
  after_prior_grids();
  extern __shared__ __align__(16) uint8_t smem[];
  const int first = static_cast<int>(blockIdx.y) * kDotOutputs;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRouterTileTokens;
  const int tokens = p.n - t0 < kRouterTileTokens ? static_cast<int>(p.n - t0) : kRouterTileTokens;
  double acc[kRouterMTiles][4][2] = {}, unused[kRouterMTiles] = {};
  dmma_dots<kRouterMTiles>(p.x + t0 * p.x_stride, p.x_stride, tokens,
                           static_cast<const W*>(p.weight) + first * p.w_stride, p.w_stride,
                           p.experts - first < kDotOutputs ? p.experts - first : kDotOutputs, 0, p.dim,
                           /*squares=*/false, smem, acc, unused);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int m = 0; m < kRouterMTiles; ++m) {
    const int token = warp * 8 * kRouterMTiles + m * 8 + g;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int expert = first + n * 8 + 2 * t + e;
        if (token < tokens && expert < p.experts)
          p.logits[(t0 + token) * p.experts + expert] = static_cast<float>(acc[m][n][e]) / p.gate_temp;
      }
  }
}

template <class W>
cudaError_t launch_router_logits_tiled(const RouterParams& p) {
  constexpr int smem = dmma_dots_smem_bytes<kRouterMTiles, W>();
  static const cudaError_t opt_in =
      cudaFuncSetAttribute(sm90_bf16_router_logits_tiled<W>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (opt_in != cudaSuccess) return opt_in;
  const dim3 tiles(static_cast<unsigned>((p.n + kRouterTileTokens - 1) / kRouterTileTokens),
                   static_cast<unsigned>((p.experts + kDotOutputs - 1) / kDotOutputs));
  return launch_kernel(sm90_bf16_router_logits_tiled<W>, tiles, kDotThreads, smem, p.stream, p);
}

// Better candidate for the top-k: the larger key, ties to the lower expert (the CPU's order).
__device__ inline bool better(float key_a, int a, float key_b, int b) {
  return b < 0 || (a >= 0 && (key_a > key_b || (key_a == key_b && a < b)));
}

// Block per token: the score function per expert (in parallel; softmax's max and sum in expert
// order on one thread), then k rounds of a block-wide arg-max over the untaken keys.
__global__ void __launch_bounds__(kThreads) sm90_f32_router_select(RouterParams p) {
  after_prior_grids();
  __shared__ float s[kMaxExperts], key[kMaxExperts];
  __shared__ bool taken[kMaxExperts];
  __shared__ float warp_key[kWarps];
  __shared__ int warp_best[kWarps], chosen[kMaxK];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const float* logits = p.logits + t * p.experts;
  for (int e = threadIdx.x; e < p.experts; e += kThreads) {
    const float l = logits[e];
    s[e] = p.score == RouterScoreKind::kSqrtSoftplus ? sqrtf(l > 20.0f ? l : log1pf(expf(l)))
           : p.score == RouterScoreKind::kSigmoid    ? 1.0f / (1.0f + expf(-l))
                                                     : l;
  }
  __syncthreads();
  if (p.score == RouterScoreKind::kSoftmax && threadIdx.x == 0) {
    float mx = s[0];
    for (int e = 1; e < p.experts; ++e) mx = fmaxf(mx, s[e]);
    float sum = 0;
    for (int e = 0; e < p.experts; ++e) s[e] = expf(s[e] - mx), sum += s[e];
    for (int e = 0; e < p.experts; ++e) s[e] = s[e] / sum;
  }
  __syncthreads();
  const float* bias = p.is_image && p.is_image[t] && p.bias_vl ? p.bias_vl : p.bias;
  for (int e = threadIdx.x; e < p.experts; e += kThreads) key[e] = bias ? s[e] + bias[e] : s[e], taken[e] = false;
  int32_t* idx = p.indices + t * p.k;
  if (p.given_indices) {
    if (threadIdx.x < p.k) chosen[threadIdx.x] = idx[threadIdx.x];
  } else {
    for (int j = 0; j < p.k; ++j) {  // the j-th largest key
      __syncthreads();
      int best = -1;
      float best_key = 0;
      for (int e = threadIdx.x; e < p.experts; e += kThreads)
        if (!taken[e] && better(key[e], e, best_key, best)) best = e, best_key = key[e];
      for (int o = 16; o > 0; o >>= 1) {
        const int ob = __shfl_xor_sync(kFull, best, o);
        const float ok = __shfl_xor_sync(kFull, best_key, o);
        if (better(ok, ob, best_key, best)) best = ob, best_key = ok;
      }
      if (lane == 0) warp_best[warp] = best, warp_key[warp] = best_key;
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int w = 0; w < kWarps; ++w)
          if (better(warp_key[w], warp_best[w], best_key, best)) best = warp_best[w], best_key = warp_key[w];
        chosen[j] = best, taken[best] = true, idx[j] = best;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float* w = p.weights + t * p.k;
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

// A thread adds its kVec consecutive columns of a token (kVec 8: 16-byte loads of o, acc and dim
// 8-aligned), each column's terms in ascending expert id.
template <int kVec>
__global__ void sm90_f32_routed_combine(RoutedCombineParams p) {
  after_prior_grids();
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * kVec;
  const int64_t tok = blockIdx.y;
  if (c >= p.dim) return;
  const int32_t* ids = p.indices + tok * p.k;
  int order[kMaxK];  // the slots by ascending expert id (insertion sort: k is small)
  for (int j = 0; j < p.k; ++j) {
    const int32_t e = ids[j];
    int at = j;
    for (; at > 0 && ids[order[at - 1]] > e; --at) order[at] = order[at - 1];
    order[at] = j;
  }
  float* acc_at = p.acc + tok * p.dim + c;
  float acc[kVec];
  if constexpr (kVec == 8) {
    const float4 lo = reinterpret_cast<const float4*>(acc_at)[0], hi = reinterpret_cast<const float4*>(acc_at)[1];
    acc[0] = lo.x, acc[1] = lo.y, acc[2] = lo.z, acc[3] = lo.w, acc[4] = hi.x, acc[5] = hi.y, acc[6] = hi.z;
    acc[7] = hi.w;
  } else {
    acc[0] = *acc_at;
  }
  for (int j = 0; j < p.k; ++j) {
    const int64_t slot = tok * p.k + order[j], row = p.rows ? p.rows[slot] : slot;
    if (row < 0) continue;
    const uint16_t* o = p.o + row * p.dim + c;
    if constexpr (kVec == 8) {
      const uint4 v = *reinterpret_cast<const uint4*>(o);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[2 * q] += bf16x2_lo_to_float(w[q]), acc[2 * q + 1] += bf16x2_hi_to_float(w[q]);
    } else {
      acc[0] += bf16_to_float(*o);
    }
  }
  if constexpr (kVec == 8) {
    reinterpret_cast<float4*>(acc_at)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    reinterpret_cast<float4*>(acc_at)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  } else {
    *acc_at = acc[0];
  }
}

// The exclusive prefix sum of v over the block's threads in order (kGroupThreads of them), through
// `sums` (a value a warp); every thread calls it.
__device__ int exclusive_scan(int v, int* sums) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  int upto = v;
#pragma unroll
  for (int d = 1; d < kWarp; d *= 2) {
    const int u = __shfl_up_sync(kFull, upto, d);
    if (lane >= d) upto += u;
  }
  if (lane == kWarp - 1) sums[warp] = upto;
  __syncthreads();
  if (warp == 0) {
    const int mine = lane < kGroupThreads / kWarp ? sums[lane] : 0;
    int before = mine;
#pragma unroll
    for (int d = 1; d < kWarp; d *= 2) {
      const int u = __shfl_up_sync(kFull, before, d);
      if (lane >= d) before += u;
    }
    if (lane < kGroupThreads / kWarp) sums[lane] = before - mine;
  }
  __syncthreads();
  return sums[warp] + upto - v;
}

// One block. The slots are cut into `segments` runs in slot order (a warp each, as many as the
// shared counts hold for the experts); a segment's count of each expert, the counts' scan in expert
// order (each expert's rows, and in them each segment's), then each segment's warp walks its slots
// in order, placing a slot after the earlier slots of its expert (their rank among the warp's lanes
// by match_any): a deterministic order, whatever the threads' timing or the segments' number, in
// time linear in the slots (a prefill chunk's tens of thousands).
__global__ void __launch_bounds__(kGroupThreads) sm90_i32_group_routes(GroupRoutesParams p) {
  after_prior_grids();
  __shared__ int32_t counts[kGroupCounts];  // [segment][expert]: counts, then each segment's next row of expert e
  const int segments = min(kMaxGroupSegments, kGroupCounts / p.experts);
  const auto at = [&](int seg, int e) -> int32_t& { return counts[seg * p.experts + e]; };
  const int m = p.n * p.k, per_segment = (m + segments - 1) / segments;
  const auto expert_of = [&](int s) {
    const int32_t e = p.indices[s];
    return e >= 0 && e < p.experts ? e : -1;
  };
  for (int i = threadIdx.x; i < segments * p.experts; i += blockDim.x) counts[i] = 0;
  __syncthreads();
  for (int s = threadIdx.x; s < m; s += blockDim.x)
    if (const int e = expert_of(s); e >= 0) atomicAdd(&at(s / per_segment, e), 1);
  __syncthreads();
  {  // thread e: expert e's rows (a scan over the experts), its group's entry, each segment's first row
    __shared__ int sums[2][kWarp], used;
    const int e = static_cast<int>(threadIdx.x);
    int total = 0;
    if (e < p.experts)
      for (int seg = 0; seg < segments; ++seg) total += at(seg, e);
    const int first = exclusive_scan(total, sums[0]), g = exclusive_scan(total > 0 ? 1 : 0, sums[1]);
    if (e < p.experts) {
      for (int seg = 0, row = first; seg < segments; ++seg) {
        const int count = at(seg, e);
        at(seg, e) = row;
        row += count;
      }
      if (total > 0 && g < p.max_groups) p.groups[g] = {e, first, total};
    }
    if (e == p.experts - 1) used = g + (total > 0 ? 1 : 0);
    __syncthreads();
    for (int i = used + e; i < p.max_groups; i += blockDim.x) p.groups[i] = {0, 0, 0};
  }
  __syncthreads();
  const int seg = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  if (seg >= segments) return;
  const int end = min(m, (seg + 1) * per_segment);
  // Each pass's expert and weight loaded a pass ahead (the walk is a chain of passes).
  const auto load = [&](int s, int& e, float& w) {
    e = s < end ? expert_of(s) : -1;
    w = e >= 0 ? p.weights[s] : 0.0f;
  };
  int e_next;
  float w_next;
  load(seg * per_segment + lane, e_next, w_next);
  for (int s0 = seg * per_segment; s0 < end; s0 += kWarp) {
    const int s = s0 + lane, e = e_next;
    const float w = w_next;
    load(s + kWarp, e_next, w_next);
    const unsigned peers = __match_any_sync(kFull, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (e >= 0) {
      const int row = at(seg, e) + rank;
      p.row[s] = row;
      p.token[row] = s / p.k;
      p.weight[row] = w;
    } else if (s < end) {
      p.row[s] = -1;
    }
    __syncwarp();
    if (e >= 0 && rank == 0) at(seg, e) += __popc(peers);
    __syncwarp();
  }
}

}  // namespace

cudaError_t launch_routed_combine(const RoutedCombineParams& p) {
  if (p.k < 1 || p.k > kMaxK || p.dim < 0 || p.n < 0 || p.n > kMaxCombineTokens) return cudaErrorInvalidValue;
  if (p.dim == 0 || p.n == 0) return cudaSuccess;
  const auto aligned = [](const void* v) { return reinterpret_cast<uintptr_t>(v) % 16 == 0; };
  const int vec = p.dim % 8 == 0 && aligned(p.o) && aligned(p.acc) ? 8 : 1;
  const dim3 grid(static_cast<unsigned>((p.dim / vec + kThreads - 1) / kThreads), static_cast<unsigned>(p.n));
  return vec == 8 ? launch_kernel(sm90_f32_routed_combine<8>, grid, kThreads, 0, p.stream, p)
                  : launch_kernel(sm90_f32_routed_combine<1>, grid, kThreads, 0, p.stream, p);
}

cudaError_t launch_group_routes(const GroupRoutesParams& p) {
  if (p.k < 1 || p.k > kMaxK || p.n < 0 || static_cast<int64_t>(p.n) * p.k > INT32_MAX || p.experts < 1 ||
      p.experts > kMaxGroupExperts || p.max_groups < 0)
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  return launch_kernel(sm90_i32_group_routes, 1, kGroupThreads, 0, p.stream, p);  // every thread: the scans
}

cudaError_t launch_router(const RouterParams& p) {
  if (p.n < 0 || p.dim <= 0 || p.k < 1 || p.k > kMaxK || p.k > p.experts || p.experts > kMaxExperts || !p.logits)
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const bool tiled = p.n >= kTiledRouterTokens && p.dim % 8 == 0 && dmma_dots_aligned(p.x, p.x_stride, 2) &&
                     dmma_dots_aligned(p.weight, p.w_stride, p.weight_f32 ? 4 : 2);
  if (tiled) {
    if (const cudaError_t e =
            p.weight_f32 ? launch_router_logits_tiled<float>(p) : launch_router_logits_tiled<uint16_t>(p);
        e != cudaSuccess)
      return e;
  } else {
    if (const cudaError_t e =
            launch_kernel(sm90_bf16_router_logits, dim3(static_cast<unsigned>(p.n), static_cast<unsigned>(p.experts)),
                          kThreads, 0, p.stream, p);
        e != cudaSuccess)
      return e;
  }
  return launch_kernel(sm90_f32_router_select, static_cast<unsigned>(p.n), kThreads, 0, p.stream, p);
}

}  // namespace dsinfer::cuda
