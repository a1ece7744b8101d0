// Cache size arithmetic.
#include "model/cache_sizes.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/units.h"

namespace dsinfer {
namespace {

struct EntryBytes {
  double compressed, index_key, window_row, token_id;
};

CacheSizes sizes(const ModelConfig& c, const EntryBytes& b) {
  CacheSizes s;
  for (int l : c.kv_source_layers) {
    const double r = c.compress_ratio(l);
    s.compressed_kv_per_token += b.compressed / r;
    s.index_keys_per_token += b.index_key / r;
    if (c.compress_ratio(l) == 2)
      s.compressor_state_per_sequence += 2 * int64_t{c.partial_group_rows()} * c.head_dim * 4;
  }
  if (!c.engram_layer_ids.empty()) s.engram_history_per_token = b.token_id;
  const int layers = c.n_layers + c.n_draft_layers();
  s.window_per_sequence = static_cast<int64_t>(layers * c.ring_rows() * b.window_row);
  return s;
}

}  // namespace

CacheSizes compact_cache_sizes(const ModelConfig& c) {
  return sizes(c, {c.head_dim / 2.0 + c.head_dim / 16.0, c.index_head_dim / 2.0 + c.index_head_dim / 32.0,
                   c.head_dim + c.head_dim / 32.0, 4});
}

CacheSizes reference_cache_sizes(const ModelConfig& c) {
  return sizes(c, {2.0 * c.head_dim, 2.0 * c.index_head_dim, 2.0 * c.head_dim, 8});
}

int64_t sequence_cache_bytes(const CacheSizes& sizes, int64_t positions) {
  return static_cast<int64_t>(std::ceil(sizes.per_token() * static_cast<double>(positions))) +
         sizes.window_per_sequence + sizes.compressor_state_per_sequence;
}

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
  if (blocks < one_sequence) {
    const int64_t fits = std::max<int64_t>(0, blocks - l.fixed_blocks) * block_tokens;
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("a cache budget of {} cannot hold one sequence at the context of {} positions (that "
                             "needs {}; this budget holds {} positions)",
                             human_bytes(static_cast<double>(budget_bytes)), max_positions,
                             human_bytes(static_cast<double>(one_sequence * l.block_bytes)), fits));
  }
  if (blocks >= (int64_t{1} << 30)) return error(ErrorKind::kInvalidArgument, "cache budget too large for its blocks");
  // Cache rows are named by int32 ids (block tables, the paged-row lists the attention reads), so
  // the positions a budget holds, all sequences together, stay below 2^31.
  if (blocks * block_tokens >= (int64_t{1} << 31))
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("a cache budget of {} holds {} positions; at most 2^31 - 1 fit the 32-bit cache row ids",
                             human_bytes(static_cast<double>(budget_bytes)), blocks * block_tokens));
  l.num_blocks = static_cast<int>(blocks);
  return l;
}

}  // namespace dsinfer
