// sm90_block_linear_wgmma: the block-scaled linear of many activation rows (a prefill chunk's
// linears, its routed experts grouped by expert on the device) and of a decode step's fp8 linears
// on Hopper's warpgroup tensor cores, the weights read as they are stored (no copy dequantised for
// another GEMM).
//
// Both operands are exact in bf16: an activation is act_quant's code times a power of two, a
// weight its e4m3 or e2m1 code times its e8m0 scale. So the products are exact bf16 ones and each
// output's sum runs in the fp32 accumulators over all of K as one chain: the numerics of a bf16
// GEMM on the dequantised weights, in a fixed order of the kernel's own.
//
// A CTA computes 128 weight rows (two warpgroups of the wgmma's M = 64) by 128 activation rows
// (its N). The tensor memory accelerator (TMA) brings each K stage of 64 through a ring of
// shared-memory stages: the activations (bf16 in wgmma_order.h's K order, 128-byte swizzled, as
// wgmma reads B) and the weights' codes as stored (64 or 32 bytes of a row). Each thread decodes
// its two weight rows' codes of the stage to bf16 times their scale in registers, wgmma's A
// fragment: the weights never pass through shared memory as bf16, and no proxy fence is needed.
//
// Up to kFewRows rows (a decode step) the dispatch runs tiles of 64 activation rows with K split
// over a cluster of CTAs by the matrix's shape (wgmma_split), their fp32 sums added in rank order
// through distributed shared memory: the weights' tiles alone are too few to fill the GPU.
//
// What fixes a row's sum: only the K order (and, for the decode tiles, the split), so its outputs
// do not depend on the rows beside it, on the tile it falls in or on how many rows or experts the
// call has. A row's bits differ between the two instances: the dispatch picks them by the call's
// row count alone, below and from kMinRows.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/wgmma.cuh"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/device_helpers.cuh"
#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "backends/cuda/kernels/linear/wgmma_order.h"

namespace dsinfer::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace common;
using linear_detail::expert_group_operands;
using namespace linear_config;
using namespace linear_config::wgmma_kernel;

static_assert(kStageK == kWgmmaOrderSpan && kStageK * 2 == 128);
static_assert(sizeof(CUtensorMap) == kTensorMapBytes);

// The tensor maps of a launch: each part's activations and, for plain calls, its weights; a grouped
// call's weights are the route table's maps (device memory).
struct Maps {
  CUtensorMap x[kMaxParts], w[kMaxParts];
};

// Shared memory of a CTA, from a 1024-byte boundary (the swizzle's pattern repeats every 8 rows of
// 128 bytes): per stage the activations [kRows][128 bytes] and the weights' codes [128 rows]
// [kRowBytes]; a barrier a stage for the TMA's bytes.
template <bool kFp4>
inline constexpr int kRowBytes = kFp4 ? kStageK / 2 : kStageK;  // a weight row's codes a stage
template <bool kFp4, int kRows>
struct Layout {
  static constexpr int kA = 0;
  static constexpr int kW = kA + kRows * kStageK * 2;
  static constexpr int kStage = kW + kTileCols * kRowBytes<kFp4>;
  static constexpr int kRing = kRows == kExpertRows ? kExpertStages : kStages;
  static constexpr int kFull = kRing * kStage;
  static constexpr int kBytes = kFull + kRing * 8 + 1024;  // and the alignment's slack
};
// The CTAs an SM an instance is built for (its registers' bound).
template <int kRows>
inline constexpr int kResidentCtas = kRows == kExpertRows ? kExpertCtasPerSm : kCtasPerSm;
template <bool kFp4, int kRows>
constexpr bool kLaidOut = Layout<kFp4, kRows>::kStage % 1024 == 0 &&
                          (kResidentCtas<kRows> * Layout<kFp4, kRows>::kBytes) <= 227 * 1024;
static_assert(kLaidOut<false, kTileRows> && kLaidOut<true, kTileRows> && kLaidOut<false, kFewRows> &&
              kLaidOut<true, kExpertRows>);

// A K-major operand's descriptor in the 128-byte swizzle: rows 128 bytes apart, 8-row groups 1024
// (the stride-byte offset), the leading-byte offset unused; a K step of 16 bf16 moves the start
// address by 32 bytes.
__device__ inline uint64_t swizzled_descriptor(const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | uint64_t{1} << 16 | uint64_t{1024 >> 4} << 32 |
         uint64_t{1} << 62;
}

__device__ inline uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline void barrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(bar)));
}

// The barrier expects `bytes` more from the TMA; this thread's arrival.
__device__ inline void barrier_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}

__device__ inline void barrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}

// A 2D box of `map` at (x, y) (x: the contiguous dimension) into shared memory, counted on `bar`.
__device__ inline void tma_load(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(smem_address(dst)),
      "l"(map), "r"(x), "r"(y), "r"(smem_address(bar))
      : "memory");
}

__device__ inline uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Two e4m3 codes of `codes` (the bytes `sel` picks into the high byte of each half) as a bf16 pair
// of their values times 2^-120: sign to bit 15, exponent and mantissa bits under it, so that the
// exponent field holds e4m3's (bias 7 instead of 127; subnormals alike).
__device__ inline uint32_t e4m3x2_placed(uint32_t codes, uint32_t sel) {
  const uint32_t t = prmt(codes, 0, sel);
  return (t & 0x80008000u) | ((t >> 4) & 0x07F007F0u);
}

// A placed bf16 pair times its scale, each multiply exact: one multiply by `scale` (the scale
// folded with the 2^120 of placed e4m3 codes, or the 2^126 of placed e2m1 codes: kFolded) or two
// (2^120, then scale_pair's scale, times 2^6 for fp4).
template <bool kFolded>
__device__ inline uint32_t scaled_pair(uint32_t placed, uint32_t scale) {
  constexpr uint32_t kTwo120 = 0x7B807B80u;  // 2^120, a bf16 pair
  if constexpr (!kFolded) placed = bf16x2_mul(placed, kTwo120);
  return bf16x2_mul(placed, scale);
}

// A row's four codes (K 4j .. 4j + 3 of the thread's run, as e4m3 bytes) as the A fragment's
// column pairs 2c, 2c + 1 (`lo`) and 2c + 8, 2c + 9 (`hi`), times their scale.
template <bool kFolded>
__device__ inline void decode_four(uint32_t codes, uint32_t scale, uint32_t& lo, uint32_t& hi) {
  lo = e4m3x2_placed(codes, 0x1404u), hi = e4m3x2_placed(codes, 0x3424u);
  lo = scaled_pair<kFolded>(lo, scale), hi = scaled_pair<kFolded>(hi, scale);
}

// e2m1x8_placed's two byte tables, a pair of registers each thread holds for the whole kernel (as
// constants the compiler is free to move them into registers again before each use).
struct E2m1Tables {
  uint32_t low = 0, high = 0;
};
__device__ inline E2m1Tables e2m1_tables() {
  // Entry e0 m -> e0 m 0 0 0 0 0 0; entry s e1 -> s 0 0 0 0 0 0 e1. (Through asm: opaque values
  // the compiler keeps instead of rematerialising.)
  E2m1Tables t;
  asm volatile("mov.b32 %0, 0xC0804000;\n\tmov.b32 %1, 0x81800100;" : "=r"(t.low), "=r"(t.high));
  return t;
}

// Eight e2m1 codes (code i in nibble i of `codes`) as four bf16 pairs of their values times 2^-126,
// pair p holding codes 2p, 2p + 1: a code s e1 e0 m is the bf16 with sign s, exponent field e1 e0
// and mantissa m 0 ... 0 (e2m1's bias 1 against bf16's 127; 0.5 a subnormal alike). Its low byte
// (e0 m 0 ...) and its high byte (s 0 ... e1) come from two 4-entry byte tables by prmt, each
// code's two bits the selector, and a permute a pair interleaves them: 13 instructions for eight
// codes (through e4m3, ~27).
__device__ inline void e2m1x8_placed(uint32_t codes, const E2m1Tables& tables, uint32_t (&pairs)[4]) {
  const uint32_t low = codes & 0x33333333u, high = (codes >> 2) & 0x33333333u;  // selectors below 4
  const uint32_t lo03 = prmt(tables.low, 0, low), lo47 = prmt(tables.low, 0, low >> 16);
  const uint32_t hi03 = prmt(tables.high, 0, high), hi47 = prmt(tables.high, 0, high >> 16);
  pairs[0] = prmt(lo03, hi03, 0x5140u), pairs[1] = prmt(lo03, hi03, 0x7362u);
  pairs[2] = prmt(lo47, hi47, 0x5140u), pairs[3] = prmt(lo47, hi47, 0x7362u);
}

// An e8m0 scale byte as a bf16 pair, times 2^6 for fp4: after the codes' multiply by 2^120, the
// rest of the 2^126 that placed fp4 codes lack (placed e4m3 codes lack 2^120).
template <bool kFp4>
__device__ inline uint32_t scale_pair(uint32_t e) {
  const uint32_t b = kFp4 ? (e + 6) << 7 : (e ? e << 7 : 0x40u);  // e8m0 0 is 2^-127, a bf16 subnormal
  return b | b << 16;
}

// The same times 2^120 (the placed codes' factor), so that one multiply makes the weight: a bf16
// pair where its exponent fits (kFoldsUpTo).
template <bool kFp4>
inline constexpr uint32_t kFoldsUpTo = kFp4 ? 128 : 134;  // e8m0 exponents: scales up to 2^1 (fp4), 2^7 (fp8)
template <bool kFp4>
__device__ inline uint32_t folded_scale_pair(uint32_t e) {
  return ((e + (kFp4 ? 126 : 120)) << 7) * 0x10001u;
}

// The A fragments of a stage (wgmma_order.h): the thread's rows r and r + 8, K 16c .. 16c + 15 of
// the stage's 64, a[j] for K step j: {row r, row r + 8} x {columns 2c, 2c + 1; 2c + 8, 2c + 9}.
template <bool kFp4, bool kFolded>
__device__ inline void decode_stage(const uint8_t* w, int r, int c, uint32_t scale_r, uint32_t scale_r8,
                                    const E2m1Tables& tables, uint32_t (&a)[4][4]) {
  if constexpr (kFp4) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // row r + 8h: K step j takes codes 4j .. 4j + 3 of the run
      const uint2 raw = *reinterpret_cast<const uint2*>(w + (r + 8 * h) * kRowBytes<true> + 8 * c);
      const uint32_t scale = h ? scale_r8 : scale_r, words[2] = {raw.x, raw.y};
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        uint32_t pairs[4];
        e2m1x8_placed(words[v], tables, pairs);
#pragma unroll
        for (int q = 0; q < 4; ++q) a[2 * v + q / 2][h + 2 * (q % 2)] = scaled_pair<kFolded>(pairs[q], scale);
      }
    }
  } else {
    uint32_t rows[2][4];  // each row's 16 codes, K order
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 raw = *reinterpret_cast<const uint4*>(w + (r + 8 * h) * kRowBytes<false> + 16 * c);
      rows[h][0] = raw.x, rows[h][1] = raw.y, rows[h][2] = raw.z, rows[h][3] = raw.w;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      decode_four<kFolded>(rows[0][j], scale_r, a[j][0], a[j][2]);
      decode_four<kFolded>(rows[1][j], scale_r8, a[j][1], a[j][3]);
    }
  }
}

// The operands of one CTA's tile.
struct Tile {
  const CUtensorMap *x = nullptr, *w = nullptr;
  int x_row = 0;                // the tile's first row in x's map
  const uint8_t* sw = nullptr;  // the weight scales of the tile's first row (fp8: first scale row)
  uint16_t* y = nullptr;        // output (first row, first column)
  int rows = 0, cols = 0, col0 = 0;
};
// Which tile CTA `cta` computes (row tiles of kRows), or false: the CTAs walk bands of kBand row
// tiles, the band's row tiles fastest, then the weight tiles (each matrix's in turn), so that a
// band's CTAs read each weight tile together. A grouped call's row tiles are its entries' tiles in
// entry order (their counts come from an earlier kernel: warp 0 scans them).
template <int kRows>
__device__ bool find_tile(const BlockLinearParams& p, const Maps& maps, int slots, int cta, Tile& t) {
  __shared__ int found[2];  // entry, row tile within it
  const bool grouped = p.expert_groups != nullptr;
  const int parts = grouped ? p.per_route : p.groups, col_tiles = (p.out + kTileCols - 1) / kTileCols;
  const int columns = parts * col_tiles;
  const int band = cta / (kBand * columns), within = cta % (kBand * columns);
  const int height = min(kBand, slots - band * kBand);
  const int slot = band * kBand + within % height, column = within / height;
  const int part = column / col_tiles;
  int entry = 0, row_tile = slot, n = p.n, first = 0;
  if (grouped) {
    if (threadIdx.x < kWarp) {
      const int entries = p.groups / p.per_route, lane = static_cast<int>(threadIdx.x);
      int before = 0;  // row tiles of the entries scanned
      if (lane == 0) found[0] = -1;
      __syncwarp();
      for (int e0 = 0; e0 < entries; e0 += kWarp) {
        const int e = e0 + lane;
        int tiles = 0;
        if (e < entries) {
          const ExpertGroup g = p.expert_groups[e];
          if (g.count > 0 && g.expert >= 0 && g.expert < p.route_count) tiles = (g.count + kRows - 1) / kRows;
        }
        int upto = tiles;  // inclusive scan over the lanes
#pragma unroll
        for (int d = 1; d < kWarp; d *= 2) {
          const int v = __shfl_up_sync(0xffffffffu, upto, d);
          if (lane >= d) upto += v;
        }
        const bool mine = slot >= before + upto - tiles && slot < before + upto;
        if (mine) found[0] = e, found[1] = slot - (before + upto - tiles);
        before += __shfl_sync(0xffffffffu, upto, kWarp - 1);
        if (__any_sync(0xffffffffu, mine)) break;
      }
    }
    __syncthreads();
    entry = found[0], row_tile = found[1];
    if (entry < 0) return false;
  }
  LinearOperands op = p.op[part];
  if (grouped) {
    if (!expert_group_operands(p, entry * p.per_route + part, op, n)) return false;
    const ExpertGroup g = p.expert_groups[entry];
    first = g.first;
    t.w = static_cast<const CUtensorMap*>(p.route_maps) + g.expert * p.per_route + part;
  } else {
    t.w = &maps.w[part];
  }
  t.x = &maps.x[part];
  const int row0 = row_tile * kRows;
  if (row0 >= n) return false;
  t.col0 = (column % col_tiles) * kTileCols;
  t.x_row = first + row0;
  t.sw = op.w_scales + static_cast<int64_t>(p.fp4 ? t.col0 : t.col0 / kScaleBlock) * p.s_stride;
  t.y = op.y + static_cast<int64_t>(row0) * p.y_stride + t.col0;
  t.rows = min(kRows, n - row0), t.cols = min(kTileCols, p.out - t.col0);
  return true;
}

// Stage s's boxes (K s * 64 .. s * 64 + 63) into `stage`, counted on `bar` (one thread). Rows past
// the tensor's arrive as zeros, and count as bytes.
template <bool kFp4, int kRows>
__device__ void load_stage(const Tile& t, int s, uint8_t* stage, uint64_t* bar) {
  using L = Layout<kFp4, kRows>;
  barrier_expect(bar, L::kStage);
  tma_load(stage + L::kA, t.x, s * kStageK, t.x_row, bar);
  tma_load(stage + L::kW, t.w, s * kRowBytes<kFp4>, t.col0, bar);
}

// A warpgroup's wgmmas of one K step: its 64 weight rows by the tile's kRows activation rows.
template <int kRows>
__device__ inline void wgmma_step(const uint32_t (&a)[4], uint64_t b, float (&acc)[kRows / 8][4]) {
  if constexpr (kRows == 128)
    wgmma_bf16_m64n128_a_registers(a, b, acc);
  else if constexpr (kRows == 64)
    wgmma_bf16_m64n64_a_registers(a, b, acc);
  else
    wgmma_bf16_m64n16_a_registers(a, b, acc);
}

// A warp's accumulators (acc[j]: rows r, r + 8 by activation rows 8j + 2c, 8j + 2c + 1) into
// out[activation row][weight row], kPitch elements a row, each value as `as` gives it.
template <int kPitch, int kTiles, typename T, typename As>
__device__ inline void store_accumulators(const float (&acc)[kTiles][4], T* out, int r, int c, As as) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      T* row = out + (8 * j + 2 * c + e) * kPitch;
      row[r] = as(acc[j][e]), row[r + 8] = as(acc[j][2 + e]);
    }
}

// The K stages [first, first + count) that rank `rank` of a cluster of `split` sums: slices of
// ceil(stages / split), the last one shorter.
struct Slice {
  int first = 0, count = 0;
};
__device__ inline Slice k_slice(int stages, int split, int rank) {
  const int each = (stages + split - 1) / split, first = min(stages, rank * each);
  return {first, min(stages, first + each) - first};
}

template <bool kFp4, int kRows>
__global__ void __launch_bounds__(kThreads, kResidentCtas<kRows>)
    sm90_block_linear_wgmma(const __grid_constant__ Maps maps, BlockLinearParams p, int slots, int split) {
  using L = Layout<kFp4, kRows>;
  extern __shared__ uint8_t dynamic_smem[];
  uint8_t* smem = dynamic_smem + ((1024 - smem_address(dynamic_smem) % 1024) % 1024);
  after_prior_grids();  // the activations, and a grouped call's entries, come from earlier kernels
  // A cluster's CTAs share a tile, each summing a K slice (split 1: no cluster).
  const int rank = static_cast<int>(blockIdx.x) % split;
  Tile t;
  if (!find_tile<kRows>(p, maps, slots, static_cast<int>(blockIdx.x) / split, t)) return;  // the whole cluster
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const int r = warp * 16 + lane / 4, c = lane % 4;  // this thread's weight rows r, r + 8 of the tile
  const Slice k = k_slice(p.k / kStageK, split, rank);
  const int s0 = k.first, stages = k.count;  // stage s of the loop is K stage s0 + s
  auto* full = reinterpret_cast<uint64_t*>(smem + L::kFull);
  if (tid == 0) {
    for (int s = 0; s < L::kRing; ++s) barrier_init(&full[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid == 0)
    for (int s = 0; s < L::kRing && s < stages; ++s) load_stage<kFp4, kRows>(t, s0 + s, smem + s * L::kStage, &full[s]);
  // The rows' scale bytes (rows past the matrix's read the last row's: their codes are zeros); K
  // block 2s + c / 2 at stage s, read a stage ahead of their use.
  const int last = t.cols - 1;
  const uint8_t* sr = t.sw + static_cast<int64_t>(kFp4 ? min(r, last) : min(r, last) / kScaleBlock) * p.s_stride;
  const uint8_t* sr8 = t.sw + static_cast<int64_t>(kFp4 ? min(r + 8, last) : min(r, last) / kScaleBlock) * p.s_stride;
  sr += 2 * s0, sr8 += 2 * s0;
  uint32_t e_r = stages > 0 ? __ldg(sr + c / 2) : 0, e_r8 = stages > 0 ? __ldg(sr8 + c / 2) : 0;
  // Stage s + 1's fragments are decoded while stage s's wgmmas run, and stage s + 1's wgmmas are
  // issued before stage s's complete: one group stays in flight, each with its own fragments.
  uint32_t frag[2][4][4] = {};
  const E2m1Tables tables = kFp4 ? e2m1_tables() : E2m1Tables{};
  // A stage's weights take one multiply where every scale of the warp's rows folds (a warp-uniform
  // choice: real checkpoints' scales always do), else two.
  // Stage s sits in ring slot `slot` (s % L::kRing), filled in the barrier's phase `phase`
  // ((s / L::kRing) & 1): in the main loop both are known to the compiler, so no ring index is
  // computed at run time.
  const auto decode = [&](int s, int slot, uint32_t phase, uint32_t(&into)[4][4]) {
    const uint32_t now_r = e_r, now_r8 = e_r8;
    const bool folds = __all_sync(0xffffffffu, max(now_r, now_r8) <= kFoldsUpTo<kFp4>);
    if (s + 1 < stages) e_r = __ldg(sr + 2 * (s + 1) + c / 2), e_r8 = __ldg(sr8 + 2 * (s + 1) + c / 2);
    barrier_wait(&full[slot], phase);
    const uint8_t* w = smem + slot * L::kStage + L::kW;
    if (folds)
      decode_stage<kFp4, true>(w, r, c, folded_scale_pair<kFp4>(now_r), folded_scale_pair<kFp4>(now_r8), tables, into);
    else
      decode_stage<kFp4, false>(w, r, c, scale_pair<kFp4>(now_r), scale_pair<kFp4>(now_r8), tables, into);
  };
  float acc[kRows / 8][4] = {};
  uint64_t activations = swizzled_descriptor(smem + L::kA);  // slot 0's
  // Opaque, so that the compiler keeps the descriptor instead of recomputing it from the shared
  // memory's base at every stage.
  asm volatile("" : "+l"(activations));
  // Stage s on `cur` (decoded): issued, then stage s - 1's group waited for, its slot refilled with
  // stage s - 1 + L::kRing and its fragments (`other`) given stage s + 1.
  const auto step = [&](int s, int slot, uint32_t phase, uint32_t(&cur)[4][4], uint32_t(&other)[4][4]) {
    const int before = (slot + L::kRing - 1) % L::kRing, next = (slot + 1) % L::kRing;
    // The stage's activations by descriptor: a K step of 16 is 32 bytes on (2 in its 16-byte units).
    const uint64_t b = activations + static_cast<uint64_t>(slot * L::kStage / 16);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) wgmma_step<kRows>(cur[j], b + 2 * j, acc);
    wgmma_commit();
    wgmma_wait<1>();
    wgmma_hold_fragments(other);  // read by stage s - 1's wgmmas until now: not to be reused before
    if (s >= 1) {
      __syncthreads();  // every warpgroup is done with stage s - 1's slot
      if (tid == 0 && s - 1 + L::kRing < stages)
        load_stage<kFp4, kRows>(t, s0 + s - 1 + L::kRing, smem + before * L::kStage, &full[before]);
    }
    if (s + 1 < stages) decode(s + 1, next, next == 0 ? phase ^ 1u : phase, other);
  };
  if (stages > 0) decode(0, 0, 0, frag[0]);
  // A trip a pass over the ring (even: the fragments' roles fixed in the code), then the rest two
  // stages a trip, an odd count's last stage after.
  static_assert(L::kRing % 2 == 0);
  int s = 0;
  uint32_t phase = 0;
  for (; s + L::kRing <= stages; s += L::kRing, phase ^= 1u) {
#pragma unroll
    for (int i = 0; i < L::kRing; i += 2) {
      step(s + i, i, phase, frag[0], frag[1]);
      step(s + i + 1, i + 1, phase, frag[1], frag[0]);
    }
  }
  int slot = 0;
  for (; s + 2 <= stages; s += 2, slot += 2) {
    step(s, slot, phase, frag[0], frag[1]);
    step(s + 1, slot + 1, phase, frag[1], frag[0]);
  }
  if (s < stages) step(s, slot, phase, frag[0], frag[1]);
  wgmma_wait<0>();
  wgmma_hold(acc);
  wgmma_hold_fragments(frag[0]);
  wgmma_hold_fragments(frag[1]);
  __syncthreads();  // the ring is idle: the output tile may take it
  if (split > 1) {
    // The slices' fp32 sums meet in distributed shared memory, added in rank order by the rank
    // that writes the output (every split-th one).
    constexpr int kPitch = kTileCols + 4;  // a row's floats: a quad's rows 2c apart hit distinct banks
    static_assert(kRows * kPitch * 4 <= L::kFull);
    auto* part = reinterpret_cast<float*>(smem);
    store_accumulators<kPitch>(acc, part, r, c, [](float v) { return v; });
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    for (int i = rank * kThreads + tid; i < t.rows * kTileCols; i += split * kThreads) {
      const int row = i / kTileCols, col = i % kTileCols;
      if (col >= t.cols) continue;
      float sum = cluster.map_shared_rank(part, 0)[row * kPitch + col];
      for (int q = 1; q < split; ++q) sum += cluster.map_shared_rank(part, q)[row * kPitch + col];
      t.y[static_cast<int64_t>(row) * p.y_stride + col] = float_to_bf16(sum);
    }
    cluster.sync();  // no CTA leaves while another reads its shared memory
    return;
  }
  // Staged through shared memory as bf16, then written a row's 16 bytes at a time.
  constexpr int kPitch = kTileCols + 8;  // a staged row's bf16: its quads' stores hit distinct banks
  static_assert(kRows * kPitch * 2 <= L::kFull && kPitch % 8 == 0);
  auto* staged = reinterpret_cast<uint16_t*>(smem);
  store_accumulators<kPitch>(acc, staged, r, c, [](float v) { return float_to_bf16(v); });
  __syncthreads();
  const bool vector = p.y_stride % 8 == 0 && reinterpret_cast<uintptr_t>(t.y) % 16 == 0;
  constexpr int kPieces = kTileCols / 8;  // 16-byte pieces of a row
  for (int i = tid; i < kRows * kPieces; i += kThreads) {
    const int row = i / kPieces, col = i % kPieces * 8;
    if (row >= t.rows || col >= t.cols) continue;
    uint16_t* y = t.y + static_cast<int64_t>(row) * p.y_stride + col;
    const uint16_t* v = staged + row * kPitch + col;
    if (vector && col + 8 <= t.cols) {
      *reinterpret_cast<uint4*>(y) = *reinterpret_cast<const uint4*>(v);
    } else {
      for (int q = 0; q < min(8, t.cols - col); ++q) y[q] = v[q];
    }
  }
}

bool aligned(const void* v, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(v) % bytes == 0;
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 2D map of [rows, cols] elements of `bytes` each, rows `stride` bytes apart, in boxes of
// box_rows x box_cols (128-byte swizzled or not); out-of-range elements read as zeros.
bool encode(CUtensorMap* map, const void* base, CUtensorMapDataType type, int64_t rows, int64_t cols, int64_t stride,
            int box_rows, int box_cols, bool swizzle) {
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encoder();
  if (!fn || !aligned(base, 16) || stride % 16 != 0 || rows < 1 || cols < 1) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return fn(map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

bool wgmma_weight_map(void* map, const uint8_t* w, int out, int k, int64_t w_stride, bool fp4) {
  const int row_bytes = fp4 ? kRowBytes<true> : kRowBytes<false>;
  return encode(static_cast<CUtensorMap*>(map), w, CU_TENSOR_MAP_DATA_TYPE_UINT8, out, fp4 ? k / 2 : k, w_stride,
                kTileCols, row_bytes, false);
}

bool wgmma_takes(const BlockLinearParams& p) {
  const bool grouped = p.expert_groups != nullptr;
  const int parts = grouped ? p.per_route : p.groups;
  if (p.routes || parts < 1 || parts > kMaxParts || p.k % kStageK != 0 || p.k <= 0 || p.n < 1 || p.out < 1 ||
      (grouped && (!p.route_maps || !p.route_table || p.groups % p.per_route != 0)))
    return false;
  const LinearKernel kernel = p.kernel;
  const int rows = grouped ? p.max_group_rows : p.n;
  if (kernel == LinearKernel::kWgmma) return true;
  if (kernel != LinearKernel::kAuto) return false;
  // A decode step's plain fp8 linears and its routed fp4 experts too (the few-rows instances:
  // every row count up to kFewRows alike).
  return rows >= kMinRows || (grouped ? p.fp4 : !p.fp4 && p.n <= kFewRows);
}

namespace {
// The K slices of a few-rows call: a power of two, so that the matrix's tiles fill the GPU once,
// each slice keeping kMinSliceStages; by the shape (and the GPU's size) alone, so that a row's sums
// never depend on the call.
int wgmma_split(int out, int k) {
  const int tiles = (out + kTileCols - 1) / kTileCols, stages = k / kStageK;
  int split = 1;
  while (split < kMaxSplit && tiles * split < linear_detail::sm_count() && stages / (2 * split) >= kMinSliceStages)
    split *= 2;
  return split;
}

// The same for a decode step's routed experts, by K alone: the most slices (a power of two) of at
// least kExpertSliceStages stages. (The tiles are as many as the step's experts, from a token's
// few to every expert; a cluster a tile keeps one token's calls across the GPU.)
int expert_split(int k) {
  int split = 1;
  while (split < kMaxSplit && k / kStageK / (2 * split) >= kExpertSliceStages) split *= 2;
  return split;
}
}  // namespace

bool wgmma_applies(const BlockLinearParams& p) {
  if (!wgmma_takes(p) || (p.x_operand_stride && (p.x_operand_stride < p.k || p.x_operand_stride % 8 != 0)))
    return false;
  const bool grouped = p.expert_groups != nullptr;
  for (int g = 0; g < (grouped ? p.per_route : p.groups); ++g) {
    const LinearOperands& op = p.op[g];
    if (!op.x_operand || !aligned(op.x_operand, 16) || !op.y || !aligned(op.y, 2)) return false;
    if (!grouped && (!op.w || !op.w_scales)) return false;
  }
  return true;
}

cudaError_t launch_block_linear_wgmma(const BlockLinearParams& p) {
  if (!wgmma_applies(p)) return cudaErrorInvalidValue;
  const bool grouped = p.expert_groups != nullptr;
  // The dispatch's choice up to kFewRows rows (a decode step): a plain fp8 call in one row tile
  // of kFewRows, K split by the matrix's shape; the routed experts in tiles of kExpertRows of an
  // expert's rows, K split by K. (Forced, the kernel runs its prefill tiles at any n.)
  const bool few = (grouped ? p.max_group_rows : p.n) <= kFewRows && p.kernel == LinearKernel::kAuto;
  const int rows = !few ? kTileRows : grouped ? kExpertRows : kFewRows;
  const int split = !few ? 1 : grouped ? expert_split(p.k) : wgmma_split(p.out, p.k);
  const int parts = grouped ? p.per_route : p.groups, entries = grouped ? p.groups / p.per_route : 1;
  const int64_t slots = (static_cast<int64_t>(p.n) + rows - 1) / rows + (grouped ? entries : 0);
  const int64_t ctas = slots * parts * ((p.out + kTileCols - 1) / kTileCols) * split;
  if (ctas == 0) return cudaSuccess;
  if (ctas > INT32_MAX) return cudaErrorInvalidValue;
  Maps maps{};
  for (int g = 0; g < parts; ++g) {
    const LinearOperands& op = p.op[g];
    const int64_t x_stride = p.x_operand_stride ? p.x_operand_stride : p.k;
    if (!encode(&maps.x[g], op.x_operand, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.n, p.k, x_stride * 2, rows, kStageK,
                true))
      return cudaErrorInvalidValue;
    if (!grouped && !wgmma_weight_map(&maps.w[g], op.w, p.out, p.k, p.w_stride, p.fp4)) return cudaErrorInvalidValue;
  }
  const auto launch = [&](auto kernel, int smem) {
    const cudaError_t opt_in = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (opt_in != cudaSuccess) return opt_in;
    return launch_clustered(kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), smem, p.stream,
                            split > 1 ? static_cast<unsigned>(split) : 0u, maps, p, static_cast<int>(slots), split);
  };
  if (few && grouped)  // fp4 alone (wgmma_takes)
    return launch(sm90_block_linear_wgmma<true, kExpertRows>, Layout<true, kExpertRows>::kBytes);
  if (few)  // fp8 alone
    return launch(sm90_block_linear_wgmma<false, kFewRows>, Layout<false, kFewRows>::kBytes);
  return p.fp4 ? launch(sm90_block_linear_wgmma<true, kTileRows>, Layout<true, kTileRows>::kBytes)
               : launch(sm90_block_linear_wgmma<false, kTileRows>, Layout<false, kTileRows>::kBytes);
}

}  // namespace dsinfer::cuda
