// Launchers of the row-wise kernels: the same arithmetic as the CPU backend's ops (rounding where
// the reference rounds; --fmad=false), so results equal the CPU's except where a libm function
// differs in its last bit (expf in SwiGLU). Framework-free; cudaErrorInvalidValue on bad shapes.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/elementwise/params.h"

namespace dsinfer::cuda {

cudaError_t launch_embed(const EmbedParams& p);
cudaError_t launch_gather_rows(const GatherRowsParams& p);
/// out[rows[i]] = src[i] (rows distinct).
cudaError_t launch_scatter_rows(const ScatterRowsParams& p);
/// acc += src row by row in fp32 (rows distinct, so no two threads share an element).
cudaError_t launch_scatter_add(const ScatterAddParams& p);
/// Sum of squares in double (as the CPU), mean and 1/sqrt in fp32, (x * r) * w rounded to bf16.
cudaError_t launch_rms_norm(const RmsNormParams& p);
cudaError_t launch_rope(const RopeParams& p);
cudaError_t launch_swiglu(const SwigluParams& p);
/// out[d] = sum over copies c in order of pre[c] * x[c][d], in fp32 from 0 (spec §4.2).
cudaError_t launch_hc_pre(const HcPreParams& p);
/// out[j][d] = post[j] * sub[d] + sum over i in order of comb[i][j] * residual[i][d].
cudaError_t launch_hc_post(const HcPostParams& p);
cudaError_t launch_compress_pool(const CompressPoolParams& p);
/// out = values[scale * 256 + code] for each code and its 32-code block's scale byte (d % 32 == 0;
/// codes 8-byte and out 16-byte aligned, their row strides too).
cudaError_t launch_decode_rows(const DecodeRowsParams& p);
/// Block per (token, copy): the three sums in double, the gate in fp32 (expf).
cudaError_t launch_engram_gate(const EngramGateParams& p);
/// Blocks per (token, projection or norm, chunk of the row), or from 128 tokens per (8 tokens, 32
/// of them, chunk), for the (2 + hc) * hc projections and the norm's partial sums in double (into
/// the workspace), then a block per token for their
/// totals, the gates and Sinkhorn in fp32, in the CPU's order. hc <= 8.
cudaError_t launch_hc_mixes(const HcMixesParams& p);
size_t hc_mixes_workspace_bytes(const HcMixesParams& p);

}  // namespace dsinfer::cuda
