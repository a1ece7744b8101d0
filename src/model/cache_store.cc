// CacheStore and BlockTable.
#include "model/cache_store.h"

#include <algorithm>

#include <fmt/format.h>

namespace dsinfer {

CacheStore::CacheStore(const ModelConfig& config, Backend& backend, int64_t block_tokens, int max_blocks)
    : config_(config), block_tokens_(block_tokens), max_blocks_(max_blocks) {
  DSINFER_CHECK(block_tokens > 0 && block_tokens % 2 == 0, "cache blocks of {} positions", block_tokens);
  compressed_.resize(config.n_layers);
  index_keys_.resize(config.n_layers);
  for (int l = 0; l < config.n_layers; ++l)
    if (config.is_kv_source(l))
      compressed_[l] = DeviceArray<uint16_t>(backend), index_keys_[l] = DeviceArray<uint16_t>(backend);
}

void CacheStore::grow(int capacity) {
  for (int l = 0; l < config_.n_layers; ++l) {
    if (!config_.is_kv_source(l)) continue;
    compressed_[l].resize(capacity * rows_per_block(l) * config_.head_dim);
    index_keys_[l].resize(capacity * rows_per_block(l) * config_.index_head_dim);
  }
  for (int b = capacity - 1; b >= capacity_; --b) free_.push_back(b);
  capacity_ = capacity;
}

Result<int32_t> CacheStore::allocate() {
  if (free_.empty()) {
    if (max_blocks_ > 0 && capacity_ >= max_blocks_)
      return error(ErrorKind::kResourceExhausted,
                   fmt::format("the cache store's {} blocks of {} positions are all in use", capacity_, block_tokens_));
    const int doubled = std::max(4, 2 * capacity_);
    grow(max_blocks_ > 0 ? std::min(doubled, max_blocks_) : doubled);
  }
  const int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void CacheStore::release(std::span<const int32_t> blocks) {
  free_.insert(free_.end(), blocks.rbegin(), blocks.rend());
}

BlockTable& BlockTable::operator=(BlockTable&& o) noexcept {
  if (this != &o) {
    clear();
    store_ = std::exchange(o.store_, nullptr);
    blocks_ = std::move(o.blocks_);
    o.blocks_.clear();
  }
  return *this;
}

Status BlockTable::cover(int64_t positions) {
  DSINFER_CHECK(store_, "a block table without a store");
  while (static_cast<int64_t>(blocks_.size()) * store_->block_tokens() < positions) {
    DSINFER_ASSIGN_OR_RETURN(int32_t b, store_->allocate());
    blocks_.push_back(b);
  }
  return {};
}

void BlockTable::clear() {
  if (store_ && !blocks_.empty()) store_->release(blocks_);
  blocks_.clear();
}

}  // namespace dsinfer
