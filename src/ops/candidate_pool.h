// The indexer's candidate pool on the host: CandidateBlocksArgs writes it as each query's kept
// block numbers; the reference (and a debug dump) holds it as a mask over the score columns.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace dsinfer {

/// The mask over `width` columns of the blocks of `block_size` columns numbered in `block_ids`
/// (-1: none).
std::vector<uint8_t> candidate_mask(std::span<const int32_t> block_ids, int64_t block_size, int64_t width);

/// The block numbers of `rows` masks over `width` columns, `per_row` a row (ascending, then -1s);
/// kInvalidArgument when a mask is not made of whole blocks or keeps more than `per_row` of them.
Result<std::vector<int32_t>> candidate_block_ids(std::span<const uint8_t> masks, int64_t rows, int64_t width,
                                                 int64_t block_size, int64_t per_row);

}  // namespace dsinfer
