// The indexer's selections (spec §7.4–7.5): top-k of bf16 scores in position order, and the
// candidate-block pool. Ties at the boundary go to the lower position (the reference keeps
// whatever torch.topk returned; the fixtures list the rows where that matters).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsinfer {

/// Positions of the k largest scores, best first (equal scores: lower position first).
std::vector<int32_t> topk_positions(std::span<const float> scores, int64_t k);

/// The k largest of `scores` (-inf = masked), ascending by position; positions >= visible become -1.
std::vector<int32_t> select_topk(std::span<const float> scores, int64_t k, int64_t visible);

/// The candidate pool over `scores.size()` positions: blocks of `block_size` scored by their maximum,
/// the block holding position visible - 1 pinned, the best `topk_blocks` kept, -inf blocks dropped;
/// the kept blocks' numbers, ascending.
std::vector<int32_t> select_candidate_block_ids(std::span<const float> scores, int64_t visible, int64_t topk_blocks,
                                                int64_t block_size);

/// Candidate mask over `scores.size()` positions: blocks of `block_size` scored by their maximum,
/// the block holding position visible - 1 pinned, the best `topk_blocks` kept, -inf blocks dropped.
std::vector<uint8_t> select_candidate_blocks(std::span<const float> scores, int64_t visible, int64_t topk_blocks,
                                             int64_t block_size);

}  // namespace dsinfer
