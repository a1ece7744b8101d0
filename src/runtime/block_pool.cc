#include "runtime/block_pool.h"

#include "core/check.h"
#include "core/hash.h"

namespace dsinfer {

BlockPool::BlockPool(int num_blocks)
    : ref_(num_blocks, 0), prev_(num_blocks, -1), next_(num_blocks, -1), hash_(num_blocks) {
  DSINFER_CHECK(num_blocks >= 2, "a block pool needs the null block and one more, got {}", num_blocks);
  ref_[0] = 1;  // the null block is always "in use"
  for (int b = 1; b < num_blocks; ++b) push_back_free(b);
}

void BlockPool::push_back_free(int block) {
  prev_[block] = tail_, next_[block] = -1;
  if (tail_ >= 0)
    next_[tail_] = block;
  else
    head_ = block;
  tail_ = block;
  ++num_free_;
}

void BlockPool::unlink_free(int block) {
  if (prev_[block] >= 0)
    next_[prev_[block]] = next_[block];
  else
    head_ = next_[block];
  if (next_[block] >= 0)
    prev_[next_[block]] = prev_[block];
  else
    tail_ = prev_[block];
  prev_[block] = next_[block] = -1;
  --num_free_;
}

std::optional<std::vector<int>> BlockPool::allocate(int n) {
  DSINFER_CHECK(n >= 0, "allocate({})", n);
  if (n > num_free_) return std::nullopt;
  std::vector<int> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    const int b = head_;
    unlink_free(b);
    if (hash_[b]) by_hash_.erase(*hash_[b]), hash_[b].reset();  // evicted: its contents are gone
    ref_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::ref(int block) {
  DSINFER_CHECK(block > 0 && block < num_blocks() && ref_[block] > 0, "ref of block {} not in use", block);
  ++ref_[block];
}

void BlockPool::release(std::span<const int> blocks) {
  for (int b : blocks) {
    if (b == 0) continue;  // the null block stands for "none"
    DSINFER_CHECK(b > 0 && b < num_blocks() && ref_[b] > 0, "release of block {} not in use", b);
    if (--ref_[b] == 0) push_back_free(b);
  }
}

void BlockPool::set_hash(int block, uint64_t hash) {
  DSINFER_CHECK(block > 0 && block < num_blocks() && ref_[block] > 0, "set_hash on block {} not in use", block);
  if (hash_[block]) by_hash_.erase(*hash_[block]);
  hash_[block] = hash;
  by_hash_[hash] = block;  // the newest block with these contents wins
}

std::optional<int> BlockPool::lookup(uint64_t hash) {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const int b = it->second;
  if (ref_[b] == 0) unlink_free(b);  // revived: out of the free queue
  ++ref_[b];
  return b;
}

uint64_t BlockPool::chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x5EEDull);
  for (int32_t t : tokens) h = mix64(h ^ static_cast<uint32_t>(t));
  return h;
}

}  // namespace dsinfer
