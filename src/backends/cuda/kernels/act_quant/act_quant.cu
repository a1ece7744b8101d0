// sm90_fp8_act_quant: fp8 e4m3 quantisation of bf16 activations in groups of 32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "backends/cuda/kernels/act_quant/act_quant.h"

namespace dsinfer::cuda {
namespace {

constexpr int kGroup = 32;
constexpr int kWarpsPerBlock = 8;

__global__ void sm90_fp8_act_quant(ActQuantParams p) {
  const int lane = threadIdx.x % kGroup;
  const int64_t groups = p.n / kGroup;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kGroup;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t g = first; g < groups; g += stride) {
    const int64_t i = g * kGroup + lane;
    const float x = __bfloat162float(__ushort_as_bfloat16(p.x[i]));
    float amax = fabsf(x);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    // 2^ceil(log2(max(amax, 1e-4) / 448)) from the fp32 bits: exponent, +1 if any mantissa bit.
    const unsigned t = __float_as_uint(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
    const unsigned e = ((t >> 23) & 0xFFu) + ((t & 0x7FFFFFu) ? 1u : 0u);
    const float s = __uint_as_float(e << 23);
    const float v = fminf(fmaxf(__fdiv_rn(x, s), -448.0f), 448.0f);
    const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    if (p.codes) p.codes[i] = q;
    if (p.scales && lane == 0) p.scales[g] = static_cast<uint8_t>(e);
    if (p.fake) {
      const float deq = __half2float(__half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3))) * s;  // exact in bf16
      p.fake[i] = __bfloat16_as_ushort(__float2bfloat16_rn(deq));
    }
  }
}

// e2m1 code magnitude (0..7) of |q| <= 6, ties to the even code (as f32_to_e2m1 on the CPU).
__device__ inline float e2m1_round(float a) {
  if (a < 2.0f) return rintf(a * 2.0f) * 0.5f;
  if (a < 4.0f) return rintf(a);
  return rintf(a * 0.5f) * 2.0f;
}

__global__ void sm90_fp4_fake_quant(Fp4FakeQuantParams p) {
  const int64_t total = static_cast<int64_t>(p.n) * p.d;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // The loop runs the same number of times on every lane of a warp (the shuffles need them all).
  const int lane = threadIdx.x % kGroup;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x - lane; base < total; base += step) {
    const int64_t i = base + lane;
    const bool valid = i < total;
    const int64_t row = valid ? i / p.d : 0, col = valid ? i % p.d : 0;
    uint16_t* xp = p.x + row * p.stride + col;
    const float x = valid ? __bfloat162float(__ushort_as_bfloat16(*xp)) : 0.0f;
    float amax = fabsf(x);
    for (int o = p.group / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    float s;
    if (p.e4m3_scale) {
      const float v = fminf(__fdiv_rn(fmaxf(amax, 6.0f * 0x1p-9f), 6.0f), 448.0f);
      const __nv_fp8_storage_t sb = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
      s = __half2float(__half(__nv_cvt_fp8_to_halfraw(sb, __NV_E4M3)));
    } else {
      const unsigned t = __float_as_uint(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
      s = __uint_as_float((((t >> 23) & 0xFFu) + ((t & 0x7FFFFFu) ? 1u : 0u)) << 23);
    }
    const float q = fminf(fmaxf(__fdiv_rn(x, s), -6.0f), 6.0f);
    const float value = copysignf(e2m1_round(fabsf(q)), q);
    if (valid) *xp = __bfloat16_as_ushort(__float2bfloat16_rn(value * s));
  }
}

}  // namespace

cudaError_t launch_fp4_fake_quant(const Fp4FakeQuantParams& p) {
  if ((p.group != 16 && p.group != 32) || p.d <= 0 || p.d % p.group != 0 || p.n < 0) return cudaErrorInvalidValue;
  const int64_t total = static_cast<int64_t>(p.n) * p.d;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
  sm90_fp4_fake_quant<<<static_cast<unsigned>(blocks), 256, 0, p.stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_act_quant(const ActQuantParams& p) {
  if (p.n % kGroup != 0 || p.n < 0) return cudaErrorInvalidValue;
  const int64_t groups = p.n / kGroup;
  if (groups == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((groups + kWarpsPerBlock - 1) / kWarpsPerBlock, 65535);
  sm90_fp8_act_quant<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kGroup, 0, p.stream>>>(p);
  return cudaGetLastError();
}

}  // namespace dsinfer::cuda
