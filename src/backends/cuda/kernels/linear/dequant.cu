// launch_dequant_weight: a thread per eight weights of a row: one 4- or 8-byte load of codes,
// one 16-byte store of bf16 (a warp's stores 512 consecutive bytes), the codes decoded with
// arithmetic only (a table indexed at run time would live in local memory).
#include <cuda_bf16.h>

#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/kernels/linear/dequant.h"

namespace dsinfer::cuda {
namespace {

using namespace common;

constexpr int kThreads = 256;

// An e2m1 code's value: its three magnitude bits placed at float bits 22-24 make the value times
// 2^-126 (a subnormal for 0.5), so one multiply gives it exactly; the sign bit goes to bit 31.
__device__ inline float e2m1_value(uint32_t code) {
  const float magnitude = __uint_as_float((code & 7u) << 22) * 0x1p126f;
  return __uint_as_float(__float_as_uint(magnitude) | (code & 8u) << 28);
}

// Eight codes (fp4 nibbles in one word, low nibble first: the even element; or fp8 bytes in two)
// times the block's scale, as four bf16 pairs (exact: 3 or 1 mantissa bits times a power of two).
template <bool kFp4>
__device__ inline void decode(const uint32_t* words, float scale, uint32_t (&out)[4]) {
  if constexpr (kFp4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t pair = words[0] >> (8 * i);
      out[i] = pack_bf16x2(e2m1_value(pair & 0xFu) * scale, e2m1_value((pair >> 4) & 0xFu) * scale);
    }
  } else {
#pragma unroll
    for (int w = 0; w < 2; ++w)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t pair = words[w] >> (16 * i);
        out[2 * w + i] = pack_bf16x2(e4m3_to_float(pair & 0xFFu) * scale, e4m3_to_float((pair >> 8) & 0xFFu) * scale);
      }
  }
}

template <bool kFp4, bool kAligned>
__global__ void __launch_bounds__(kThreads) sm90_bf16_dequant_weight(DequantWeightParams p) {
  after_prior_grids();
  constexpr int kCodeBytes = kFp4 ? 4 : 8;  // eight weights' codes
  const int octets = p.k / 8;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= static_cast<int64_t>(p.rows) * octets) return;
  const int r = static_cast<int>(item / octets), j = static_cast<int>(item - static_cast<int64_t>(r) * octets);
  const float scale = e8m0_to_float(p.scales[static_cast<int64_t>(kFp4 ? r : r / 32) * p.s_stride + j / 4]);
  const uint8_t* codes = p.codes + r * p.w_stride + j * kCodeBytes;
  uint32_t words[kCodeBytes / 4];
  if constexpr (kAligned) {
    if constexpr (kFp4) {
      words[0] = __ldg(reinterpret_cast<const uint32_t*>(codes));
    } else {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(codes));
      words[0] = v.x, words[1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kCodeBytes / 4; ++i)
      words[i] =
          codes[4 * i] | codes[4 * i + 1] << 8 | codes[4 * i + 2] << 16 | static_cast<uint32_t>(codes[4 * i + 3]) << 24;
  }
  uint32_t out[4];
  decode<kFp4>(words, scale, out);
  *reinterpret_cast<uint4*>(p.out + static_cast<int64_t>(r) * p.k + j * 8) = make_uint4(out[0], out[1], out[2], out[3]);
}

template <bool kFp4>
cudaError_t launch(const DequantWeightParams& p, int64_t items) {
  const int bytes = kFp4 ? 4 : 8;  // a thread's load
  const auto aligned = reinterpret_cast<uintptr_t>(p.codes) % bytes == 0 && p.w_stride % bytes == 0;
  const dim3 grid(static_cast<unsigned>((items + kThreads - 1) / kThreads));
  if (aligned) return launch_kernel(sm90_bf16_dequant_weight<kFp4, true>, grid, kThreads, 0, p.stream, p);
  return launch_kernel(sm90_bf16_dequant_weight<kFp4, false>, grid, kThreads, 0, p.stream, p);
}

}  // namespace

cudaError_t launch_dequant_weight(const DequantWeightParams& p) {
  if (p.rows < 0 || p.k % 32 != 0 || reinterpret_cast<uintptr_t>(p.out) % 16 != 0) return cudaErrorInvalidValue;
  const int64_t items = static_cast<int64_t>(p.rows) * (p.k / 8);
  if (items / kThreads >= INT32_MAX) return cudaErrorInvalidValue;
  if (items == 0) return cudaSuccess;
  return p.fp4 ? launch<true>(p, items) : launch<false>(p, items);
}

}  // namespace dsinfer::cuda
