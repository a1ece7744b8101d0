// sm90_block_linear_tiled: the block-scaled linear of a decode step (1-64 activation rows) on e4m3
// tensor cores, reading each weight once per 64 activation rows, batch-invariant by construction.
//
// A CTA takes 64 weight rows (a 16-row tile a warp) and one slice of the K blocks; the K slices of
// a row tile are the CTAs of one thread-block cluster, and their fp32 partial sums meet in
// distributed shared memory, added in cluster-rank order. A K block of a warp's 16 rows is the A
// operand of one mma.m16n8k32 on e4m3 (fp8 weights as they are, fp4 codes placed in e4m3 bits times
// 2^-6, fp4.cuh), each 8 activation rows' e4m3 codes the B operand, so D is that block's partial
// sum (products exact, summed by the tensor cores); it goes into the row's fp32 sum as fma(D, sx *
// sw, acc) (both scales powers of two, fp4's times 2^6, so their product is exact).
//
// The slice's activations and weight scales are staged in shared memory for the CTA's four warps
// (a weight byte costs at most one activation byte from L2 at 64 rows), at once or, for 64 rows,
// in parts so that an SM holds several CTAs. Each warp streams its rows' weights through its own
// ring of K blocks in shared memory with cp.async, kStages blocks ahead of its mmas: the bytes in
// flight cost no registers, so an SM keeps several CTAs and enough loads in flight to cover the
// memory's latency.
//
// What fixes a row's sum: the split (by the matrix's shape and the GPU's size, never by the
// number of rows, matrices or experts in the launch), the block order within a slice, the rank
// order of the slices. Each activation row is its own column of the mma, so its outputs do not
// depend on the rows beside it or on how many activation tiles the instance computes: a sequence
// decodes to the same bits alone or in a batch of 64, whichever path (token by token, grouped by
// expert) ran its experts.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/common/async_copy.cuh"
#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/fp4.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/kernels/linear/config.h"
#include "backends/cuda/kernels/linear/device_helpers.cuh"
#include "backends/cuda/kernels/linear/kernels.h"
#include "backends/cuda/kernels/linear/linear.h"

namespace dsinfer::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace common;
using namespace linear_config;
using namespace linear_config::tiled_kernel;
using namespace linear_detail;

// A ring slot: 32 bytes of each of a warp's 16 rows, one K block of fp8 or two of fp4 (so that
// every lane copies 16 bytes of it and a wait, a barrier and a copy serve two fp4 blocks).
inline constexpr int kSlotBytes = 16 * 32;
__host__ __device__ constexpr int blocks_a_slot(bool fp4) {
  return fp4 ? 2 : 1;
}

// Bytes of one activation row of a slice in shared memory: 32 a K block (e4m3 codes), padded to 32
// mod 64 so that the sixteen lanes of an 8-byte load phase (rows g .. g + 3, slots t) hit distinct
// banks.
__host__ __device__ constexpr int act_stride(int slice) {
  return slice * 32 + (slice % 2 == 0 ? 32 : 0);
}
// The weight scales of the CTA's rows over a slice: fp4 a byte a row and block, fp8 one a 32-row
// group and block (two groups), padded to 16 bytes.
__host__ __device__ constexpr int scale_bytes(int slice) {
  return (kTileRows * slice + 15) / 16 * 16;
}
// The warps' rings of `stages` K blocks each, in slots (fp4's two blocks a slot leave shared
// memory for more CTAs an SM).
__host__ __device__ constexpr int ring_slots(int stages, bool fp4) {
  return stages / blocks_a_slot(fp4);
}
__host__ __device__ constexpr int ring_bytes(int stages, bool fp4) {
  return kWarps * ring_slots(stages, fp4) * kSlotBytes;
}
// Shared memory of a pass of `rows` activation rows (a multiple of 8) with `part` K blocks staged
// at a time: the rings, the part's weight scales, activations and their scales. After the pass the
// CTA's partial sums are written from the start (over the rings); the space is sized so that they
// fit.
__host__ __device__ constexpr int pass_smem_bytes(int rows, int part, int stages, bool fp4) {
  const int staged = rows * act_stride(part) + rows * part * 4;
  const int partial = kTileRows * rows * 4;
  return ring_bytes(stages, fp4) + scale_bytes(part) + (staged > partial ? staged : partial);
}

struct Operand {
  const uint8_t* x = nullptr;    // e4m3 codes, row stride k
  const float* sx = nullptr;     // [rows][k / 32]
  const uint16_t* xb = nullptr;  // or the bf16 input, row stride p.x_bf16_stride, quantised here
  const uint8_t* w = nullptr;
  const uint8_t* sw = nullptr;
  uint16_t* y = nullptr;
  int n = 0;
  bool live = false;  // false: a routed id outside the table (the outputs are zeros)
};

// The matrix, activations and outputs of launch group `group` (plain, routed or grouped by expert).
__device__ inline Operand resolve(const BlockLinearParams& p, int group) {
  Operand o;
  if (p.expert_groups) {
    LinearOperands op;
    if (!expert_group_operands(p, group, op, o.n)) return o;  // nothing to write
    o.x = op.x_codes, o.sx = op.x_scales, o.y = op.y, o.w = op.w, o.sw = op.w_scales, o.live = true;
    return o;
  }
  const LinearOperands& op = p.op[group];
  o.x = op.x_codes, o.sx = op.x_scales, o.xb = op.x_bf16, o.y = op.y, o.n = p.n;
  o.live = group_weights(p, group, o.w, o.sw);
  return o;
}

// i / count as (2i * ceil(2^31 / count)) / 2^32: exact for i < 2^31 / count (a slice's rows and
// blocks are far fewer), where a division by a value known only at run time costs ~20 instructions.
struct DivideBy {
  uint32_t magic;
  __device__ explicit DivideBy(int count)
      : magic((0x80000000u + static_cast<uint32_t>(count) - 1u) / static_cast<uint32_t>(count)) {}
  __device__ int operator()(int i) const { return static_cast<int>(__umulhi(static_cast<uint32_t>(i) << 1, magic)); }
};

// The bf16 activations of the slice's blocks [b, b + count) of rows [n0, n0 + rows) quantised into
// shared memory as launch_quantize_input would (common::act_quant_eight: four lanes a group of 32,
// each with a 16-byte load), rows past `rows` up to `padded` as zeros. Every lane runs every round
// (the shuffles).
__device__ inline void quantise_slice(const BlockLinearParams& p, const Operand& o, int n0, int rows, int padded, int b,
                                      int count, int width, uint8_t* act, float* scales) {
  constexpr int kThreads = kWarps * kWarp;
  const int stride = act_stride(width), quarters = rows * count * 4;
  const DivideBy row_of(count);
  for (int i0 = 0; i0 < quarters; i0 += kThreads) {
    const int i = i0 + threadIdx.x, group = i >> 2, quarter = i & 3, r = row_of(group), c = group - r * count;
    const bool in = i < quarters;
    float x[8] = {};
    if (in) {
      const uint4 raw = *reinterpret_cast<const uint4*>(o.xb + static_cast<int64_t>(n0 + r) * p.x_bf16_stride +
                                                        (b + c) * 32 + quarter * 8);
      const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int v = 0; v < 4; ++v) x[2 * v] = bf16x2_lo_to_float(w[v]), x[2 * v + 1] = bf16x2_hi_to_float(w[v]);
    }
    uint32_t codes[2];
    const unsigned e = act_quant_eight(x, codes);
    if (!in) continue;
    *reinterpret_cast<uint2*>(act + r * stride + c * 32 + quarter * 8) = make_uint2(codes[0], codes[1]);
    if (quarter == 0) scales[r * width + c] = __uint_as_float(e << 23);
  }
  for (int i = threadIdx.x; i < (padded - rows) * count * 2; i += kThreads) {  // 16-byte chunks, 2 a block
    const int r = rows + row_of(i >> 1), c = i - (r - rows) * count * 2;
    *reinterpret_cast<uint4*>(act + r * stride + c * 16) = make_uint4(0, 0, 0, 0);
    if (c % 2 == 0) scales[r * width + c / 2] = 0.0f;
  }
}

// Starts copying the activations of the slice's blocks [b, b + count) of rows [n0, n0 + rows) and
// their scales to shared memory, rows of `width` blocks (rows past `rows` up to `padded` as zeros:
// their columns are discarded, but stay finite), or quantises them there from bf16
// (quantise_slice), and loads the CTA's weight scales of those blocks (fp4: [row][block]; fp8:
// [32-row group][block]); the caller waits and then meets the other warps at a barrier. No load
// waits for another: a CTA's prologue costs one memory latency, not one a scale byte (the weight
// scales are bytes at any offset, too small for cp.async: batches of loads to registers, then the
// stores).
__device__ inline void stage_slice(const BlockLinearParams& p, const Operand& o, int n0, int rows, int padded,
                                   int tile_r0, int b, int count, int width, uint8_t* act, float* scales,
                                   uint8_t* wscales) {
  constexpr int kThreads = kWarps * kWarp, kBatch = 8;
  const int blocks = p.k / 32, stride = act_stride(width);
  const DivideBy row_of(count);
  if (o.xb) {
    quantise_slice(p, o, n0, rows, padded, b, count, width, act, scales);
  } else {
    for (int i = threadIdx.x; i < padded * count * 2; i += kThreads) {  // 16-byte chunks, 2 a block
      const int r = row_of(i >> 1), c = i - r * count * 2;
      cp_async16(act + r * stride + c * 16, o.x + static_cast<int64_t>(n0 + min(r, rows - 1)) * p.k + b * 32 + c * 16,
                 r < rows);
    }
    for (int i = threadIdx.x; i < padded * count; i += kThreads) {
      const int r = row_of(i), c = i - r * count;
      cp_async4(scales + r * width + c, o.sx + static_cast<int64_t>(n0 + min(r, rows - 1)) * blocks + b + c, r < rows);
    }
  }
  if (p.fp4 && count % 4 == 0 && width % 4 == 0 && b % 4 == 0 && p.s_stride % 4 == 0 &&
      reinterpret_cast<uintptr_t>(o.sw) % 4 == 0) {  // fp4's scale rows in 4-byte copies where aligned
    const int words = count / 4;
    const DivideBy row_of_word(words);
    for (int i = threadIdx.x; i < kTileRows * words; i += kThreads) {
      const int r = row_of_word(i), c = i - r * words, row = tile_r0 + r;
      cp_async4(wscales + r * width + 4 * c, o.sw + static_cast<int64_t>(min(row, p.out - 1)) * p.s_stride + b + 4 * c,
                row < p.out);
    }
    return;
  }
  const int scale_rows = p.fp4 ? kTileRows : kTileRows / 32, total = scale_rows * count;
  for (int i0 = 0; i0 < total; i0 += kBatch * kThreads) {
    uint8_t v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads + threadIdx.x, r = row_of(i), c = i - r * count;
      const int row = p.fp4 ? tile_r0 + r : tile_r0 / 32 + r;
      const bool in = i < total && (p.fp4 ? row < p.out : row * 32 < p.out);
      v[u] = in ? __ldg(o.sw + static_cast<int64_t>(row) * p.s_stride + b + c) : 0;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads + threadIdx.x, r = row_of(i);
      if (i < total) wscales[r * width + i - r * count] = v[u];
    }
  }
}

// An e8m0 scale byte's power of two times 2^6, exactly as e8m0_to_float(e) * 0x1p6f (2^-127 * 2^6 is
// the normal 2^-121; from e = 249 on both are inf): three integer instructions instead of four.
__device__ __forceinline__ float e8m0_times_64(uint8_t e) {
  return __uint_as_float(min(static_cast<uint32_t>(e) + 6u, 255u) << 23);
}

// The lane's words of a block from its ring slot (at the lane's offset): fp8, rows g and g + 8 at
// K 8t .. 8t + 3, then at 8t + 4 .. 8t + 7 (mma_e4m3's A fragment as it is); fp4, the words of rows
// g and g + 8 holding K 8t .. 8t + 7 (of the slot's first block, or at + 16 its second).
template <bool kFp4>
__device__ __forceinline__ void ring_raw(const uint8_t* slot, uint32_t raw[4]) {
  if constexpr (kFp4) {
    raw[0] = *reinterpret_cast<const uint32_t*>(slot);
    raw[1] = *reinterpret_cast<const uint32_t*>(slot + 8 * 32);
  } else {
    const uint2 lo = *reinterpret_cast<const uint2*>(slot);
    const uint2 hi = *reinterpret_cast<const uint2*>(slot + 8 * 32);
    raw[0] = lo.x, raw[1] = hi.x, raw[2] = lo.y, raw[3] = hi.y;
  }
}

// One pass of NT tiles of activation rows over the CTA's K slice [kb0, kb1): the slice's
// activations and scales staged `part` blocks at a time (fp4: an even number where there are
// several parts), then each warp's blocks through its ring of slots (blocks_a_slot blocks each),
// kStages / blocks_a_slot - 1 slots in flight ahead of the one in use (a commit group a slot, empty
// past the slice; the ring runs on across the parts). The blocks' order, and so every sum, is the
// same whatever the part. Addresses that do not change from block to block are formed once: the
// loop is what a weight byte costs in instructions.
template <int NT, int kStages, bool kFp4>
__device__ __forceinline__ void slice_pass(const BlockLinearParams& p, const Operand& o, int n0, int rows, int tile_r0,
                                           int kb0, int kb1, int part, uint8_t* smem, float (&acc)[NT][4]) {
  constexpr int kRowBytes = kFp4 ? 16 : 32;  // a weight row's bytes of one K block
  constexpr int kStep = blocks_a_slot(kFp4), kSlots = ring_slots(kStages, kFp4);
  static_assert(kStages % kStep == 0 && kSlots >= 2);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int count = kb1 - kb0, r0 = tile_r0 + warp * 16, width = min(part, count);
  const int slots = (count + kStep - 1) / kStep;  // the slice's slots
  uint8_t* ring = smem + warp * kSlots * kSlotBytes;
  uint8_t* wscales = smem + ring_bytes(kStages, kFp4);
  uint8_t* act = wscales + scale_bytes(width);
  float* scales = reinterpret_cast<float*>(act + NT * 8 * act_stride(width));
  // The lane's copy into each slot: 16 bytes of row lane / 2 (fp4: the slot's block lane % 2), rows
  // past the matrix and fp4 blocks past the slice as zeros.
  const int copy_row = r0 + lane / 2, half = lane % 2;
  // The slots the lane copies from the matrix (fp4's lane of a slot's second block: one fewer for
  // an odd count); past them its copies write zeros.
  const int copied = copy_row >= p.out ? 0 : kFp4 ? (count - half + 1) / 2 : slots;
  const uint8_t* copy_src = o.w + static_cast<int64_t>(min(copy_row, p.out - 1)) * p.w_stride +
                            static_cast<int64_t>(kb0) * kRowBytes + half * 16;
  uint8_t* copy_dst = ring + lane * 16;
  const auto ring_load = [&](int slot_rel, int slot) {
    cp_async16(copy_dst + slot * kSlotBytes, copy_src + slot_rel * 32, slot_rel < copied);
  };
  // The lane's A words of a slot: rows g and g + 8 at K 8t.. (ring_raw).
  const uint8_t* raw_at = ring + g * 32 + t * (kFp4 ? 4 : 8);
#pragma unroll
  for (int s = 0; s < kSlots - 1; ++s) {
    if (s < slots) ring_load(s, s);
    cp_async_commit();
  }
  const int stride = act_stride(width);
  const uint8_t* sw_g = wscales + (kFp4 ? (warp * 16 + g) * width : (warp * 16 / 32) * width);
  const uint8_t* sw_g8 = wscales + (warp * 16 + g + 8) * width;  // fp4 only
  const uint8_t* act_at = act + g * stride + t * 8;              // tile j: + j * 8 * stride
  const float* scale_at = scales + 2 * t * width;                // tile j: + j * 8 * width
  int use = 0, refill = kSlots - 1;  // the slot in use; the slot that the one kSlots - 1 ahead goes to
  for (int s0 = 0; s0 < count; s0 += width) {
    if (s0 > 0) __syncthreads();  // every warp is done with the previous part
    stage_slice(p, o, n0, rows, NT * 8, tile_r0, kb0 + s0, min(width, count - s0), width, act, scales, wscales);
    cp_async_commit();
    cp_async_wait<0>();  // the staged part (and the ring's slots in flight)
    __syncthreads();
    const int in_part = min(count, s0 + width) - s0;  // the part's blocks
    // The block's weight scales, activations and their scales, advanced a slot at a time.
    const uint8_t *sw = sw_g, *sw8 = sw_g8, *x = act_at;
    const float* sx = scale_at;
#pragma unroll(kFp4 ? 1 : 2)
    for (int c0 = 0, slot_rel = s0 / kStep; c0 < in_part;
         c0 += kStep, ++slot_rel, sw += kStep, sw8 += kStep, x += 32 * kStep, sx += kStep) {
      cp_async_wait<kSlots - 2>();  // the slot's blocks are in (this lane's copies)
      __syncwarp();                 // and every lane's; every lane is done with the slot refilled next
      if (slot_rel + kSlots - 1 < slots) ring_load(slot_rel + kSlots - 1, refill);
      cp_async_commit();
#pragma unroll
      for (int h = 0; h < kStep; ++h) {
        if (c0 + h >= in_part) break;  // fp4: an odd part's last slot holds one block
        // The A fragment (mma_e4m3): rows g, g + 8 at K' 4t.. and 16 + 4t... fp8: the row's bytes
        // 8t .. 8t + 3 and 8t + 4 .. 8t + 7 as they are; fp4: its even and odd elements 8t .. 8t + 7,
        // so that B's columns take the activations in that order too (prmt below).
        uint32_t a[4];
        ring_raw<kFp4>(raw_at + use * kSlotBytes + h * 16, a);
        float wg, wg8;
        if constexpr (kFp4) {  // the codes as e4m3 times 2^-6, so their scales times 2^6 (exact below 2^121)
          const uint32_t row_g = a[0], row_g8 = a[1];
          e2m1x8_to_e4m3x8_scaled(row_g, a[0], a[2]);
          e2m1x8_to_e4m3x8_scaled(row_g8, a[1], a[3]);
          wg = e8m0_times_64(sw[h]), wg8 = e8m0_times_64(sw8[h]);
        } else {
          wg = wg8 = e8m0_to_float(sw[h]);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j * 8 >= rows) break;  // tiles of no row (an expert's few tokens): nothing to add
          const uint2 bx = *reinterpret_cast<const uint2*>(x + j * 8 * stride + h * 32);
          float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          if constexpr (kFp4)
            mma_e4m3(a, prmt(bx.x, bx.y, 0x6420u), prmt(bx.x, bx.y, 0x7531u), d);
          else
            mma_e4m3(a, bx.x, bx.y, d);
          const float sx0 = sx[j * 8 * width + h], sx1 = sx[j * 8 * width + width + h];
          acc[j][0] = fmaf(d[0], sx0 * wg, acc[j][0]);
          acc[j][1] = fmaf(d[1], sx1 * wg, acc[j][1]);
          acc[j][2] = fmaf(d[2], sx0 * wg8, acc[j][2]);
          acc[j][3] = fmaf(d[3], sx1 * wg8, acc[j][3]);
        }
      }
      // The slot goes back to the ring at the next slot, after that one's __syncwarp.
      refill = use;
      use = use + 1 == kSlots ? 0 : use + 1;
    }
  }
  cp_async_wait<0>();
}

// A pass of T tiles: the slice's sums of the warp's rows, then (once every warp has read the
// staged activations) written to shared memory as [kTileRows][T * 8] partial sums.
template <int T, int kStages, bool kFp4>
__device__ __forceinline__ void pass_to_smem(const BlockLinearParams& p, const Operand& o, int n0, int rows,
                                             int tile_r0, int kb0, int kb1, int staged, uint8_t* smem, float* part) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  float acc[T][4] = {};
  slice_pass<T, kStages, kFp4>(p, o, n0, rows, tile_r0, kb0, kb1, staged, smem, acc);
  __syncthreads();  // the staged activations are read: the space holds the partial sums now
#pragma unroll
  for (int j = 0; j < T; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      part[(warp * 16 + g + (e >= 2 ? 8 : 0)) * (T * 8) + j * 8 + 2 * t + (e & 1)] = acc[j][e];
}

// Ring stages a warp for T tiles: more tiles stage more activations, so fewer blocks in flight.
__host__ __device__ constexpr int stages_for(int tiles) {
  return tiles <= 2 ? 16 : tiles <= 4 ? 12 : 8;
}

// kTiles: the activation tiles of a pass (rows past the call's are zeros). The same arithmetic per
// row at every kTiles: each row is its own column of the mma.
// CTAs an SM should hold, which caps the registers: one tile's instance fits 8 in shared memory
// (fp4) at 64 registers, two tiles' 7 (64 would spill), the others 4 (the compiler's own choice
// took up to 110 and 146).
__host__ __device__ constexpr int min_ctas_for(int tiles) {
  return tiles == 1 ? 8 : tiles == 2 ? 7 : 4;
}

// The weight bytes of the first `count` K blocks from kb0 of the CTA's rows into L2: what its warps'
// rings load first. Called before the CTA waits for the kernels before it (common/dependent_launch.cuh),
// so that those loads meet L2 rather than memory; only for weights named by the call (a routed or
// grouped call's come from the step's earlier kernels).
__device__ inline void prefetch_first_blocks(const BlockLinearParams& p, int group, int tile_r0, int kb0, int count) {
  constexpr int kLine = 128;
  const int row_bytes = p.fp4 ? 16 : 32, bytes = count * row_bytes;
  if (bytes <= 0) return;
  const int lines = (bytes + kLine - 1) / kLine + 1;  // + 1: the run may straddle a line
  const int rows = min(kTileRows, p.out - tile_r0);
  for (int i = threadIdx.x; i < rows * lines; i += blockDim.x) {
    const uint8_t* run =
        p.op[group].w + static_cast<int64_t>(tile_r0 + i / lines) * p.w_stride + static_cast<int64_t>(kb0) * row_bytes;
    const uint8_t* at = run + min((i % lines) * kLine, bytes - 1);  // within the run: a hint, never past it
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
  }
}

template <int kTiles>
__global__ void __launch_bounds__(kWarps* kWarp, min_ctas_for(kTiles))
    sm90_block_linear_tiled(BlockLinearParams p, int split, int staged) {
  constexpr int kStages = stages_for(kTiles), cols = kTiles * 8;
  extern __shared__ __align__(16) uint8_t smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int row_tiles = (p.out + kTileRows - 1) / kTileRows;
  const int unit = blockIdx.x / split, group = unit / row_tiles, tile_r0 = (unit % row_tiles) * kTileRows;
  const int blocks = p.k / 32, slice = (blocks + split - 1) / split;
  if (!p.expert_groups && !p.routes) {
    const int kb = min(blocks, rank * slice);
    prefetch_first_blocks(p, group, tile_r0, kb, min(kStages - 1, min(blocks, kb + slice) - kb));
  }
  after_prior_grids();  // a grouped call's experts and counts, and every call's activations, come from earlier kernels
  const Operand o = resolve(p, group);
  if (o.n <= 0) return;  // the whole cluster: its CTAs share the group
  const int kb0 = min(blocks, rank * slice), kb1 = o.live ? min(blocks, kb0 + slice) : kb0;
  float* part = reinterpret_cast<float*>(smem);  // [kTileRows][cols] after the pass (over the rings)
  for (int n0 = 0; n0 < o.n; n0 += cols) {
    const int rows = min(cols, o.n - n0);
    if (p.fp4)
      pass_to_smem<kTiles, kStages, true>(p, o, n0, rows, tile_r0, kb0, kb1, staged, smem, part);
    else
      pass_to_smem<kTiles, kStages, false>(p, o, n0, rows, tile_r0, kb0, kb1, staged, smem, part);
    cluster.sync();  // every slice's partial sums are in its CTA's shared memory
    // Rank q adds the slices of every split-th output, in rank order, and writes it.
    for (int i = rank * blockDim.x + threadIdx.x; i < kTileRows * cols; i += split * blockDim.x) {
      const int row = i / cols, col = i % cols;
      float s = cluster.map_shared_rank(part, 0)[i];
      for (int q = 1; q < split; ++q) s += cluster.map_shared_rank(part, q)[i];
      if (tile_r0 + row < p.out && col < rows)
        o.y[static_cast<int64_t>(n0 + col) * p.y_stride + tile_r0 + row] = float_to_bf16(s);
    }
    cluster.sync();  // no CTA reuses or leaves its shared memory while another reads it
  }
}

// K blocks of activations staged at a time: a slice's, or fewer for the 64-row instance so that
// an SM holds more than one of its CTAs (the order of the sums does not change).
__host__ __device__ constexpr int staged_blocks_for(int tiles) {
  return tiles >= kMaxNTiles ? kStagedBlocksFullPass : kMaxSliceBlocks;
}

template <int kTiles>
cudaError_t launch_tiles(const BlockLinearParams& p, int split, int64_t ctas) {
  const int slice = (p.k / 32 + split - 1) / split;
  int staged = std::min(slice, p.tiled_staged_blocks > 0 ? p.tiled_staged_blocks : staged_blocks_for(kTiles));
  if (staged < slice && staged % blocks_a_slot(p.fp4) != 0) staged += 1;  // fp4's parts: whole slots (slice_pass)
  const int smem = pass_smem_bytes(kTiles * 8, staged, stages_for(kTiles), p.fp4);
  if (smem > kSharedBytesOptIn) return cudaErrorInvalidValue;  // only a benchmark's part of over 64 blocks
  // The opt-in once an instance (a launch takes what it asks for, up to this).
  static const cudaError_t opt_in = cudaFuncSetAttribute(
      sm90_block_linear_tiled<kTiles>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytesOptIn);
  if (opt_in != cudaSuccess) return opt_in;
  return launch_clustered(sm90_block_linear_tiled<kTiles>, dim3(static_cast<unsigned>(ctas)), dim3(kWarps * kWarp),
                          smem, p.stream, static_cast<unsigned>(split), p, split, staged);
}

// The fewest K slices (a power of two, at most kMaxSplit) of at most `max_blocks` blocks each.
int fewest_slices(int blocks, int max_blocks) {
  int split = 1;
  while (split < kMaxSplit && (blocks + split - 1) / split > max_blocks) split *= 2;
  return split;
}

}  // namespace

int tiled_split(int out, int k, bool fp4) {
  const int blocks = k / 32;
  // fp4 weights are the routed experts, several matrices a launch (top-k, w1 with w3) whose CTAs
  // fill the GPU together: the fewest slices of at most kFp4SliceBlocks, so that a CTA streams
  // long runs through its ring (measured faster than one matrix's fill: docs/perf-notes.md).
  if (fp4) return fewest_slices(blocks, kFp4SliceBlocks);
  int split = 1;
  // Clusters of K slices until the row tiles of one matrix fill the GPU once and a slice's
  // activations fit the shared memory, each slice keeping a wave of blocks; by shape alone, so a
  // row's sums never depend on the launch.
  const int row_tiles = (out + kTileRows - 1) / kTileRows;
  while (split < kMaxSplit && blocks / (split * 2) >= kMinSliceBlocks &&
         (row_tiles * split < sm_count() || (blocks + split - 1) / split > kMaxSliceBlocks))
    split *= 2;
  return split;
}

bool tiled_quantises_input(const BlockLinearParams& p) {
  return !p.expert_groups && (p.kernel == LinearKernel::kAuto || p.kernel == LinearKernel::kTiled) && p.n >= 1 &&
         p.n <= 8 && p.k % 32 == 0 && !wgmma_takes(p);
}

cudaError_t launch_block_linear_tiled(const BlockLinearParams& p) {
  if (!operands_given(p, /*codes=*/true)) return cudaErrorInvalidValue;
  for (int g = 0; g < (p.expert_groups ? 0 : p.groups); ++g)  // bf16 inputs: one tile, 16-byte rows
    if (p.op[g].x_bf16 && (!tiled_quantises_input(p) || !bf16_rows_aligned(p.op[g].x_bf16, p.x_bf16_stride)))
      return cudaErrorInvalidValue;
  const bool grouped = p.expert_groups != nullptr;
  // The benchmark's sweep (tiled_slice_blocks) sets the slices' bound itself.
  const int split =
      p.tiled_slice_blocks > 0 ? fewest_slices(p.k / 32, p.tiled_slice_blocks) : tiled_split(p.out, p.k, p.fp4);
  const int64_t ctas = static_cast<int64_t>(p.groups) * ((p.out + kTileRows - 1) / kTileRows) * split;
  if (ctas > INT32_MAX) return cudaErrorInvalidValue;
  // As few activation tiles a pass as the rows need: fewer tiles keep more blocks in flight and
  // more CTAs on an SM. A grouped call's counts are on the device; its experts have a few tokens
  // each (a step's k x n choices over many experts), so passes of 16 rows, more for a busy expert.
  const int rows = grouped ? std::min(p.max_group_rows > 0 ? p.max_group_rows : 16, 16) : p.n;
  if (rows <= 8) return launch_tiles<1>(p, split, ctas);
  if (rows <= 16) return launch_tiles<2>(p, split, ctas);
  if (rows <= 32) return launch_tiles<4>(p, split, ctas);
  return launch_tiles<kMaxNTiles>(p, split, ctas);
}

}  // namespace dsinfer::cuda
