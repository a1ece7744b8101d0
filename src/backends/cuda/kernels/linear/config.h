// The linear kernels' tile and launch constants, one namespace per kernel, with what the kernels
// rely on asserted. The launch knobs (loads in flight, blocks an SM) are the values the dispatch
// runs; the kernel lab (bench/cuda/lab) instantiates the kernels at others. Plain C++ (no CUDA
// headers): host code may read it too.
#pragma once

namespace dsinfer::cuda::linear_config {

inline constexpr int kWarp = 32;
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kSharedBytesDefault = 48 * 1024;  // a block's dynamic shared memory without the opt-in
inline constexpr int kSharedBytesOptIn = 227 * 1024;   // with it (sm_90)
inline constexpr int kE2m1TableWords = 256 * kWarp;    // common::fill_e2m1_table: 256 bytes x a copy per lane
inline constexpr int kScaleBlock = 32;                 // K of one scale block (the quantisation group)

/// linear_fma.cuh: the CUDA-core kernel, a warp per output row.
namespace fma_kernel {
inline constexpr int kWarpsPerBlock = 8;
inline constexpr int kRowsPerPass = 4;     // activation rows against one weight chunk in registers
inline constexpr int kChunksInFlight = 2;  // 16-byte weight loads a lane issues before using them
inline constexpr int kBlocksPerSm = 4;     // the persistent grid's blocks, per SM
static_assert(kWarpsPerBlock * kWarp <= kMaxThreadsPerBlock);
// A lane's 16-byte load: fp8, half a scale block (lanes 2m and 2m + 1 share one: a pair's sum);
// fp4, one whole block (32 codes of 4 bits).
static_assert(kScaleBlock == 2 * 16 && kWarp % 2 == 0);
static_assert(kE2m1TableWords * 4 <= kSharedBytesDefault);
static_assert(kRowsPerPass >= 1 && kChunksInFlight >= 1 && kBlocksPerSm >= 1);
}  // namespace fma_kernel

/// linear_gemv.cuh: the f16 tensor-core GEMV, a warp per weight row (n <= kMaxN).
namespace gemv_kernel {
inline constexpr int kWarps = 8;           // per CTA
inline constexpr int kPartK = 64;          // K of one part (two scale blocks): 4 lanes x 16
inline constexpr int kStepK = 8 * kPartK;  // K per warp step: the mma's 8 columns are 8 parts of one row
inline constexpr int kMaxN = 4;            // activation rows (each one's own four mmas a step)
// fp8 at one token: from this many rows in a launch, 8 rows a warp (linear_gemv_rows.cuh) measured
// faster than a row a warp with its K split (wq_b, 32768 rows: 35 -> 21 us); with fewer rows it has
// too few warps (2304 x 5120: 10 -> 31 us).
inline constexpr int kRowsWarpFp8Rows = 16384;
inline constexpr int kStepsInFlight = 4;  // steps of loads a warp keeps in flight
inline constexpr int kBlocksPerSm = 4;    // CTAs in the grid, at most, per SM
static_assert(kWarps * kWarp <= kMaxThreadsPerBlock);
// A part is 4 lanes' 16 weights (lane (g, t): K 16t .. 16t + 15 of part g) and two scale blocks
// (A row g carries the first, row g + 8 the second: t < 2 and t >= 2).
static_assert(kPartK == 4 * 16 && kPartK == 2 * kScaleBlock);
// The mma.m16n8k16's 8 columns are 8 parts (lane group g = lane / 4 < 8) of 16 K slots each.
static_assert(kStepK == 8 * kPartK && kWarp / 4 == 8);
// The row's sum goes out from lane tok (split 1) or the CTA's warps' sums from lanes < kMaxN.
static_assert(kMaxN >= 1 && kMaxN <= kWarp);
// The K split over a CTA's warps halves ranges: split is a power of two dividing kWarps.
static_assert((kWarps & (kWarps - 1)) == 0);
static_assert(kE2m1TableWords * 4 + kWarps * kMaxN * 4 <= kSharedBytesOptIn);
static_assert(kStepsInFlight >= 1 && kBlocksPerSm >= 1);
}  // namespace gemv_kernel

/// linear_gemv_rows.cuh: one token's f16 tensor-core GEMV, kRows weight rows a warp.
namespace gemv_rows_kernel {
inline constexpr int kWarps = 8;          // per CTA
inline constexpr int kRows = 8;           // weight rows a warp: the mma.m16n8k16's 8 B columns
inline constexpr int kStepBlocks = 4;     // scale blocks a step: lane (g, t) loads block t of row g
inline constexpr int kStepsInFlight = 2;  // steps of loads a warp keeps in flight
static_assert(kWarps * kWarp <= kMaxThreadsPerBlock);
static_assert(kRows == kWarp / 4 && kStepBlocks == 4);
// Lanes t < 4 (of lane group 0) keep the chains of rows 2t and 2t + 1.
static_assert(kRows == 2 * kStepBlocks);
// A block's 32 f16 activations are the A operand's two 8-slot halves of 8 mmas (16 K each, 4 a lane).
static_assert(kScaleBlock == 8 * 4);
static_assert(kE2m1TableWords * 4 <= kSharedBytesOptIn);
static_assert(kStepsInFlight >= 1);
}  // namespace gemv_rows_kernel

/// linear_mma.cu: the f16 tensor-core kernel (two mma.m16n8k16 a K block), any n.
namespace mma_kernel {
inline constexpr int kWarps = 8;      // per CTA, splitting K
inline constexpr int kTileRows = 16;  // weight rows per CTA (the mma's M)
inline constexpr int kMaxNTiles = 8;  // activation rows per pass: 8 tiles of 8
inline constexpr int kInFlight = 8;   // K blocks each warp loads before its first mma
static_assert(kWarps * kWarp <= kMaxThreadsPerBlock);
// One mma's K is one scale block; an fp8 scale covers 32 rows, so a tile never straddles two.
static_assert(kScaleBlock == 32 && kScaleBlock % kTileRows == 0);
// The warps' K slices meet in shared memory: [kWarps][tiles][4][32] floats.
static_assert(kWarps * kMaxNTiles * 4 * kWarp * 4 <= kSharedBytesOptIn);
static_assert(kInFlight >= 1);
}  // namespace mma_kernel

/// linear_tiled.cu: the decode kernel, 64 weight rows a CTA, K split over a cluster.
namespace tiled_kernel {
inline constexpr int kWarps = 4;                 // per CTA, 16 weight rows each (the mma's M)
inline constexpr int kTileRows = kWarps * 16;    // weight rows a CTA
inline constexpr int kMaxNTiles = 8;             // activation rows a pass: 8 tiles of 8
inline constexpr int kMaxSplit = 8;              // K slices of a row tile: a portable cluster
inline constexpr int kMinSliceBlocks = 8;        // a slice's K blocks at least (the ring's fill and the reduction)
inline constexpr int kMaxSliceBlocks = 32;       // a slice's K blocks, where the split allows (shared memory)
inline constexpr int kFp4SliceBlocks = 80;       // fp4 (the routed experts): a slice's K blocks at most
inline constexpr int kStagedBlocksFullPass = 8;  // K blocks of 64 rows' activations staged at a time (4 CTAs an SM)
static_assert(kWarps * kWarp <= kMaxThreadsPerBlock);
// An fp8 scale covers 32 rows: a warp's 16-row tile (16-aligned) never straddles two.
static_assert(kScaleBlock % 16 == 0 && kTileRows % kScaleBlock == 0);
static_assert(kMinSliceBlocks >= 1 && kMaxSliceBlocks >= kMinSliceBlocks && kFp4SliceBlocks >= 1 && kMaxSplit >= 1 &&
              kMaxSplit <= 8);
static_assert(kStagedBlocksFullPass >= 1);
}  // namespace tiled_kernel

/// linear_wgmma.cu: many activation rows (prefill chunks and their routed experts) on bf16 wgmma.
namespace wgmma_kernel {
inline constexpr int kMinRows = 65;        // rows of a call (a grouped call: tokens) from which the dispatch runs it
inline constexpr int kTileRows = 128;      // activation rows a CTA: the wgmma's N
inline constexpr int kFewRows = 64;        // the same up to this many rows (a decode step's linears, any count)
inline constexpr int kMaxSplit = 8;        // K slices of a few-rows tile: a portable cluster
inline constexpr int kMinSliceStages = 4;  // K stages of a slice at least (the ring's fill)
// A decode step's routed experts (grouped fp4 calls up to kFewRows tokens): an expert's rows in
// tiles of kExpertRows (the wgmma's N; ~6 rows an expert at 64 tokens), K split over a cluster into
// the most slices, up to kMaxSplit, of kExpertSliceStages stages or more (by K alone).
inline constexpr int kExpertRows = 16;
inline constexpr int kExpertSliceStages = 32;
inline constexpr int kExpertStages = 8;     // their ring: a stage is 6 KB (of the others' 16-32)
inline constexpr int kExpertCtasPerSm = 3;  // their resident CTAs an SM (the registers' bound: 85 a thread)
inline constexpr int kTileCols = 128;       // weight rows a CTA: two warpgroups of the wgmma's M = 64
inline constexpr int kStageK = 64;          // K a stage: 128 bytes of an activation row (one swizzle span)
inline constexpr int kStages = 4;           // stages of the TMA ring
inline constexpr int kCtasPerSm = 2;        // resident CTAs an SM (registers and shared memory)
inline constexpr int kBand = 8;             // row tiles a band: a weight tile is read by a band's CTAs together
inline constexpr int kThreads = 2 * 128;    // two warpgroups
// Matrices a launch (plain: ops, e.g. wo_a's groups; grouped: an entry's), their tensor maps by value.
inline constexpr int kMaxParts = 8;
static_assert(kTileCols == 2 * 64 && kTileRows == 128 && kThreads == 2 * 4 * kWarp);
static_assert(kStageK == 2 * kScaleBlock && kStages >= 2 && kBand >= 1);
static_assert(kFewRows == 64 && kFewRows == kMinRows - 1 && kMaxSplit >= 1 && kMaxSplit <= 8 && kMinSliceStages >= 1);
static_assert(kExpertRows % 8 == 0 && kExpertRows <= kFewRows && kExpertSliceStages >= 1 && kExpertStages >= 2);
}  // namespace wgmma_kernel

/// dense.cu: the dense (bf16 or fp8 read as bf16) kernel with double sums, a warp per output row.
namespace dense_kernel {
inline constexpr int kWarpsPerBlock = 8;
inline constexpr int kRowsPerPass = 4;  // activation rows a pass (a kernel per count: 4 or 1)
inline constexpr int kStep = 16;        // weights a lane takes a step: one 16-byte load of fp8, two of bf16
inline constexpr int kSpan = kWarp * kStep;
static_assert(kWarpsPerBlock * kWarp <= kMaxThreadsPerBlock);
static_assert(kStep == 16);
// fp8 scales per 32 weights: a step's 16 never straddle two.
static_assert(kScaleBlock % kStep == 0);
}  // namespace dense_kernel

/// dense_mma.cu: dense weights on bf16 tensor cores, fp32 sums, 1-64 activation rows a pass.
namespace dense_mma_kernel {
inline constexpr int kWarps = 8;           // a CTA: 8 / split row tiles, each split over `split` warps
inline constexpr int kTileRows = 16;       // weight rows a warp (the mma's M)
inline constexpr int kChunk = 64;          // K a warp loads at once: lane (g, q) holds 16q .. 16q + 15
inline constexpr int kMaxNTiles = 8;       // activation rows a pass: tiles of 8 (the mma's N)
inline constexpr int kTargetWarps = 2048;  // K is split until a launch has this many warps (shape only)
inline constexpr int kMinSliceChunks = 4;  // ... or a slice would be shorter than this
inline constexpr int kMinCtas = 2;         // CTAs an SM holds (caps the registers at 128)
static_assert(kWarps * kWarp <= kMaxThreadsPerBlock);
static_assert(kChunk == 4 * 16 && kTileRows == 2 * (kWarp / 4));
// fp8 scales cover 32 rows x 32 K: a 16-row tile and a lane's 16 K of a chunk never straddle two.
static_assert(kScaleBlock % kTileRows == 0 && kScaleBlock % 16 == 0);
static_assert((kWarps & (kWarps - 1)) == 0);
}  // namespace dense_mma_kernel

}  // namespace dsinfer::cuda::linear_config
