// sm90_f64_dense_linear: y = x . W^T with double accumulation (the CPU backend's numerics).
//
// Bytes per call: the weights once (2 bytes a weight for bf16, 1 for fp8) and x as doubles from
// L1. Each lane takes 16 consecutive weights a step (one 16-byte load of fp8 codes, two of bf16),
// converts them to double once and fuses them with every activation row. x is laid out so that
// the 32 lanes' doubles for one of their 16 weights are adjacent (one 256-byte read a warp): in
// natural order each lane's 16 doubles fill their own 128-byte line and a warp's read touches 32
// lines (measured: L1-bound at 9 % of the bandwidth). The conversions (16 a clock per SM) and x's
// L1 reads (8 bytes a weight) then bound it near 3.7 T weights a second.
#include <algorithm>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/dense.h"
#include "backends/cuda/kernels/linear/device_helpers.cuh"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace linear_config;
using namespace linear_config::dense_kernel;
using namespace linear_detail;

int64_t padded(int k) {
  return (static_cast<int64_t>(k) + kSpan - 1) / kSpan * kSpan;
}

// x [n, groups * k] as doubles, each (row, group) k-slice padded to a whole number of warp spans
// and permuted within a span: weight j = 512 s + 16 lane + e sits at 512 s + 32 e + lane.
__global__ void sm90_f64_dense_linear_stage(DenseLinearParams p, int groups, int64_t kp) {
  after_prior_grids();
  const int64_t width = static_cast<int64_t>(groups) * p.k, total = p.n * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, c = i % width, g = c / p.k, j = c % p.k;
    const float v = p.x_f32 ? static_cast<const float*>(p.x)[r * p.x_stride + c]
                            : bf16_to_float(static_cast<const uint16_t*>(p.x)[r * p.x_stride + c]);
    p.x_f64[(r * groups + g) * kp + j / kSpan * kSpan + j % kStep * kWarp + j % kSpan / kStep] = v;
  }
}

// The 16-byte pieces holding weights j0 .. j0 + 15 of a row: one of fp8 codes, two of bf16 (k a
// multiple of 16, rows 16-byte aligned). Streaming loads (evict first), so that the weights, read
// once, do not push x's doubles out of L1 (measured on the head: 676 -> 364 us).
struct Piece {
  uint4 a, b;
};

__device__ inline Piece load_piece(const DenseLinearParams& p, const void* weights, int row, int j0) {
  Piece v{};
  if (p.fp8_weights) {
    v.a = __ldcs(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(weights) +
                                                static_cast<int64_t>(row) * p.w_stride + j0));
  } else {
    const uint4* q = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(weights) +
                                                    static_cast<int64_t>(row) * p.w_stride + j0);
    v.a = __ldcs(q), v.b = __ldcs(q + 1);
  }
  return v;
}

// A piece's weights as floats (exact: bf16, or e4m3 times a power of two).
__device__ inline void decode_piece(const DenseLinearParams& p, const uint8_t* scales, int row, int j0, const Piece& v,
                                    float (&w)[kStep]) {
  if (p.fp8_weights) {
    const float s = e8m0_to_float(scales[static_cast<int64_t>(row / 32) * p.s_stride + j0 / 32]);
    const uint32_t words[4] = {v.a.x, v.a.y, v.a.z, v.a.w};
#pragma unroll
    for (int e = 0; e < kStep; ++e) w[e] = e4m3_to_float(static_cast<uint8_t>(words[e / 4] >> (8 * (e % 4)))) * s;
  } else {
    const uint32_t words[8] = {v.a.x, v.a.y, v.a.z, v.a.w, v.b.x, v.b.y, v.b.z, v.b.w};
#pragma unroll
    for (int e = 0; e < kStep; ++e) w[e] = e % 2 ? bf16x2_hi_to_float(words[e / 2]) : bf16x2_lo_to_float(words[e / 2]);
  }
}

// Weights j0 .. j0 + 15 one load each, zeros past k (any k and alignment).
__device__ inline void load_weights_scalar(const DenseLinearParams& p, const void* weights, const uint8_t* scales,
                                           int row, int j0, float (&w)[kStep]) {
  if (p.fp8_weights) {
    const uint8_t* codes = static_cast<const uint8_t*>(weights) + static_cast<int64_t>(row) * p.w_stride + j0;
    const float s = e8m0_to_float(scales[static_cast<int64_t>(row / 32) * p.s_stride + j0 / 32]);
#pragma unroll
    for (int e = 0; e < kStep; ++e) w[e] = j0 + e < p.k ? e4m3_to_float(codes[e]) * s : 0.0f;
  } else {
    const uint16_t* vals = static_cast<const uint16_t*>(weights) + static_cast<int64_t>(row) * p.w_stride + j0;
#pragma unroll
    for (int e = 0; e < kStep; ++e) w[e] = j0 + e < p.k ? bf16_to_float(vals[e]) : 0.0f;
  }
}

template <int NB, bool kVec>
__device__ void dense_row(const DenseLinearParams& p, int row, int i0, int lane, int groups, int64_t kp) {
  // A grouped call's row: a row of its group's matrix, against its group's columns of x.
  const int g = p.group_rows ? row / p.group_rows : 0, r = p.group_rows ? row % p.group_rows : row;
  const void* weights = p.group_rows ? p.group_w[g] : p.w;
  const uint8_t* scales = p.group_rows ? p.group_scales[g] : p.w_scales;
  const int64_t row_stride = groups * kp;  // between activation rows in x_f64
  const double* x = p.x_f64 + i0 * row_stride + g * kp + lane;
  double acc[NB] = {};
  const auto fuse = [&](const float(&w)[kStep], int j0) {
    const double* xs = x + (j0 - lane * kStep);  // this span's permuted doubles
#pragma unroll
    for (int i = 0; i < NB; ++i)
#pragma unroll
      for (int e = 0; e < kStep; ++e)
        if (kVec || j0 + e < p.k) acc[i] = fma(static_cast<double>(w[e]), xs[i * row_stride + e * kWarp], acc[i]);
  };
  if constexpr (kVec) {
    // Several activation rows: kInFlight spans' loads issued before any is used (measured at 8
    // rows: the head 4.65 -> 1.9 ms). One row: a span at a time (4 in flight measured slower:
    // the head 409 -> 586 us, wo_a 28 -> 39 us; the conversions, not the loads, bound it).
    constexpr int kInFlight = NB > 1 ? 4 : 1;
    for (int j0 = lane * kStep; j0 < p.k; j0 += kInFlight * kSpan) {
      Piece v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        if (j0 + u * kSpan < p.k) v[u] = load_piece(p, weights, r, j0 + u * kSpan);
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        if (j0 + u * kSpan >= p.k) break;
        float w[kStep];
        decode_piece(p, scales, r, j0 + u * kSpan, v[u], w);
        fuse(w, j0 + u * kSpan);
      }
    }
  } else {
    for (int j0 = lane * kStep; j0 < p.k; j0 += kSpan) {
      float w[kStep];
      load_weights_scalar(p, weights, scales, r, j0, w);
      fuse(w, j0);
    }
  }
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    const double s = warp_sum(acc[i]);
    if (lane == 0) {
      const float f = static_cast<float>(s);
      const int64_t at = static_cast<int64_t>(i0 + i) * p.y_stride + row;
      if (p.y_f32)
        static_cast<float*>(p.y)[at] = f;
      else
        static_cast<uint16_t*>(p.y)[at] = float_to_bf16(f);
    }
  }
}

// Activation rows i0 .. i0 + NB - 1 (a kernel per NB: the 4-row one's registers would cost the
// single row's occupancy).
template <int NB, bool kVec>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    sm90_f64_dense_linear(DenseLinearParams p, int i0, int groups, int64_t kp) {
  after_prior_grids();
  const int lane = threadIdx.x % kWarp, warps = gridDim.x * kWarpsPerBlock;
  for (int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp; row < p.out; row += warps)
    dense_row<NB, kVec>(p, row, i0, lane, groups, kp);
}

template <bool kVec>
cudaError_t launch_rows(const DenseLinearParams& p, int groups, int64_t kp) {
  const int blocks = std::min((p.out + kWarpsPerBlock - 1) / kWarpsPerBlock, sm_count() * 8);
  for (int i0 = 0; i0 < p.n;) {
    const bool pass = p.n - i0 >= kRowsPerPass;
    const cudaError_t e = pass ? launch_kernel(sm90_f64_dense_linear<kRowsPerPass, kVec>, blocks,
                                               kWarpsPerBlock * kWarp, 0, p.stream, p, i0, groups, kp)
                               : launch_kernel(sm90_f64_dense_linear<1, kVec>, blocks, kWarpsPerBlock * kWarp, 0,
                                               p.stream, p, i0, groups, kp);
    if (e != cudaSuccess) return e;
    i0 += pass ? kRowsPerPass : 1;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_dense_linear(const DenseLinearParams& p) {
  const int groups = p.group_rows > 0 && p.out % p.group_rows == 0 ? p.out / p.group_rows : 1;
  if (p.n < 0 || p.k <= 0 || p.out < 0 || p.group_rows < 0 || groups > DenseLinearParams::kMaxGroups ||
      (p.group_rows && p.out % p.group_rows != 0))
    return cudaErrorInvalidValue;
  bool vec = p.k % kStep == 0 && (p.w_stride * (p.fp8_weights ? 1 : 2)) % 16 == 0;
  for (int g = 0; g < groups; ++g) {
    const void* w = p.group_rows ? p.group_w[g] : p.w;
    const uint8_t* s = p.group_rows ? p.group_scales[g] : p.w_scales;
    if (!w || (p.fp8_weights && (p.k % 32 != 0 || !s))) return cudaErrorInvalidValue;
    vec = vec && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  }
  if (p.n == 0 || p.out == 0) return cudaSuccess;
  if (dense_linear_on_tensor_cores(p)) return launch_dense_mma(p);
  if (!p.x_f64) return cudaErrorInvalidValue;
  const int64_t kp = padded(p.k), total = p.n * static_cast<int64_t>(groups) * p.k;
  if (const cudaError_t e = launch_kernel(sm90_f64_dense_linear_stage,
                                          static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535)), 256, 0,
                                          p.stream, p, groups, kp);
      e != cudaSuccess)
    return e;
  return vec ? launch_rows<true>(p, groups, kp) : launch_rows<false>(p, groups, kp);
}

size_t dense_linear_scratch_bytes(int n, int k, int groups) {
  return static_cast<size_t>(n) * groups * padded(k) * sizeof(double);
}

}  // namespace dsinfer::cuda
