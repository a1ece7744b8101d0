// The attention kernels' tile and launch constants, one namespace per kernel, with what the kernels
// rely on asserted. Plain C++ (no CUDA headers).
#pragma once

#include <cstdint>

namespace dsinfer::cuda::attention_config {

inline constexpr int kWarp = 32;
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kSharedBytesDefault = 48 * 1024;  // a block's shared memory without the opt-in

/// attention.cu: the sparse attention's two passes (scores, then the softmax and the value sums).
namespace sparse_attn {
inline constexpr int kSoftmaxBlock = 64;  // the reference kernel's online-softmax block
// Scores: a block per (tile of KV slots, group of kScoreHeads heads, token); warp w takes heads w
// and w + kScoreWarps; a lane up to kMaxChunksPerLane chunks of 8 bf16 of d.
inline constexpr int kScoreWarps = 8, kScoreHeads = 2 * kScoreWarps, kMaxChunksPerLane = 4;
inline constexpr int kMaxD = kMaxChunksPerLane * kWarp * 8;  // 1024
// Values: 64 threads of 2 output dims each (128 dims a block) times 4 groups of a block's rows.
inline constexpr int kColThreads = 64, kValueCols = 2, kRowGroups = 4, kValueThreads = kColThreads * kRowGroups;
inline constexpr int kGroupRows = kSoftmaxBlock / kRowGroups;
inline constexpr int kTokensPerPass = 256;  // bounds the scores' workspace
// The values kernel's static shared memory: the blocks' probability sums (a double a thread), two
// buffers of the row groups' partials (doubles) and two floats, in 16-byte units (8208 bytes: the
// cubin's .nv.shared section less the 1 KB the system reserves).
inline constexpr int kValuesStaticBytes =
    (kValueThreads * 8 + 2 * (kRowGroups - 1) * kColThreads * kValueCols * 8 + 2 * 4 + 15) / 16 * 16;
static_assert(kScoreWarps * kWarp <= kMaxThreadsPerBlock && kValueThreads <= kMaxThreadsPerBlock);
// The maxima: a warp per 32 rows, two to a softmax block.
static_assert(kSoftmaxBlock == 2 * kWarp);
// Row groups split a block evenly, in whole batches of 8 rows' loads.
static_assert(kSoftmaxBlock % kRowGroups == 0 && kGroupRows % 8 == 0);
// A thread's output dims are one 32-bit load of a bf16 pair.
static_assert(kValueCols == 2);
// A block's probability sums: one thread a block, kValueThreads blocks a round.
static_assert(kValueThreads >= 1);
static_assert(kValuesStaticBytes < kSharedBytesDefault);
}  // namespace sparse_attn

/// attention.cu: the indexer's scores, a warp per (token, key) and a lane per head.
namespace indexer_scores {
inline constexpr int kWarpsPerBlock = 4;
inline constexpr int kMaxHeads = kWarp;
// Blocks a launch: a T of up to 2^30 keys still gets a token a launch, in far fewer than grid.x's
// 2^31 - 1 blocks.
inline constexpr int64_t kMaxBlocks = int64_t{1} << 28;
static_assert(kWarpsPerBlock * kWarp <= kMaxThreadsPerBlock);
}  // namespace indexer_scores

/// select.cu: the indexer's selections, a block per query row.
namespace selection {
inline constexpr int kThreads = 1024;
inline constexpr int kPagedRowsThreads = 256;
inline constexpr int kRadixBits = 8;  // bits of the key a histogram pass finds
static_assert(kThreads <= kMaxThreadsPerBlock && kThreads % kWarp == 0);
static_assert(32 % kRadixBits == 0);  // whole passes over a 32-bit key
static_assert(kPagedRowsThreads <= kMaxThreadsPerBlock);
}  // namespace selection

}  // namespace dsinfer::cuda::attention_config
