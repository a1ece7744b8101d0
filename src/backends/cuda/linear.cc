// CudaBackend's linear ops: the path linear_dispatch.h picks, then the launches of that path.
#include <algorithm>
#include <vector>

#include <cublas_v2.h>
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/linear/dense.h"
#include "backends/cuda/kernels/linear/dequant.h"
#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "backends/cuda/linear_dispatch.h"
#include "core/check.h"

namespace dsinfer {

void CudaBackend::linear(const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  check_device({&a.x, &w.weight, &w.scale, &a.out}, "linear");
  const int64_t n = a.x.size(0);
  DSINFER_CHECK(a.x.size(1) == w.in && a.out.size(1) == w.out && a.out.size(0) == n, "linear shapes");
  switch (cuda::linear_path(a, options_.linear_kernel)) {
    case cuda::LinearPath::kNothing:
      return;
    case cuda::LinearPath::kTensorCores:
      return tensor_core_linear(a);
    case cuda::LinearPath::kBlockScaled:
      return block_linear({&a, 1});
    case cuda::LinearPath::kDense:
      return dense_linear({&a, 1});
  }
}

void CudaBackend::grouped_linear(const GroupedLinearArgs& a) {
  switch (cuda::group_path(a.ops, options_.linear_kernel)) {
    case cuda::GroupPath::kBlockScaled:
      return block_linear(a.ops);
    case cuda::GroupPath::kBlockDiagonal:
      for (const LinearArgs& op : a.ops) check_device({&op.x, &op.w->weight, &op.w->scale, &op.out}, "linear");
      return dense_linear(a.ops);
    case cuda::GroupPath::kBlockDiagonalWgmma:
      for (const LinearArgs& op : a.ops) check_device({&op.x, &op.w->weight, &op.w->scale, &op.out}, "linear");
      return block_diagonal_wgmma(a.ops);
    case cuda::GroupPath::kEach:
      for (const LinearArgs& op : a.ops) linear(op);
      return;
  }
}

cuda::BlockLinearParams CudaBackend::block_params(const LinearWeight& w, int64_t groups, int64_t n) const {
  return {.op = {},
          .groups = static_cast<int>(groups),
          .n = static_cast<int>(n),
          .k = static_cast<int>(w.in),
          .out = static_cast<int>(w.out),
          .fp4 = w.format == LinearFormat::kFp4,
          .w_stride = w.weight.stride[0],
          .s_stride = w.scale.stride[0],
          .y_stride = w.out,
          .kernel = options_.linear_kernel,
          .gemv_rows = options_.gemv_rows,
          .stream = stream_};
}

void CudaBackend::block_linear(std::span<const LinearArgs> ops) {
  const LinearWeight& w0 = *ops[0].w;
  const int64_t n = ops[0].x.size(0), k = w0.in, x_stride = ops[0].x.stride[0];
  for (const LinearArgs& op : ops) check_device({&op.x, &op.w->weight, &op.w->scale, &op.out}, "linear");
  // The kernel for the shape (or the forced one) is launch_block_linear's choice (kernels/linear/linear.cu).
  cuda::BlockLinearParams p = block_params(w0, static_cast<int64_t>(ops.size()), n);
  p.y_stride = ops[0].out.stride[0], p.x_bf16_stride = x_stride;
  // A decode step's few rows: the kernel quantises its inputs as it stages them.
  if (cuda::tiled_quantises_input(p) && std::all_of(ops.begin(), ops.end(), [&](const LinearArgs& op) {
        return op.x.stride[0] == x_stride && cuda::bf16_rows_aligned(op.x.data, x_stride);
      })) {
    for (size_t g = 0; g < ops.size(); ++g)
      p.op[g] = {.w = ops[g].w->weight.as<const uint8_t>(),
                 .w_scales = ops[g].w->scale.as<const uint8_t>(),
                 .y = ops[g].out.as<uint16_t>(),
                 .x_bf16 = ops[g].x.as<const uint16_t>()};
    launched(cuda::launch_block_linear(p), "linear");
    return;
  }
  // Each distinct input is quantised once, into its slot; inputs that lie back to back in memory
  // (the experts' gathered rows) in one launch.
  std::vector<const uint16_t*> inputs;
  std::vector<int> slot(ops.size());
  for (size_t g = 0; g < ops.size(); ++g) {
    const uint16_t* x = ops[g].x.as<const uint16_t>();
    const auto it = std::find(inputs.begin(), inputs.end(), x);
    slot[g] = static_cast<int>(it - inputs.begin());
    if (it == inputs.end()) inputs.push_back(x);
  }
  const size_t m = inputs.size();
  const auto [values, codes, scales] = quant_scratch(static_cast<int64_t>(m) * n, k);
  // The wgmma kernel reads the inputs as bf16 values in its K order (in the values' buffer), the
  // others as codes, scales and fp16 values.
  const bool wgmma = cuda::wgmma_takes(p);
  for (size_t i = 0; i < m;) {
    size_t run = 1;  // inputs i .. i + run - 1 are consecutive rows of one array
    while (i + run < m && x_stride == k && inputs[i + run] == inputs[i] + run * n * k) ++run;
    cuda::QuantizeInputParams q{.x = inputs[i],
                                .x_stride = x_stride,
                                .n = static_cast<int>(run * n),
                                .k = static_cast<int>(k),
                                .stream = stream_};
    if (wgmma)
      q.operand = values + i * n * k;
    else
      q.values = values + i * n * k, q.codes = codes + i * n * k, q.scales = scales + i * n * (k / 32);
    launched(cuda::launch_quantize_input(q), "linear (input quantisation)");
    i += run;
  }
  for (size_t g = 0; g < ops.size(); ++g) {
    const int64_t at = slot[g];
    p.op[g] = {.w = ops[g].w->weight.as<const uint8_t>(),
               .w_scales = ops[g].w->scale.as<const uint8_t>(),
               .y = ops[g].out.as<uint16_t>()};
    if (wgmma)
      p.op[g].x_operand = values + at * n * k;
    else
      p.op[g].x_values = values + at * n * k, p.op[g].x_scales = scales + at * n * (k / 32),
      p.op[g].x_codes = codes + at * n * k;
  }
  launched(cuda::launch_block_linear(p), "linear");
}

void CudaBackend::block_diagonal_wgmma(std::span<const LinearArgs> ops) {
  const LinearArgs& a = ops[0];
  const LinearWeight& w = *a.w;
  const int64_t n = a.x.size(0), k = w.in, groups = static_cast<int64_t>(ops.size());
  // The groups' inputs are consecutive column blocks of one row: the row reordered once into the
  // kernel's K order (its values as they are: a bf16 GEMM's input), each group's block a part.
  uint16_t* operand = quant_scratch(n, groups * k).values;
  launched(cuda::launch_quantize_input({.x = a.x.as<const uint16_t>(),
                                        .x_stride = a.x.stride[0],
                                        .operand = operand,
                                        .unquantised = true,
                                        .n = static_cast<int>(n),
                                        .k = static_cast<int>(groups * k),
                                        .stream = stream_}),
           "linear (input order)");
  cuda::BlockLinearParams p = block_params(w, groups, n);
  p.y_stride = a.out.stride[0], p.x_operand_stride = groups * k;
  for (int64_t g = 0; g < groups; ++g)
    p.op[g] = {.w = ops[g].w->weight.as<const uint8_t>(),
               .w_scales = ops[g].w->scale.as<const uint8_t>(),
               .y = ops[g].out.as<uint16_t>(),
               .x_operand = operand + g * k};
  DSINFER_CHECK(cuda::wgmma_applies(p), "linear (block-diagonal on the wgmma kernel): its dispatch's conditions");
  launched(cuda::launch_block_linear(p), "linear (block-diagonal)");
}

void CudaBackend::dense_linear(std::span<const LinearArgs> ops) {
  const LinearArgs& a = ops[0];
  const LinearWeight& w = *a.w;
  const int n = static_cast<int>(a.x.size(0)), k = static_cast<int>(w.in), groups = static_cast<int>(ops.size());
  cuda::DenseLinearParams p{.x = a.x.data,
                            .x_f32 = a.x.dtype == DType::kF32,
                            .x_stride = a.x.stride[0],
                            .exact = options_.linear_kernel == cuda::LinearKernel::kExact,
                            .fp8_weights = w.format == LinearFormat::kFp8AsBf16,
                            .w = w.weight.data,
                            .w_stride = w.weight.stride[0],
                            .w_scales = w.scale.as<const uint8_t>(),
                            .s_stride = w.scale.ndim ? w.scale.stride[0] : 0,
                            .y = a.out.data,
                            .y_f32 = a.out.dtype == DType::kF32,
                            .y_stride = a.out.stride[0],
                            .n = n,
                            .k = k,
                            .out = static_cast<int>(w.out * groups),
                            .stream = stream_};
  if (groups > 1) {
    p.group_rows = static_cast<int>(w.out);
    for (int g = 0; g < groups; ++g)
      p.group_w[g] = ops[g].w->weight.data, p.group_scales[g] = ops[g].w->scale.as<const uint8_t>();
  }
  if (!cuda::dense_linear_on_tensor_cores(p))
    p.x_f64 = static_cast<double*>(scratch(scratch_->dense_x, cuda::dense_linear_scratch_bytes(n, k, groups)));
  launched(cuda::launch_dense_linear(p), "linear (dense)");
}

void CudaBackend::tensor_core_linear(const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  const int64_t n = a.x.size(0), k = w.in, o = w.out;
  if (!scratch_->cublas) {
    DSINFER_CHECK(cublasCreate(&scratch_->cublas) == CUBLAS_STATUS_SUCCESS, "cuBLAS could not start");
  }
  DSINFER_CHECK(cublasSetStream(scratch_->cublas, stream_) == CUBLAS_STATUS_SUCCESS,
                "cuBLAS stream");  // a capture's, maybe
  const uint16_t* wb = w.weight.as<const uint16_t>();
  int64_t ldw = w.weight.stride[0];
  if (w.format == LinearFormat::kFp8AsBf16) {  // the weights as bf16, exactly
    auto* dequantised = static_cast<uint16_t*>(scratch(scratch_->tc_weights, o * k * 2));
    launched(cuda::launch_dequant_weight({.codes = w.weight.as<const uint8_t>(),
                                          .w_stride = w.weight.stride[0],
                                          .scales = w.scale.as<const uint8_t>(),
                                          .s_stride = w.scale.stride[0],
                                          .fp4 = false,
                                          .out = dequantised,
                                          .rows = static_cast<int>(o),
                                          .k = static_cast<int>(k),
                                          .stream = stream_}),
             "linear (weights to bf16)");
    wb = dequantised, ldw = k;
  }
  const uint16_t* xb = a.x.as<const uint16_t>();
  const int64_t ldx = a.x.stride[0];
  const float one = 1.0f, zero = 0.0f;
  const bool y32 = a.out.dtype == DType::kF32;
  // Row-major Y[n, o] = X[n, k] W[o, k]^T is column-major Y^T = W^T(op T of W's storage) X^T.
  const cublasStatus_t st = cublasGemmEx(
      scratch_->cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(o), static_cast<int>(n), static_cast<int>(k), &one,
      wb, CUDA_R_16BF, static_cast<int>(ldw), xb, CUDA_R_16BF, static_cast<int>(ldx), &zero, a.out.data,
      y32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(a.out.stride[0]), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  DSINFER_CHECK(st == CUBLAS_STATUS_SUCCESS, "linear: cuBLAS GEMM [{}, {}] x [{}, {}]^T failed ({})", n, k, o, k,
                static_cast<int>(st));
  ++stats_.ops;
}

}  // namespace dsinfer
