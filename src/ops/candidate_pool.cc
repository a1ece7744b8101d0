#include "ops/candidate_pool.h"

#include <algorithm>

#include <fmt/format.h>

namespace dsinfer {

std::vector<uint8_t> candidate_mask(std::span<const int32_t> block_ids, int64_t block_size, int64_t width) {
  std::vector<uint8_t> mask(width, 0);
  for (int32_t b : block_ids)
    if (b >= 0)
      for (int64_t i = b * block_size; i < std::min(width, (b + 1) * block_size); ++i) mask[i] = 1;
  return mask;
}

Result<std::vector<int32_t>> candidate_block_ids(std::span<const uint8_t> masks, int64_t rows, int64_t width,
                                                 int64_t block_size, int64_t per_row) {
  if (static_cast<int64_t>(masks.size()) != rows * width)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("the candidate masks hold {} values, not {}", masks.size(), rows * width));
  std::vector<int32_t> ids(rows * per_row, -1);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* mask = masks.data() + i * width;
    int64_t kept = 0;
    for (int64_t b = 0; b * block_size < width; ++b) {
      const int64_t end = std::min(width, (b + 1) * block_size);
      const bool in = mask[b * block_size] != 0;
      if (std::any_of(mask + b * block_size, mask + end, [&](uint8_t v) { return (v != 0) != in; }))
        return error(ErrorKind::kInvalidArgument,
                     fmt::format("candidate mask row {} splits block {} of {} columns", i, b, block_size));
      if (!in) continue;
      if (kept == per_row)
        return error(ErrorKind::kInvalidArgument,
                     fmt::format("candidate mask row {} keeps more than {} blocks", i, per_row));
      ids[i * per_row + kept++] = static_cast<int32_t>(b);
    }
  }
  return ids;
}

}  // namespace dsinfer
