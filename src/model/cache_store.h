// CacheStore: the storage of the caches that grow with a sequence (each kv source's compressed KV
// and index keys), shared by all sequences in blocks of `block_tokens` positions (vLLM's paged KV
// cache), and the one allocator of those blocks (a BlockPool whose ids index the pools). A
// sequence's BlockTable lists its blocks: block j of the table holds its positions
// [j * block_tokens, (j + 1) * block_tokens), i.e. rows [id * block_tokens / r, ...) of a ratio-r
// layer's pools, so a sequence holds memory for the positions it has and no more. Unbounded, the
// pools grow (doubling) as blocks are taken; bounded by a budget's layout (the server's), the
// store hands out its blocks and counts each sequence's fixed caches as `fixed_blocks` of them,
// so that the running sequences stay inside the budget. The fixed caches (each layer's window ring,
// each ratio-2 kv source's partial group) live in pools of their own, a slot a sequence, so that
// the attention of a decode batch reads every sequence's ring from one tensor.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
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

  /// A slot of the fixed caches for a new sequence, its rings zeroed and its partial groups empty
  /// (the pools grow by doubling); given back with release_slot.
  int32_t take_slot();
  void release_slot(int32_t slot) { free_slots_.push_back(slot); }
  int slots_in_use() const { return slots_ - static_cast<int>(free_slots_.size()); }
  /// Layer l's window rings: [slots * R, head_dim] bf16 with R = config.ring_rows(); slot s holds
  /// rows [s * R, (s + 1) * R), position p at row p % R. A draft stage's (layer n_layers + i) ring
  /// holds its KV of the target's main hidden states, position p at row p % window.
  const DeviceArray<uint16_t>& windows(int layer) const { return windows_[layer]; }
  /// A ratio-2 kv source's partial groups: [slots * G, head_dim] f32 each with G =
  /// config.partial_group_rows(); slot s holds rows [s * G, (s + 1) * G), position p at p % G.
  const DeviceArray<float>& kv_states(int layer) const { return kv_states_[layer]; }
  const DeviceArray<float>& score_states(int layer) const { return score_states_[layer]; }

 private:
  CacheStore(const ModelConfig& config, Backend& backend, int64_t block_tokens, int capacity, bool bounded,
             int64_t fixed_blocks);
  void cover_block(int32_t block);  // the pools reach block `block`
  bool pools_partial_groups(int layer) const {
    return config_.is_kv_source(layer) && config_.compress_ratio(layer) == 2;
  }

  const ModelConfig& config_;
  int64_t block_tokens_;
  bool bounded_;
  int64_t fixed_blocks_;
  BlockPool pool_;
  int64_t pool_blocks_ = 0;  // blocks the pools hold memory for: ids [0, pool_blocks_)
  std::vector<DeviceArray<uint16_t>> compressed_, index_keys_;  // by layer; empty but for kv sources
  std::vector<DeviceArray<uint16_t>> windows_;                  // by layer, draft stages included
  std::vector<DeviceArray<float>> kv_states_, score_states_;    // by layer; empty but for ratio-2 kv sources
  int slots_ = 0;                                               // slots the pools hold
  std::vector<int32_t> free_slots_;
};

/// A sequence's slot of a CacheStore's fixed caches, given back when it goes (move-only).
class CacheSlot {
 public:
  CacheSlot() = default;
  explicit CacheSlot(CacheStore* store) : store_(store), id_(store->take_slot()) {}
  CacheSlot(CacheSlot&& o) noexcept { *this = std::move(o); }
  CacheSlot& operator=(CacheSlot&& o) noexcept {
    if (this != &o) {
      if (store_) store_->release_slot(id_);
      store_ = std::exchange(o.store_, nullptr);
      id_ = o.id_;
    }
    return *this;
  }
  CacheSlot(const CacheSlot&) = delete;
  CacheSlot& operator=(const CacheSlot&) = delete;
  ~CacheSlot() {
    if (store_) store_->release_slot(id_);
  }
  int32_t id() const { return id_; }

 private:
  CacheStore* store_ = nullptr;
  int32_t id_ = -1;
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
