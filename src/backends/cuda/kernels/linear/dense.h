// Dense linear layers (spec §3.6): bf16 weights (or fp8 weights dequantised exactly, wo_a) times
// an unquantised input, rounded to bf16 unless the output is f32 (the head, the ratio-2
// compressor). Two kernels: bf16 tensor cores with fp32 sums in an order fixed by the matrix's
// shape (dense_mma.cu: issue 18's numerics contract, batch-invariant), and double sums (products
// exact, as on the CPU, rounded once to fp32: dense.cu) where asked for or where the first does
// not apply. Framework-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

struct DenseLinearParams {
  const void* x = nullptr;  // [n, k] bf16 (uint16_t bits) or f32, row stride x_stride
  bool x_f32 = false;
  int64_t x_stride = 0;
  bool exact = false;        // double sums even where the tensor cores apply
  double* x_f64 = nullptr;   // double sums only: scratch of dense_linear_scratch_bytes() the launcher fills
  bool fp8_weights = false;  // e4m3 [out, k] with e8m0 scales [ceil(out/32), k/32], else bf16
  const void* w = nullptr;   // [out, k], row stride w_stride (elements)
  int64_t w_stride = 0;
  const uint8_t* w_scales = nullptr;  // fp8 only
  int64_t s_stride = 0;
  void* y = nullptr;  // [n, out] bf16 or f32, row stride y_stride
  bool y_f32 = false;
  int64_t y_stride = 0;
  int n = 0, k = 0, out = 0;
  // > 0: a block-diagonal call (wo_a's groups in one launch): output row r is row r % group_rows
  // of group g = r / group_rows, whose weights are group_w[g] (scales group_scales[g]) and which
  // reads columns [g * k, g * k + k) of x (then k * out / group_rows columns wide).
  int group_rows = 0;
  static constexpr int kMaxGroups = 16;
  const void* group_w[kMaxGroups] = {};
  const uint8_t* group_scales[kMaxGroups] = {};
  cudaStream_t stream = nullptr;
};

/// The tensor-core kernel where it applies (not `exact`, bf16 x, k % 64 == 0, 16-byte aligned
/// rows), else the double sums (a warp per output row, up to 4 activation rows a pass).
/// cudaErrorInvalidValue for fp8 weights with k % 32 != 0, groups that do not divide out, or a
/// missing scratch where the double sums need one.
cudaError_t launch_dense_linear(const DenseLinearParams& p);
/// Whether launch_dense_linear runs p on the tensor cores (then it needs no x_f64).
bool dense_linear_on_tensor_cores(const DenseLinearParams& p);
/// The x_f64 scratch a call of n activation rows of `groups` blocks of k columns needs.
size_t dense_linear_scratch_bytes(int n, int k, int groups);
/// The tensor-core kernel alone (dense_mma.cu), for launch_dense_linear once p is checked.
cudaError_t launch_dense_mma(const DenseLinearParams& p);

}  // namespace dsinfer::cuda
