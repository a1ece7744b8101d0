// Parameters of the row-wise kernels (spec §3.1, §3.2, §4.2, §8.2): plain pointers, POD. bf16
// tensors are uint16_t bit patterns; row strides are in elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda {

struct EmbedParams {
  const int32_t* ids = nullptr;     // [n]
  const uint16_t* table = nullptr;  // [rows, dim] bf16: vocab rows [vocab_offset, vocab_offset + rows)
  int64_t rows = 0, vocab_offset = 0;
  uint16_t* out = nullptr;  // [n, dim], row stride out_stride (ids outside the rows give zero rows)
  int64_t out_stride = 0;
  int n = 0, dim = 0;
  cudaStream_t stream = nullptr;
};

struct RmsNormParams {
  const uint16_t* x = nullptr;  // [n, d], row stride x_stride
  int64_t x_stride = 0;
  const uint16_t* weight = nullptr;  // [d]
  uint16_t* out = nullptr;           // [n, d], row stride out_stride; may alias x
  int64_t out_stride = 0;
  int n = 0, d = 0;
  float eps = 0;
  cudaStream_t stream = nullptr;
};

struct RopeParams {
  uint16_t* x = nullptr;  // [n, heads, d], rotated in place on the last 2 * half dims
  int64_t x_stride = 0, head_stride = 0;
  const float* cos = nullptr;  // [n, half], row stride table_stride
  const float* sin = nullptr;
  int64_t table_stride = 0;
  int n = 0, heads = 0, d = 0, half = 0;
  bool inverse = false;
  cudaStream_t stream = nullptr;
};

struct SwigluParams {
  const uint16_t* gate = nullptr;  // [n, f], row stride gate_stride
  const uint16_t* up = nullptr;    // [n, f], row stride up_stride
  int64_t gate_stride = 0, up_stride = 0;
  const float* row_weight = nullptr;  // [n] or null
  float limit = 0;                    // 0: no clamp
  uint16_t* out = nullptr;            // [n, f], row stride out_stride
  int64_t out_stride = 0;
  // Or, where not null (out unused): the bf16 result quantised as the wgmma kernel's activation
  // operand, [n, f] contiguous (QuantizeInputParams::operand; f a multiple of its K order's span).
  uint16_t* operand = nullptr;
  int n = 0, f = 0;
  cudaStream_t stream = nullptr;
};

struct HcPreParams {
  const uint16_t* x = nullptr;  // [n, hc, dim], token stride x_stride
  int64_t x_stride = 0;
  const float* pre = nullptr;  // [n, hc]
  uint16_t* out = nullptr;     // [n, dim], row stride out_stride
  int64_t out_stride = 0;
  int n = 0, hc = 0, dim = 0;
  cudaStream_t stream = nullptr;
};

struct HcPostParams {
  const uint16_t* sub = nullptr;  // [n, dim], row stride sub_stride
  int64_t sub_stride = 0;
  const uint16_t* residual = nullptr;  // [n, hc, dim], token stride residual_stride
  int64_t residual_stride = 0;
  const float* post = nullptr;  // [n, hc]
  const float* comb = nullptr;  // [n, hc, hc]
  uint16_t* out = nullptr;      // [n, hc, dim], token stride out_stride; may alias residual
  int64_t out_stride = 0;
  int n = 0, hc = 0, dim = 0;
  cudaStream_t stream = nullptr;
};

/// Ratio-2 compressor pooling (spec §6.1): per channel, softmax over the group's 2 tokens.
struct CompressPoolParams {
  const float* kv = nullptr;     // [groups, 2, d]
  const float* score = nullptr;  // [groups, 2, d]
  uint16_t* out = nullptr;       // [groups, d] bf16
  int groups = 0, d = 0;
  cudaStream_t stream = nullptr;
};

/// Rows of e4m3 codes with an e8m0 scale byte a 32 (the looked-up Engram rows as stored) decoded
/// to bf16 through a table of every (scale, code) value.
struct DecodeRowsParams {
  const uint8_t* codes = nullptr;    // [n, d], row stride codes_stride
  const uint8_t* scales = nullptr;   // [n, d / 32], row stride scales_stride
  const uint16_t* values = nullptr;  // [256 * 256] bf16: by scale byte, then code
  uint16_t* out = nullptr;           // [n, d], row stride out_stride
  int64_t codes_stride = 0, scales_stride = 0, out_stride = 0;
  int n = 0, d = 0;
  cudaStream_t stream = nullptr;
};

/// Engram gate and injection (spec §9.7), per token and copy: x += gate * value.
struct EngramGateParams {
  uint16_t* x = nullptr;  // [n, hc, dim], token stride x_stride, updated in place
  int64_t x_stride = 0;
  const uint16_t* kv = nullptr;  // [n, (hc + 1) * dim], row stride kv_stride: hc keys, then the value
  int64_t kv_stride = 0;
  const float* wgt = nullptr;     // [hc, dim]
  const uint8_t* live = nullptr;  // [n] or null: 0 forces the gate to 0
  float norm_eps = 0;
  int n = 0, hc = 0, dim = 0;
  cudaStream_t stream = nullptr;
};

/// Hyper-connection mixes (spec §4.1): RMS-scaled projections of the stream, sigmoid pre/post
/// gates and the Sinkhorn-normalised combination matrix.
struct HcMixesParams {
  const uint16_t* x = nullptr;  // [n, hc, dim], token stride x_stride
  int64_t x_stride = 0;
  const float* fn = nullptr;     // [(2 + hc) * hc, hc * dim]
  const float* scale = nullptr;  // [3]
  const float* base = nullptr;   // [(2 + hc) * hc]
  float norm_eps = 0, hc_eps = 0;
  int sinkhorn_iters = 0;
  float* pre = nullptr;       // [n, hc]
  float* post = nullptr;      // [n, hc]
  float* comb = nullptr;      // [n, hc, hc]
  double* partial = nullptr;  // workspace of hc_mixes_workspace_bytes(): partial sums
  int n = 0, hc = 0, dim = 0;
  cudaStream_t stream = nullptr;
};

/// Rows copied as 16-bit words (d words a row: a 4-byte type is two a value).
struct GatherRowsParams {
  const uint16_t* src = nullptr;  // [*, d], row stride src_stride
  int64_t src_stride = 0;
  const int32_t* rows = nullptr;  // [m]
  uint16_t* out = nullptr;        // [m, d], row stride out_stride
  int64_t out_stride = 0;
  int m = 0, d = 0;
  cudaStream_t stream = nullptr;
};

struct ScatterRowsParams {
  const uint16_t* src = nullptr;  // [m, d], row stride src_stride
  int64_t src_stride = 0;
  const int32_t* rows = nullptr;  // [m] distinct
  uint16_t* out = nullptr;        // [*, d], row stride out_stride
  int64_t out_stride = 0;
  int m = 0, d = 0;
  cudaStream_t stream = nullptr;
};

struct ScatterAddParams {
  const uint16_t* src = nullptr;  // [m, d], row stride src_stride
  int64_t src_stride = 0;
  const int32_t* rows = nullptr;  // [m], distinct
  float* acc = nullptr;           // [*, d], row stride acc_stride
  int64_t acc_stride = 0;
  uint16_t* out = nullptr;  // [*, d] or null: bf16 of the updated acc rows
  int64_t out_stride = 0;
  int m = 0, d = 0;
  cudaStream_t stream = nullptr;
};

}  // namespace dsinfer::cuda
