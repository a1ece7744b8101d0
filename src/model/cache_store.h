// CacheStore: the storage of the caches that grow with a sequence (each kv source's compressed KV
// and index keys), shared by all sequences in blocks of `block_tokens` positions (vLLM's paged KV
// cache). A sequence's BlockTable lists its blocks: block j holds its positions
// [j * block_tokens, (j + 1) * block_tokens), i.e. rows [j * block_tokens / r, ...) of a ratio-r
// layer's caches, so a sequence holds memory for the positions it has and no more. The pools grow
// (doubling) as blocks are taken, up to `max_blocks` when one is given (the server's memory
// budget), so memory follows use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "io/model_config.h"
#include "ops/device_array.h"

namespace dsinfer {

class CacheStore {
 public:
  /// `block_tokens` a positive multiple of 2 (the largest compress ratio); max_blocks 0: no bound.
  CacheStore(const ModelConfig& config, Backend& backend, int64_t block_tokens, int max_blocks);

  int64_t block_tokens() const { return block_tokens_; }
  int max_blocks() const { return max_blocks_; }
  int blocks_in_use() const { return capacity_ - static_cast<int>(free_.size()); }

  /// A free block; kResourceExhausted when max_blocks are in use.
  Result<int32_t> allocate();
  void release(std::span<const int32_t> blocks);

  /// Layer l's pools (l a kv source): [num_blocks * rows_per_block(l), width] bf16.
  const DeviceArray<uint16_t>& compressed(int layer) const { return compressed_[layer]; }
  const DeviceArray<uint16_t>& index_keys(int layer) const { return index_keys_[layer]; }
  int64_t rows_per_block(int layer) const { return block_tokens_ / config_.compress_ratio(layer); }
  /// Row of `group` (a compressed position of layer l) in l's pools, through a block table.
  int64_t row(int layer, std::span<const int32_t> blocks, int64_t group) const {
    const int64_t per = rows_per_block(layer);
    return blocks[group / per] * per + group % per;
  }

 private:
  void grow(int capacity);

  const ModelConfig& config_;
  int64_t block_tokens_;
  int max_blocks_;
  int capacity_ = 0;
  std::vector<int32_t> free_;  // a stack: the most recently released block is reused first
  std::vector<DeviceArray<uint16_t>> compressed_, index_keys_;  // by layer; empty but for kv sources
};

/// A sequence's blocks of a CacheStore, returned to it when the table goes (move-only).
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
  /// Takes blocks until positions [0, positions) are covered.
  Status cover(int64_t positions);
  void clear();

 private:
  CacheStore* store_ = nullptr;
  std::vector<int32_t> blocks_;
};

}  // namespace dsinfer
