// The attention kernels' tile and launch constants, one namespace per kernel, with what the kernels
// rely on asserted. Plain C++ (no CUDA headers).
#pragma once

#include <cstdint>

namespace dsinfer::cuda::attention_config {

inline constexpr int kWarp = 32;
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kSharedBytesDefault = 48 * 1024;  // a block's shared memory without the opt-in
// Calls of fewer tokens than this split their work finer (the same sums): more blocks for a few tokens.
inline constexpr int kFewTokens = 32;

/// attention.cu: the sparse attention's three passes (scores, the softmax, the value sums).
namespace sparse_attn {
inline constexpr int kSoftmaxBlock = 64;                          // the reference kernel's online-softmax block
inline constexpr int kHeadGroup = 64;                             // heads a block reads a KV row for
inline constexpr int kSmallScoreGroup = 8;  // heads a scores block for a few tokens
// Scores: a block per (tile of kScoreRows slots, head group, token); a lane a slot, a warp a head.
inline constexpr int kScoreRows = kWarp, kScoreThreads = 256;
inline constexpr int kMaxD = 1024;  // the scores' q and rows in shared memory (the opt-in's 227 KB)
// Softmax: a warp per (token, head), kSoftmaxWarps a block.
inline constexpr int kSoftmaxWarps = 4;
// Values on bf16 tensor cores: a block of kValueWarps per (kValueDims dims, head tiles of 16,
// token): 4 head tiles (64 heads), or 1 for a few tokens; the softmax blocks' rows and P staged in
// a ring of shared-memory stages.
inline constexpr int kValueDims = 64, kValueWarps = 4;
inline constexpr int kValueHeadTiles = 4, kSmallValueHeadTiles = 1;
inline constexpr int kValueStages = 2, kSmallValueStages = 4;  // fewer heads a block: more blocks in flight
inline constexpr int kTokensPerPass = 256;  // bounds the workspace
static_assert(kScoreThreads % kScoreRows == 0 && kScoreThreads <= kMaxThreadsPerBlock);
static_assert(kSmallScoreGroup <= kHeadGroup && kValueHeadTiles * 16 == kHeadGroup);
// A warp takes a head tile and an equal share of the block's 8-dim columns, in pairs (ldmatrix.x4).
static_assert(kValueWarps % kValueHeadTiles == 0 && kValueWarps % kSmallValueHeadTiles == 0);
static_assert(kValueDims / 8 % (2 * (kValueWarps / kSmallValueHeadTiles)) == 0);
static_assert(kSoftmaxBlock % 16 == 0 && kValueDims % 8 == 0);
// The maxima: a warp per 32 rows, two to a softmax block.
static_assert(kSoftmaxBlock == 2 * kWarp);
static_assert(kHeadGroup * kMaxD / 2 * 4 + kScoreRows * (kMaxD / 2 + 1) * 4 <= 227 * 1024);
}  // namespace sparse_attn

/// attention.cu: the indexer's scores, a block per (tile of keys, token), a warp per key, a lane per head.
namespace indexer_scores {
inline constexpr int kWarpsPerBlock = 8;
inline constexpr int kKeysPerBlock = 128, kFewTokensKeys = 32;  // keys a block (for a few tokens)
inline constexpr int kMaxHeads = kWarp;
// The token's q as floats [d][32] and a key row a warp, in the default shared memory.
inline constexpr int kMaxD = 256;
inline constexpr int64_t kMaxTokens = 65535;  // grid.y
static_assert(kWarpsPerBlock * kWarp <= kMaxThreadsPerBlock);
static_assert(kMaxD * (kWarp + kWarpsPerBlock) * 4 <= kSharedBytesDefault);
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
