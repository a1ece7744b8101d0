// Per-token and per-sequence cache sizes of a config: what `inspect` reports and what the paged
// caches are sized from. Two layouts: the reference's (bf16 buffers holding fake-quantised values)
// and the compact one that stores the quantised codes and scales (vLLM's layout, spec §14b.1).
#pragma once

#include <cstdint>

#include "io/model_config.h"

namespace dsinfer {

struct CacheSizes {
  // Grows with the sequence, bytes per token.
  double compressed_kv_per_token = 0;   // kv sources' compressed KV
  double index_keys_per_token = 0;      // kv sources' index keys
  double engram_history_per_token = 0;  // compressed token ids for the n-gram hashes
  // Fixed per sequence.
  int64_t window_per_sequence = 0;            // every layer's sliding-window ring (draft layers included)
  int64_t compressor_state_per_sequence = 0;  // ratio-2 partial groups (fp32 kv and score)

  double per_token() const { return compressed_kv_per_token + index_keys_per_token + engram_history_per_token; }
};

/// Compact layout: fp4 compressed KV (head_dim/2 + head_dim/16 e4m3 scale bytes per entry), fp4
/// index keys (+ e8m0 per 32), fp8 window rows (+ e8m0 per 32), int32 token history.
CacheSizes compact_cache_sizes(const ModelConfig& c);
/// The reference's buffers: bf16 everywhere, int64 token history.
CacheSizes reference_cache_sizes(const ModelConfig& c);

}  // namespace dsinfer
