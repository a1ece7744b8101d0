// BlockPool: the one allocator of the paged caches' blocks (vLLM's block pool; TensorRT-LLM's "a
// block just holds metadata"). Its ids index the CacheStore's pools (model/cache_store.h). Block 0
// is the null block: never handed out, it stands for "no block" in block tables (a padded table's
// entries). A block has a reference count (a prefix shared by several sequences) and, when full,
// may carry the hash of its contents chained over the prefix, so that a later request with the
// same prefix can reuse it. Free blocks without contents are reused first, most recently freed
// first, so the ids in use stay few and the pools' memory follows the peak use; free blocks that
// still hold contents are kept longest and evicted least recently released first. Blocks can be
// reserved without naming them: a sequence's fixed caches, counted in blocks of the same budget.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace dsinfer {

class BlockPool {
 public:
  /// Blocks 1..capacity usable (capacity >= 1).
  explicit BlockPool(int capacity);

  int capacity() const { return static_cast<int>(ref_.size()) - 1; }
  /// Blocks that can be taken: free ones less the reserved.
  int num_free() const { return static_cast<int>(fresh_.size()) + num_cached_ - reserved_; }
  int num_in_use() const { return capacity() - static_cast<int>(fresh_.size()) - num_cached_; }
  int ref_count(int32_t block) const { return ref_[block]; }

  /// n blocks with a reference count of 1 (evicting cached contents last); nothing is taken when
  /// fewer than n can be.
  std::optional<std::vector<int32_t>> allocate(int n);
  /// One more user of a block in use (a sequence sharing a prefix).
  void ref(int32_t block);
  /// Drops one reference of each block; a block whose count reaches 0 is free again (keeping its
  /// cached contents, if any, until it is taken).
  void release(std::span<const int32_t> blocks);
  /// Holds back n blocks from num_free without naming them; false (nothing held) when fewer are free.
  bool reserve(int n);
  void unreserve(int n);
  /// More usable blocks: capacity + 1 .. new_capacity, taken after the free ones.
  void grow(int new_capacity);

  /// Marks a full block's contents; lookup() can then find it.
  void set_hash(int32_t block, uint64_t hash);
  /// The block holding contents with this hash, with one more reference (taken out of the free
  /// blocks if it was free), or nullopt.
  std::optional<int32_t> lookup(uint64_t hash);

  /// The hash of a block of tokens following a prefix whose last block hashed to `parent` (0 for
  /// the first block): equal hashes mean equal prefixes.
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);

 private:
  void push_back_cached(int32_t block);
  void unlink_cached(int32_t block);

  std::vector<int> ref_;
  std::vector<int32_t> fresh_;        // free blocks without contents, a stack: the back is taken first
  std::vector<int32_t> prev_, next_;  // free blocks with contents, a list in release order; -1 ends it
  std::vector<std::optional<uint64_t>> hash_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int32_t head_ = -1, tail_ = -1;
  int num_cached_ = 0, reserved_ = 0;
};

}  // namespace dsinfer
