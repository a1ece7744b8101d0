// The attention kernels' tile and launch constants, one namespace per kernel, with what the kernels
// rely on asserted. Plain C++ (no CUDA headers).
#pragma once

#include <cstdint>

namespace dsinfer::cuda::attention_config {

inline constexpr int kWarp = 32;
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kSharedBytesDefault = 48 * 1024;  // a block's shared memory without the opt-in
inline constexpr int kSharedBytesOptIn = 227 * 1024;   // with it (sm_90)
// Calls of fewer tokens than this split their work finer (the same sums): more blocks for a few tokens.
inline constexpr int kFewTokens = 32;

/// attention.cu: the sparse attention's three passes (scores, the softmax, the value sums).
namespace sparse_attn {
inline constexpr int kSoftmaxBlock = 64;  // the reference kernel's online-softmax block
// Both sums on bf16 tensor cores, a block of 4 warps over head tiles of 16: 4 tiles (64 heads), or
// 1 for a few tokens so that their blocks fill the GPU; a warp takes a head tile and an equal share
// of the block's 8-wide columns (slots, or dims), in pairs.
inline constexpr int kWarps = 4;
inline constexpr int kHeadTiles = 4, kSmallHeadTiles = 1;
// Scores: a block per (kScoreSlots slots, head tiles, token); d in chunks of kScoreChunk through a
// ring of cp.async stages of the slots' rows and the heads' q (a few tokens' blocks, fewer than the
// GPU's SMs at batch 1, keep more in flight).
// A block of many tokens takes kScoreSlots slots with 2 warps a head tile (its q crosses L2 once per
// kScoreSlots of the token's slots), a few tokens' blocks kSmallScoreSlots.
inline constexpr int kScoreSlots = 128, kSmallScoreSlots = 64, kScoreChunk = 128;
inline constexpr int kScoreStages = 2, kSmallScoreStages = 3;
// Softmax: a warp per (token, head), kSoftmaxWarps a block.
inline constexpr int kSoftmaxWarps = 4;
// Values: a block per (kValueDims dims, head tiles, token); the softmax blocks' rows and P staged
// in a ring of shared-memory stages, more in flight for a few tokens' smaller blocks, most for up to
// kDeepTokens (at batch 1, 32 blocks on 132 SMs: the loads a block has in flight bound it).
inline constexpr int kValueDims = 64;
inline constexpr int kValueStages = 2, kSmallValueStages = 4, kDeepValueStages = 8, kDeepTokens = 8;
inline constexpr int kTokensPerPass = 256;  // bounds the workspace
// The fused pass (calls of kFusedMinTokens tokens or more, d a multiple of 32 up to kFusedMaxD): a
// block per (token, 16 x kFusedHeadTiles heads) of kFusedWarps warps in warpgroups of the 64
// heads, each warpgroup a share of a softmax block's slots (the scores) and of the dims (the value
// sums); q and two stages of a block's rows in shared memory. Its blocks stream a token's softmax
// blocks one after another, so a decode step's few tokens (up to 64) keep the three passes, which
// spread them wider.
inline constexpr int kFusedWarps = 16, kFusedHeadTiles = 4, kFusedMaxD = 512, kFusedMinTokens = 128;
inline constexpr int kFusedGroups = kFusedWarps / kFusedHeadTiles;  // warpgroups
inline constexpr int fused_smem_bytes(int d) {
  return 16 * kFusedHeadTiles * d * 2                      // q (in core matrices: no padding)
         + 2 * kSoftmaxBlock * d * 2                       // two stages of a block's rows
         + 16 * kFusedHeadTiles * (kSoftmaxBlock + 8) * 2  // P (bf16)
         + 16 * kFusedHeadTiles * (kSoftmaxBlock + 8) * 4  // P (fp32, for the blocks' sums)
         + (kFusedGroups + 2) * 16 * kFusedHeadTiles * 4   // the groups' maxima, alpha, l
         + 2 * kSoftmaxBlock * 4;                          // the two stages' slot indices
}
static_assert(fused_smem_bytes(kFusedMaxD) <= kSharedBytesOptIn);
// Warpgroups of the 64 heads; a group's slots (wgmma's N for the scores: 16 or 32) and each
// warp's heads of the block sums whole; a block's rows staged by pairs of threads a slot.
static_assert(kFusedHeadTiles == 4 && kFusedWarps % kFusedHeadTiles == 0 && (kFusedGroups == 2 || kFusedGroups == 4));
static_assert(16 * kFusedHeadTiles % kFusedWarps == 0 && kFusedWarps * kWarp % (2 * kSoftmaxBlock) == 0);
static_assert(kWarps * kWarp <= kMaxThreadsPerBlock);
static_assert(kWarps % kHeadTiles == 0 && kWarps % kSmallHeadTiles == 0);
static_assert(kSmallScoreSlots / 8 % (2 * (kWarps / kSmallHeadTiles)) == 0 && kScoreChunk % 16 == 0);
static_assert(kScoreSlots % kSmallScoreSlots == 0 &&
              kScoreSlots / kSmallScoreSlots * kWarps * kWarp <= kMaxThreadsPerBlock);
static_assert(kValueDims / 8 % (2 * (kWarps / kSmallHeadTiles)) == 0);
static_assert(kSoftmaxBlock % 16 == 0 && kSmallScoreSlots % 16 == 0);
static_assert(kScoreStages >= 2 && kSmallScoreStages >= 2 && kValueStages >= 2 && kSmallValueStages >= 2 &&
              kDeepValueStages >= 2 && kDeepTokens < kFewTokens);
// The maxima: a warp per 32 rows, two to a softmax block.
static_assert(kSoftmaxBlock == 2 * kWarp);
}  // namespace sparse_attn

/// indexer_scores.cu: the indexer's scores on bf16 tensor cores, a block per (tile of keys, token).
namespace indexer_scores {
inline constexpr int kWarps = 4;
// n8 tiles of keys a warp: 2 (64 keys a block), or 1 for a few tokens so that their blocks fill the GPU.
inline constexpr int kKeyTiles = 2, kFewTokensKeyTiles = 1;
inline constexpr int kMaxHeads = 2 * 16;  // two m16 tiles of heads
// The token's q (kMaxHeads rows) and the tile's keys staged as bf16 rows of d + 8.
inline constexpr int kMaxD = 256;
inline constexpr int64_t kMaxTokens = 65535;  // grid.y
static_assert(kWarps * kWarp <= kMaxThreadsPerBlock);
static_assert((kMaxHeads + kWarps * kKeyTiles * 8) * (kMaxD + 8) * 2 <= kSharedBytesOptIn);
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
