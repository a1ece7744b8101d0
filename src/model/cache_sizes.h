// Per-token and per-sequence cache sizes of a config: what `inspect` reports and what the paged
// caches are sized from. Two layouts: the reference's (bf16 buffers holding fake-quantised values)
// and the compact one that stores the quantised codes and scales (vLLM's layout, spec §14b.1).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "io/model_config.h"

namespace dsinfer {

struct CacheSizes {
  // Grows with the sequence, bytes per token.
  double compressed_kv_per_token = 0;   // kv sources' compressed KV
  double index_keys_per_token = 0;      // kv sources' index keys
  double engram_history_per_token = 0;  // compressed token ids for the n-gram hashes
  // Fixed per sequence.
  int64_t window_per_sequence = 0;            // every layer's sliding-window ring (draft layers included), slack too
  int64_t compressor_state_per_sequence = 0;  // ratio-2 partial groups (fp32 kv and score), slack too

  double per_token() const { return compressed_kv_per_token + index_keys_per_token + engram_history_per_token; }
};

/// Compact layout: fp4 compressed KV (head_dim/2 + head_dim/16 e4m3 scale bytes per entry), fp4
/// index keys (+ e8m0 per 32), fp8 window rows (+ e8m0 per 32), int32 token history.
CacheSizes compact_cache_sizes(const ModelConfig& c);
/// The reference's buffers: bf16 everywhere, int64 token history.
CacheSizes reference_cache_sizes(const ModelConfig& c);

/// Bytes of one sequence's caches at `positions` (fixed parts included, no block rounding).
int64_t sequence_cache_bytes(const CacheSizes& sizes, int64_t positions);

/// A memory budget for the caches in blocks (the server's): a sequence of L positions holds the
/// blocks of its fixed caches (every layer's window ring, the compressor's partial groups) plus
/// one block per `block_tokens` positions of the caches that grow with it.
struct CacheLayout {
  int64_t block_tokens = 256;  // positions per block of the growing caches
  int64_t block_bytes = 0;     // what one block stands for
  int64_t fixed_blocks = 0;    // blocks every sequence holds from its first position
  int num_blocks = 0;          // usable blocks
};

/// The layout for a budget; kInvalidArgument when one sequence of `max_positions` does not fit
/// (the error names the budget that would), since then a request could never finish.
Result<CacheLayout> cache_layout(const CacheSizes& sizes, int64_t budget_bytes, int64_t block_tokens,
                                 int64_t max_positions);

}  // namespace dsinfer
