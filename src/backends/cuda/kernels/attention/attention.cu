// sm90_bf16_sparse_attn_scores, sm90_f32_sparse_attn_softmax, sm90_bf16_sparse_attn_values: the sparse attention
// in three passes (scores, the softmax, the value sums), sm90_bf16_indexer_scores. The indexer's
// numerics are the CPU backend's: a q.k dot product is the exact sum of its bf16 x bf16 products
// (each exact in fp32, summed in double), rounded once, so its bits are the CPU's. The attention
// keeps the CPU's structure (the online softmax over the reference's 64-row blocks in row order,
// P rounded to bf16, each block's value sums folded into the fp32 accumulator in block order) but
// sums its dot products in fp32 and a block's values on bf16 tensor cores (fp32 sums), in an order
// fixed per output.
#include <algorithm>
#include <cmath>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/attention/config.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace attention_config;
using namespace attention_config::sparse_attn;
using attention_config::indexer_scores::kFewTokensKeys;
using attention_config::indexer_scores::kKeysPerBlock;
using attention_config::indexer_scores::kWarpsPerBlock;

// A token's row of scores (then P) in the workspace: its k slots padded to whole softmax blocks,
// P zero past k, so that the value pass copies whole 16-byte pieces of a block.
__host__ __device__ inline int padded_slots(int k) {
  return (k + kSoftmaxBlock - 1) / kSoftmaxBlock * kSoftmaxBlock;
}

// The row a KV index names, or null for an empty slot.
__device__ inline const uint16_t* kv_row(const SparseAttnParams& p, int32_t id) {
  return id < 0         ? nullptr
         : id < p.n_win ? p.window + static_cast<int64_t>(id) * p.d
                        : p.compressed + static_cast<int64_t>(id - p.n_win) * p.d;
}

// The three passes of the sparse attention over a pass of tokens (workspace: the scores, then
// alpha and l, as sparse_attn_workspace_bytes lays them out). The scores and the value sums are
// fp32 sums in a fixed order (the issue's numerics contract: the CPU sums exactly), each item's
// order its own whatever the launch: the same bits for a token alone or in a batch. A block reads
// a KV row once for a group of `group` heads: up to kHeadGroup (a decode batch's 64 heads at
// V4.1-Flash), fewer for a few tokens, whose launches would otherwise fill a few SMs.

// Block per (tile of kScoreRows slots, head group, token): the group's q staged in shared memory as
// bf16 pairs [d / 2][heads], the tile's rows [kScoreRows][d / 2 + 1] (padded: lane j reads row j
// without bank conflicts); a warp takes a head and the tile's 32 rows, a lane a row.
// scores[token][head][j] = (q.k) * scale, -inf for an empty slot; q.k in four fp32 partial sums
// (the pairs' low and high halves of even and odd pairs), added as (s0 + s1) + (s2 + s3).
__global__ void __launch_bounds__(kScoreThreads) sm90_bf16_sparse_attn_scores(SparseAttnParams p, int t0, int group) {
  extern __shared__ uint32_t smem32[];
  const int half = p.d / 2, h0 = blockIdx.y * group, heads = min(group, p.heads - h0);
  uint32_t* qs = smem32;             // [half][heads]
  uint32_t* ks = qs + half * heads;  // [kScoreRows][half + 1]
  __shared__ bool live[kScoreRows];
  const int64_t t = t0 + blockIdx.z;
  const uint32_t* q = reinterpret_cast<const uint32_t*>(p.q + t * p.q_stride + static_cast<int64_t>(h0) * p.d);
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x) qs[(i % half) * heads + i / half] = q[i];
  const int j0 = static_cast<int>(blockIdx.x) * kScoreRows, rows = min(kScoreRows, p.k - j0);
  const int32_t* idx = p.idx + t * p.idx_stride + j0;
  for (int i = threadIdx.x; i < rows * half; i += blockDim.x) {
    const int j = i / half, c2 = i % half;
    const uint16_t* row = kv_row(p, idx[j]);
    ks[j * (half + 1) + c2] = row ? __ldg(reinterpret_cast<const uint32_t*>(row) + c2) : 0u;
    if (c2 == 0) live[j] = row != nullptr;
  }
  __syncthreads();
  const int kp = padded_slots(p.k);
  float* out = p.scores + (static_cast<int64_t>(blockIdx.z) * p.heads + h0) * kp + j0;
  const int j = threadIdx.x % kScoreRows;
  if (j >= rows) return;
  const uint32_t* kr = ks + j * (half + 1);
  for (int h = threadIdx.x / kScoreRows; h < heads; h += kScoreThreads / kScoreRows) {
    if (!live[j]) {
      out[static_cast<int64_t>(h) * kp + j] = -INFINITY;
      continue;
    }
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int c2 = 0;
    for (; c2 + 1 < half; c2 += 2) {
      const uint32_t a0 = qs[c2 * heads + h], b0 = kr[c2], a1 = qs[(c2 + 1) * heads + h], b1 = kr[c2 + 1];
      s0 = fmaf(bf16x2_lo_to_float(a0), bf16x2_lo_to_float(b0), s0);
      s1 = fmaf(bf16x2_hi_to_float(a0), bf16x2_hi_to_float(b0), s1);
      s2 = fmaf(bf16x2_lo_to_float(a1), bf16x2_lo_to_float(b1), s2);
      s3 = fmaf(bf16x2_hi_to_float(a1), bf16x2_hi_to_float(b1), s3);
    }
    if (c2 < half) {
      const uint32_t a0 = qs[c2 * heads + h], b0 = kr[c2];
      s0 = fmaf(bf16x2_lo_to_float(a0), bf16x2_lo_to_float(b0), s0);
      s1 = fmaf(bf16x2_hi_to_float(a0), bf16x2_hi_to_float(b0), s1);
    }
    out[static_cast<int64_t>(h) * kp + j] = ((s0 + s1) + (s2 + s3)) * p.scale;
  }
}

// A warp per (token, head): over the reference's 64-row blocks in order, the running max, each
// block's rescale factor alpha, P = exp(s - max) over the scores (rounded to bf16, as P.V uses it;
// 0 for an empty slot and past k), and the blocks' probability sums (fp32 values added in row order in
// double) folded into l with alpha; l then takes the sink.
__global__ void __launch_bounds__(kSoftmaxWarps* kWarp)
    sm90_f32_sparse_attn_softmax(SparseAttnParams p, float* alpha, float* l_out) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = static_cast<int>(blockIdx.x) * kSoftmaxWarps + warp;
  if (h >= p.heads) return;
  const int64_t th = static_cast<int64_t>(blockIdx.y) * p.heads + h;
  const int k = p.k, nb = (k + kSoftmaxBlock - 1) / kSoftmaxBlock;
  float* s = p.scores + th * padded_slots(k);
  __shared__ float probs[kSoftmaxWarps][kSoftmaxBlock];
  float* prob = probs[warp];
  float m = -1e30f, l = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const int ja = b * kSoftmaxBlock + lane, jb = ja + kWarp;
    const float sa = ja < k ? s[ja] : -INFINITY, sb = jb < k ? s[jb] : -INFINITY;
    const float next = fmaxf(m, warp_max(fmaxf(sa, sb)));
    const float a = expf(m - next);
    const float pa = ja < k ? expf(sa - next) : 0.0f, pb = jb < k ? expf(sb - next) : 0.0f;
    prob[lane] = pa, prob[lane + kWarp] = pb;
    __syncwarp();
    double sum = 0;  // every lane the same, in row order
    for (int r = 0; r < kSoftmaxBlock; ++r) sum += prob[r];
    __syncwarp();
    s[ja] = round_bf16(pa), s[jb] = round_bf16(pb);  // 0 past k
    if (lane == 0) alpha[th * nb + b] = a;
    l = l * a + static_cast<float>(sum);
    m = next;
  }
  if (lane == 0) l_out[th] = l + expf(p.sink[h] - m);
}

// Block per (kValueDims dims, kHeadTiles x 16 heads, token), on bf16 tensor cores. For each 64-row
// block in order, the block's rows (dims [c0, c0 + kValueDims)) and the heads' P are staged in
// shared memory, kStages - 1 blocks ahead; a warp's D = P . V over the block is 4 chained
// mma.m16n8k16 (16 rows each; P is bf16 already, so the products are exact in fp32) for its 16 heads
// and its columns of 8 dims, folded into its accumulator: acc = acc * alpha + D. out = bf16(acc / l).
// An output's sum does not depend on the tiling (the few tokens' smaller blocks give the same bits).
constexpr int kVStride = kValueDims + 8;  // bf16 a staged row: ldmatrix's 8 rows on distinct banks
constexpr int kPStride = kSoftmaxBlock + 8;  // floats a staged row of P: a half-warp's float2 reads on distinct banks

__host__ __device__ constexpr int value_stage_bytes(int head_tiles) {
  return kSoftmaxBlock * kVStride * 2 + head_tiles * 16 * kPStride * 4;
}

template <int kHeadTiles, int kStages>
__global__ void __launch_bounds__(kValueWarps* kWarp)
    sm90_bf16_sparse_attn_values(SparseAttnParams p, int t0, const float* alpha, const float* l_in) {
  constexpr int kHeads = 16 * kHeadTiles, kWarpsPerTile = kValueWarps / kHeadTiles;
  constexpr int kColumns = kValueDims / 8 / kWarpsPerTile;  // a warp's 8-dim columns
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, q = lane % 4;
  const int64_t tl = blockIdx.z, t = t0 + tl;
  const int c0 = static_cast<int>(blockIdx.x) * kValueDims, h0 = static_cast<int>(blockIdx.y) * kHeads;
  const int k = p.k, kp = padded_slots(k), nb = kp / kSoftmaxBlock;
  const int32_t* idx = p.idx + t * p.idx_stride;
  const float* P = p.scores + (tl * p.heads + h0) * kp;
  const auto stage_at = [&](int b) { return smem + (b % kStages) * value_stage_bytes(kHeadTiles); };
  // Starts copying block b's rows and P into its stage (zeros for empty slots, rows past k, dims
  // past d and heads past the count); a commit group a block, empty past the last.
  const auto stage = [&](int b) {
    if (b < nb) {
      uint16_t* vs = reinterpret_cast<uint16_t*>(stage_at(b));
      float* ps = reinterpret_cast<float*>(stage_at(b) + kSoftmaxBlock * kVStride * 2);
      const int jb = b * kSoftmaxBlock;
      for (int i = threadIdx.x; i < kSoftmaxBlock * (kValueDims / 8); i += blockDim.x) {
        const int j = i / (kValueDims / 8), c = c0 + 8 * (i % (kValueDims / 8));
        const uint16_t* row = jb + j < k && c < p.d ? kv_row(p, idx[jb + j]) : nullptr;
        cp_async16(vs + j * kVStride + (c - c0), row ? row + c : p.q, row != nullptr);
      }
      for (int i = threadIdx.x; i < kHeads * (kSoftmaxBlock / 4); i += blockDim.x) {
        const int hh = i / (kSoftmaxBlock / 4), c = 4 * (i % (kSoftmaxBlock / 4));
        const bool in = h0 + hh < p.heads;
        cp_async16(ps + hh * kPStride + c, in ? P + static_cast<int64_t>(hh) * kp + jb + c : P, in);
      }
    }
    cp_async_commit();
  };
  const int tile = warp / kWarpsPerTile, col0 = (warp % kWarpsPerTile) * kColumns;
  const int ha = h0 + 16 * tile + g, hb = ha + 8;  // the lane's heads (D rows g and g + 8)
  float acc[kColumns][4] = {};
  for (int b = 0; b < kStages - 1; ++b) stage(b);
  for (int b = 0; b < nb; ++b) {
    stage(b + kStages - 1);
    cp_async_wait<kStages - 1>();  // block b's group
    __syncthreads();
    const uint16_t* vs = reinterpret_cast<const uint16_t*>(stage_at(b));
    const float* ps = reinterpret_cast<const float*>(stage_at(b) + kSoftmaxBlock * kVStride * 2) + 16 * tile * kPStride;
    float d[kColumns][4] = {};
#pragma unroll
    for (int s = 0; s < kSoftmaxBlock / 16; ++s) {
      const float* pa = ps + g * kPStride + 16 * s + 2 * q;
      const float2 p00 = *reinterpret_cast<const float2*>(pa), p01 = *reinterpret_cast<const float2*>(pa + 8);
      const float2 p10 = *reinterpret_cast<const float2*>(pa + 8 * kPStride);
      const float2 p11 = *reinterpret_cast<const float2*>(pa + 8 * kPStride + 8);
      const uint32_t a[4] = {pack_bf16x2(p00.x, p00.y), pack_bf16x2(p10.x, p10.y), pack_bf16x2(p01.x, p01.y),
                             pack_bf16x2(p11.x, p11.y)};
      // Lanes 8m .. 8m + 7 address matrix m: rows 16s + 8 (m % 2) + lane % 8 of column pair m / 2.
      const uint16_t* row = vs + (16 * s + 8 * ((lane / 8) % 2) + lane % 8) * kVStride + 8 * (lane / 16);
#pragma unroll
      for (int c = 0; c < kColumns; c += 2) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, row + 8 * (col0 + c));
        mma_bf16(a, r[0], r[1], d[c]);
        mma_bf16(a, r[2], r[3], d[c + 1]);
      }
    }
    const float* alpha_t = alpha + tl * p.heads * nb;
    const float aa = ha < p.heads ? alpha_t[static_cast<int64_t>(ha) * nb + b] : 0.0f;
    const float ab = hb < p.heads ? alpha_t[static_cast<int64_t>(hb) * nb + b] : 0.0f;
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      acc[c][0] = acc[c][0] * aa + d[c][0];
      acc[c][1] = acc[c][1] * aa + d[c][1];
      acc[c][2] = acc[c][2] * ab + d[c][2];
      acc[c][3] = acc[c][3] * ab + d[c][3];
    }
    __syncthreads();  // every warp is done with the stage before it is loaded again
  }
#pragma unroll
  for (int c = 0; c < kColumns; ++c) {
    const int dim = c0 + 8 * (col0 + c) + 2 * q;
    if (dim >= p.d) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = half ? hb : ha;
      if (h >= p.heads) continue;
      const float l = l_in[tl * p.heads + h];
      const uint32_t lo = float_to_bf16(acc[c][2 * half] / l), hi = float_to_bf16(acc[c][2 * half + 1] / l);
      *reinterpret_cast<uint32_t*>(p.out + t * p.out_stride + static_cast<int64_t>(h) * p.d + dim) = lo | hi << 16;
    }
  }
}

// Block per (tile of `tile` keys, token): the token's q staged once in shared memory as
// floats [d][32] (lane h reads head h's column: no bank conflicts), its weights scaled in each
// lane's register; warp w takes keys w, w + kWarpsPerBlock, ... of the tile, each key row staged
// in the warp's slice of shared memory, and lane h sums head h's dot product over d in double, in
// d's order.
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) sm90_bf16_indexer_scores(IndexerScoresParams p, int tile) {
  extern __shared__ float qs[];  // [d][kWarp], then each warp's key row [d]
  float* key = qs + p.d * kWarp + (threadIdx.x / kWarp) * p.d;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t t = blockIdx.y;
  const int64_t tau0 = static_cast<int64_t>(blockIdx.x) * tile, tau_end = min(static_cast<int64_t>(p.T), tau0 + tile);
  const int64_t visible = p.visible[t];
  float* out = p.out + t * p.out_stride;
  if (tau0 >= visible) {  // none of the tile's keys is visible
    for (int64_t tau = tau0 + threadIdx.x; tau < tau_end; tau += blockDim.x) out[tau] = -INFINITY;
    return;
  }
  const uint16_t* q = p.q + t * p.q_stride;
  for (int i = threadIdx.x; i < p.heads * p.d; i += blockDim.x) qs[(i % p.d) * kWarp + i / p.d] = bf16_to_float(q[i]);
  const float wt = lane < p.heads ? round_bf16(bf16_to_float(p.weights[t * p.heads + lane]) * p.weight_scale) : 0.0f;
  __syncthreads();
  for (int64_t tau = tau0 + warp; tau < tau_end; tau += kWarpsPerBlock) {
    if (tau >= visible) {
      if (lane == 0) out[tau] = -INFINITY;
      continue;
    }
    const uint16_t* k = p.keys + (p.key_table.blocks ? p.key_table.row(t, tau) : tau) * static_cast<int64_t>(p.d);
    for (int c = lane; c < p.d; c += kWarp) key[c] = bf16_to_float(k[c]);
    __syncwarp();
    double term = 0;  // lane = head
    if (lane < p.heads) {
      double dot = 0;
      for (int c = 0; c < p.d; ++c) dot += static_cast<double>(qs[c * kWarp + lane]) * key[c];
      const float dv = fmaxf(round_bf16(static_cast<float>(dot)), 0.0f);  // bf16, then relu
      term = round_bf16(dv * wt);
    }
    const double exact = warp_sum(term);  // the bf16 terms sum exactly in double: order-free
    if (lane == 0) out[tau] = round_bf16(static_cast<float>(exact));
    __syncwarp();  // the key row is read before the next is staged
  }
}

template <int kHeadTiles, int kStages>
cudaError_t launch_values(const SparseAttnParams& p, int t0, unsigned tokens, const float* alpha, const float* l) {
  constexpr int bytes = kStages * value_stage_bytes(kHeadTiles);
  static const cudaError_t opt_in = cudaFuncSetAttribute(sm90_bf16_sparse_attn_values<kHeadTiles, kStages>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (opt_in != cudaSuccess) return opt_in;
  const dim3 grid(static_cast<unsigned>((p.d + kValueDims - 1) / kValueDims),
                  static_cast<unsigned>((p.heads + 16 * kHeadTiles - 1) / (16 * kHeadTiles)), tokens);
  sm90_bf16_sparse_attn_values<kHeadTiles, kStages><<<grid, kValueWarps * kWarp, bytes, p.stream>>>(p, t0, alpha, l);
  return cudaGetLastError();
}

}  // namespace

size_t sparse_attn_workspace_bytes(const SparseAttnParams& p) {
  const int kp = padded_slots(p.k);  // the scores (then P), alpha and l of a pass
  return static_cast<size_t>(std::min(p.n, kTokensPerPass)) * p.heads * (kp + kp / kSoftmaxBlock + 1) * sizeof(float);
}

cudaError_t launch_sparse_attn(const SparseAttnParams& p) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (p.n < 0 || p.heads <= 0 || p.d <= 0 || p.d % 8 != 0 || p.d > kMaxD || p.k < 0 || p.q_stride % 8 != 0 ||
      p.out_stride % 2 != 0 || !aligned(p.q) || !aligned(p.window) || !aligned(p.compressed) || (p.n > 0 && !p.scores))
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const int nb = (p.k + kSoftmaxBlock - 1) / kSoftmaxBlock;
  const int pass = std::min(p.n, kTokensPerPass);
  float* alpha = p.scores + static_cast<int64_t>(pass) * p.heads * padded_slots(p.k);
  float* l = alpha + static_cast<int64_t>(pass) * p.heads * nb;
  // A few tokens' heads in small groups, so that their blocks fill the GPU (the sums are the same).
  const bool few = p.n < kFewTokens;
  const int group = few ? kSmallScoreGroup : kHeadGroup;
  const size_t score_bytes = static_cast<size_t>(std::min(p.heads, group)) * (p.d / 2) * 4 +
                             static_cast<size_t>(kScoreRows) * (p.d / 2 + 1) * 4;
  if (score_bytes > kSharedBytesDefault) {
    if (const cudaError_t e = cudaFuncSetAttribute(
            sm90_bf16_sparse_attn_scores, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(score_bytes));
        e != cudaSuccess)
      return e;
  }
  const unsigned head_groups = static_cast<unsigned>((p.heads + group - 1) / group);
  for (int t0 = 0; t0 < p.n; t0 += kTokensPerPass) {
    const unsigned tokens = static_cast<unsigned>(std::min(kTokensPerPass, p.n - t0));
    if (p.k > 0) {
      sm90_bf16_sparse_attn_scores<<<dim3(static_cast<unsigned>((p.k + kScoreRows - 1) / kScoreRows), head_groups,
                                          tokens),
                                     kScoreThreads, score_bytes, p.stream>>>(p, t0, group);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    sm90_f32_sparse_attn_softmax<<<dim3(static_cast<unsigned>((p.heads + kSoftmaxWarps - 1) / kSoftmaxWarps), tokens),
                                   kSoftmaxWarps * kWarp, 0, p.stream>>>(p, alpha, l);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const cudaError_t e = few ? launch_values<kSmallValueHeadTiles, kSmallValueStages>(p, t0, tokens, alpha, l)
                              : launch_values<kValueHeadTiles, kValueStages>(p, t0, tokens, alpha, l);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t launch_indexer_scores(const IndexerScoresParams& p) {
  if (p.n < 0 || p.heads <= 0 || p.heads > attention_config::indexer_scores::kMaxHeads || p.d <= 0 ||
      p.d > attention_config::indexer_scores::kMaxD || p.T < 0 ||
      (p.key_table.blocks && p.key_table.rows_per_block <= 0))
    return cudaErrorInvalidValue;
  if (static_cast<int64_t>(p.n) * p.T == 0) return cudaSuccess;
  // A launch covers at most kMaxTokens tokens (grid.y).
  using attention_config::indexer_scores::kMaxTokens;
  // A few tokens' keys in short tiles, so that their blocks fill the GPU (each key's sum is the same).
  const int tile = p.n < kFewTokens ? kFewTokensKeys : kKeysPerBlock;
  const unsigned tiles = static_cast<unsigned>((p.T + tile - 1) / tile);
  const size_t shared = static_cast<size_t>(p.d) * (kWarp + kWarpsPerBlock) * sizeof(float);
  for (int64_t t0 = 0; t0 < p.n; t0 += kMaxTokens) {
    IndexerScoresParams part = p;
    part.n = static_cast<int>(std::min<int64_t>(kMaxTokens, p.n - t0));
    part.q += t0 * p.q_stride;
    part.weights += t0 * p.heads;
    part.visible += t0;
    part.out += t0 * p.out_stride;
    if (part.key_table.blocks) part.key_table.blocks += t0 * p.key_table.blocks_stride;
    sm90_bf16_indexer_scores<<<dim3(tiles, static_cast<unsigned>(part.n)), kWarpsPerBlock * kWarp, shared, p.stream>>>(
        part, tile);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace dsinfer::cuda
