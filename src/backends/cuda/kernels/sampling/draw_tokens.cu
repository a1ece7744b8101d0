// sm90_f32_draw_tokens: core/token_draw.h's draw, a cluster of kCluster blocks per drawn row,
// each block an eighth of the row staged in its shared memory (read from the row itself where
// an eighth is too large). Each cut is the host's radix selection (a byte of the key a pass, from
// the high one): each block bins its tokens' counts or masses in shared memory, a thread's runs of
// one bin added at once, and every block sums the cluster's bins through distributed shared memory
// and makes the same choice. The draw sums the kept masses of a chunk of consecutive tokens a
// thread, scans them in the block and the blocks in rank order (id order), and the thread whose
// chunk holds the target finds the token in it. Every sum is of integers, so it is the host's
// whatever the order; the weights are draw_weight's, whose every rounding is fixed. So the token
// is the host's.
#include <cooperative_groups.h>

#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/kernels/sampling/draw_tokens.h"

namespace dsinfer::cuda {
namespace {

namespace cg = cooperative_groups;
using common::after_prior_grids;
using common::launch_clustered;

constexpr int kCluster = 8;
constexpr int kThreads = 512;
constexpr int kWarp = 32;
constexpr int kWarps = kThreads / kWarp;
constexpr int kBins = 256;
constexpr int kMaxStaged = 48 * 1024;  // tokens a block stages (192 KB of shared memory)

struct Shared {
  unsigned long long bins[kBins];  // this block's histogram
  unsigned long long totals[kBins];
  unsigned long long warp_sums[kWarps];
  unsigned long long partial, above;
  uint32_t max_key;
  int finite, byte;
};

// A block's tokens [begin, begin + count) of the row, x[i] being token begin + i.
struct Part {
  const float* x;
  int begin, count;
  float max, temperature;
  __device__ uint32_t key(int i) const { return draw_key(x[i]); }
  __device__ double weight(int i) const { return draw_weight(x[i], max, temperature); }
};

// The block's sum of `v`, in s.partial (every thread may read it after the call).
__device__ void block_sum(uint64_t v, Shared& s) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % kWarp == 0) s.warp_sums[threadIdx.x / kWarp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long b = 0;
    for (int w = 0; w < kWarps; ++w) b += s.warp_sums[w];
    s.partial = b;
  }
}

// The cluster's sum of each block's `v`.
__device__ uint64_t cluster_sum(cg::cluster_group& cluster, uint64_t v, Shared& s) {
  block_sum(v, s);
  cluster.sync();  // every block's partial is written
  uint64_t total = 0;
  for (int r = 0; r < kCluster; ++r) total += *cluster.map_shared_rank(&s.partial, r);
  cluster.sync();  // no block writes its partial again while another reads it
  return total;
}

// The largest key v >= floor whose tokens at or above it (and at or above floor) weigh `target`
// together in the whole row, weight(i) a token's count or mass: core/token_draw.cc's
// largest_key_reaching, each block binning its part.
template <typename Weight>
__device__ uint32_t largest_key_reaching(cg::cluster_group& cluster, const Part& part, uint32_t floor, uint64_t target,
                                         Weight weight, Shared& s) {
  uint32_t prefix = 0;
  uint64_t above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t high = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int i = threadIdx.x; i < kBins; i += kThreads) s.bins[i] = 0;
    __syncthreads();
    // A thread's tokens mostly fall in few bins (most logits share the key's high bytes): a run
    // of them in one bin is added at once, which spares the shared atomics most of their conflicts.
    int run_bin = 0;
    unsigned long long run = 0;
    for (int i = threadIdx.x; i < part.count; i += kThreads) {
      const uint32_t k = part.key(i);
      if (k < floor || (k & high) != prefix) continue;
      const int bin = (k >> shift) & 255;
      if (bin != run_bin && run != 0) atomicAdd(&s.bins[run_bin], run), run = 0;
      run_bin = bin;
      run += weight(i);
    }
    if (run != 0) atomicAdd(&s.bins[run_bin], run);
    cluster.sync();  // every block's bins are complete
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      unsigned long long sum = 0;
      for (int r = 0; r < kCluster; ++r) sum += cluster.map_shared_rank(s.bins, r)[b];
      s.totals[b] = sum;
    }
    cluster.sync();  // the totals are in; no block clears its bins while another reads them
    if (threadIdx.x == 0) {
      int byte = kBins - 1;
      while (byte > 0 && above + s.totals[byte] < target) above += s.totals[byte--];
      s.byte = byte;
      s.above = above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(s.byte) << shift;
    above = s.above;
    __syncthreads();  // s.byte and s.above are written again at the next byte
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sm90_f32_draw_tokens(DrawTokensParams p) {
  extern __shared__ float staged[];
  __shared__ Shared s;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int lane = threadIdx.x % kWarp;
  const int per = (p.V + kCluster - 1) / kCluster;
  const bool stage = per <= kMaxStaged;
  if (threadIdx.x == 0) s.max_key = 0, s.finite = 1;
  after_prior_grids();  // the logits come from the step's last kernels
  const RowDraw d = p.draws[blockIdx.y];
  const float* row = p.logits + static_cast<int64_t>(d.row) * p.row_stride;
  Part part{nullptr, min(p.V, rank * per), 0, 0.0f, d.params.temperature};
  part.count = min(p.V, part.begin + per) - part.begin;
  part.x = stage ? staged : row + part.begin;

  // The row's largest key and whether it is all finite; the part staged on the way.
  uint32_t top = 0;
  bool finite = true;
  for (int i = threadIdx.x; i < part.count; i += kThreads) {
    const float x = row[part.begin + i];
    if (stage) staged[i] = x;
    finite = finite && isfinite(x);
    top = max(top, draw_key(x));
  }
  top = __reduce_max_sync(0xffffffffu, top);
  finite = __all_sync(0xffffffffu, finite);
  __syncthreads();  // s.max_key and s.finite are set
  if (lane == 0) atomicMax(&s.max_key, top), atomicAnd(&s.finite, static_cast<int>(finite));
  cluster.sync();
  for (int r = 0; r < kCluster; ++r) {
    top = max(top, *cluster.map_shared_rank(&s.max_key, r));
    finite = finite && *cluster.map_shared_rank(&s.finite, r) != 0;
  }
  cluster.sync();  // every block has read the others' before any leaves
  if (!finite) {
    if (rank == 0 && threadIdx.x == 0) p.picks[d.row] = -1;
    return;
  }
  part.max = __uint_as_float((top & 0x80000000u) ? top & 0x7fffffffu : ~top);

  uint32_t cut = 0;
  if (d.params.top_k > 0 && d.params.top_k < p.V)
    cut = largest_key_reaching(
        cluster, part, 0, static_cast<uint64_t>(d.params.top_k), [](int) { return uint64_t{1}; }, s);
  const auto mass = [&](int i) -> uint64_t { return part.key(i) >= cut ? draw_mass(part.weight(i)) : 0; };
  if (d.params.top_p < 1.0f) {
    uint64_t kept = 0;
    for (int i = threadIdx.x; i < part.count; i += kThreads) kept += mass(i);
    kept = cluster_sum(cluster, kept, s);
    cut = largest_key_reaching(cluster, part, cut, draw_nucleus_mass(d.params.top_p, kept), mass, s);
  }

  // The kept masses summed in id order: a chunk of consecutive tokens a thread, the chunks
  // scanned in the block, the blocks in rank order.
  const auto kept_mass = [&](int i) -> uint64_t {
    if (part.key(i) < cut) return 0;
    const double w = part.weight(i);
    return w >= d.params.min_p ? draw_mass(w) : 0;
  };
  const int chunk = (part.count + kThreads - 1) / kThreads;
  const int begin = min(part.count, static_cast<int>(threadIdx.x) * chunk), end = min(part.count, begin + chunk);
  uint64_t mine = 0;
  for (int i = begin; i < end; ++i) mine += kept_mass(i);
  uint64_t inclusive = mine;
  for (int o = 1; o < kWarp; o *= 2) {
    const uint64_t v = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += v;
  }
  if (lane == kWarp - 1) s.warp_sums[threadIdx.x / kWarp] = inclusive;
  __syncthreads();
  uint64_t before = 0, block = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < static_cast<int>(threadIdx.x / kWarp)) before += s.warp_sums[w];
    block += s.warp_sums[w];
  }
  if (threadIdx.x == 0) s.partial = block;
  cluster.sync();  // every block's total is written
  uint64_t total = 0;
  for (int r = 0; r < kCluster; ++r) {
    const uint64_t b = *cluster.map_shared_rank(&s.partial, r);
    if (r < rank) before += b;
    total += b;
  }
  cluster.sync();                                    // every block has read the others' before any leaves
  const uint64_t first = before + inclusive - mine;  // the masses before this chunk
  const uint64_t target = draw_target(d.params.bits, total);
  if (first <= target && target < first + mine) {
    uint64_t sum = first;
    for (int i = begin; i < end; ++i)
      if ((sum += kept_mass(i)) > target) {
        p.picks[d.row] = part.begin + i;
        break;
      }
  }
}

}  // namespace

cudaError_t launch_draw_tokens(const DrawTokensParams& p) {
  if (p.V < 1 || p.V > kMaxDrawVocab) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const int per = (p.V + kCluster - 1) / kCluster;
  const size_t smem = per <= kMaxStaged ? static_cast<size_t>(per) * sizeof(float) : 0;
  static const cudaError_t allowed = cudaFuncSetAttribute(
      sm90_f32_draw_tokens, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxStaged * static_cast<int>(sizeof(float)));
  if (allowed != cudaSuccess) return allowed;
  return launch_clustered(sm90_f32_draw_tokens, dim3(kCluster, static_cast<unsigned>(p.n)), dim3(kThreads), smem,
                          p.stream, kCluster, p);
}

}  // namespace dsinfer::cuda
