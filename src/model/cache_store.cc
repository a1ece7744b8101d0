// CacheStore and BlockTable.
#include "model/cache_store.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace dsinfer {

CacheStore::CacheStore(const ModelConfig& config, Backend& backend, int64_t block_tokens)
    : CacheStore(config, backend, block_tokens, 4, false, 0) {}

CacheStore::CacheStore(const ModelConfig& config, Backend& backend, const CacheLayout& layout)
    : CacheStore(config, backend, layout.block_tokens, layout.num_blocks, true, layout.fixed_blocks) {}

CacheStore::CacheStore(const ModelConfig& config, Backend& backend, int64_t block_tokens, int capacity, bool bounded,
                       int64_t fixed_blocks)
    : config_(config), block_tokens_(block_tokens), bounded_(bounded), fixed_blocks_(fixed_blocks), pool_(capacity) {
  DSINFER_CHECK(block_tokens > 0 && block_tokens % 2 == 0, "cache blocks of {} positions", block_tokens);
  compressed_.resize(config.n_layers);
  index_keys_.resize(config.n_layers);
  windows_.resize(config.n_layers + config.n_draft_layers());  // the draft stages' rings of main KV too
  kv_states_.resize(config.n_layers);
  score_states_.resize(config.n_layers);
  for (int l = 0; l < static_cast<int>(windows_.size()); ++l) windows_[l] = DeviceArray<uint16_t>(backend);
  for (int l = 0; l < config.n_layers; ++l) {
    if (!config.is_kv_source(l)) continue;
    compressed_[l] = DeviceArray<uint16_t>(backend), index_keys_[l] = DeviceArray<uint16_t>(backend);
    if (pools_partial_groups(l))
      kv_states_[l] = DeviceArray<float>(backend), score_states_[l] = DeviceArray<float>(backend);
  }
}

int32_t CacheStore::take_slot() {
  const int64_t ring = int64_t{config_.ring_rows()} * config_.head_dim,
                state = int64_t{config_.partial_group_rows()} * config_.head_dim;
  if (free_slots_.empty()) {  // double the pools; the new slots are taken last first
    const int grown = std::max(2 * slots_, 4);
    for (DeviceArray<uint16_t>& w : windows_) w.resize(grown * ring);
    for (int l = 0; l < config_.n_layers; ++l) {
      if (!pools_partial_groups(l)) continue;
      kv_states_[l].resize(grown * state);
      score_states_[l].resize(grown * state);
    }
    for (int s = grown - 1; s >= slots_; --s) free_slots_.push_back(s);
    slots_ = grown;
  }
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  const std::vector<float> empty(state, -std::numeric_limits<float>::infinity());  // no score yet: weight 0
  for (const DeviceArray<uint16_t>& w : windows_) w.backend().zero(w.data() + slot * ring, ring * sizeof(uint16_t));
  for (int l = 0; l < config_.n_layers; ++l) {
    if (!pools_partial_groups(l)) continue;
    Backend& be = kv_states_[l].backend();
    be.zero(kv_states_[l].data() + slot * state, state * sizeof(float));
    be.copy_to_device(score_states_[l].data() + slot * state, empty.data(), state * sizeof(float));
  }
  return slot;
}

int64_t CacheStore::blocks_for(int64_t positions) const {
  return positions <= 0 ? 0 : fixed_blocks_ + (positions + block_tokens_ - 1) / block_tokens_;
}

void CacheStore::cover_block(int32_t block) {
  if (block < pool_blocks_) return;
  // Doubling, but never past the ids the pool has: the pools' memory follows the highest id in use.
  const int64_t blocks = std::min<int64_t>(std::max<int64_t>({2 * pool_blocks_, block + 1, 4}), pool_.capacity() + 1);
  for (int l = 0; l < config_.n_layers; ++l) {
    if (!config_.is_kv_source(l)) continue;
    compressed_[l].resize(blocks * rows_per_block(l) * config_.head_dim);
    index_keys_[l].resize(blocks * rows_per_block(l) * config_.index_head_dim);
  }
  pool_blocks_ = blocks;
}

Result<int32_t> CacheStore::allocate() {
  if (pool_.num_free() == 0) {
    if (bounded_)
      return error(
          ErrorKind::kResourceExhausted,
          fmt::format("the cache store's {} blocks of {} positions are all in use", pool_.capacity(), block_tokens_));
    pool_.grow(2 * pool_.capacity());
  }
  const int32_t b = pool_.allocate(1)->front();
  cover_block(b);
  return b;
}

Status CacheStore::reserve_fixed() {
  if (!pool_.reserve(static_cast<int>(fixed_blocks_)))
    return error(ErrorKind::kResourceExhausted,
                 fmt::format("the cache store's {} blocks cannot hold another sequence's fixed caches ({} blocks)",
                             pool_.capacity(), fixed_blocks_));
  return {};
}

BlockTable& BlockTable::operator=(BlockTable&& o) noexcept {
  if (this != &o) {
    clear();
    store_ = std::exchange(o.store_, nullptr);
    blocks_ = std::move(o.blocks_);
    fixed_ = std::exchange(o.fixed_, false);
    o.blocks_.clear();
  }
  return *this;
}

Status BlockTable::cover(int64_t positions) {
  DSINFER_CHECK(store_, "a block table without a store");
  if (positions > 0 && !fixed_) {
    DSINFER_RETURN_IF_ERROR(store_->reserve_fixed());
    fixed_ = true;
  }
  while (static_cast<int64_t>(blocks_.size()) * store_->block_tokens() < positions) {
    DSINFER_ASSIGN_OR_RETURN(int32_t b, store_->allocate());
    blocks_.push_back(b);
  }
  return {};
}

void BlockTable::clear() {
  if (store_ && !blocks_.empty()) store_->release(blocks_);
  if (store_ && fixed_) store_->release_fixed();
  blocks_.clear();
  fixed_ = false;
}

}  // namespace dsinfer
