// launch_dequant_weight: a thread per (row, scale block of 32 weights): one or two 16-byte loads
// of codes, four 16-byte stores of bf16, the codes decoded with arithmetic only (a table indexed
// at run time would live in local memory).
#include <cuda_bf16.h>

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

// Eight codes of a word: fp4 nibbles (low nibble first: the even element), or fp8 bytes (four a
// word, so `words` of them) times the block's scale, as bf16 pairs (exact: 3 or 1 mantissa bits
// times a power of two).
template <bool kFp4>
__device__ inline void decode(const uint32_t* words, float scale, uint32_t (&out)[16]) {
  if constexpr (kFp4) {
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t pair = words[w] >> (8 * i);
        out[4 * w + i] = pack_bf16x2(e2m1_value(pair & 0xFu) * scale, e2m1_value((pair >> 4) & 0xFu) * scale);
      }
  } else {
#pragma unroll
    for (int w = 0; w < 8; ++w)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t pair = words[w] >> (16 * i);
        out[2 * w + i] = pack_bf16x2(e4m3_to_float(pair & 0xFFu) * scale, e4m3_to_float((pair >> 8) & 0xFFu) * scale);
      }
  }
}

template <bool kFp4, bool kAligned>
__global__ void __launch_bounds__(kThreads) sm90_bf16_dequant_weight(DequantWeightParams p) {
  constexpr int kCodeBytes = kFp4 ? 16 : 32;  // a scale block's codes
  const int blocks = p.k / 32;
  const int item = blockIdx.x * kThreads + threadIdx.x;  // rows * blocks < 2^31 (the launch checks)
  if (item >= p.rows * blocks) return;
  const int r = item / blocks, c = item - r * blocks;
  const float scale = e8m0_to_float(p.scales[static_cast<int64_t>(kFp4 ? r : r / 32) * p.s_stride + c]);
  const uint8_t* codes = p.codes + r * p.w_stride + c * kCodeBytes;
  uint32_t words[kCodeBytes / 4];
  if constexpr (kAligned) {
#pragma unroll
    for (int i = 0; i < kCodeBytes / 16; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(codes) + i);
      words[4 * i] = v.x, words[4 * i + 1] = v.y, words[4 * i + 2] = v.z, words[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kCodeBytes / 4; ++i)
      words[i] =
          codes[4 * i] | codes[4 * i + 1] << 8 | codes[4 * i + 2] << 16 | static_cast<uint32_t>(codes[4 * i + 3]) << 24;
  }
  uint32_t out[16];
  decode<kFp4>(words, scale, out);
  uint4* dst = reinterpret_cast<uint4*>(p.out + static_cast<int64_t>(r) * p.k + c * 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = make_uint4(out[4 * i], out[4 * i + 1], out[4 * i + 2], out[4 * i + 3]);
}

template <bool kFp4>
cudaError_t launch(const DequantWeightParams& p, int64_t items) {
  const auto aligned = reinterpret_cast<uintptr_t>(p.codes) % 16 == 0 && p.w_stride % 16 == 0;
  const dim3 grid(static_cast<unsigned>((items + kThreads - 1) / kThreads));
  if (aligned)
    sm90_bf16_dequant_weight<kFp4, true><<<grid, kThreads, 0, p.stream>>>(p);
  else
    sm90_bf16_dequant_weight<kFp4, false><<<grid, kThreads, 0, p.stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_dequant_weight(const DequantWeightParams& p) {
  if (p.rows < 0 || p.k % 32 != 0 || reinterpret_cast<uintptr_t>(p.out) % 16 != 0) return cudaErrorInvalidValue;
  const int64_t items = static_cast<int64_t>(p.rows) * (p.k / 32);
  if (items > INT32_MAX - kThreads) return cudaErrorInvalidValue;
  if (items == 0) return cudaSuccess;
  return p.fp4 ? launch<true>(p, items) : launch<false>(p, items);
}

}  // namespace dsinfer::cuda
