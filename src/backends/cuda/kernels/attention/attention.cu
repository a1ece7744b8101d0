// sm90_bf16_sparse_attn_scores + sm90_bf16_sparse_attn_values: the sparse attention in two passes (scores, then the
// softmax and the value sums), sm90_bf16_indexer_scores. The numerics are the CPU backend's: a q.k dot
// product is the exact sum of its bf16 x bf16 products (each exact in fp32, summed in double,
// where the order does not show), rounded once; the online softmax runs over the reference's
// 64-row blocks in row order; a block's value sums are exact in double and fold into the fp32
// accumulator in block order. So the parallel order below gives the CPU's bits.
#include <algorithm>
#include <cmath>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/attention/config.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace attention_config;
using namespace attention_config::sparse_attn;
using attention_config::indexer_scores::kWarpsPerBlock;

// The row a KV index names, or null for an empty slot.
__device__ inline const uint16_t* kv_row(const SparseAttnParams& p, int32_t id) {
  return id < 0         ? nullptr
         : id < p.n_win ? p.window + static_cast<int64_t>(id) * p.d
                        : p.compressed + static_cast<int64_t>(id - p.n_win) * p.d;
}

// Exact sum of the products of 8 bf16 pairs (two uint4 of packed bf16), added to two doubles.
__device__ inline void dot8(const uint4& a, const uint4& b, double& s0, double& s1) {
  const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    s0 += static_cast<double>(bf16x2_lo_to_float(aw[q]) * bf16x2_lo_to_float(bw[q]));
    s1 += static_cast<double>(bf16x2_hi_to_float(aw[q]) * bf16x2_hi_to_float(bw[q]));
  }
}

// Block per (tile of `rows` KV slots, group of 16 heads, token); the group's q staged in shared
// memory. Warp w takes heads w and w + 8 of the group for every row of the tile (two independent
// sums in flight), a lane 8-element chunks of d.
// scores[token - t0][head][j] = fp32(q.k) * scale, -inf for an empty slot.
__global__ void __launch_bounds__(kScoreWarps* kWarp)
    sm90_bf16_sparse_attn_scores(SparseAttnParams p, int t0, int rows) {
  extern __shared__ uint4 qs[];  // [kScoreHeads][d / 8]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t t = t0 + blockIdx.z;
  const int chunks = p.d / 8, h0 = blockIdx.y * kScoreHeads, group = min(kScoreHeads, p.heads - h0);
  const uint4* q = reinterpret_cast<const uint4*>(p.q + t * p.q_stride + static_cast<int64_t>(h0) * p.d);
  for (int i = threadIdx.x; i < group * chunks; i += blockDim.x) qs[i] = q[i];
  __syncthreads();
  const int32_t* idx = p.idx + t * p.idx_stride;
  float* out = p.scores + (static_cast<int64_t>(blockIdx.z) * p.heads + h0) * p.k;
  const int ha = warp, hb = warp + kScoreWarps;  // within the group
  const int j_begin = static_cast<int>(blockIdx.x) * rows, j_end = min(p.k, j_begin + rows);
  for (int j = j_begin; j < j_end; ++j) {
    const uint16_t* row = kv_row(p, idx[j]);
    if (!row) {
      if (lane == 0 && ha < group) out[static_cast<int64_t>(ha) * p.k + j] = -INFINITY;
      if (lane == 0 && hb < group) out[static_cast<int64_t>(hb) * p.k + j] = -INFINITY;
      continue;
    }
    double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
#pragma unroll
    for (int u = 0; u < kMaxChunksPerLane; ++u) {
      const int c = lane + u * kWarp;
      if (c >= chunks) break;
      const uint4 kc = __ldg(reinterpret_cast<const uint4*>(row) + c);
      if (ha < group) dot8(qs[ha * chunks + c], kc, a0, a1);
      if (hb < group) dot8(qs[hb * chunks + c], kc, b0, b1);
    }
    const double da = warp_sum(a0 + a1), db = warp_sum(b0 + b1);
    if (lane == 0 && ha < group) out[static_cast<int64_t>(ha) * p.k + j] = static_cast<float>(da) * p.scale;
    if (lane == 0 && hb < group) out[static_cast<int64_t>(hb) * p.k + j] = static_cast<float>(db) * p.scale;
  }
}

// Block per (128 output dims, head, token). The softmax bookkeeping of all 64-row blocks first
// (maxima, probabilities, their sums in row order, the rescale factors), then the value sums
// block after block.
__global__ void __launch_bounds__(kValueThreads) sm90_bf16_sparse_attn_values(SparseAttnParams p, int t0) {
  extern __shared__ double smem[];
  const int k = p.k, nb = (k + kSoftmaxBlock - 1) / kSoftmaxBlock;
  const uint16_t** rows = reinterpret_cast<const uint16_t**>(smem);  // [k]
  float* s = reinterpret_cast<float*>(rows + k);                     // [k] scores, then P rounded to bf16 (for P.V)
  float* prob = s + k;                                               // [k] P in fp32 (for its sums)
  float* half_max = prob + k;                                        // [2 nb] the live rows' max of each 32 rows
  float* bmax = half_max + 2 * nb;                                   // [nb] the running max after each block
  float* alpha = bmax + nb;                                          // [nb]
  __shared__ float l_final, m_final;
  const int lane = threadIdx.x % kWarp;
  const int64_t t = t0 + blockIdx.z;
  const int h = blockIdx.y;
  const int32_t* idx = p.idx + t * p.idx_stride;
  const float* sc = p.scores + (static_cast<int64_t>(blockIdx.z) * p.heads + h) * k;
  for (int j0 = threadIdx.x - lane; j0 < 2 * nb * kWarp; j0 += blockDim.x) {  // a warp per 32 rows
    const int j = j0 + lane;
    const uint16_t* r = j < k ? kv_row(p, idx[j]) : nullptr;
    float m = r ? sc[j] : -INFINITY;
    if (j < k) rows[j] = r, s[j] = m;
    m = warp_max(m);
    if (lane == 0) half_max[j0 / kWarp] = m;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = -1e30f;
    for (int b = 0; b < nb; ++b) {
      const float next = fmaxf(m, fmaxf(half_max[2 * b], half_max[2 * b + 1]));
      alpha[b] = expf(m - next), bmax[b] = next, m = next;
    }
    m_final = m;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < k; j += blockDim.x) {
    const float pj = rows[j] ? expf(s[j] - bmax[j / kSoftmaxBlock]) : 0.0f;
    prob[j] = pj, s[j] = round_bf16(pj);
  }
  __syncthreads();
  __shared__ double psum[kValueThreads];
  float l = 0.0f;                                   // thread 0's
  for (int b0 = 0; b0 < nb; b0 += kValueThreads) {  // the probabilities' sum of each block, in row order
    const int b = b0 + static_cast<int>(threadIdx.x);
    if (b < nb) {
      double sum = 0;
      for (int j = b * kSoftmaxBlock; j < min(k, (b + 1) * kSoftmaxBlock); ++j)
        if (rows[j]) sum += prob[j];
      psum[threadIdx.x] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int i = 0; i < min(kValueThreads, nb - b0); ++i) l = l * alpha[b0 + i] + static_cast<float>(psum[i]);
    __syncthreads();
  }
  if (threadIdx.x == 0) l_final = l + expf(p.sink[h] - m_final);
  __syncthreads();
  l = l_final;
  // Row group g adds rows [16 g, 16 g + 16) of each block into its partial sums; group 0 adds the
  // other groups' partials (exact in double, so in any order) and folds the block into acc.
  // Two buffers of partials: a group writes block b + 2's only after every thread has passed
  // block b + 1's barrier, which group 0 reaches after reading block b's.
  __shared__ double partials[2][kRowGroups - 1][kColThreads][kValueCols];
  const int group = threadIdx.x / kColThreads, ct = threadIdx.x % kColThreads;
  const int c = (blockIdx.x * kColThreads + ct) * kValueCols;
  const bool active = c < p.d;
  float acc[kValueCols] = {};
  for (int b = 0; b < nb; ++b) {
    double part[kValueCols] = {};
    const int j0 = b * kSoftmaxBlock + group * kGroupRows, j1 = min(k, j0 + kGroupRows);
    if (active)
      for (int jb = j0; jb < j1; jb += 8) {  // 8 rows' loads issued before their sums
        uint32_t v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const uint16_t* r = jb + u < j1 ? rows[jb + u] : nullptr;
          v[u] = r ? __ldg(reinterpret_cast<const uint32_t*>(r + c)) : 0u;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          if (jb + u >= j1 || !rows[jb + u]) continue;
          const float pj = s[jb + u];
          part[0] += static_cast<double>(pj * bf16x2_lo_to_float(v[u]));  // exact products
          part[1] += static_cast<double>(pj * bf16x2_hi_to_float(v[u]));
        }
      }
    if (group > 0)
#pragma unroll
      for (int i = 0; i < kValueCols; ++i) partials[b % 2][group - 1][ct][i] = part[i];
    __syncthreads();
    if (group == 0)
#pragma unroll
      for (int i = 0; i < kValueCols; ++i) {
        for (int g = 0; g < kRowGroups - 1; ++g) part[i] += partials[b % 2][g][ct][i];
        acc[i] = acc[i] * alpha[b] + static_cast<float>(part[i]);
      }
  }
  if (group != 0 || !active) return;
  uint16_t* out = p.out + t * p.out_stride + static_cast<int64_t>(h) * p.d + c;
  const uint32_t lo = float_to_bf16(acc[0] / l);
  const uint32_t hi = float_to_bf16(acc[1] / l);
  *reinterpret_cast<uint32_t*>(out) = lo | hi << 16;
}

__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) sm90_bf16_indexer_scores(IndexerScoresParams p) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (w >= static_cast<int64_t>(p.n) * p.T) return;
  const int64_t t = w / p.T, tau = w % p.T;
  float* out = p.out + t * p.out_stride + tau;
  if (tau >= p.visible[t]) {
    if (lane == 0) *out = -INFINITY;
    return;
  }
  const uint16_t* key = p.keys + (p.key_table.blocks ? p.key_table.row(t, tau) : tau) * static_cast<int64_t>(p.d);
  double term = 0;  // lane = head
  if (lane < p.heads) {
    const uint16_t* q = p.q + t * p.q_stride + static_cast<int64_t>(lane) * p.d;
    double dot = 0;
    for (int c = 0; c < p.d; ++c) dot += static_cast<double>(bf16_to_float(q[c])) * bf16_to_float(key[c]);
    const float dv = fmaxf(round_bf16(static_cast<float>(dot)), 0.0f);  // bf16, then relu
    term = round_bf16(dv * round_bf16(bf16_to_float(p.weights[t * p.heads + lane]) * p.weight_scale));
  }
  const double exact = warp_sum(term);  // the bf16 terms sum exactly in double: order-free
  if (lane == 0) *out = round_bf16(static_cast<float>(exact));
}

}  // namespace

size_t sparse_attn_workspace_bytes(const SparseAttnParams& p) {
  return static_cast<size_t>(std::min(p.n, kTokensPerPass)) * p.heads * p.k * sizeof(float);
}

cudaError_t launch_sparse_attn(const SparseAttnParams& p) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (p.n < 0 || p.heads <= 0 || p.d <= 0 || p.d % 8 != 0 || p.d > kMaxD || p.k < 0 || p.q_stride % 8 != 0 ||
      p.out_stride % 2 != 0 || !aligned(p.q) || !aligned(p.window) || !aligned(p.compressed) ||
      (p.n > 0 && p.k > 0 && !p.scores))
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const size_t q_bytes = static_cast<size_t>(std::min(p.heads, kScoreHeads)) * p.d * 2;
  const int nb = (p.k + kSoftmaxBlock - 1) / kSoftmaxBlock;
  const size_t v_bytes = static_cast<size_t>(p.k) * (sizeof(void*) + 2 * sizeof(float)) + nb * 4 * sizeof(float);
  if (v_bytes > kSharedBytesDefault - kValuesStaticBytes) {  // with the static shared memory past the 48 KB default
    if (const cudaError_t e = cudaFuncSetAttribute(
            sm90_bf16_sparse_attn_values, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(v_bytes));
        e != cudaSuccess)
      return e;
  }
  // Tiles of 8 KV slots give a decode step's few tokens several blocks an SM; longer ones for
  // prefill, where each block's staging of q costs more than the blocks' count gains.
  const int rows = p.n >= 64 ? 32 : 8;
  const unsigned head_groups = static_cast<unsigned>((p.heads + kScoreHeads - 1) / kScoreHeads);
  for (int t0 = 0; t0 < p.n; t0 += kTokensPerPass) {
    const unsigned tokens = static_cast<unsigned>(std::min(kTokensPerPass, p.n - t0));
    if (p.k > 0) {
      const dim3 grid(static_cast<unsigned>((p.k + rows - 1) / rows), head_groups, tokens);
      sm90_bf16_sparse_attn_scores<<<grid, kScoreWarps * kWarp, q_bytes, p.stream>>>(p, t0, rows);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    const dim3 grid(static_cast<unsigned>((p.d + kColThreads * kValueCols - 1) / (kColThreads * kValueCols)),
                    static_cast<unsigned>(p.heads), tokens);
    sm90_bf16_sparse_attn_values<<<grid, kValueThreads, v_bytes, p.stream>>>(p, t0);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t launch_indexer_scores(const IndexerScoresParams& p) {
  if (p.n < 0 || p.heads <= 0 || p.heads > attention_config::indexer_scores::kMaxHeads || p.d <= 0 || p.T < 0 ||
      (p.key_table.blocks && p.key_table.rows_per_block <= 0))
    return cudaErrorInvalidValue;
  if (static_cast<int64_t>(p.n) * p.T == 0) return cudaSuccess;
  // A launch covers whole token rows within kMaxBlocks blocks: n x T warps of a long prefill
  // would pass grid.x's 2^31 - 1 (and the unsigned count would wrap).
  using attention_config::indexer_scores::kMaxBlocks;
  const int64_t tokens = std::max<int64_t>(1, kMaxBlocks * kWarpsPerBlock / p.T);
  for (int64_t t0 = 0; t0 < p.n; t0 += tokens) {
    IndexerScoresParams part = p;
    part.n = static_cast<int>(std::min<int64_t>(tokens, p.n - t0));
    part.q += t0 * p.q_stride;
    part.weights += t0 * p.heads;
    part.visible += t0;
    part.out += t0 * p.out_stride;
    if (part.key_table.blocks) part.key_table.blocks += t0 * p.key_table.blocks_stride;
    const int64_t warps = static_cast<int64_t>(part.n) * p.T;
    sm90_bf16_indexer_scores<<<static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock),
                               kWarpsPerBlock * kWarp, 0, p.stream>>>(part);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace dsinfer::cuda
