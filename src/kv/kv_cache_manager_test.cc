#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <vector>

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

// Speculative decoding's roll-back: the slots of rejected draft tokens go,
// blocks wholly past the kept ones return to the pool, and the sequence
// grows again from there as if they had never been allocated.
TEST(KvCacheManager, TruncateReleasesTheBlocksPastTheKeptSlots) {
  KvCacheManager m(8, 4);
  std::vector<BlockCopy> copies;
  const int32_t s = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(s, 6, copies));  // 2 blocks
  ASSERT_TRUE(m.allocate_slots(s, 5, copies));  // 11 slots, 3 blocks: 5 drafts
  ASSERT_EQ(m.n_used_blocks(), 3);
  m.truncate(s, 7);  // 1 draft kept
  EXPECT_EQ(m.n_tokens(s), 7);
  EXPECT_EQ(m.block_table(s).size(), 2u);
  EXPECT_EQ(m.n_free_blocks(), 6);
  m.check_integrity();
  m.truncate(s, 7);  // nothing to drop
  EXPECT_EQ(m.n_tokens(s), 7);
  ASSERT_TRUE(m.allocate_slots(s, 2, copies));
  EXPECT_EQ(m.block_table(s).size(), 3u);
  EXPECT_TRUE(copies.empty());
  m.check_integrity();
  m.free(s);
  EXPECT_EQ(m.n_free_blocks(), 8);
}

TEST(KvCacheManager, TruncateKeepsWhatAForkShares) {
  KvCacheManager m(8, 4);
  std::vector<BlockCopy> copies;
  const int32_t parent = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(parent, 6, copies));
  const int32_t child = m.fork(parent);
  ASSERT_TRUE(m.allocate_slots(child, 4, copies));  // copy-on-write of block 1, then block 2
  ASSERT_EQ(copies.size(), 1u);
  m.truncate(child, 6);  // back to the shared length: its own copy of block 1 stays
  EXPECT_EQ(m.block_table(child).size(), 2u);
  EXPECT_EQ(m.block_table(child)[0], m.block_table(parent)[0]);
  EXPECT_NE(m.block_table(child)[1], m.block_table(parent)[1]);
  m.check_integrity();
  m.free(child);
  m.free(parent);
  EXPECT_EQ(m.n_free_blocks(), 8);
}

TEST(KvCacheManagerDeathTest, TruncatingIntoCachedBlocksAborts) {
  KvCacheManager m(8, 4, /*enable_prefix_caching=*/true);
  std::vector<BlockCopy> copies;
  std::vector<uint64_t> keys;
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const int32_t s = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(s, 9, copies));
  m.cache_full_blocks(s, TokenView{tokens, {}}, 9, keys);  // blocks 0 and 1 registered
  m.truncate(s, 8);
  EXPECT_DEATH(m.truncate(s, 7), "");
}

}  // namespace
}  // namespace omnibus

// --- layer groups (sliding-window KV) ---

namespace omnibus {
namespace {

std::vector<int32_t> table_of(const KvCacheManager& m, int32_t seq, int32_t group) {
  const std::span<const int32_t> t = m.block_table(seq, group);
  return std::vector<int32_t>(t.begin(), t.end());
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = first + i;
  return t;
}

// A sequence computed over `tokens` in one step: allocate, commit, slide.
int32_t compute(KvCacheManager& m, const std::vector<int32_t>& tokens) {
  std::vector<BlockCopy> copies;
  std::vector<uint64_t> keys;
  const int32_t s = m.add_seq();
  EXPECT_TRUE(m.allocate_slots(s, int32_t(tokens.size()), copies));
  m.cache_full_blocks(s, TokenView{tokens, {}}, int32_t(tokens.size()), keys);
  m.slide(s, int32_t(tokens.size()));
  m.check_integrity();
  return s;
}

// The blocks a new sequence over `tokens` would start with (match_prefix as
// the scheduler calls it: at least one token left to compute).
PrefixMatch match(const KvCacheManager& m, const std::vector<int32_t>& tokens) {
  PrefixMatch out;
  std::vector<uint64_t> keys;
  m.match_prefix(TokenView{tokens, {}}, (int32_t(tokens.size()) - 1) / m.block_size(), keys, out);
  return out;
}

TEST(KvCacheManagerGroups, SlidingTablesLetGoOfBlocksOutsideEveryWindow) {
  KvCacheManager m(32, 4, false, 3, 8);
  std::vector<BlockCopy> copies;
  const int32_t s = m.add_seq();
  ASSERT_EQ(m.num_blocks_needed(s, 14), 3 * 4);
  ASSERT_TRUE(m.allocate_slots(s, 14, copies));
  EXPECT_EQ(m.n_used_blocks(), 12);
  // The next token (14) sees 7..14: block 0 (0..3) is outside, block 1 (4..7) is not.
  m.slide(s, 14);
  for (int32_t g : {1, 2}) {
    const std::vector<int32_t> t = table_of(m, s, g);
    ASSERT_EQ(t.size(), 4u);
    EXPECT_EQ(t[0], kNoBlock);
    for (size_t j = 1; j < 4; ++j) EXPECT_NE(t[j], kNoBlock);
  }
  EXPECT_EQ(m.n_used_blocks(), 4 + 3 + 3);
  m.check_integrity();
  // Every group's blocks are its own.
  std::vector<int32_t> all;
  for (int32_t g = 0; g < 3; ++g) {
    for (int32_t b : table_of(m, s, g)) {
      if (b != kNoBlock) all.push_back(b);
    }
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());

  ASSERT_TRUE(m.allocate_slots(s, 1, copies));  // token 14 (block 3 has room)
  EXPECT_EQ(m.n_used_blocks(), 10);
  m.slide(s, 15);  // token 15 sees 8..15: block 1 goes
  EXPECT_EQ(table_of(m, s, 1)[1], kNoBlock);
  EXPECT_EQ(m.n_used_blocks(), 4 + 2 + 2);
  // Sliding again to the same point changes nothing.
  m.slide(s, 15);
  EXPECT_EQ(m.n_used_blocks(), 8);
  m.check_integrity();
  m.free(s);
  EXPECT_EQ(m.n_free_blocks(), 32);
  m.check_integrity();
}

TEST(KvCacheManagerGroups, TruncateCutsEveryGroup) {
  KvCacheManager m(32, 4, false, 3, 8);
  std::vector<BlockCopy> copies;
  const int32_t s = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(s, 14, copies));
  m.slide(s, 13);
  ASSERT_TRUE(m.allocate_slots(s, 4, copies));  // 18 slots: a fifth block position
  EXPECT_EQ(m.n_used_blocks(), 5 + 4 + 4);
  m.truncate(s, 14);
  for (int32_t g = 0; g < 3; ++g) EXPECT_EQ(table_of(m, s, g).size(), 4u);
  EXPECT_EQ(m.n_used_blocks(), 4 + 3 + 3);
  m.check_integrity();
  m.free(s);
  EXPECT_EQ(m.n_free_blocks(), 32);
}

TEST(KvCacheManagerGroups, GrowthCountsEveryGroup) {
  KvCacheManager m(32, 4, false, 3, 8);
  std::vector<BlockCopy> copies;
  const int32_t s = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(s, 5, copies));  // 2 blocks per group, 3 slots open
  EXPECT_EQ(m.num_blocks_needed(s, 3), 0);
  EXPECT_EQ(m.num_blocks_needed(s, 4), 3);
  EXPECT_EQ(m.max_new_slots(s, 5), 3 + 4);  // a new block position costs 3 blocks
  EXPECT_EQ(m.max_new_slots(s, 2), 3);
  EXPECT_DOUBLE_EQ(m.n_unfilled_slots(), 3.0 * 3);
}

TEST(KvCacheManagerGroups, ForkCopiesOnWriteInEveryGroup) {
  KvCacheManager m(16, 4, false, 2, 8);
  std::vector<BlockCopy> copies;
  const int32_t parent = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(parent, 6, copies));
  const int32_t child = m.fork(parent);
  EXPECT_EQ(table_of(m, child, 1), table_of(m, parent, 1));
  EXPECT_EQ(m.n_used_blocks(), 4);
  EXPECT_EQ(m.num_blocks_needed(child, 1), 2);
  EXPECT_EQ(m.max_new_slots(child, 1), 0);  // the two copies do not fit in one block
  ASSERT_TRUE(m.allocate_slots(child, 1, copies));
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].src, table_of(m, parent, 0)[1]);
  EXPECT_EQ(copies[1].src, table_of(m, parent, 1)[1]);
  EXPECT_EQ(copies[1].dst, table_of(m, child, 1)[1]);
  m.check_integrity();
  // Sliding in one leaves the other's blocks alone.
  ASSERT_TRUE(m.allocate_slots(child, 8, copies));
  m.slide(child, 15);
  EXPECT_EQ(table_of(m, child, 1)[0], kNoBlock);
  EXPECT_NE(table_of(m, parent, 1)[0], kNoBlock);
  m.check_integrity();
  m.free(parent);
  m.free(child);
  EXPECT_EQ(m.n_free_blocks(), 16);
  m.check_integrity();
}

TEST(KvCacheManagerGroups, BlocksLetGoStayCachedAndServeHits) {
  KvCacheManager m(32, 4, true, 3, 8);
  const std::vector<int32_t> t = iota_tokens(16);
  const int32_t a = compute(m, t);  // the next token (16) sees 9..16: blocks 0, 1 let go
  const std::vector<int32_t> a1 = table_of(m, a, 1);
  EXPECT_EQ(a1[0], kNoBlock);
  EXPECT_EQ(a1[1], kNoBlock);
  m.free(a);
  m.check_integrity();

  // The same 16 tokens and more: all four blocks, and per sliding group the
  // window of token 16 (positions 9..15: blocks 2, 3).
  std::vector<int32_t> b_tokens = t;
  b_tokens.insert(b_tokens.end(), {90, 91, 92});
  PrefixMatch mb = match(m, b_tokens);
  EXPECT_EQ(mb.n_blocks(), 4);
  EXPECT_EQ(mb.window_first, 2);
  ASSERT_EQ(mb.window.size(), 4u);
  EXPECT_EQ(mb.window[0], a1[2]);
  EXPECT_EQ(mb.window[1], a1[3]);
  EXPECT_EQ(mb.n_free, 4 + 4);

  // Only the first 12 tokens shared: 3 blocks; token 12 sees 5..12: blocks
  // 1 and 2, and block 1 was let go by `a` but is still cached.
  std::vector<int32_t> c_tokens(t.begin(), t.begin() + 12);
  c_tokens.insert(c_tokens.end(), {70, 71, 72, 73, 74});
  const PrefixMatch mc = match(m, c_tokens);
  EXPECT_EQ(mc.n_blocks(), 3);
  EXPECT_EQ(mc.window_first, 1);

  // Attach b's hit: the tables start with the matched blocks.
  const int32_t b = m.add_seq();
  m.attach_prefix(b, mb);
  EXPECT_EQ(m.n_tokens(b), 16);
  EXPECT_EQ(table_of(m, b, 1), (std::vector<int32_t>{kNoBlock, kNoBlock, a1[2], a1[3]}));
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.allocate_slots(b, 3, copies));
  m.check_integrity();
  m.free(b);
  m.check_integrity();
}

TEST(KvCacheManagerGroups, AHitNeedsEverySlidingGroupsWindow) {
  KvCacheManager m(32, 4, true, 3, 8);
  const std::vector<int32_t> t = iota_tokens(16);
  m.free(compute(m, t));  // 12 blocks cached; 20 never used
  std::vector<int32_t> b_tokens = t;
  b_tokens.push_back(99);
  std::vector<int32_t> c_tokens(t.begin(), t.begin() + 12);
  c_tokens.push_back(99);
  ASSERT_EQ(match(m, b_tokens).n_blocks(), 4);
  ASSERT_EQ(match(m, c_tokens).n_blocks(), 3);

  // Allocation takes the 20 untouched blocks, then the cached ones least
  // recently freed first: the sliding groups' blocks 0 and 1 (let go while
  // `a` ran).
  std::vector<BlockCopy> copies;
  const int32_t d = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(d, 32, copies));  // 8 positions x 3 groups = 24 blocks
  m.check_integrity();
  // b's window (blocks 2, 3) is intact; c's needs block 1, gone: a shorter hit
  // would need blocks 0..1, gone too. Group 0 alone still matches 3 blocks.
  EXPECT_EQ(match(m, b_tokens).n_blocks(), 4);
  EXPECT_EQ(match(m, c_tokens).n_blocks(), 0);
  // Three more: group 1's block 3 goes, and with it every hit.
  ASSERT_TRUE(m.allocate_slots(d, 4, copies));
  EXPECT_EQ(match(m, b_tokens).n_blocks(), 0);
  m.check_integrity();
}

TEST(KvCacheManagerGroups, ClearDropsTheSlidingEntries) {
  KvCacheManager m(32, 4, true, 2, 8);
  const std::vector<int32_t> t = iota_tokens(16);
  m.free(compute(m, t));
  std::vector<int32_t> b_tokens = t;
  b_tokens.push_back(5);
  ASSERT_EQ(match(m, b_tokens).n_blocks(), 4);
  m.clear_prefix_cache();
  EXPECT_EQ(match(m, b_tokens).n_blocks(), 0);
  m.check_integrity();
  // Computed again, it is cached again.
  m.free(compute(m, t));
  EXPECT_EQ(match(m, b_tokens).n_blocks(), 4);
  m.check_integrity();
}

TEST(KvCacheManagerGroups, AfterEvictionTheSameTokensAreCachedAgain) {
  // Every cached block evicted (group 0's and the sliding group's), then the
  // same tokens computed again: both groups register anew.
  KvCacheManager m(12, 4, true, 2, 8);
  const std::vector<int32_t> t = iota_tokens(8);
  m.free(compute(m, t));  // 4 blocks cached
  std::vector<int32_t> b_tokens = t;
  b_tokens.push_back(1);
  ASSERT_EQ(match(m, b_tokens).n_blocks(), 2);
  // Evict everything: 12 blocks for a 24-token sequence of 2 groups.
  std::vector<BlockCopy> copies;
  const int32_t d = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(d, 24, copies));
  EXPECT_EQ(match(m, b_tokens).n_blocks(), 0);
  m.free(d);
  m.free(compute(m, t));
  EXPECT_EQ(match(m, b_tokens).n_blocks(), 2);
  m.check_integrity();
}

}  // namespace
}  // namespace omnibus
