#include "runtime/cache_manager.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/check.h"
#include "core/units.h"

namespace dsinfer {

Result<CacheLayout> cache_layout(const CacheSizes& sizes, int64_t budget_bytes, int64_t block_tokens,
                                 int64_t max_positions) {
  if (block_tokens < 2 || block_tokens % 2 != 0)  // a block holds whole groups of every compress ratio
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("cache blocks must hold an even number of positions (2 or more), not {}", block_tokens));
  CacheLayout l;
  l.block_tokens = block_tokens;
  l.block_bytes = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(sizes.per_token() * block_tokens)));
  l.fixed_blocks =
      (sizes.window_per_sequence + sizes.compressor_state_per_sequence + l.block_bytes - 1) / l.block_bytes;
  const int64_t blocks = budget_bytes / l.block_bytes;
  const int64_t one_sequence = l.fixed_blocks + (max_positions + block_tokens - 1) / block_tokens;
  if (blocks < one_sequence)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("a cache budget of {} cannot hold one sequence of {} positions (needs {})",
                             human_bytes(static_cast<double>(budget_bytes)), max_positions,
                             human_bytes(static_cast<double>(one_sequence * l.block_bytes))));
  if (blocks >= (int64_t{1} << 30)) return error(ErrorKind::kInvalidArgument, "cache budget too large for its blocks");
  l.num_blocks = static_cast<int>(blocks);
  return l;
}

CacheManager::CacheManager(const CacheLayout& layout) : layout_(layout), pool_(layout.num_blocks + 1) {}

int64_t CacheManager::blocks_for(int64_t positions) const {
  return layout_.fixed_blocks + (positions + layout_.block_tokens - 1) / layout_.block_tokens;
}

int64_t CacheManager::grow(uint64_t id, int64_t from, int64_t wanted) {
  DSINFER_CHECK(from >= 0 && wanted >= 0, "grow({}, {})", from, wanted);
  std::vector<int>& held = held_[id];
  const int64_t have = static_cast<int64_t>(held.size());
  const int64_t affordable = have + pool_.num_free();
  if (affordable < layout_.fixed_blocks + 1) return 0;
  const int64_t n = std::min(wanted, (affordable - layout_.fixed_blocks) * layout_.block_tokens - from);
  if (n <= 0) return 0;
  const int64_t need = blocks_for(from + n) - have;
  if (need > 0) {
    auto blocks = pool_.allocate(static_cast<int>(need));
    DSINFER_CHECK(blocks.has_value(), "{} blocks counted as free", need);
    held.insert(held.end(), blocks->begin(), blocks->end());
  }
  return n;
}

void CacheManager::release(uint64_t id) {
  const auto it = held_.find(id);
  if (it == held_.end()) return;
  pool_.release(it->second);
  held_.erase(it);
}

}  // namespace dsinfer
