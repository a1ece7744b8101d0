// sm90_dense_linear: y = x . W^T with double accumulation (the CPU backend's numerics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "backends/cuda/kernels/linear/dense.h"
#include "backends/cuda/kernels/linear/device_helpers.cuh"

namespace dsinfer::cuda {
namespace {

using namespace linear_detail;

constexpr int kWarp = 32, kWarpsPerBlock = 8, kRowsPerPass = 4;

__global__ void to_f64_kernel(DenseLinearParams p) {
  const int64_t total = static_cast<int64_t>(p.n) * p.k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.k, j = i % p.k;
    const float v =
        p.x_f32 ? static_cast<const float*>(p.x)[r * p.x_stride + j]
                : __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p.x)[r * p.x_stride + j]) << 16);
    p.x_f64[i] = v;
  }
}

// Weight element j of row `row` as a float (exact: bf16, or e4m3 times a power of two).
__device__ inline float weight_at(const DenseLinearParams& p, int row, int j) {
  if (!p.fp8_weights)
    return __uint_as_float(
        static_cast<uint32_t>(static_cast<const uint16_t*>(p.w)[static_cast<int64_t>(row) * p.w_stride + j]) << 16);
  const uint8_t code = static_cast<const uint8_t*>(p.w)[static_cast<int64_t>(row) * p.w_stride + j];
  return e4m3_value(code) * e8m0_to_float(p.w_scales[static_cast<int64_t>(row / 32) * p.s_stride + j / 32]);
}

template <int NB>
__device__ void dense_row(const DenseLinearParams& p, int row, int i0, int lane) {
  double acc[NB] = {};
  for (int j = lane; j < p.k; j += kWarp) {
    const double w = weight_at(p, row, j);
#pragma unroll
    for (int i = 0; i < NB; ++i) acc[i] = fma(w, p.x_f64[static_cast<int64_t>(i0 + i) * p.k + j], acc[i]);
  }
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    double s = acc[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) {
      const float f = static_cast<float>(s);
      const int64_t at = static_cast<int64_t>(i0 + i) * p.y_stride + row;
      if (p.y_f32)
        static_cast<float*>(p.y)[at] = f;
      else
        static_cast<uint16_t*>(p.y)[at] = __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
  }
}

__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) sm90_dense_linear(DenseLinearParams p) {
  const int lane = threadIdx.x % kWarp, warps = gridDim.x * kWarpsPerBlock;
  for (int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp; row < p.out; row += warps) {
    int i0 = 0;
    for (; i0 + kRowsPerPass <= p.n; i0 += kRowsPerPass) dense_row<kRowsPerPass>(p, row, i0, lane);
    for (; i0 < p.n; ++i0) dense_row<1>(p, row, i0, lane);
  }
}

}  // namespace

cudaError_t launch_dense_linear(const DenseLinearParams& p) {
  if (p.n < 0 || p.k <= 0 || p.out < 0 || !p.x_f64 || (p.fp8_weights && (p.k % 32 != 0 || !p.w_scales)))
    return cudaErrorInvalidValue;
  if (p.n == 0 || p.out == 0) return cudaSuccess;
  const int64_t total = static_cast<int64_t>(p.n) * p.k;
  to_f64_kernel<<<static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535)), 256, 0, p.stream>>>(p);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int blocks = std::min((p.out + kWarpsPerBlock - 1) / kWarpsPerBlock, sm_count() * 8);
  sm90_dense_linear<<<blocks, kWarpsPerBlock * kWarp, 0, p.stream>>>(p);
  return cudaGetLastError();
}

}  // namespace dsinfer::cuda
