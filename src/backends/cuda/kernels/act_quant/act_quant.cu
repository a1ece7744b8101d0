// sm90_fp8_act_quant: fp8 e4m3 quantisation of bf16 activations in groups of 32, with every output
// act_quant has (the fake-quantised bf16, the e4m3 codes, their values in fp16, the scales as e8m0
// bytes or floats), each written where asked for: launch_act_quant (the fake quantisation, the
// CPU's codes and scale bytes) and launch_quantize_input (the block-scaled linears' input) run it.
// sm90_fp4_fake_quant: the fp4 fake quantisation.
#include <algorithm>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/act_quant/config.h"
#include "backends/cuda/kernels/linear/wgmma_operand.cuh"
#include "backends/cuda/kernels/linear/wgmma_order.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace act_quant_config;

// The kernel's view of both launchers' params: x [rows, k] (k a multiple of 32), outputs null
// where not wanted.
struct Fp8ActQuantArgs {
  const uint16_t* x = nullptr;  // bf16, row stride x_stride
  int64_t x_stride = 0;
  const int32_t* x_rows = nullptr;  // [rows] x's row for each output row (null: the same one); not with fake
  int64_t rows = 0, k = 0;
  uint16_t* fake = nullptr;        // [rows, k] bf16 code * scale, row stride x_stride (may alias x)
  uint16_t* values = nullptr;      // [rows, k] fp16 bits of the codes' values, contiguous
  uint8_t* codes = nullptr;        // [rows, k] e4m3, contiguous
  uint8_t* scale_bytes = nullptr;  // [rows * k / 32] e8m0
  float* scales = nullptr;         // [rows * k / 32] the scales as floats
  uint16_t* operand = nullptr;     // [rows, k] bf16 code * scale in wgmma_order.h's K order, contiguous
  bool unquantised = false;        // operand alone: x's values themselves
  cudaStream_t stream = nullptr;
};

// Eight consecutive values a thread, a group of 32 four threads (common::act_quant_eight), a row a
// blockIdx.y (a grid-stride loop over the rows): no division per value. kVector: 16-byte loads and
// stores (x, fake and values 16-byte aligned, x's rows a multiple of 8 apart, codes 8-byte
// aligned); otherwise a value at a time.
template <bool kVector>
__global__ void __launch_bounds__(kThreads) sm90_fp8_act_quant(Fp8ActQuantArgs p) {
  after_prior_grids();
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;  // the first column
  const bool in = c < p.k;
  for (int64_t i = blockIdx.y; i < p.rows; i += gridDim.y) {
    const int64_t at = (p.x_rows ? p.x_rows[i] : i) * p.x_stride + c, out = i * p.k + c;  // in x, contiguous
    uint32_t pairs[4] = {};  // the eight bf16 values (zeros past k)
    if (in) {
      if constexpr (kVector) {
        const uint4 raw = *reinterpret_cast<const uint4*>(p.x + at);
        pairs[0] = raw.x, pairs[1] = raw.y, pairs[2] = raw.z, pairs[3] = raw.w;
      } else {
        for (int v = 0; v < 4; ++v) pairs[v] = p.x[at + 2 * v] | static_cast<uint32_t>(p.x[at + 2 * v + 1]) << 16;
      }
    }
    // The operand's columns c .. c + 7 (wgmma_operand.cuh: the threads of a row's span of 64 are
    // eight consecutive lanes); every lane runs its shuffles (p.operand and p.unquantised are
    // uniform).
    if (p.unquantised) {  // the row's bf16 values reordered, nothing else
      const uint4 operand = wgmma_operand_sixteen_bytes(pairs);
      if (in) *reinterpret_cast<uint4*>(p.operand + i * p.k + c) = operand;
      continue;
    }
    float x[8];
    for (int v = 0; v < 4; ++v) x[2 * v] = bf16x2_lo_to_float(pairs[v]), x[2 * v + 1] = bf16x2_hi_to_float(pairs[v]);
    uint32_t codes[2], fake[4];
    const unsigned e = act_quant_eight(x, codes);  // every lane: the shuffles
    act_quant_eight_bf16(codes, e, fake);
    uint4 operand{};
    if (p.operand) operand = wgmma_operand_sixteen_bytes(fake);
    if (!in) continue;
    const float s = __uint_as_float(e << 23);
    const int64_t group = out / kGroup;
    if (threadIdx.x % 4 == 0) {
      if (p.scale_bytes) p.scale_bytes[group] = static_cast<uint8_t>(e);
      if (p.scales) p.scales[group] = s;
    }
    uint32_t values[4];
    for (int v = 0; v < 8; ++v) {
      const uint32_t value = e4m3_to_f16_bits(static_cast<__nv_fp8_storage_t>(codes[v / 4] >> (8 * (v % 4))));
      values[v / 2] = v % 2 ? values[v / 2] | value << 16 : value;
    }
    if constexpr (kVector) {
      if (p.codes) *reinterpret_cast<uint2*>(p.codes + out) = make_uint2(codes[0], codes[1]);
      if (p.values) *reinterpret_cast<uint4*>(p.values + out) = make_uint4(values[0], values[1], values[2], values[3]);
      if (p.fake) *reinterpret_cast<uint4*>(p.fake + at) = make_uint4(fake[0], fake[1], fake[2], fake[3]);
    } else {
      for (int v = 0; v < 8; ++v) {
        if (p.codes) p.codes[out + v] = static_cast<uint8_t>(codes[v / 4] >> (8 * (v % 4)));
        if (p.values) p.values[out + v] = static_cast<uint16_t>(values[v / 2] >> (16 * (v % 2)));
        if (p.fake) p.fake[at + v] = static_cast<uint16_t>(fake[v / 2] >> (16 * (v % 2)));
      }
    }
    if (p.operand) *reinterpret_cast<uint4*>(p.operand + i * p.k + c) = operand;
  }
}

cudaError_t launch_fp8_act_quant(const Fp8ActQuantArgs& p) {
  if (p.rows == 0 || p.k == 0) return cudaSuccess;
  const auto aligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  const bool vector =
      aligned(p.x, 16) && p.x_stride % 8 == 0 && aligned(p.fake, 16) && aligned(p.values, 16) && aligned(p.codes, 8);
  if (p.operand && (p.k % kWgmmaOrderSpan != 0 || !aligned(p.operand, 16))) return cudaErrorInvalidValue;
  if (p.x_rows && p.fake) return cudaErrorInvalidValue;
  if (p.unquantised && (!p.operand || p.fake || p.values || p.codes || p.scale_bytes || p.scales))
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((p.k / 8 + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(p.rows, 65535)));
  if (vector) return launch_kernel(sm90_fp8_act_quant<true>, grid, kThreads, 0, p.stream, p);
  return launch_kernel(sm90_fp8_act_quant<false>, grid, kThreads, 0, p.stream, p);
}

__global__ void sm90_fp4_fake_quant(Fp4FakeQuantParams p) {
  after_prior_grids();
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
  return launch_kernel(sm90_fp4_fake_quant, static_cast<unsigned>(blocks), kFp4Threads, 0, p.stream, p);
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
  a.x = p.x, a.x_stride = p.x_stride, a.x_rows = p.x_rows, a.rows = p.n, a.k = p.k;
  a.values = p.values, a.codes = p.codes, a.scales = p.scales, a.operand = p.operand, a.stream = p.stream;
  a.unquantised = p.unquantised;
  return launch_fp8_act_quant(a);
}

}  // namespace dsinfer::cuda
