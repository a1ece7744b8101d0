// Cache size arithmetic.
#include "model/cache_sizes.h"

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
    if (c.compress_ratio(l) == 2) s.compressor_state_per_sequence += 2 * 2 * int64_t{c.head_dim} * 4;
  }
  if (!c.engram_layer_ids.empty()) s.engram_history_per_token = b.token_id;
  const int layers = c.n_layers + c.n_draft_layers();
  s.window_per_sequence = static_cast<int64_t>(layers * c.window_size * b.window_row);
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

}  // namespace dsinfer
