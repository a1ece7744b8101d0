// sm90_sparse_attn, sm90_indexer_scores: ports of the CPU backend's loops (the same sums in the
// same order where the order shows in the bits). Every head re-reads the shared KV rows (from L2);
// a version that reads each row once for all heads of a token is still to come.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "backends/cuda/kernels/attention/attention.h"

namespace dsinfer::cuda {
namespace {

constexpr int kWarp = 32, kWarpsPerBlock = 4, kBlock = 64;
constexpr int kAttnWarps = 8, kAttnThreads = kAttnWarps * kWarp, kMaxPerThread = 4;  // d <= 1024
constexpr unsigned kFull = 0xFFFFFFFFu;

__device__ inline float bf16f(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ inline float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}
__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Block per (token, head), kAttnWarps warps. Per 64-row block of the selection: each warp takes
// every kAttnWarps-th row's q.k dot (lane-strided double sums and a warp tree, as the CPU-checked
// order), thread 0 the running max and the probability sum in row order, then each thread owns
// output dims (c = thread + kAttnThreads * i) and adds the rows into them in row order. Every
// output element sees the same operations in the same order as the one-warp version before it.
__global__ void __launch_bounds__(kAttnThreads) sm90_sparse_attn(SparseAttnParams p) {
  __shared__ float s[kBlock], prob[kBlock];
  __shared__ const uint16_t* rows[kBlock];
  __shared__ float shared_m, shared_alpha, shared_l;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t t = blockIdx.x / p.heads;
  const int h = static_cast<int>(blockIdx.x % p.heads);
  const uint16_t* q = p.q + t * p.q_stride + static_cast<int64_t>(h) * p.d;
  const int32_t* idx = p.idx + t * p.idx_stride;
  const int per_thread = (p.d + kAttnThreads - 1) / kAttnThreads;
  float acc[kMaxPerThread] = {};
  if (threadIdx.x == 0) shared_m = -1e30f, shared_l = 0.0f;
  __syncthreads();
  for (int b0 = 0; b0 < p.k; b0 += kBlock) {
    const int len = min(kBlock, p.k - b0);
    for (int j = warp; j < len; j += kAttnWarps) {
      const int32_t id = idx[b0 + j];
      const uint16_t* row = id < 0         ? nullptr
                            : id < p.n_win ? p.window + static_cast<int64_t>(id) * p.d
                                           : p.compressed + static_cast<int64_t>(id - p.n_win) * p.d;
      float sj = -INFINITY;
      if (row) {
        double dot = 0;
        for (int c = lane; c < p.d; c += kWarp) dot += static_cast<double>(bf16f(q[c])) * bf16f(row[c]);
        sj = static_cast<float>(warp_sum(dot)) * p.scale;
      }
      if (lane == 0) s[j] = sj, rows[j] = row;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const float m = shared_m;
      float bmax = m;
      for (int j = 0; j < len; ++j)
        if (rows[j]) bmax = fmaxf(bmax, s[j]);
      double psum = 0;  // in row order, as the CPU
      for (int j = 0; j < len; ++j) {
        prob[j] = rows[j] ? expf(s[j] - bmax) : 0.0f;
        if (rows[j]) psum += prob[j];
      }
      const float alpha = expf(m - bmax);
      shared_alpha = alpha, shared_l = shared_l * alpha + static_cast<float>(psum), shared_m = bmax;
    }
    __syncthreads();
    const float alpha = shared_alpha;
    for (int i = 0; i < per_thread; ++i) {
      const int c = threadIdx.x + i * kAttnThreads;
      if (c >= p.d) break;
      double part = 0;
      for (int j = 0; j < len; ++j)
        if (rows[j]) part += static_cast<double>(round_bf16(prob[j])) * bf16f(rows[j][c]);
      acc[i] = acc[i] * alpha + static_cast<float>(part);
    }
    __syncthreads();
  }
  const float l = shared_l + expf(p.sink[h] - shared_m);
  uint16_t* out = p.out + t * p.out_stride + static_cast<int64_t>(h) * p.d;
  for (int i = 0; i < per_thread; ++i) {
    const int c = threadIdx.x + i * kAttnThreads;
    if (c < p.d) out[c] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[i] / l));
  }
}

__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) sm90_indexer_scores(IndexerScoresParams p) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (w >= static_cast<int64_t>(p.n) * p.T) return;
  const int64_t t = w / p.T, tau = w % p.T;
  float* out = p.out + t * p.out_stride + tau;
  if (tau >= p.visible[t]) {
    if (lane == 0) *out = -INFINITY;
    return;
  }
  const uint16_t* key = p.keys + (p.key_rows ? p.key_rows[tau] : tau) * static_cast<int64_t>(p.d);
  double term = 0;  // lane = head
  if (lane < p.heads) {
    const uint16_t* q = p.q + t * p.q_stride + static_cast<int64_t>(lane) * p.d;
    double dot = 0;
    for (int c = 0; c < p.d; ++c) dot += static_cast<double>(bf16f(q[c])) * bf16f(key[c]);
    const float dv = fmaxf(round_bf16(static_cast<float>(dot)), 0.0f);  // bf16, then relu
    term = round_bf16(dv * bf16f(p.weights[t * p.heads + lane]));
  }
  const double exact = warp_sum(term);  // the bf16 terms sum exactly in double: order-free
  if (lane == 0) *out = round_bf16(static_cast<float>(exact));
}

}  // namespace

cudaError_t launch_sparse_attn(const SparseAttnParams& p) {
  if (p.n < 0 || p.heads <= 0 || p.d <= 0 || p.d > kAttnThreads * kMaxPerThread || p.k < 0)
    return cudaErrorInvalidValue;
  const int64_t blocks = static_cast<int64_t>(p.n) * p.heads;
  if (blocks == 0) return cudaSuccess;
  sm90_sparse_attn<<<static_cast<unsigned>(blocks), kAttnThreads, 0, p.stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_indexer_scores(const IndexerScoresParams& p) {
  if (p.n < 0 || p.heads <= 0 || p.heads > kWarp || p.d <= 0 || p.T < 0) return cudaErrorInvalidValue;
  const int64_t warps = static_cast<int64_t>(p.n) * p.T;
  if (warps == 0) return cudaSuccess;
  sm90_indexer_scores<<<static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock), kWarpsPerBlock * kWarp, 0,
                        p.stream>>>(p);
  return cudaGetLastError();
}

}  // namespace dsinfer::cuda
