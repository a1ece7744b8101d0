// The row-wise kernels' launch constants, with what the kernels rely on asserted. Plain C++ (no
// CUDA headers).
#pragma once

namespace dsinfer::cuda::elementwise_config {

inline constexpr int kWarp = 32;
inline constexpr int kThreads = 256;        // every kernel's block but Sinkhorn's
inline constexpr int kMaxBlocks = 1 << 20;  // a grid-stride kernel's grid, at most
inline constexpr int kNormMaxChunks = 4;    // RMSNorm's 16-byte chunks a thread holds: rows up to 8192 values
inline constexpr int kMaxHc = 8;            // hyper-connection copies (hc_post's registers, Sinkhorn's tiles)
inline constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;  // the mixes' projections: pre, post, the combination
inline constexpr int kMaxHcChunks = 16;                // the mixes' chunks of a row (at every batch)
inline constexpr int kStageBatch = 8;                  // loads a thread issues before their stores
inline constexpr int kMixTokens = 8;                   // decode's mixes: tokens a block of the dots
static_assert(kThreads <= 1024 && kThreads % kWarp == 0);
// The block sums: a tree over kThreads (a power of two), or the warps' in order (kThreads / 32 of them).
static_assert((kThreads & (kThreads - 1)) == 0);
// Sinkhorn: one warp, at most two elements of the hc x hc combination a lane.
static_assert(kMaxHc * kMaxHc <= 2 * kWarp);
// The decode dots' trees: a block's kMixTokens sums at once in static shared memory.
static_assert(kMixTokens * kThreads * 8 <= 48 * 1024);
// Sinkhorn's shared memory: the staged partial sums of one token.
static_assert((kMaxMix + 1) * kMaxHcChunks * 8 <= 48 * 1024);

}  // namespace dsinfer::cuda::elementwise_config
