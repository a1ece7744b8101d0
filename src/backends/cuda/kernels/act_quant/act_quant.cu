// sm90_fp8_act_quant: fp8 e4m3 quantisation of bf16 activations in groups of 32, with every output
// act_quant has (the fake-quantised bf16, the e4m3 codes, their values in fp16, the scales as e8m0
// bytes or floats), each written where asked for: launch_act_quant (the fake quantisation, the
// CPU's codes and scale bytes) and launch_quantize_input (the block-scaled linears' input) run it.
// sm90_fp4_fake_quant: the fp4 fake quantisation.
#include <algorithm>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/act_quant/config.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace act_quant_config;

// The kernel's view of both launchers' params: x [rows, k] (k a multiple of 32), outputs null
// where not wanted.
struct Fp8ActQuantArgs {
  const uint16_t* x = nullptr;  // bf16, row stride x_stride
  int64_t x_stride = 0;
  int64_t rows = 0, k = 0;
  uint16_t* fake = nullptr;        // [rows, k] bf16 code * scale, row stride x_stride (may alias x)
  uint16_t* values = nullptr;      // [rows, k] fp16 bits of the codes' values, contiguous
  uint8_t* codes = nullptr;        // [rows, k] e4m3, contiguous
  uint8_t* scale_bytes = nullptr;  // [rows * k / 32] e8m0
  float* scales = nullptr;         // [rows * k / 32] the scales as floats
  cudaStream_t stream = nullptr;
};

// A warp per group of 32 (a grid-stride loop over the groups in row order).
__global__ void sm90_fp8_act_quant(Fp8ActQuantArgs p) {
  const int lane = threadIdx.x % kGroup;
  const int64_t groups_per_row = p.k / kGroup, groups = p.rows * groups_per_row;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kGroup;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t g = first; g < groups; g += stride) {
    const int64_t i = g / groups_per_row, j = g % groups_per_row * kGroup + lane;
    const int64_t at = i * p.x_stride + j, out = i * p.k + j;  // in x's layout, contiguous
    const float x = bf16_to_float(p.x[at]);
    const float amax = warp_max(fabsf(x));
    // 2^ceil(log2(max(amax, 1e-4) / 448)) from the fp32 bits: exponent, +1 if any mantissa bit.
    const unsigned e = e8m0_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
    const float s = __uint_as_float(e << 23);
    const float v = fminf(fmaxf(__fdiv_rn(x, s), -448.0f), 448.0f);
    const __nv_fp8_storage_t q = float_to_e4m3(v);
    if (p.codes) p.codes[out] = q;
    if (p.values) p.values[out] = e4m3_to_f16_bits(q);
    if (p.scale_bytes && lane == 0) p.scale_bytes[g] = static_cast<uint8_t>(e);
    if (p.scales && lane == 0) p.scales[g] = s;
    if (p.fake) {
      const float deq = e4m3_to_float(q) * s;  // exact in bf16
      p.fake[at] = float_to_bf16(deq);
    }
  }
}

cudaError_t launch_fp8_act_quant(const Fp8ActQuantArgs& p) {
  const int64_t groups = p.rows * (p.k / kGroup);
  if (groups == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((groups + kWarpsPerBlock - 1) / kWarpsPerBlock, 65535);
  sm90_fp8_act_quant<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kGroup, 0, p.stream>>>(p);
  return cudaGetLastError();
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
    const float x = valid ? bf16_to_float(*xp) : 0.0f;
    const float amax = warp_max(fabsf(x), p.group);
    float s;
    if (p.e4m3_scale) {
      const float v = fminf(__fdiv_rn(fmaxf(amax, 6.0f * 0x1p-9f), 6.0f), 448.0f);
      s = e4m3_to_float(float_to_e4m3(v));
    } else {
      s = __uint_as_float(e8m0_ceil(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f)) << 23);
    }
    const float q = fminf(fmaxf(__fdiv_rn(x, s), -6.0f), 6.0f);
    const float value = copysignf(e2m1_round(fabsf(q)), q);
    if (valid) *xp = float_to_bf16(value * s);
  }
}

}  // namespace

cudaError_t launch_fp4_fake_quant(const Fp4FakeQuantParams& p) {
  if ((p.group != 16 && p.group != 32) || p.d <= 0 || p.d % p.group != 0 || p.n < 0) return cudaErrorInvalidValue;
  const int64_t total = static_cast<int64_t>(p.n) * p.d;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + kFp4Threads - 1) / kFp4Threads, 65535);
  sm90_fp4_fake_quant<<<static_cast<unsigned>(blocks), kFp4Threads, 0, p.stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_act_quant(const ActQuantParams& p) {
  if (p.n % kGroup != 0 || p.n < 0) return cudaErrorInvalidValue;
  Fp8ActQuantArgs a;  // one row of n
  a.x = p.x, a.x_stride = p.n, a.rows = 1, a.k = p.n;
  a.fake = p.fake, a.codes = p.codes, a.scale_bytes = p.scales, a.stream = p.stream;
  return launch_fp8_act_quant(a);
}

cudaError_t launch_quantize_input(const QuantizeInputParams& p) {
  if (p.k % kGroup != 0 || p.k <= 0 || p.n < 0) return cudaErrorInvalidValue;
  Fp8ActQuantArgs a;
  a.x = p.x, a.x_stride = p.x_stride, a.rows = p.n, a.k = p.k;
  a.values = p.values, a.codes = p.codes, a.scales = p.scales, a.stream = p.stream;
  return launch_fp8_act_quant(a);
}

}  // namespace dsinfer::cuda
