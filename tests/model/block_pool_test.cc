// BlockPool: allocation and exhaustion, the null block, reference counts, reuse order (empty
// blocks most recently freed first, cached contents evicted least recently released first),
// reservations, growth, and prefix reuse through chained hashes.
#include "model/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace dsinfer {
namespace {

TEST(BlockPool, AllocatesUntilExhaustedAndNeverHandsOutTheNullBlock) {
  BlockPool pool(4);  // blocks 1..4 usable
  EXPECT_EQ(pool.num_free(), 4);
  auto a = pool.allocate(3);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(pool.allocate(2));  // only one left: nothing is taken
  EXPECT_EQ(pool.num_free(), 1);
  auto b = pool.allocate(1);
  ASSERT_TRUE(b);
  EXPECT_EQ(pool.num_free(), 0);
  pool.release(*a);
  pool.release(std::vector<int32_t>{0});  // the null block is ignored
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_TRUE(pool.allocate(0));
}

TEST(BlockPool, SharedBlocksFreeOnTheLastRelease) {
  BlockPool pool(2);
  const std::vector<int32_t> a = *pool.allocate(1);
  pool.ref(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 1);  // still held by the other user
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockPool, EmptyBlocksAreReusedMostRecentlyFreedFirstSoFewIdsAreTouched) {
  BlockPool pool(8);
  for (int round = 0; round < 5; ++round) {  // two sequences come and go: only blocks 1..3 are ever used
    const std::vector<int32_t> a = *pool.allocate(2), b = *pool.allocate(1);
    for (int32_t id : a) EXPECT_LE(id, 3);
    EXPECT_LE(b[0], 3);
    pool.release(b);
    pool.release(a);
  }
  const std::vector<int32_t> c = *pool.allocate(2);
  pool.release(std::vector<int32_t>{c[0]});
  EXPECT_EQ(*pool.allocate(1), (std::vector<int32_t>{c[0]})) << "the block just freed";
}

TEST(BlockPool, CachedContentsAreEvictedLeastRecentlyReleasedFirst) {
  BlockPool pool(3);
  const std::vector<int32_t> all = *pool.allocate(3);  // 1, 2, 3
  for (int32_t b : all) pool.set_hash(b, 100 + b);
  pool.release(std::vector<int32_t>{all[1]});  // 2 first
  pool.release(std::vector<int32_t>{all[2]});  // then 3
  pool.release(std::vector<int32_t>{all[0]});  // then 1
  EXPECT_EQ(*pool.allocate(2), (std::vector<int32_t>{2, 3}));
  EXPECT_FALSE(pool.lookup(102)) << "evicted";
  EXPECT_EQ(pool.lookup(101), 1) << "kept";
}

TEST(BlockPool, ReservationsHoldBlocksBackAndGrowthAddsBlocks) {
  BlockPool pool(4);
  EXPECT_TRUE(pool.reserve(3));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_FALSE(pool.allocate(2));
  EXPECT_FALSE(pool.reserve(2));
  ASSERT_TRUE(pool.allocate(1));
  EXPECT_EQ(pool.num_free(), 0);
  pool.unreserve(3);
  EXPECT_EQ(pool.num_free(), 3);
  pool.grow(6);
  EXPECT_EQ(pool.capacity(), 6);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(*pool.allocate(3), (std::vector<int32_t>{2, 3, 4})) << "the old free blocks first";
}

TEST(BlockPool, PrefixBlocksAreReusedUntilEvicted) {
  BlockPool pool(3);
  const std::vector<int32_t> first = {1, 2, 3, 4}, second = {5, 6, 7, 8};
  const uint64_t h1 = BlockPool::chain_hash(0, first), h2 = BlockPool::chain_hash(h1, second);
  EXPECT_NE(h2, BlockPool::chain_hash(0, second));  // the same tokens after another prefix differ
  const std::vector<int32_t> blocks = *pool.allocate(2);
  pool.set_hash(blocks[0], h1);
  pool.set_hash(blocks[1], h2);
  // A second request with the same prefix shares the blocks while they are in use ...
  EXPECT_EQ(pool.lookup(h1), blocks[0]);
  EXPECT_EQ(pool.ref_count(blocks[0]), 2);
  pool.release(std::vector<int32_t>{blocks[0]});
  pool.release(blocks);
  // ... and revives them from the free queue after both finished.
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.lookup(h2), blocks[1]);
  EXPECT_EQ(pool.num_free(), 2);
  pool.release(std::vector<int32_t>{blocks[1]});
  // Taking every free block evicts the cached contents.
  ASSERT_TRUE(pool.allocate(3));
  EXPECT_FALSE(pool.lookup(h1));
  EXPECT_FALSE(pool.lookup(h2));
}

}  // namespace
}  // namespace dsinfer
