// BlockPool (block_pool.h).
#include "model/block_pool.h"

#include "core/check.h"
#include "core/hash.h"

namespace dsinfer {

BlockPool::BlockPool(int capacity) : ref_(1, 1), prev_(1, -1), next_(1, -1), hash_(1) {  // block 0: always "in use"
  DSINFER_CHECK(capacity >= 1, "a block pool needs a usable block, got {}", capacity);
  grow(capacity);
}

void BlockPool::grow(int new_capacity) {
  const int old = capacity();
  DSINFER_CHECK(new_capacity >= old, "a block pool does not shrink ({} -> {})", old, new_capacity);
  ref_.resize(new_capacity + 1, 0), prev_.resize(new_capacity + 1, -1), next_.resize(new_capacity + 1, -1);
  hash_.resize(new_capacity + 1);
  // Under the free ones, lowest id on top.
  std::vector<int32_t> added;
  for (int32_t b = new_capacity; b > old; --b) added.push_back(b);
  fresh_.insert(fresh_.begin(), added.begin(), added.end());
}

void BlockPool::push_back_cached(int32_t block) {
  prev_[block] = tail_, next_[block] = -1;
  if (tail_ >= 0)
    next_[tail_] = block;
  else
    head_ = block;
  tail_ = block;
  ++num_cached_;
}

void BlockPool::unlink_cached(int32_t block) {
  if (prev_[block] >= 0)
    next_[prev_[block]] = next_[block];
  else
    head_ = next_[block];
  if (next_[block] >= 0)
    prev_[next_[block]] = prev_[block];
  else
    tail_ = prev_[block];
  prev_[block] = next_[block] = -1;
  --num_cached_;
}

std::optional<std::vector<int32_t>> BlockPool::allocate(int n) {
  DSINFER_CHECK(n >= 0, "allocate({})", n);
  if (n > num_free()) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    int32_t b;
    if (!fresh_.empty()) {
      b = fresh_.back();
      fresh_.pop_back();
    } else {  // evict the least recently released contents
      b = head_;
      unlink_cached(b);
      by_hash_.erase(*hash_[b]), hash_[b].reset();
    }
    ref_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::ref(int32_t block) {
  DSINFER_CHECK(block > 0 && block <= capacity() && ref_[block] > 0, "ref of block {} not in use", block);
  ++ref_[block];
}

void BlockPool::release(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    if (b == 0) continue;  // the null block stands for "none"
    DSINFER_CHECK(b > 0 && b <= capacity() && ref_[b] > 0, "release of block {} not in use", b);
    if (--ref_[b] > 0) continue;
    if (hash_[b])
      push_back_cached(b);
    else
      fresh_.push_back(b);
  }
}

bool BlockPool::reserve(int n) {
  DSINFER_CHECK(n >= 0, "reserve({})", n);
  if (n > num_free()) return false;
  reserved_ += n;
  return true;
}

void BlockPool::unreserve(int n) {
  DSINFER_CHECK(n >= 0 && n <= reserved_, "unreserve({}) of {} reserved", n, reserved_);
  reserved_ -= n;
}

void BlockPool::set_hash(int32_t block, uint64_t hash) {
  DSINFER_CHECK(block > 0 && block <= capacity() && ref_[block] > 0, "set_hash on block {} not in use", block);
  if (hash_[block]) by_hash_.erase(*hash_[block]);
  hash_[block] = hash;
  by_hash_[hash] = block;  // the newest block with these contents wins
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash) {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const int32_t b = it->second;
  if (ref_[b] == 0) {
    if (num_free() == 0) return std::nullopt;  // free but reserved: taking it would break a reservation
    unlink_cached(b);                          // revived: no longer free
  }
  ++ref_[b];
  return b;
}

uint64_t BlockPool::chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x5EEDull);
  for (int32_t t : tokens) h = mix64(h ^ static_cast<uint32_t>(t));
  return h;
}

}  // namespace dsinfer
