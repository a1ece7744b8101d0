// BlockPool: the fixed set of cache blocks every paged cache kind draws from (vLLM's block pool;
// TensorRT-LLM's "a block just holds metadata"). Block 0 is the null block: never handed out, it
// stands for "no block" in block tables. Free blocks wait in a queue in eviction order (least
// recently released first); a full block can carry the hash of its contents (chained over the
// prefix) so that a later request with the same prefix reuses it instead of recomputing it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace dsinfer {

class BlockPool {
 public:
  /// num_blocks >= 2 (the null block plus at least one usable block).
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_.size()); }
  int num_free() const { return num_free_; }
  int ref_count(int block) const { return ref_[block]; }

  /// n blocks with a reference count of 1, taken from the front of the free queue (evicting any
  /// cached contents); nothing is taken when fewer than n are free.
  std::optional<std::vector<int>> allocate(int n);
  /// One more user of a block in use (a sequence sharing a prefix).
  void ref(int block);
  /// Drops one reference of each block; a block whose count reaches 0 goes to the back of the free
  /// queue, keeping its cached contents until it is taken again.
  void release(std::span<const int> blocks);

  /// Marks a full block's contents; lookup() can then find it.
  void set_hash(int block, uint64_t hash);
  /// The block holding contents with this hash, with one more reference (taken out of the free
  /// queue if it was free), or nullopt.
  std::optional<int> lookup(uint64_t hash);

  /// The hash of a block of tokens following a prefix whose last block hashed to `parent` (0 for
  /// the first block): equal hashes mean equal prefixes.
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);

 private:
  void push_back_free(int block);
  void unlink_free(int block);

  std::vector<int> ref_;
  std::vector<int> prev_, next_;  // the free queue as a doubly linked list; -1 ends it
  std::vector<std::optional<uint64_t>> hash_;
  std::unordered_map<uint64_t, int> by_hash_;
  int head_ = -1, tail_ = -1, num_free_ = 0;
};

}  // namespace dsinfer
