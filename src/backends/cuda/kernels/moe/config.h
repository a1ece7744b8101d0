// The router kernels' launch constants and limits, with what the kernels rely on asserted. Plain
// C++ (no CUDA headers).
#pragma once

namespace dsinfer::cuda::moe_config {

inline constexpr int kWarp = 32;
inline constexpr int kThreads = 256, kWarps = kThreads / kWarp;
inline constexpr int kMaxExperts = 1024;        // the select kernel's per-expert shared arrays
inline constexpr int kMaxK = 16;                // experts a token (the chosen ids and weights in registers)
inline constexpr int kTiledRouterTokens = 128;  // steps from this many tokens (prefill): the tiled logits
inline constexpr int kGroupThreads = 1024;      // the route grouping's one block
inline constexpr int kGroupCounts = 10 * 1024;  // its shared counts: a segment's (a run of slots, a warp's) per expert
inline constexpr int kMaxGroupExperts = 1024;   // its experts
// As many segments as the counts allow, up to a warp each (at least 8: 1024 experts).
inline constexpr int kMaxGroupSegments = kGroupThreads / kWarp;
static_assert(kThreads <= 1024 && kThreads % kWarp == 0 && kGroupThreads <= 1024);
static_assert(kGroupCounts / kMaxGroupExperts >= 8 && kGroupCounts * 4 <= 40 * 1024);
// A thread an expert in the scans; warp 0 scans the warps' sums.
static_assert(kMaxGroupExperts <= kGroupThreads && kGroupThreads == kWarp * kWarp);
// Replayed selections: threads < k load the given ids.
static_assert(kMaxK <= kThreads);
// The select kernel's shared memory: scores and keys (floats), taken flags, the warps' best.
static_assert(kMaxExperts * (4 + 4 + 1) + kWarps * 8 + kMaxK * 4 <= 48 * 1024);

}  // namespace dsinfer::cuda::moe_config
