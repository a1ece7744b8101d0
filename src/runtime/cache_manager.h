// CacheManager: the cache memory each request holds, in blocks of a BlockPool sized from a memory
// budget (vLLM's KV cache manager). A request of L positions holds the blocks of its fixed caches
// (every layer's window ring, the compressor's partial groups) plus one block per `block_tokens`
// positions of the caches that grow with it (compressed KV, index keys, the Engram history). The
// scheduler asks for blocks before it runs a chunk and preempts requests when the pool is short.
// The growing caches are stored in the model's CacheStore in blocks of the same size, bounded by
// the same count (the Engine sets it); the fixed caches are each sequence's own, counted here.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "model/cache_sizes.h"
#include "runtime/block_pool.h"

namespace dsinfer {

struct CacheLayout {
  int64_t block_tokens = 256;  // positions per block of the growing caches
  int64_t block_bytes = 0;     // what one block stands for
  int64_t fixed_blocks = 0;    // blocks every request holds from its first position
  int num_blocks = 0;          // usable blocks in the pool
};

/// The layout for a budget; kInvalidArgument when one sequence of `max_positions` does not fit
/// (the error names the budget that would), since then a request could never finish.
Result<CacheLayout> cache_layout(const CacheSizes& sizes, int64_t budget_bytes, int64_t block_tokens,
                                 int64_t max_positions);

class CacheManager {
 public:
  explicit CacheManager(const CacheLayout& layout);

  const CacheLayout& layout() const { return layout_; }
  /// Blocks a request of `positions` positions holds.
  int64_t blocks_for(int64_t positions) const;
  /// Of `wanted` more positions after `from`, how many `id` can hold with its blocks and the free
  /// ones, and takes the blocks for them (0: nothing taken).
  int64_t grow(uint64_t id, int64_t from, int64_t wanted);
  /// Frees every block of `id` (finished, cancelled or preempted).
  void release(uint64_t id);

  int num_blocks() const { return layout_.num_blocks; }
  int num_free() const { return pool_.num_free(); }

 private:
  CacheLayout layout_;
  BlockPool pool_;
  std::unordered_map<uint64_t, std::vector<int>> held_;
};

}  // namespace dsinfer
