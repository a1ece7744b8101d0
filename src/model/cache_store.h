// CacheStore: the storage of the caches that grow with a sequence (each kv source's compressed KV
// and index keys), shared by all sequences in blocks of `block_tokens` positions (vLLM's paged KV
// cache), and the one allocator of those blocks (a BlockPool whose ids index the pools). A
// sequence's BlockTable lists its blocks: block j of the table holds its positions
// [j * block_tokens, (j + 1) * block_tokens), i.e. rows [id * block_tokens / r, ...) of a ratio-r
// layer's pools, so a sequence holds memory for the positions it has and no more. Unbounded, the
// pools grow (doubling) as blocks are taken; bounded by a budget's layout (the server's), the
// store hands out its blocks and counts each sequence's fixed caches (window rings, the
// compressor's partial groups: each sequence's own memory) as `fixed_blocks` of them, so that the
// running sequences stay inside the budget.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "io/model_config.h"
#include "model/block_pool.h"
#include "model/cache_sizes.h"
#include "ops/device_array.h"

namespace dsinfer {

class CacheStore {
 public:
  /// Unbounded, blocks of `block_tokens` positions (a positive multiple of 2, the largest
  /// compress ratio).
  CacheStore(const ModelConfig& config, Backend& backend, int64_t block_tokens);
  /// Bounded by a budget: layout.num_blocks blocks, each sequence's fixed caches counted as
  /// layout.fixed_blocks of them.
  CacheStore(const ModelConfig& config, Backend& backend, const CacheLayout& layout);

  int64_t block_tokens() const { return block_tokens_; }
  bool bounded() const { return bounded_; }
  int64_t fixed_blocks() const { return fixed_blocks_; }
  /// Blocks a sequence of `positions` positions holds, its fixed caches counted (0 for none).
  int64_t blocks_for(int64_t positions) const;
  const BlockPool& pool() const { return pool_; }

  /// A free block; kResourceExhausted when a bounded store's blocks are all taken.
  Result<int32_t> allocate();
  void release(std::span<const int32_t> blocks) { pool_.release(blocks); }
  /// Counts a sequence's fixed caches against the budget; kResourceExhausted when they do not fit.
  Status reserve_fixed();
  void release_fixed() { pool_.unreserve(static_cast<int>(fixed_blocks_)); }

  /// Layer l's pools (l a kv source): [blocks * rows_per_block(l), width] bf16, block 0 the null one.
  const DeviceArray<uint16_t>& compressed(int layer) const { return compressed_[layer]; }
  const DeviceArray<uint16_t>& index_keys(int layer) const { return index_keys_[layer]; }
  int64_t rows_per_block(int layer) const { return block_tokens_ / config_.compress_ratio(layer); }
  /// Row of `group` (a compressed position of layer l) in l's pools, through a block table.
  int64_t row(int layer, std::span<const int32_t> blocks, int64_t group) const {
    const int64_t per = rows_per_block(layer);
    return blocks[group / per] * per + group % per;
  }

 private:
  CacheStore(const ModelConfig& config, Backend& backend, int64_t block_tokens, int capacity, bool bounded,
             int64_t fixed_blocks);
  void cover_block(int32_t block);  // the pools reach block `block`

  const ModelConfig& config_;
  int64_t block_tokens_;
  bool bounded_;
  int64_t fixed_blocks_;
  BlockPool pool_;
  int64_t pool_blocks_ = 0;  // blocks the pools hold memory for: ids [0, pool_blocks_)
  std::vector<DeviceArray<uint16_t>> compressed_, index_keys_;  // by layer; empty but for kv sources
};

/// A sequence's blocks of a CacheStore (and its fixed caches' count), returned to it when the table
/// goes or is cleared (move-only): the one place a sequence's cache blocks are released.
class BlockTable {
 public:
  BlockTable() = default;
  explicit BlockTable(CacheStore* store) : store_(store) {}
  BlockTable(BlockTable&& o) noexcept { *this = std::move(o); }
  BlockTable& operator=(BlockTable&& o) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;
  ~BlockTable() { clear(); }

  std::span<const int32_t> blocks() const { return blocks_; }
  /// Takes blocks until positions [0, positions) are covered (the fixed caches counted first).
  Status cover(int64_t positions);
  void clear();

 private:
  CacheStore* store_ = nullptr;
  std::vector<int32_t> blocks_;
  bool fixed_ = false;  // the fixed caches are counted
};

}  // namespace dsinfer
