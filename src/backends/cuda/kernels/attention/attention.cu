// sm90_bf16_sparse_attn_scores, sm90_f32_sparse_attn_softmax, sm90_bf16_sparse_attn_values: the sparse attention
// in three passes (scores, the softmax, the value sums); sm90_bf16_sparse_attn_fused: the same in one kernel, with
// the same bits, for calls of many tokens. They keep the CPU's structure (the online softmax over the reference's
// 64-row blocks in row order, P rounded to bf16, each block's value sums folded into the fp32 accumulator in block
// order) but sum their dot products and a block's values on bf16 tensor cores (fp32 sums), in an order fixed per
// output.
#include <algorithm>
#include <cmath>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/common/wgmma.cuh"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/attention/config.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace attention_config;
using namespace attention_config::sparse_attn;

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
// alpha and l, as sparse_attn_workspace_bytes lays them out). The scores and the value sums run on
// bf16 tensor cores, fp32 sums in a fixed order per output (the issue's numerics contract: the CPU
// sums exactly): an output's mma chain does not depend on the other rows and columns of its tile,
// so a token gets the same bits alone or in a batch, in a few tokens' smaller blocks or the batch's.

constexpr int kSStride = kScoreChunk + 8;  // bf16 a staged row of a d chunk: the fragments' lanes on distinct banks

__host__ __device__ constexpr int score_stage_bytes(int slots, int head_tiles) {
  return (slots + 16 * head_tiles) * kSStride * 2;
}
// A block's warps: kWarps for kSmallScoreSlots slots, more for more.
__host__ __device__ constexpr int score_warps(int slots) {
  return slots / kSmallScoreSlots * kWarps;
}

// Block per (kSlots slots, kHeadTiles x 16 heads, token). Over d in chunks (kStages cp.async
// stages of the slots' rows and the heads' q, kStages - 1 chunks in flight), a warp's D = q . K^T for its 16 heads and
// its 8-slot columns is one chain of mma.m16n8k16 over d in order (products exact in fp32); a row of K is the B
// operand's column as it lies in memory. scores[token][head][j] = D * scale, -inf for an empty slot.
template <int kHeadTiles, int kSlots, int kStages>
__global__ void __launch_bounds__(score_warps(kSlots) * kWarp)
    sm90_bf16_sparse_attn_scores(SparseAttnParams p, int t0) {
  after_prior_grids();
  constexpr int kHeads = 16 * kHeadTiles, kWarpsPerTile = score_warps(kSlots) / kHeadTiles;
  constexpr int kColumns = kSlots / 8 / kWarpsPerTile;  // a warp's 8-slot columns
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, q = lane % 4;
  const int64_t tl = blockIdx.z, t = t0 + tl;
  const int j0 = static_cast<int>(blockIdx.x) * kSlots, h0 = static_cast<int>(blockIdx.y) * kHeads;
  const int32_t* idx = p.idx + t * p.idx_stride;
  const uint16_t* qt = p.q + t * p.q_stride + static_cast<int64_t>(h0) * p.d;
  const int chunks = (p.d + kScoreChunk - 1) / kScoreChunk;
  const auto stage_at = [&](int c) {
    return reinterpret_cast<uint16_t*>(smem + (c % kStages) * score_stage_bytes(kSlots, kHeadTiles));
  };
  // Starts copying d chunk c of the slots' rows and the heads' q (zeros for empty slots, slots past
  // k, heads past the count, d past its end); a commit group a chunk, empty past the last.
  const auto stage = [&](int c) {
    if (c < chunks) {
      uint16_t* ks = stage_at(c);
      uint16_t* qs = ks + kSlots * kSStride;
      for (int i = threadIdx.x; i < (kSlots + kHeads) * (kScoreChunk / 8); i += blockDim.x) {
        const int r = i / (kScoreChunk / 8), col = c * kScoreChunk + 8 * (i % (kScoreChunk / 8));
        const uint16_t* src = nullptr;
        if (col < p.d) {
          if (r < kSlots)
            src = j0 + r < p.k ? kv_row(p, idx[j0 + r]) : nullptr;
          else if (h0 + r - kSlots < p.heads)
            src = qt + static_cast<int64_t>(r - kSlots) * p.d;
        }
        cp_async16((r < kSlots ? ks + r * kSStride : qs + (r - kSlots) * kSStride) + (col - c * kScoreChunk),
                   src ? src + col : p.q, src != nullptr);
      }
    }
    cp_async_commit();
  };
  const int tile = warp / kWarpsPerTile, col0 = (warp % kWarpsPerTile) * kColumns;
  float d[kColumns][4] = {};
  for (int c = 0; c < kStages - 1; ++c) stage(c);
  for (int c = 0; c < chunks; ++c) {
    stage(c + kStages - 1);
    cp_async_wait<kStages - 1>();  // chunk c's group
    __syncthreads();
    const uint16_t* ks = stage_at(c);
    const uint16_t* qa = ks + kSlots * kSStride + (16 * tile + g) * kSStride;
    const int steps = (min(kScoreChunk, p.d - c * kScoreChunk) + 15) / 16;
    for (int s = 0; s < steps; ++s) {
      const int kk = 16 * s + 2 * q;
      const uint32_t a[4] = {*reinterpret_cast<const uint32_t*>(qa + kk),
                             *reinterpret_cast<const uint32_t*>(qa + 8 * kSStride + kk),
                             *reinterpret_cast<const uint32_t*>(qa + kk + 8),
                             *reinterpret_cast<const uint32_t*>(qa + 8 * kSStride + kk + 8)};
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        const uint16_t* kb = ks + (8 * (col0 + j) + g) * kSStride + kk;
        mma_bf16(a, *reinterpret_cast<const uint32_t*>(kb), *reinterpret_cast<const uint32_t*>(kb + 8), d[j]);
      }
    }
    __syncthreads();  // every warp is done with the stage before it is loaded again
  }
  const int kp = padded_slots(p.k);
#pragma unroll
  for (int j = 0; j < kColumns; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = h0 + 16 * tile + g + (e >= 2 ? 8 : 0), slot = j0 + 8 * (col0 + j) + 2 * q + (e & 1);
      if (h >= p.heads || slot >= p.k) continue;
      p.scores[(tl * p.heads + h) * kp + slot] = idx[slot] < 0 ? -INFINITY : d[j][e] * p.scale;
    }
}

// A warp per (token, head): over the reference's 64-row blocks in order, the running max, each
// block's rescale factor alpha, P = exp(s - max) as bf16 (as P.V uses it; 0 for an empty slot and
// past k) over the first half of the row's scores (bytes the warp has read by then), and the
// blocks' probability sums folded into l with alpha; l then takes the sink. A block's sum is in
// double over a fixed tree (each lane's pair, then the lanes by xor shuffles, which leave every
// lane the same bits: a + b == b + a): the CPU adds in row order, and the two differ only where a
// double add rounds, which the float l seldom shows (the per-op test's bound). A sum in row order
// would convert all 64 values to double in every lane, at the conversions' low rate.
__global__ void __launch_bounds__(kSoftmaxWarps* kWarp)
    sm90_f32_sparse_attn_softmax(SparseAttnParams p, float* alpha, float* l_out) {
  after_prior_grids();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = static_cast<int>(blockIdx.x) * kSoftmaxWarps + warp;
  if (h >= p.heads) return;
  const int64_t th = static_cast<int64_t>(blockIdx.y) * p.heads + h;
  const int k = p.k, nb = (k + kSoftmaxBlock - 1) / kSoftmaxBlock;
  float* s = p.scores + th * padded_slots(k);
  uint16_t* P = reinterpret_cast<uint16_t*>(s);  // block b's P over the floats of block b / 2
  float m = -1e30f, l = 0.0f;
  // Each block's scores are loaded while the block before is worked on.
  float sa = lane < k ? s[lane] : -INFINITY, sb = lane + kWarp < k ? s[lane + kWarp] : -INFINITY;
  for (int b = 0; b < nb; ++b) {
    const int ja = b * kSoftmaxBlock + lane, jb = ja + kWarp;
    const int na = ja + kSoftmaxBlock, nb2 = na + kWarp;
    const float sa_next = na < k ? s[na] : -INFINITY, sb_next = nb2 < k ? s[nb2] : -INFINITY;
    const float next = fmaxf(m, warp_max(fmaxf(sa, sb)));
    const float a = expf(m - next);
    const float pa = ja < k ? expf(sa - next) : 0.0f, pb = jb < k ? expf(sb - next) : 0.0f;
    double sum = static_cast<double>(pa) + static_cast<double>(pb);
    for (int o = kWarp / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    P[ja] = float_to_bf16(pa), P[jb] = float_to_bf16(pb);  // 0 past k
    if (lane == 0) alpha[th * nb + b] = a;
    l = l * a + static_cast<float>(sum);
    m = next;
    sa = sa_next, sb = sb_next;
  }
  if (lane == 0) l_out[th] = l + expf(p.sink[h] - m);
}

// Block per (kValueDims dims, kHeadTiles x 16 heads, token), on bf16 tensor cores. For each 64-row
// block in order, the block's rows (dims [c0, c0 + kValueDims)) and the heads' P are staged in
// shared memory, kStages - 1 blocks ahead; a warp's D = P . V over the block is 4 chained
// mma.m16n8k16 (16 rows each; P is bf16 already, so the products are exact in fp32) for its 16 heads
// and its columns of 8 dims, folded into its accumulator: acc = acc * alpha + D. out = bf16(acc / l).
// An output's sum does not depend on the tiling (the few tokens' smaller blocks give the same bits).
constexpr int kVStride = kValueDims + 8;     // bf16 a staged row: ldmatrix's 8 rows on distinct banks
constexpr int kPStride = kSoftmaxBlock + 8;  // bf16 a staged row of P: a warp's 4-byte reads on distinct banks

__host__ __device__ constexpr int value_stage_bytes(int head_tiles) {
  return kSoftmaxBlock * kVStride * 2 + head_tiles * 16 * kPStride * 2;
}

template <int kHeadTiles, int kStages>
__global__ void __launch_bounds__(kWarps* kWarp)
    sm90_bf16_sparse_attn_values(SparseAttnParams p, int t0, const float* alpha, const float* l_in) {
  after_prior_grids();
  constexpr int kHeads = 16 * kHeadTiles, kWarpsPerTile = kWarps / kHeadTiles;
  constexpr int kColumns = kValueDims / 8 / kWarpsPerTile;  // a warp's 8-dim columns
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, q = lane % 4;
  const int64_t tl = blockIdx.z, t = t0 + tl;
  const int c0 = static_cast<int>(blockIdx.x) * kValueDims, h0 = static_cast<int>(blockIdx.y) * kHeads;
  const int k = p.k, kp = padded_slots(k), nb = kp / kSoftmaxBlock;
  const int32_t* idx = p.idx + t * p.idx_stride;
  // Head h's P: the bf16 values over the start of its row of kp floats (the softmax's).
  const uint16_t* P = reinterpret_cast<const uint16_t*>(p.scores + (tl * p.heads + h0) * kp);
  const auto stage_at = [&](int b) { return smem + (b % kStages) * value_stage_bytes(kHeadTiles); };
  // Starts copying block b's rows and P into its stage (zeros for empty slots, rows past k, dims
  // past d and heads past the count); a commit group a block, empty past the last.
  const auto stage = [&](int b) {
    if (b < nb) {
      uint16_t* vs = reinterpret_cast<uint16_t*>(stage_at(b));
      uint16_t* ps = reinterpret_cast<uint16_t*>(stage_at(b) + kSoftmaxBlock * kVStride * 2);
      const int jb = b * kSoftmaxBlock;
      for (int i = threadIdx.x; i < kSoftmaxBlock * (kValueDims / 8); i += blockDim.x) {
        const int j = i / (kValueDims / 8), c = c0 + 8 * (i % (kValueDims / 8));
        const uint16_t* row = jb + j < k && c < p.d ? kv_row(p, idx[jb + j]) : nullptr;
        cp_async16(vs + j * kVStride + (c - c0), row ? row + c : p.q, row != nullptr);
      }
      for (int i = threadIdx.x; i < kHeads * (kSoftmaxBlock / 8); i += blockDim.x) {
        const int hh = i / (kSoftmaxBlock / 8), c = 8 * (i % (kSoftmaxBlock / 8));
        const bool in = h0 + hh < p.heads;
        cp_async16(ps + hh * kPStride + c, in ? P + static_cast<int64_t>(hh) * 2 * kp + jb + c : P, in);
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
    const uint16_t* ps =
        reinterpret_cast<const uint16_t*>(stage_at(b) + kSoftmaxBlock * kVStride * 2) + 16 * tile * kPStride;
    float d[kColumns][4] = {};
#pragma unroll
    for (int s = 0; s < kSoftmaxBlock / 16; ++s) {
      const uint16_t* pa = ps + g * kPStride + 16 * s + 2 * q;
      const uint32_t a[4] = {
          *reinterpret_cast<const uint32_t*>(pa), *reinterpret_cast<const uint32_t*>(pa + 8 * kPStride),
          *reinterpret_cast<const uint32_t*>(pa + 8), *reinterpret_cast<const uint32_t*>(pa + 8 * kPStride + 8)};
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

// The three passes in one kernel, with the same bits (calls of many tokens): a block per (token,
// 64 heads) holds the token's q in shared memory and streams its softmax blocks' rows through two
// stages, reading each row once for both products and keeping the scores and P on chip. Both
// products run on wgmma, kFusedGroups warpgroups of the 64 heads each taking a share of the slots
// or dims, in the passes' K steps and chains (common/wgmma.cuh: the same bits as their mma.sync
// chains). For each block: the scores (warp (tile, group): its 16 heads and the group's slots of
// the block, the scores pass's chain over d), the block's maxima of every group, P as the softmax
// pass forms it (and its block sums by the same xor tree, a warp a share of the heads), then the
// value sums (warp (tile, group): its 16 heads and the group's dims, the value pass's chains over
// the block's 16-row steps) folded into the accumulators with alpha.
constexpr int kFusedHeads = 16 * kFusedHeadTiles;
constexpr int kGroupSlots = kSoftmaxBlock / kFusedGroups;  // a warpgroup's slots of a block: wgmma's N
// Floats a row of P in fp32: a half warp's 8-byte stores on distinct banks.
constexpr int kPfStride = kSoftmaxBlock + 8;

// A warpgroup's scores of its slots (d += q K^T, both from shared memory by descriptor).
template <int kN>
__device__ inline void group_scores(uint64_t q, uint64_t k, float (&d)[kN / 8][4]) {
  if constexpr (kN == 32)
    wgmma_bf16_m64n32(q, k, d);
  else
    wgmma_bf16_m64n16(q, k, d);
}
// A warpgroup's value sums of kN dims (d += P V, P from registers, V transposed by descriptor).
template <int kN>
__device__ inline void group_values(const uint32_t (&pa)[4], uint64_t v, float (&d)[kN / 8][4]) {
  if constexpr (kN == 32)
    wgmma_bf16_m64n32_b_transposed(pa, v, d);
  else
    wgmma_bf16_m64n16_a_registers</*kTransposedB=*/true>(pa, v, d);
}

template <int kD>  // p.d: 64, 128, 256 or 512 (fused())
__global__ void __launch_bounds__(kFusedWarps* kWarp, 1) sm90_bf16_sparse_attn_fused(SparseAttnParams p) {
  after_prior_grids();
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kThreads = kFusedWarps * kWarp;
  constexpr int d = kD, pieces = d / 8;
  constexpr int kGroupDims = kD / kFusedGroups, kChunk = kGroupDims < 32 ? kGroupDims : 32;  // value chains' N
  static_assert(kGroupDims % 16 == 0 && kGroupDims % kChunk == 0);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, q = lane % 4;
  const int64_t t = blockIdx.x;
  const int h0 = static_cast<int>(blockIdx.y) * kFusedHeads;
  const int k = p.k, nb = (k + kSoftmaxBlock - 1) / kSoftmaxBlock;
  // q and the stages of rows in core matrices (the scores' wgmma operands).
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem);
  uint16_t* rows = qs + kFusedHeads * d;  // stage s: rows + s * kSoftmaxBlock * d
  uint16_t* ps = rows + 2 * kSoftmaxBlock * d;
  float* pf = reinterpret_cast<float*>(ps + kFusedHeads * kPStride);
  float* group_max = pf + kFusedHeads * kPfStride;  // [kFusedGroups][kFusedHeads]
  float* alpha = group_max + kFusedGroups * kFusedHeads;
  float* l = alpha + kFusedHeads;
  int32_t* slot_ids = reinterpret_cast<int32_t*>(l + kFusedHeads);  // [2][kSoftmaxBlock]: the stages' indices
  const int32_t* idx = p.idx + t * p.idx_stride;
  const uint16_t* qt = p.q + t * p.q_stride + static_cast<int64_t>(h0) * d;
  // A thread copies 16 bytes: two threads a row's 32-byte sector, a warp 16 rows (their 16-byte
  // pieces 16 bytes apart in a core matrix: every bank once a 128 bytes).
  for (int i = threadIdx.x; i < kFusedHeads * pieces; i += blockDim.x) {
    const int r = i / 2 % kFusedHeads, c = 8 * (2 * (i / (2 * kFusedHeads)) + i % 2);
    const bool in = h0 + r < p.heads;
    cp_async16(qs + core_offset<kFusedHeads>(r, c), in ? qt + static_cast<int64_t>(r) * d + c : p.q, in);
  }
  // Starts copying block b's rows into its stage (zeros for empty slots and rows past k), as q:
  // a thread takes one slot's 16-byte pieces 8 (t % 2) + 16 (t / 128) + 8 m (threads / 64), so it
  // finds the row once. Its slot's index comes loaded a block ahead (`id`), so the copies wait on
  // no load; the even ones of the first 128 threads keep the block's indices for the masks.
  constexpr int kPieceStep = 8 * (kThreads / kSoftmaxBlock);
  const int my_slot = threadIdx.x / 2 % kSoftmaxBlock;
  const auto slot_id = [&](int b) { return b * kSoftmaxBlock + my_slot < k ? idx[b * kSoftmaxBlock + my_slot] : -1; };
  const auto stage = [&](int b, int32_t id) {
    uint16_t* to = rows + (b % 2) * kSoftmaxBlock * d;
    const uint16_t* row = id >= 0 ? kv_row(p, id) : nullptr;
    if (threadIdx.x < 2 * kSoftmaxBlock && threadIdx.x % 2 == 0) slot_ids[(b % 2) * kSoftmaxBlock + my_slot] = id;
#pragma unroll 4
    for (int c = 8 * (threadIdx.x % 2) + 16 * (threadIdx.x / (2 * kSoftmaxBlock)); c < d; c += kPieceStep)
      cp_async16(to + core_offset<kSoftmaxBlock>(my_slot, c), row ? row + c : p.q, row != nullptr);
  };
  if (threadIdx.x < kFusedHeads) l[threadIdx.x] = 0.0f;
  if (nb > 0) stage(0, slot_id(0));
  cp_async_commit();
  int32_t next_id = slot_id(1);  // the next block's (past the last: unused)
  const int tile = warp % kFusedHeadTiles, group = warp / kFusedHeadTiles;
  const int ra = 16 * tile + g, rb = ra + 8;  // the lane's rows of heads (D rows g and g + 8)
  const int dim0 = group * kGroupDims;
  constexpr int kSumHeads = kFusedHeads / kFusedWarps;  // heads a warp sums
  float acc[kGroupDims / 8][4] = {};
  float m_a = -1e30f, m_b = -1e30f;
  for (int b = 0; b < nb; ++b) {
    cp_async_wait<0>();
    fence_shared_for_wgmma();
    __syncthreads();  // block b's rows are in; every warp is done with block b - 1's stage and P
    const uint16_t* vs = rows + (b % 2) * kSoftmaxBlock * d;
    // The scores of the warp's 16 heads and the group's slots: warpgroup `group` takes the 64 heads
    // and its slots, one wgmma a K step of 16 over d in order (the scores pass's mma chains, the
    // same bits), q and the rows from shared memory.
    float sc[kGroupSlots / 8][4] = {};
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < d; kk += 16)
      group_scores<kGroupSlots>(
          core_descriptor<kFusedHeads>(qs + core_offset<kFusedHeads>(0, kk)),
          core_descriptor<kSoftmaxBlock>(vs + core_offset<kSoftmaxBlock>(kGroupSlots * group, kk)), sc);
    wgmma_commit();
    // The next block's copies start while the scores run (the other stage: block b - 1's, done).
    if (b + 1 < nb) stage(b + 1, next_id);
    cp_async_commit();
    if (b + 2 < nb) next_id = slot_id(b + 2);
    wgmma_wait_all();
    const int32_t* ids = slot_ids + (b % 2) * kSoftmaxBlock;
    float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
    for (int n = 0; n < kGroupSlots / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = b * kSoftmaxBlock + kGroupSlots * group + 8 * n + 2 * q + (e & 1);
        sc[n][e] = ids[slot - b * kSoftmaxBlock] < 0 ? -INFINITY : sc[n][e] * p.scale;  // -1 past k
        if (e < 2)
          max_a = fmaxf(max_a, sc[n][e]);
        else
          max_b = fmaxf(max_b, sc[n][e]);
      }
    for (int o = 1; o < 4; o *= 2) {
      max_a = fmaxf(max_a, __shfl_xor_sync(0xffffffffu, max_a, o));
      max_b = fmaxf(max_b, __shfl_xor_sync(0xffffffffu, max_b, o));
    }
    if (q == 0) group_max[group * kFusedHeads + ra] = max_a, group_max[group * kFusedHeads + rb] = max_b;
    __syncthreads();  // every group's maxima
    float block_a = group_max[ra], block_b = group_max[rb];
#pragma unroll
    for (int gg = 1; gg < kFusedGroups; ++gg)
      block_a = fmaxf(block_a, group_max[gg * kFusedHeads + ra]),
      block_b = fmaxf(block_b, group_max[gg * kFusedHeads + rb]);
    const float next_a = fmaxf(m_a, block_a), next_b = fmaxf(m_b, block_b);
    const float al_a = expf(m_a - next_a), al_b = expf(m_b - next_b);
    m_a = next_a, m_b = next_b;
#pragma unroll
    for (int n = 0; n < kGroupSlots / 8; ++n) {
      const int c = kGroupSlots * group + 8 * n + 2 * q, slot = b * kSoftmaxBlock + c;
      const float pa0 = slot < k ? expf(sc[n][0] - next_a) : 0.0f, pa1 = slot + 1 < k ? expf(sc[n][1] - next_a) : 0.0f;
      const float pb0 = slot < k ? expf(sc[n][2] - next_b) : 0.0f, pb1 = slot + 1 < k ? expf(sc[n][3] - next_b) : 0.0f;
      *reinterpret_cast<float2*>(pf + ra * kPfStride + c) = make_float2(pa0, pa1);
      *reinterpret_cast<float2*>(pf + rb * kPfStride + c) = make_float2(pb0, pb1);
      *reinterpret_cast<uint32_t*>(ps + ra * kPStride + c) =
          float_to_bf16(pa0) | static_cast<uint32_t>(float_to_bf16(pa1)) << 16;
      *reinterpret_cast<uint32_t*>(ps + rb * kPStride + c) =
          float_to_bf16(pb0) | static_cast<uint32_t>(float_to_bf16(pb1)) << 16;
    }
    if (group == 0 && q == 0) alpha[ra] = al_a, alpha[rb] = al_b;
    __syncthreads();  // P and alpha
    // The block's probability sums of the warp's heads (the softmax pass's tree).
    for (int hh = 0; hh < kSumHeads; ++hh) {
      const int h = kSumHeads * warp + hh;
      double sum =
          static_cast<double>(pf[h * kPfStride + lane]) + static_cast<double>(pf[h * kPfStride + lane + kWarp]);
      for (int o = kWarp / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) l[h] = l[h] * alpha[h] + static_cast<float>(sum);
    }
    // The value sums of the warp's 16 heads and dims over the block: warpgroup `group` takes the 64
    // heads and its dims kChunk at a time, one wgmma a 16-slot step (the value pass's mma chains,
    // the same bits), P from registers, the rows read transposed from their stage.
    uint32_t pa[kSoftmaxBlock / 16][4];
#pragma unroll
    for (int s = 0; s < kSoftmaxBlock / 16; ++s) {
      const uint16_t* pp = ps + ra * kPStride + 16 * s + 2 * q;
      pa[s][0] = *reinterpret_cast<const uint32_t*>(pp);
      pa[s][1] = *reinterpret_cast<const uint32_t*>(pp + 8 * kPStride);
      pa[s][2] = *reinterpret_cast<const uint32_t*>(pp + 8);
      pa[s][3] = *reinterpret_cast<const uint32_t*>(pp + 8 * kPStride + 8);
    }
#pragma unroll
    for (int c0 = 0; c0 < kGroupDims; c0 += kChunk) {
      float dv[kChunk / 8][4] = {};
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < kSoftmaxBlock / 16; ++s)
        group_values<kChunk>(
            pa[s], core_descriptor_transposed<kSoftmaxBlock>(vs + core_offset<kSoftmaxBlock>(16 * s, dim0 + c0)), dv);
      wgmma_commit();
      wgmma_wait_all();
#pragma unroll
      for (int j = 0; j < kChunk / 8; ++j) {
        float(&a)[4] = acc[c0 / 8 + j];
        a[0] = a[0] * al_a + dv[j][0], a[1] = a[1] * al_a + dv[j][1];
        a[2] = a[2] * al_b + dv[j][2], a[3] = a[3] * al_b + dv[j][3];
      }
    }
  }
  __syncthreads();  // the last block's sums
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int h = h0 + (hf ? rb : ra);
    if (h >= p.heads) continue;
    const float lh = l[h - h0] + expf(p.sink[h] - (hf ? m_b : m_a));
    uint16_t* out = p.out + t * p.out_stride + static_cast<int64_t>(h) * d + dim0 + 2 * q;
#pragma unroll
    for (int c = 0; c < kGroupDims / 8; ++c) {
      const uint32_t lo = float_to_bf16(acc[c][2 * hf] / lh), hi = float_to_bf16(acc[c][2 * hf + 1] / lh);
      *reinterpret_cast<uint32_t*>(out + 8 * c) = lo | hi << 16;
    }
  }
}

template <int kHeadTiles, int kSlots, int kStages>
cudaError_t launch_scores(const SparseAttnParams& p, int t0, unsigned tokens) {
  constexpr int bytes = kStages * score_stage_bytes(kSlots, kHeadTiles);
  static const cudaError_t opt_in = cudaFuncSetAttribute(sm90_bf16_sparse_attn_scores<kHeadTiles, kSlots, kStages>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (opt_in != cudaSuccess) return opt_in;
  const dim3 grid(static_cast<unsigned>((p.k + kSlots - 1) / kSlots),
                  static_cast<unsigned>((p.heads + 16 * kHeadTiles - 1) / (16 * kHeadTiles)), tokens);
  return launch_kernel(sm90_bf16_sparse_attn_scores<kHeadTiles, kSlots, kStages>, grid, score_warps(kSlots) * kWarp,
                       bytes, p.stream, p, t0);
}

template <int kHeadTiles, int kStages>
cudaError_t launch_values(const SparseAttnParams& p, int t0, unsigned tokens, const float* alpha, const float* l) {
  constexpr int bytes = kStages * value_stage_bytes(kHeadTiles);
  static const cudaError_t opt_in = cudaFuncSetAttribute(sm90_bf16_sparse_attn_values<kHeadTiles, kStages>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (opt_in != cudaSuccess) return opt_in;
  const dim3 grid(static_cast<unsigned>((p.d + kValueDims - 1) / kValueDims),
                  static_cast<unsigned>((p.heads + 16 * kHeadTiles - 1) / (16 * kHeadTiles)), tokens);
  return launch_kernel(sm90_bf16_sparse_attn_values<kHeadTiles, kStages>, grid, kWarps * kWarp, bytes, p.stream, p, t0,
                       alpha, l);
}

// Whether a call takes the fused kernel (its own bits are the passes': the choice is speed alone).
bool fused(const SparseAttnParams& p) {
  return p.n >= kFusedMinTokens && (p.d == 64 || p.d == 128 || p.d == 256 || p.d == 512);
}

template <int kD>
cudaError_t launch_fused(const SparseAttnParams& p) {
  static_assert(kD % 32 == 0 && kD <= kFusedMaxD);
  static const cudaError_t opt_in = cudaFuncSetAttribute(
      sm90_bf16_sparse_attn_fused<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, fused_smem_bytes(kD));
  if (opt_in != cudaSuccess) return opt_in;
  const dim3 grid(static_cast<unsigned>(p.n), static_cast<unsigned>((p.heads + kFusedHeads - 1) / kFusedHeads));
  return launch_kernel(sm90_bf16_sparse_attn_fused<kD>, grid, kFusedWarps * kWarp, fused_smem_bytes(kD), p.stream, p);
}

cudaError_t launch_fused(const SparseAttnParams& p) {
  switch (p.d) {
    case 64:
      return launch_fused<64>(p);
    case 128:
      return launch_fused<128>(p);
    case 256:
      return launch_fused<256>(p);
    case 512:
      return launch_fused<512>(p);
    default:  // fused() takes no other
      return cudaErrorInvalidValue;
  }
}

}  // namespace

size_t sparse_attn_workspace_bytes(const SparseAttnParams& p) {
  if (fused(p)) return 0;
  const int kp = padded_slots(p.k);  // the scores (then P), alpha and l of a pass
  return static_cast<size_t>(std::min(p.n, kTokensPerPass)) * p.heads * (kp + kp / kSoftmaxBlock + 1) * sizeof(float);
}

cudaError_t launch_sparse_attn(const SparseAttnParams& p) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (p.n < 0 || p.heads <= 0 || p.d <= 0 || p.d % 8 != 0 || p.k < 0 || p.q_stride % 8 != 0 || p.out_stride % 2 != 0 ||
      !aligned(p.q) || !aligned(p.window) || !aligned(p.compressed) || (p.n > 0 && !fused(p) && !p.scores))
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  if (fused(p)) return launch_fused(p);
  const int nb = (p.k + kSoftmaxBlock - 1) / kSoftmaxBlock;
  const int pass = std::min(p.n, kTokensPerPass);
  float* alpha = p.scores + static_cast<int64_t>(pass) * p.heads * padded_slots(p.k);
  float* l = alpha + static_cast<int64_t>(pass) * p.heads * nb;
  // A few tokens' heads in small groups, so that their blocks fill the GPU (the sums are the same).
  const bool few = p.n < kFewTokens;
  for (int t0 = 0; t0 < p.n; t0 += kTokensPerPass) {
    const unsigned tokens = static_cast<unsigned>(std::min(kTokensPerPass, p.n - t0));
    if (p.k > 0) {
      const cudaError_t e = few ? launch_scores<kSmallHeadTiles, kSmallScoreSlots, kSmallScoreStages>(p, t0, tokens)
                                : launch_scores<kHeadTiles, kScoreSlots, kScoreStages>(p, t0, tokens);
      if (e != cudaSuccess) return e;
    }
    if (const cudaError_t e =
            launch_kernel(sm90_f32_sparse_attn_softmax,
                          dim3(static_cast<unsigned>((p.heads + kSoftmaxWarps - 1) / kSoftmaxWarps), tokens),
                          kSoftmaxWarps * kWarp, 0, p.stream, p, alpha, l);
        e != cudaSuccess)
      return e;
    const cudaError_t e = !few ? launch_values<kHeadTiles, kValueStages>(p, t0, tokens, alpha, l)
                          : p.n <= kDeepTokens
                              ? launch_values<kSmallHeadTiles, kDeepValueStages>(p, t0, tokens, alpha, l)
                              : launch_values<kSmallHeadTiles, kSmallValueStages>(p, t0, tokens, alpha, l);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace dsinfer::cuda
