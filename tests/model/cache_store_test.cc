// CacheStore and BlockTable: blocks taken and given back, the pools growing without losing rows,
// the bound of a budgeted store, rows through a block table (and the backend op that maps
// selected positions the same way), the slots of the fixed caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "model/cache_sizes.h"
#include "model/cache_store.h"
#include "testing/config_builder.h"
#include "testing/tiny_model.h"
#include "testing/tiny_tokenizer.h"

namespace dsinfer {
namespace {

ModelConfig config() {
  auto vocab = TokenizerVocab::from_json(make_tiny_tokenizer_json(kTinyTokenizerMerges), "tokenizer");
  EXPECT_TRUE(vocab.ok());
  auto c = tiny_model_config(*vocab);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

// Cache rows are int32 ids: a budget of more than 2^31 positions (all sequences together) is
// refused instead of wrapping them; one of 2^30 is planned.
TEST(CacheLayout, PositionsStayWithinTheRowIds) {
  CacheSizes one_byte;
  one_byte.compressed_kv_per_token = 1;
  auto fits = cache_layout(one_byte, int64_t{1} << 30, 256, 1 << 20);
  ASSERT_TRUE(fits.ok()) << fits.status().to_string();
  EXPECT_EQ(int64_t{fits->num_blocks} * fits->block_tokens, int64_t{1} << 30);
  auto wraps = cache_layout(one_byte, int64_t{4} << 30, 256, 1 << 20);
  ASSERT_FALSE(wraps.ok());
  EXPECT_NE(wraps.status().message().find("32-bit cache row ids"), std::string::npos) << wraps.status().message();
}

TEST(CacheStore, BlocksComeBackWhenTheTableGoes) {
  const ModelConfig c = config();
  CpuBackend be(1);
  CacheStore store(c, be, 8);
  {
    BlockTable a(&store), b(&store);
    ASSERT_TRUE(a.cover(20).ok());  // 3 blocks of 8 positions
    ASSERT_TRUE(b.cover(1).ok());
    EXPECT_EQ(a.blocks().size(), 3u);
    EXPECT_EQ(store.pool().num_in_use(), 4);
    BlockTable moved = std::move(a);
    EXPECT_EQ(store.pool().num_in_use(), 4);  // a move hands the blocks over
  }
  EXPECT_EQ(store.pool().num_in_use(), 0);
}

TEST(CacheStore, GrowingKeepsTheRowsAndABoundedStoreSaysWhenItIsFull) {
  const ModelConfig c = config();
  CpuBackend be(1);
  const int layer = c.kv_source_layers.front();
  CacheStore store(c, be, CacheLayout{/*block_tokens=*/4, /*block_bytes=*/1, /*fixed_blocks=*/0, /*num_blocks=*/8});
  BlockTable t(&store);
  ASSERT_TRUE(t.cover(4).ok());
  const int64_t row = store.row(layer, t.blocks(), 0);
  store.compressed(layer).data()[row * c.head_dim] = 0x3F80;  // 1.0 in bf16
  ASSERT_TRUE(t.cover(32).ok());                              // all 8 blocks: the pools grew (doubling) under the first
  EXPECT_EQ(store.compressed(layer).data()[store.row(layer, t.blocks(), 0) * c.head_dim], 0x3F80);
  const Status full = t.cover(33);
  EXPECT_EQ(full.kind(), ErrorKind::kResourceExhausted);
  EXPECT_NE(full.message().find("8 blocks of 4 positions"), std::string::npos) << full.message();
}

TEST(CacheStore, ABudgetCountsEachSequencesFixedCachesFromTheSameBlocks) {
  const ModelConfig c = config();
  CpuBackend be(1);
  CacheStore store(c, be, CacheLayout{/*block_tokens=*/4, /*block_bytes=*/1, /*fixed_blocks=*/2, /*num_blocks=*/7});
  EXPECT_EQ(store.blocks_for(0), 0);
  EXPECT_EQ(store.blocks_for(5), 4);  // 2 fixed + 2 of 4 positions
  BlockTable a(&store), b(&store), d(&store);
  ASSERT_TRUE(a.cover(5).ok());
  EXPECT_EQ(store.pool().num_free(), 3);
  ASSERT_TRUE(b.cover(1).ok());  // 2 fixed + 1
  EXPECT_EQ(store.pool().num_free(), 0);
  EXPECT_EQ(d.cover(1).kind(), ErrorKind::kResourceExhausted) << "no room for a third sequence's fixed caches";
  b.clear();  // its blocks and its fixed caches' count come back once
  EXPECT_EQ(store.pool().num_free(), 3);
  b.clear();
  EXPECT_EQ(store.pool().num_free(), 3);
  ASSERT_TRUE(d.cover(4).ok());
  EXPECT_EQ(store.pool().num_free(), 0);
}

TEST(CacheStore, RowsOfARatioTwoLayerFollowTheBlockTable) {
  const ModelConfig c = config();
  CpuBackend be(1);
  CacheStore store(c, be, 8);
  int layer = -1;
  for (int l : c.kv_source_layers)
    if (c.compress_ratio(l) == 2) layer = l;
  ASSERT_GE(layer, 0);
  BlockTable other(&store), t(&store);
  ASSERT_TRUE(other.cover(8).ok());  // takes a block first, so t's blocks are not 0, 1
  ASSERT_TRUE(t.cover(16).ok());
  EXPECT_EQ(store.rows_per_block(layer), 4);
  for (int64_t g = 0; g < 8; ++g) EXPECT_EQ(store.row(layer, t.blocks(), g), t.blocks()[g / 4] * 4 + g % 4);

  // The backend op the attention uses on selected positions gives the same rows (after `base`,
  // the window's rows), and -1 for an empty pick.
  std::vector<int32_t> picks = {7, -1, 0, 5}, blocks(t.blocks().begin(), t.blocks().end()), rows(6, 99);
  TensorView out = TensorView::contiguous(rows.data() + 2, DType::kI32, {1, 4});
  be.paged_rows({TensorView::contiguous(picks.data(), DType::kI32, {1, 4}),
                 {TensorView::contiguous(blocks.data(), DType::kI32, {static_cast<int64_t>(blocks.size())}),
                  store.rows_per_block(layer), 16},
                 out});
  EXPECT_EQ(rows, (std::vector<int32_t>{99, 99, static_cast<int32_t>(16 + store.row(layer, t.blocks(), 7)), -1,
                                        static_cast<int32_t>(16 + store.row(layer, t.blocks(), 0)),
                                        static_cast<int32_t>(16 + store.row(layer, t.blocks(), 5))}));

  // A table a row (a decode batch): row 0 reads `other`'s blocks, row 1 t's (padded with 0s).
  std::vector<int32_t> tables(2 * 4, 0), two = {3, 7}, rows2(2, -5);
  tables[0] = other.blocks()[0];
  std::copy(t.blocks().begin(), t.blocks().end(), tables.begin() + 4);
  be.paged_rows({TensorView::contiguous(two.data(), DType::kI32, {2, 1}),
                 {TensorView::contiguous(tables.data(), DType::kI32, {2, 4}), store.rows_per_block(layer), 0},
                 TensorView::contiguous(rows2.data(), DType::kI32, {2, 1})});
  EXPECT_EQ(rows2, (std::vector<int32_t>{static_cast<int32_t>(store.row(layer, other.blocks(), 3)),
                                         static_cast<int32_t>(store.row(layer, t.blocks(), 7))}));
}

TEST(CacheStore, SlotsOfTheFixedCachesAreReusedAndStartEmpty) {
  const ModelConfig c = config();
  CpuBackend be(1);
  CacheStore store(c, be, 4);
  int ratio2 = -1;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.is_kv_source(l) && c.compress_ratio(l) == 2) ratio2 = l;
  ASSERT_GE(ratio2, 0);
  std::vector<CacheSlot> slots;
  for (int i = 0; i < 5; ++i) slots.emplace_back(&store);  // past the first 4: the pools double
  EXPECT_EQ(store.slots_in_use(), 5);
  // A ring of the window and a verify chunk's slack; partial groups of 2 and the slack.
  const int64_t ring = int64_t{c.ring_rows()} * c.head_dim, state = int64_t{c.partial_group_rows()} * c.head_dim;
  EXPECT_EQ(c.ring_rows(), c.window_size + c.verify_tokens() - 1);
  EXPECT_EQ(static_cast<int64_t>(store.windows(0).size()), 8 * ring);
  EXPECT_EQ(static_cast<int64_t>(store.kv_states(ratio2).size()), 8 * state);
  std::vector<int32_t> ids;
  for (const CacheSlot& s : slots) ids.push_back(s.id());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());  // distinct

  // A slot given back and taken again starts as a new sequence's: zero rings, empty partial groups.
  const int32_t reused = slots[2].id();
  std::fill_n(store.windows(0).data() + reused * ring, ring, uint16_t{0x3F80});
  std::fill_n(store.score_states(ratio2).data() + reused * state, state, 1.0f);
  slots.erase(slots.begin() + 2);
  EXPECT_EQ(store.slots_in_use(), 4);
  CacheSlot again(&store);
  EXPECT_EQ(again.id(), reused);
  for (int64_t i = 0; i < ring; ++i) ASSERT_EQ(store.windows(0).data()[reused * ring + i], 0);
  for (int64_t i = 0; i < state; ++i) {
    ASSERT_EQ(store.kv_states(ratio2).data()[reused * state + i], 0.0f);
    ASSERT_TRUE(std::isinf(store.score_states(ratio2).data()[reused * state + i]));
  }
}

}  // namespace
}  // namespace dsinfer
