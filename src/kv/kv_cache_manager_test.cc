#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

namespace omnibus {
namespace {

TEST(KvCacheManager, AllocatesBlocksAsTokensGrow) {
  KvCacheManager m(8, 4);
  std::vector<BlockCopy> copies;
  const int32_t s = m.add_seq();
  EXPECT_EQ(m.num_blocks_needed(s, 5), 2);
  ASSERT_TRUE(m.allocate_slots(s, 5, copies));
  EXPECT_EQ(m.n_tokens(s), 5);
  EXPECT_EQ(m.block_table(s).size(), 2u);
  EXPECT_EQ(m.num_blocks_needed(s, 3), 0);  // fits in the partly filled last block
  ASSERT_TRUE(m.allocate_slots(s, 3, copies));
  EXPECT_EQ(m.block_table(s).size(), 2u);
  ASSERT_TRUE(m.allocate_slots(s, 1, copies));
  EXPECT_EQ(m.block_table(s).size(), 3u);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m.n_used_blocks(), 3);
  EXPECT_DOUBLE_EQ(m.n_unfilled_slots(), 3.0);
  m.check_integrity();
  m.free(s);
  EXPECT_EQ(m.n_free_blocks(), 8);
  EXPECT_EQ(m.n_seqs(), 0);
  m.check_integrity();
}

TEST(KvCacheManager, FailsWithoutChangeWhenThePoolIsShort) {
  KvCacheManager m(3, 4);
  std::vector<BlockCopy> copies;
  const int32_t a = m.add_seq();
  const int32_t b = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(a, 8, copies));
  EXPECT_FALSE(m.can_allocate(b, 5));
  EXPECT_FALSE(m.allocate_slots(b, 5, copies));
  EXPECT_EQ(m.n_tokens(b), 0);
  EXPECT_EQ(m.n_free_blocks(), 1);
  EXPECT_TRUE(m.allocate_slots(b, 4, copies));
  m.check_integrity();
}

TEST(KvCacheManager, ForkSharesBlocksAndCopiesOnWrite) {
  KvCacheManager m(8, 4);
  std::vector<BlockCopy> copies;
  const int32_t parent = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(parent, 6, copies));  // blocks [x, y], y holds 2 of 4
  const int32_t child = m.fork(parent);
  const std::vector<int32_t> shared(m.block_table(parent).begin(), m.block_table(parent).end());
  EXPECT_EQ(std::vector<int32_t>(m.block_table(child).begin(), m.block_table(child).end()), shared);
  EXPECT_EQ(m.n_used_blocks(), 2);
  EXPECT_DOUBLE_EQ(m.n_unfilled_slots(), 2.0);  // the shared partial block, counted once
  m.check_integrity();

  // The child appends: its partly filled last block is shared, so it is copied.
  EXPECT_EQ(m.num_blocks_needed(child, 1), 1);
  ASSERT_TRUE(m.allocate_slots(child, 1, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, shared[1]);
  EXPECT_EQ(copies[0].dst, m.block_table(child)[1]);
  EXPECT_NE(copies[0].dst, shared[1]);
  EXPECT_EQ(m.block_table(child)[0], shared[0]);  // the full block stays shared
  m.check_integrity();

  // The parent is now the last holder of its block and writes in place.
  copies.clear();
  ASSERT_TRUE(m.allocate_slots(parent, 1, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m.block_table(parent)[1], shared[1]);
  m.check_integrity();

  m.free(parent);
  EXPECT_EQ(m.n_used_blocks(), 2);  // the child still holds the first block
  m.free(child);
  EXPECT_EQ(m.n_used_blocks(), 0);
  m.check_integrity();
}

TEST(KvCacheManager, ForkOfAFullBlockNeedsNoCopy) {
  KvCacheManager m(4, 4);
  std::vector<BlockCopy> copies;
  const int32_t parent = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(parent, 4, copies));
  const int32_t child = m.fork(parent);
  ASSERT_TRUE(m.allocate_slots(child, 1, copies));
  ASSERT_TRUE(m.allocate_slots(parent, 1, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m.n_used_blocks(), 3);
  m.check_integrity();
}

TEST(KvCacheManager, CopyOnWriteCountsAgainstTheFreeBlocks) {
  KvCacheManager m(2, 4);
  std::vector<BlockCopy> copies;
  const int32_t parent = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(parent, 5, copies));  // both blocks
  const int32_t child = m.fork(parent);
  EXPECT_FALSE(m.can_allocate(child, 1));  // would need a block for the copy
  EXPECT_FALSE(m.allocate_slots(child, 1, copies));
  EXPECT_TRUE(copies.empty());
  m.check_integrity();
}

// free() reports a block (KvCache: to release its residual slots) only when
// no table holds it any more, once.
TEST(KvCacheManager, FreeReportsBlocksWhenTheLastHolderLetsGo) {
  KvCacheManager m(8, 4);
  std::vector<int32_t> freed;
  std::vector<BlockCopy> copies;
  const int32_t parent = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(parent, 6, copies));
  const int32_t child = m.fork(parent);
  const std::vector<int32_t> blocks(m.block_table(parent).begin(), m.block_table(parent).end());
  m.free(parent, &freed);
  EXPECT_TRUE(freed.empty());  // the child holds both
  m.free(child, &freed);
  EXPECT_EQ(freed, (std::vector<int32_t>{blocks[1], blocks[0]}));  // last block first
}

TEST(KvCacheManager, ReusesSequenceIds) {
  KvCacheManager m(4, 4);
  const int32_t a = m.add_seq();
  m.free(a);
  EXPECT_EQ(m.add_seq(), a);
}

TEST(KvCacheManagerDeathTest, FreeingTwiceAborts) {
  KvCacheManager m(4, 4);
  const int32_t a = m.add_seq();
  m.free(a);
  EXPECT_DEATH(m.free(a), "invariant violated");
}

}  // namespace
}  // namespace omnibus
