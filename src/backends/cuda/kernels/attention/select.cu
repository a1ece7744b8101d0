// sm90_f32_topk, sm90_f32_candidate_blocks, sm90_u8_candidate_mask, sm90_i32_paged_rows: the indexer's selections (spec
// §7.4–7.5) without a trip to the host. A score becomes a 32-bit key whose unsigned order is the float order (-0 taken
// as +0, so scores the CPU's comparison sees as equal stay equal); four 8-bit histogram passes find the k-th largest
// key K and how many keys equal to K are among the k largest; a last pass in column order takes every key above K and
// the first such equal ones (the lowest columns: the CPU's tie rule), so the top-k comes out sorted by column without a
// sort.
#include <cub/block/block_scan.cuh>

#include <cmath>
#include <cstdint>

#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/attention/config.h"

namespace dsinfer::cuda {
namespace {

using common::after_prior_grids;
using common::launch_kernel;

using attention_config::kWarp;
using namespace attention_config::selection;  // kThreads: one block per query row
using Scan = cub::BlockScan<int, kThreads>;

__device__ inline uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct ScoreKeys {  // a score row, -inf where the mask holds 0
  const float* row;
  const uint8_t* mask;
  __device__ uint32_t operator()(int j) const { return order_key(mask && !mask[j] ? -INFINITY : row[j]); }
};

struct BlockKeys {  // a row's blocks by their maximum; block `pinned` first of all
  const float* row;
  int T, block_size, pinned;
  __device__ uint32_t operator()(int b) const {
    if (b == pinned) return order_key(INFINITY);
    float m = -INFINITY;
    for (int c = b * block_size; c < min(T, (b + 1) * block_size); ++c) m = fmaxf(m, row[c]);
    return order_key(m);
  }
};

struct Threshold {
  uint32_t key;     // the k-th largest key
  int equal_taken;  // how many keys equal to it are among the k largest
};

struct Shared {
  int hist[256];
  Threshold threshold;
  Scan::TempStorage scan;
};

// By the first warp (every lane): the largest bucket b such that the buckets above it hold fewer
// than `remaining` keys, as {b, remaining - those keys} in the lane that found it, {0, 0} in the
// others. A lane sums 8 buckets (lane 0 the top 8), the lanes' sums are scanned by shuffles, and
// the lane where the running count reaches `remaining` walks its 8: the answer of a walk down all
// 256 from the top by one thread, in ~20 dependent steps instead of up to 256.
__device__ inline Threshold top_bucket(const int (&hist)[256], int remaining) {
  constexpr int kPerLane = 256 / kWarp;
  const int lane = threadIdx.x % kWarp, top = 255 - kPerLane * lane;
  int own = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) own += hist[top - i];
  int upto = own;  // this lane's buckets and those above them
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, upto, o);
    if (lane >= o) upto += v;
  }
  const unsigned reached = __ballot_sync(0xffffffffu, upto >= remaining);  // the keys matching hold >= remaining
  if (lane != __ffs(reached) - 1) return {0, 0};
  int above = upto - own, b = top;
  while (above + hist[b] < remaining) above += hist[b--];
  return {static_cast<uint32_t>(b), remaining - above};
}

// The k-th largest of `len` keys (1 <= k <= len), eight bits a pass from the top.
template <class Keys>
__device__ Threshold kth_largest(const Keys& keys, int len, int k, Shared& sh) {
  uint32_t prefix = 0, fixed = 0;  // the bits of K found so far, and which bits those are
  int remaining = k;               // of the keys matching the prefix, how many are still to take
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
      const uint32_t key = keys(j);
      if ((key & fixed) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255], 1);
    }
    __syncthreads();
    if (threadIdx.x < kWarp) {
      const Threshold th = top_bucket(sh.hist, remaining);
      if (th.equal_taken > 0) sh.threshold = {prefix | (th.key << shift), th.equal_taken};
    }
    __syncthreads();
    prefix = sh.threshold.key, remaining = sh.threshold.equal_taken, fixed |= 255u << shift;
  }
  return {prefix, remaining};
}

// Walks the keys in column order and calls emit(j, taken, rank among the taken, key) for each,
// where a key `keep` refuses counts as not taken; returns how many were taken.
template <class Keys, class Keep, class Emit>
__device__ int take_in_order(const Keys& keys, int len, Threshold th, Shared& sh, Keep keep, Emit emit) {
  int equal_before = 0, taken_before = 0;
  for (int base = 0; base < len; base += kThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    const uint32_t key = j < len ? keys(j) : 0;
    const int equal = j < len && key == th.key;
    int equal_rank, equal_total, rank, total;
    Scan(sh.scan).ExclusiveSum(equal, equal_rank, equal_total);
    __syncthreads();  // the scan's storage is used again
    const int take = j < len && (key > th.key || (equal && equal_before + equal_rank < th.equal_taken)) && keep(key);
    Scan(sh.scan).ExclusiveSum(take, rank, total);
    __syncthreads();
    if (j < len) emit(j, take, taken_before + rank, key);
    equal_before += equal_total, taken_before += total;
  }
  return taken_before;
}

__global__ void __launch_bounds__(kThreads) sm90_f32_topk(TopkParams p) {
  after_prior_grids();
  __shared__ Shared sh;
  const int64_t i = blockIdx.x;
  const ScoreKeys keys{p.scores + i * p.score_stride, p.mask ? p.mask + i * p.mask_stride : nullptr};
  const Threshold th = p.k > 0 ? kth_largest(keys, p.T, p.k, sh) : Threshold{UINT32_MAX, 0};
  const int visible = p.visible[i];
  int32_t* out = p.out + i * p.out_stride;
  take_in_order(
      keys, p.T, th, sh, [](uint32_t) { return true; },
      [&](int j, int take, int rank, uint32_t) {
        if (take) out[rank] = j >= visible ? -1 : j;
      });
}

__global__ void __launch_bounds__(kThreads) sm90_f32_candidate_blocks(CandidateBlocksParams p) {
  after_prior_grids();
  __shared__ Shared sh;
  const int64_t i = blockIdx.x;
  const int blocks = (p.T + p.block_size - 1) / p.block_size, visible = p.visible[i];
  const int last = visible > 0 ? (visible - 1) / p.block_size : -1;
  const BlockKeys keys{p.scores + i * p.score_stride, p.T, p.block_size, last < blocks ? last : -1};
  const int k = min(p.topk_blocks, blocks);
  const Threshold th = k > 0 ? kth_largest(keys, blocks, k, sh) : Threshold{UINT32_MAX, 0};
  const uint32_t unreachable = order_key(-INFINITY);
  int32_t* out = p.blocks + i * p.blocks_stride;
  const int kept = take_in_order(
      keys, blocks, th, sh, [&](uint32_t key) { return key != unreachable; },
      [&](int b, int take, int rank, uint32_t) {
        if (take) out[rank] = b;
      });
  for (int j = kept + static_cast<int>(threadIdx.x); j < k; j += blockDim.x) out[j] = -1;
}

// Block per query row: the row cleared, then each listed block's columns set.
__global__ void __launch_bounds__(kThreads) sm90_u8_candidate_mask(CandidateMaskParams p) {
  after_prior_grids();
  const int64_t i = blockIdx.x;
  uint8_t* mask = p.mask + i * p.mask_stride;
  const int32_t* ids = p.blocks + i * p.blocks_stride;
  for (int c = threadIdx.x; c < p.T; c += blockDim.x) mask[c] = 0;
  __syncthreads();
  for (int64_t e = threadIdx.x; e < static_cast<int64_t>(p.kb) * p.block_size; e += blockDim.x) {
    const int32_t b = ids[e / p.block_size];
    const int64_t c = int64_t{b} * p.block_size + e % p.block_size;
    if (b >= 0 && c < p.T) mask[c] = 1;
  }
}

__global__ void sm90_i32_paged_rows(PagedRowsParams p) {
  after_prior_grids();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<int64_t>(p.n) * p.k) return;
  const int64_t i = e / p.k, j = e % p.k;
  const int32_t pos = p.positions[i * p.pos_stride + j];
  p.out[i * p.out_stride + j] = pos < 0 ? -1 : static_cast<int32_t>(p.table.row(i, pos));
}

}  // namespace

cudaError_t launch_topk(const TopkParams& p) {
  if (p.n < 0 || p.T < 0 || p.k < 0 || p.k > p.T) return cudaErrorInvalidValue;
  if (p.n == 0 || p.k == 0) return cudaSuccess;
  return launch_kernel(sm90_f32_topk, p.n, kThreads, 0, p.stream, p);
}

cudaError_t launch_candidate_blocks(const CandidateBlocksParams& p) {
  if (p.n < 0 || p.T < 0 || p.block_size <= 0 || p.topk_blocks < 0) return cudaErrorInvalidValue;
  if (p.n == 0 || p.T == 0) return cudaSuccess;
  return launch_kernel(sm90_f32_candidate_blocks, p.n, kThreads, 0, p.stream, p);
}

cudaError_t launch_candidate_mask(const CandidateMaskParams& p) {
  if (p.n < 0 || p.T < 0 || p.kb < 0 || p.block_size <= 0) return cudaErrorInvalidValue;
  if (p.n == 0 || p.T == 0) return cudaSuccess;
  return launch_kernel(sm90_u8_candidate_mask, p.n, kThreads, 0, p.stream, p);
}

cudaError_t launch_paged_rows(const PagedRowsParams& p) {
  if (p.n < 0 || p.k < 0 || p.table.rows_per_block <= 0) return cudaErrorInvalidValue;
  const int64_t count = static_cast<int64_t>(p.n) * p.k;
  if (count == 0) return cudaSuccess;
  constexpr int kBlock = kPagedRowsThreads;
  return launch_kernel(sm90_i32_paged_rows, static_cast<unsigned>((count + kBlock - 1) / kBlock), kBlock, 0, p.stream,
                       p);
}

}  // namespace dsinfer::cuda
