// Warp and block reductions. Each fixes its order of operations (the kernels' results depend on
// it in fp32): a warp's are the butterfly v = op(v, shfl_xor(v, o)) for o = lanes / 2, ..., 2, 1,
// which gives every lane the same bits.
#pragma once

#include <cuda_runtime.h>

namespace dsinfer::cuda::common {

inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

/// The sum over each group of `lanes` consecutive lanes (a power of two, at most 32; every lane
/// of the warp takes part), by the butterfly: v += shfl_xor(v, o) for o = lanes / 2, ..., 1.
template <class T>
__device__ inline T warp_sum(T v, int lanes = 32) {
  for (int o = lanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

/// The maximum over each group of `lanes` consecutive lanes, by the butterfly:
/// v = fmaxf(v, shfl_xor(v, o)) for o = lanes / 2, ..., 1 (fmaxf: a NaN loses to a number).
__device__ inline float warp_max(float v, int lanes = 32) {
  for (int o = lanes / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

/// The sum over a block of kThreads threads (a power of two): each warp's by warp_sum, then the
/// warps' in warp order from 0 (partial: kThreads / 32 values of shared memory). Every thread gets
/// the total; ends after a barrier, before which partial may not be reused.
template <int kThreads, class T>
__device__ inline T block_sum_of_warps(T v, T* partial) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

/// K sums over a block of kThreads threads (a power of two) as trees in shared memory, with one set
/// of barriers: scratch[k][i] += scratch[k][i + s] for s = kThreads / 2, ..., 1 (scratch: K *
/// kThreads values). Every thread gets the K totals in v, each sum's bits whatever the others are;
/// scratch may be reused on return.
template <int kThreads, int K, class T>
__device__ inline void block_sum_trees(T (&v)[K], T* scratch) {
#pragma unroll
  for (int k = 0; k < K; ++k) scratch[k * kThreads + threadIdx.x] = v[k];
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
#pragma unroll
      for (int k = 0; k < K; ++k) scratch[k * kThreads + threadIdx.x] += scratch[k * kThreads + threadIdx.x + s];
    __syncthreads();
  }
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = scratch[k * kThreads];
  __syncthreads();
}

/// The sum over a block of kThreads threads (a power of two) as a tree in shared memory (one of
/// block_sum_trees' trees; scratch: kThreads values). Every thread gets the total.
template <int kThreads, class T>
__device__ inline T block_sum_tree(T v, T* scratch) {
  T one[1] = {v};
  block_sum_trees<kThreads>(one, scratch);
  return one[0];
}

}  // namespace dsinfer::cuda::common
