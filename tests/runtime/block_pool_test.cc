// BlockPool: allocation and exhaustion, the null block, reference counts, eviction order, and
// prefix reuse through chained hashes.
#include "runtime/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace dsinfer {
namespace {

TEST(BlockPool, AllocatesUntilExhaustedAndNeverHandsOutTheNullBlock) {
  BlockPool pool(5);  // blocks 1..4 usable
  EXPECT_EQ(pool.num_free(), 4);
  auto a = pool.allocate(3);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(pool.allocate(2));  // only one left: nothing is taken
  EXPECT_EQ(pool.num_free(), 1);
  auto b = pool.allocate(1);
  ASSERT_TRUE(b);
  EXPECT_EQ(pool.num_free(), 0);
  pool.release(*a);
  pool.release(std::vector<int>{0});  // the null block is ignored
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_TRUE(pool.allocate(0));
}

TEST(BlockPool, SharedBlocksFreeOnTheLastRelease) {
  BlockPool pool(3);
  const std::vector<int> a = *pool.allocate(1);
  pool.ref(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 1);  // still held by the other user
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockPool, EvictsTheLeastRecentlyReleasedFirst) {
  BlockPool pool(4);
  const std::vector<int> all = *pool.allocate(3);  // 1, 2, 3
  pool.release(std::vector<int>{all[1]});          // 2 first
  pool.release(std::vector<int>{all[2]});          // then 3
  pool.release(std::vector<int>{all[0]});          // then 1
  EXPECT_EQ(*pool.allocate(3), (std::vector<int>{2, 3, 1}));
}

TEST(BlockPool, PrefixBlocksAreReusedUntilEvicted) {
  BlockPool pool(4);
  const std::vector<int32_t> first = {1, 2, 3, 4}, second = {5, 6, 7, 8};
  const uint64_t h1 = BlockPool::chain_hash(0, first), h2 = BlockPool::chain_hash(h1, second);
  EXPECT_NE(h2, BlockPool::chain_hash(0, second));  // the same tokens after another prefix differ
  const std::vector<int> blocks = *pool.allocate(2);
  pool.set_hash(blocks[0], h1);
  pool.set_hash(blocks[1], h2);
  // A second request with the same prefix shares the blocks while they are in use ...
  EXPECT_EQ(pool.lookup(h1), blocks[0]);
  EXPECT_EQ(pool.ref_count(blocks[0]), 2);
  pool.release(std::vector<int>{blocks[0]});
  pool.release(blocks);
  // ... and revives them from the free queue after both finished.
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.lookup(h2), blocks[1]);
  EXPECT_EQ(pool.num_free(), 2);
  pool.release(std::vector<int>{blocks[1]});
  // Taking every free block evicts the cached contents.
  ASSERT_TRUE(pool.allocate(3));
  EXPECT_FALSE(pool.lookup(h1));
  EXPECT_FALSE(pool.lookup(h2));
}

}  // namespace
}  // namespace dsinfer
