// launch_dequant_weight: a thread per output element pair, with the block kernels' decoders.
#include <cuda_bf16.h>

#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/kernels/linear/dequant.h"

namespace dsinfer::cuda {
namespace {

using namespace common;

__global__ void sm90_bf16_dequant_weight(DequantWeightParams p) {
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // elements 2 * pair, + 1
  const int half = p.k / 2;
  if (pair >= static_cast<int64_t>(p.rows) * half) return;
  const int64_t r = pair / half;
  const int j = static_cast<int>(pair % half) * 2;
  const float s = e8m0_to_float(p.scales[(p.fp4 ? r : r / 32) * p.s_stride + j / 32]);
  float v0, v1;
  if (p.fp4) {
    const uint8_t b = p.codes[r * p.w_stride + j / 2];
    v0 = e2m1_to_float(b & 0xF), v1 = e2m1_to_float(b >> 4);  // low nibble: the even element
  } else {
    v0 = e4m3_to_float(p.codes[r * p.w_stride + j]), v1 = e4m3_to_float(p.codes[r * p.w_stride + j + 1]);
  }
  __nv_bfloat162 o;
  o.x = __float2bfloat16_rn(v0 * s), o.y = __float2bfloat16_rn(v1 * s);
  reinterpret_cast<__nv_bfloat162*>(p.out)[pair] = o;
}

}  // namespace

cudaError_t launch_dequant_weight(const DequantWeightParams& p) {
  if (p.rows < 0 || p.k % 32 != 0) return cudaErrorInvalidValue;
  const int64_t pairs = static_cast<int64_t>(p.rows) * (p.k / 2);
  if (pairs == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  sm90_bf16_dequant_weight<<<static_cast<unsigned>((pairs + kThreads - 1) / kThreads), kThreads, 0, p.stream>>>(p);
  return cudaGetLastError();
}

}  // namespace dsinfer::cuda
