// Prefix caching through KvCacheManager: hit, partial hit, miss, LRU
// eviction order, a block shared by many sequences, freeing one of them,
// forced hash collisions, and staleness after a parent's eviction.
#include "kv/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace omnibus {
namespace {

constexpr int32_t kBlock = 4;

TokenView view(const std::vector<int32_t>& t, uint64_t root = PrefixCache::kRootKey) {
  return TokenView{t, {}, root};
}

// A sequence as the engine drives one: look up the cache, attach the match,
// allocate the rest, "compute" everything and register the full blocks.
struct SeqRun {
  int32_t seq = -1;
  int32_t n_matched = 0;  // blocks
  std::vector<int32_t> table;
};

SeqRun run(KvCacheManager& m, const std::vector<int32_t>& tokens,
           uint64_t root = PrefixCache::kRootKey) {
  std::vector<uint64_t> keys;
  PrefixMatch match;
  m.match_prefix(view(tokens, root), (int32_t(tokens.size()) - 1) / kBlock, keys, match);
  SeqRun r;
  r.n_matched = match.n_blocks();
  r.seq = m.add_seq();
  m.attach_prefix(r.seq, match);
  std::vector<BlockCopy> copies;
  EXPECT_TRUE(m.allocate_slots(r.seq, int32_t(tokens.size()) - m.n_tokens(r.seq), copies));
  EXPECT_TRUE(copies.empty());
  m.cache_full_blocks(r.seq, view(tokens, root), int32_t(tokens.size()), keys);
  r.table.assign(m.block_table(r.seq).begin(), m.block_table(r.seq).end());
  m.check_integrity();
  return r;
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = start + i;
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixCache, FullHitReusesEveryBlockButTheLastToken) {
  KvCacheManager m(16, kBlock, true);
  const std::vector<int32_t> p = iota_tokens(12, 100);  // 3 full blocks
  const SeqRun a = run(m, p);
  EXPECT_EQ(a.n_matched, 0);
  EXPECT_EQ(m.n_cached_blocks(), 3);
  const SeqRun b = run(m, p);
  // At most (12 - 1) / 4 = 2 blocks: the last token is always computed.
  EXPECT_EQ(b.n_matched, 2);
  EXPECT_EQ(b.table[0], a.table[0]);
  EXPECT_EQ(b.table[1], a.table[1]);
  EXPECT_NE(b.table[2], a.table[2]);
  EXPECT_EQ(m.n_used_blocks(), 4);
  // A longer prompt with the same beginning gets all three.
  const SeqRun c = run(m, concat(p, {1, 2}));
  EXPECT_EQ(c.n_matched, 3);
  EXPECT_EQ(c.table[2], a.table[2]);
}

TEST(PrefixCache, PartialHitStopsAtTheFirstDifferentBlock) {
  KvCacheManager m(16, kBlock, true);
  const std::vector<int32_t> p = iota_tokens(16, 0);
  const SeqRun a = run(m, p);
  std::vector<int32_t> q = p;
  q[9] = 999;  // third block differs
  const SeqRun b = run(m, q);
  EXPECT_EQ(b.n_matched, 2);
  EXPECT_EQ(b.table[1], a.table[1]);
  EXPECT_NE(b.table[2], a.table[2]);
  // Same third block's tokens after a different second block: no hit past it.
  std::vector<int32_t> r = p;
  r[5] = 999;
  const SeqRun c = run(m, r);
  EXPECT_EQ(c.n_matched, 1);
}

TEST(PrefixCache, MissWhenTheFirstBlockDiffersOrCachingIsOff) {
  KvCacheManager m(16, kBlock, true);
  run(m, iota_tokens(9, 0));
  EXPECT_EQ(run(m, iota_tokens(9, 1)).n_matched, 0);
  KvCacheManager off(16, kBlock, false);
  run(off, iota_tokens(9, 0));
  EXPECT_EQ(off.n_cached_blocks(), 0);
  EXPECT_EQ(run(off, iota_tokens(9, 0)).n_matched, 0);
}

TEST(PrefixCache, FreedBlocksStayCachedAndCountAsFree) {
  KvCacheManager m(4, kBlock, true);
  const std::vector<int32_t> p = iota_tokens(9, 0);  // 2 full blocks + 1 token
  const SeqRun a = run(m, p);
  m.free(a.seq);
  EXPECT_EQ(m.n_free_blocks(), 4);
  EXPECT_EQ(m.n_cached_blocks(), 2);
  std::vector<uint64_t> keys;
  PrefixMatch match;
  m.match_prefix(view(p), 2, keys, match);
  EXPECT_EQ(match.n_blocks(), 2);
  EXPECT_EQ(match.n_free, 2);
  EXPECT_EQ(m.num_blocks_needed(match, 1), 3);  // two taken back from the free list + one new
  const SeqRun b = run(m, p);
  EXPECT_EQ(b.n_matched, 2);
  EXPECT_EQ(m.n_free_blocks(), 1);
}

TEST(PrefixCache, EvictsTheLeastRecentlyFreedFirst) {
  KvCacheManager m(6, kBlock, true);
  const std::vector<int32_t> x = iota_tokens(8, 0);    // 2 blocks
  const std::vector<int32_t> y = iota_tokens(8, 100);  // 2 blocks
  const SeqRun a = run(m, x);
  const SeqRun b = run(m, y);
  m.free(a.seq);  // x's blocks freed first: least recently used
  m.free(b.seq);
  EXPECT_EQ(m.n_cached_blocks(), 4);
  // 4 new blocks: the 2 never-used blocks, then x's blocks (tail first).
  const SeqRun c = run(m, iota_tokens(16, 500));
  EXPECT_EQ(c.n_matched, 0);
  EXPECT_EQ(c.table[2], a.table[1]);  // a freed its tail before its head
  EXPECT_EQ(c.table[3], a.table[0]);
  m.free(c.seq);
  // y is still cached, x is gone (c's blocks became cached in its place).
  const SeqRun y_again = run(m, concat(y, {1}));
  EXPECT_EQ(y_again.n_matched, 2);
  m.free(y_again.seq);
  EXPECT_EQ(run(m, concat(x, {1})).n_matched, 0);
}

TEST(PrefixCache, ABlockSharedByManySequencesAndOneFreed) {
  KvCacheManager m(32, kBlock, true);
  const std::vector<int32_t> prefix = iota_tokens(8, 0);
  const SeqRun first = run(m, concat(prefix, {1}));
  std::vector<SeqRun> runs;
  for (int32_t i = 0; i < 8; ++i) runs.push_back(run(m, concat(prefix, {10 + i, 20, 30})));
  for (const SeqRun& r : runs) {
    EXPECT_EQ(r.n_matched, 2);
    EXPECT_EQ(r.table[0], first.table[0]);
    EXPECT_EQ(r.table[1], first.table[1]);
  }
  // first + 8 sequences hold the two prefix blocks; each has one block of its own.
  EXPECT_EQ(m.n_used_blocks(), 2 + 1 + 8);
  // Freeing ("aborting") one holder leaves the shared blocks to the others.
  m.free(runs[3].seq);
  m.check_integrity();
  EXPECT_EQ(m.n_used_blocks(), 2 + 1 + 7);
  m.free(first.seq);
  EXPECT_EQ(m.n_used_blocks(), 2 + 7);
  EXPECT_EQ(run(m, concat(prefix, {7})).n_matched, 2);
}

TEST(PrefixCache, ForcedCollisionsNeverReturnAWrongBlock) {
  for (uint64_t mask : {uint64_t(0), uint64_t(1), uint64_t(3)}) {
    KvCacheManager m(256, kBlock, true);
    m.set_key_mask_for_testing(mask);
    const std::vector<int32_t> p = iota_tokens(12, 0);
    const SeqRun a = run(m, p);
    // Same second block after a different first block: same key under mask 0,
    // and same block tokens: must still miss.
    std::vector<int32_t> q = p;
    q[0] = 77;
    const SeqRun b = run(m, q);
    EXPECT_EQ(b.n_matched, 0) << "mask " << mask;
    // Different tokens, colliding keys: miss.
    const SeqRun c = run(m, iota_tokens(12, 1000));
    EXPECT_EQ(c.n_matched, 0) << "mask " << mask;
    // Whatever is found is exactly the right content.
    for (int32_t k = 0; k < 20; ++k) {
      std::vector<int32_t> t = iota_tokens(12, 0);
      if (k % 2) t[size_t(4 + k % 8)] = k;
      const SeqRun r = run(m, concat(t, {k}));
      for (int32_t i = 0; i < r.n_matched; ++i) {
        for (int32_t j = 0; j < (i + 1) * kBlock; ++j) ASSERT_EQ(t[size_t(j)], p[size_t(j)]);
      }
      if (k % 3 == 0) m.free(r.seq);
    }
  }
}

// cache_salt: tenants with different salts never share a block, even when
// every key collides (the root is checked, not only hashed in); one tenant's
// repeats still hit.
TEST(PrefixCache, SaltsSeparateTenants) {
  EXPECT_EQ(PrefixCache::root_key(""), PrefixCache::kRootKey);
  EXPECT_NE(PrefixCache::root_key("a"), PrefixCache::kRootKey);
  EXPECT_NE(PrefixCache::root_key("a"), PrefixCache::root_key("b"));
  for (uint64_t mask : {~uint64_t(0), uint64_t(0)}) {
    KvCacheManager m(256, kBlock, true);
    m.set_key_mask_for_testing(mask);
    const uint64_t ra = PrefixCache::root_key("tenant-a"), rb = PrefixCache::root_key("tenant-b");
    const std::vector<int32_t> secret = concat(iota_tokens(12, 0), {99});
    const SeqRun a = run(m, secret, ra);
    EXPECT_EQ(a.n_matched, 0);
    EXPECT_EQ(run(m, secret, rb).n_matched, 0)
        << "mask " << mask << ": tenant b saw tenant a's blocks";
    EXPECT_EQ(run(m, secret).n_matched, 0) << "mask " << mask << ": an unsalted request saw them";
    if (mask != 0) {
      EXPECT_EQ(run(m, secret, ra).n_matched, 3) << "tenant a's own repeat hits";
    }
  }
}

TEST(PrefixCache, SuccessorsOfAnEvictedBlockNoLongerMatch) {
  PrefixCache c(8, kBlock);
  const std::vector<int32_t> p = iota_tokens(12, 0);
  std::vector<uint64_t> keys;
  c.extend_keys(view(p), 3, keys);
  ASSERT_EQ(c.insert(0, keys[0], view(p), 0, {}), 0);
  ASSERT_EQ(c.insert(1, keys[1], view(p), 1, c.ref_of(0)), 1);
  ASSERT_EQ(c.insert(2, keys[2], view(p), 2, c.ref_of(1)), 2);
  EXPECT_EQ(c.find(keys[2], view(p), 2, c.ref_of(1)), 2);
  c.evict(1);  // the pool reuses block 1 for something else
  c.check_integrity();
  EXPECT_EQ(c.find(keys[1], view(p), 1, c.ref_of(0)), -1);
  // Block 3 computes position 1 again: block 2 is not its successor.
  ASSERT_EQ(c.insert(3, keys[1], view(p), 1, c.ref_of(0)), 3);
  EXPECT_EQ(c.find(keys[2], view(p), 2, c.ref_of(3)), -1);
  // Nor does the old identity of block 1 verify after its reuse.
  EXPECT_EQ(c.find(keys[2], view(p), 2, PrefixCache::BlockRef{1, 0}), -1);
  // A new position-2 block replaces the stale entry.
  EXPECT_EQ(c.insert(4, keys[2], view(p), 2, c.ref_of(3)), 4);
  EXPECT_FALSE(c.is_cached(2));
  EXPECT_EQ(c.find(keys[2], view(p), 2, c.ref_of(3)), 4);
  c.check_integrity();
}

TEST(PrefixCache, DuplicateComputationsShareOneEntry) {
  KvCacheManager m(16, kBlock, true);
  const std::vector<int32_t> p = iota_tokens(9, 0);
  // Two sequences admitted together both compute the prefix.
  std::vector<uint64_t> ka, kb;
  std::vector<BlockCopy> copies;
  const int32_t a = m.add_seq();
  const int32_t b = m.add_seq();
  ASSERT_TRUE(m.allocate_slots(a, 9, copies));
  ASSERT_TRUE(m.allocate_slots(b, 9, copies));
  m.cache_full_blocks(a, view(p), 9, ka);
  m.cache_full_blocks(b, view(p), 9, kb);
  EXPECT_EQ(m.n_cached_blocks(), 2);  // b's copies are duplicates
  m.check_integrity();
  // b goes on past the prefix: its next block chains to a's canonical blocks.
  ASSERT_TRUE(m.allocate_slots(b, 4, copies));
  std::vector<int32_t> bt = concat(p, {1, 2, 3, 4});
  m.cache_full_blocks(b, view(bt), 13, kb);
  EXPECT_EQ(m.n_cached_blocks(), 3);
  m.free(b);
  EXPECT_EQ(run(m, concat(bt, {0})).n_matched, 3);
  m.free(a);
  m.check_integrity();
}

TEST(PrefixCache, KeysSpanPromptAndOutput) {
  PrefixCache c(4, kBlock);
  const std::vector<int32_t> all = iota_tokens(12, 0);
  const std::vector<int32_t> head(all.begin(), all.begin() + 6), tail(all.begin() + 6, all.end());
  std::vector<uint64_t> split, whole;
  c.extend_keys(TokenView{head, tail}, 3, split);
  c.extend_keys(view(all), 3, whole);
  EXPECT_EQ(split, whole);
  EXPECT_NE(whole[0], whole[1]);
}

// KvCache cuts hits back (kivi2's fp16 window: KvStorage::usable_prefix):
// the match keeps the allowed leading blocks, and n_free counts only those.
TEST(PrefixCache, TruncateMatchCutsTheHitBack) {
  KvCacheManager m(16, kBlock, true);
  const std::vector<int32_t> p = iota_tokens(17, 100);  // 4 full blocks + 1
  const SeqRun a = run(m, p);
  m.free(a.seq);  // its blocks are free but cached
  std::vector<uint64_t> keys;
  PrefixMatch match;
  m.match_prefix(view(p), 4, keys, match);
  EXPECT_EQ(match.blocks, std::vector<int32_t>(a.table.begin(), a.table.begin() + 4));
  EXPECT_EQ(match.n_free, 4);
  m.truncate_match(match, 2);
  EXPECT_EQ(match.blocks, std::vector<int32_t>(a.table.begin(), a.table.begin() + 2));
  EXPECT_EQ(match.n_free, 2);
  m.truncate_match(match, 0);
  EXPECT_EQ(match.n_blocks(), 0);
  EXPECT_EQ(match.n_free, 0);
}

// A flush drops every entry, held or free; what was cached is computed again
// afterwards (and cached again), and the key set tracks exactly the entries.
TEST(PrefixCache, ClearDropsEveryEntryAndKeysListsThem) {
  KvCacheManager m(16, kBlock, true);
  const std::vector<int32_t> p = iota_tokens(12, 100);  // 3 full blocks
  const SeqRun a = run(m, p);
  const SeqRun held = run(m, iota_tokens(9, 500));  // 2 full blocks, still held
  m.free(a.seq);
  EXPECT_EQ(m.n_cached_blocks(), 5);
  EXPECT_EQ(m.cached_block_keys().size(), 5u);

  m.clear_prefix_cache();
  m.check_integrity();
  EXPECT_EQ(m.n_cached_blocks(), 0);
  EXPECT_TRUE(m.cached_block_keys().empty());
  EXPECT_EQ(m.block_table(held.seq).size(), 3u);  // the holder keeps its blocks

  const SeqRun again = run(m, p);
  EXPECT_EQ(again.n_matched, 0);  // computed again
  EXPECT_EQ(m.n_cached_blocks(), 3);
  std::vector<uint64_t> keys;
  m.extend_keys(view(p), 3, keys);
  std::vector<uint64_t> listed = m.cached_block_keys();
  std::sort(listed.begin(), listed.end());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(listed, keys);
  m.free(again.seq);
  m.free(held.seq);
  m.check_integrity();
}

// The eviction sink sees each registered block the pool reuses, as it was
// registered: its key, its parent's key (the root for block 0) and tokens.
TEST(PrefixCache, EvictionSinkRecordsKeyParentAndTokens) {
  KvCacheManager m(3, kBlock, true);
  std::vector<PrefixCache::Evicted> evicted;
  m.set_eviction_sink(&evicted);
  const std::vector<int32_t> p = iota_tokens(9, 100);  // 2 full blocks + 1 token
  const SeqRun a = run(m, p);
  std::vector<uint64_t> keys;
  m.extend_keys(view(p), 2, keys);
  m.free(a.seq);
  EXPECT_TRUE(evicted.empty());
  run(m, iota_tokens(9, 500));  // takes all 3 blocks: both cached ones go
  ASSERT_EQ(evicted.size(), 2u);
  std::sort(evicted.begin(), evicted.end(),
            [&](const auto& x, const auto& y) { return x.key == keys[0] && y.key != keys[0]; });
  EXPECT_EQ(evicted[0].key, keys[0]);
  EXPECT_EQ(evicted[0].parent_key, PrefixCache::kRootKey);
  EXPECT_EQ(evicted[0].tokens, iota_tokens(4, 100));
  EXPECT_EQ(evicted[0].block, a.table[0]);
  EXPECT_EQ(evicted[1].key, keys[1]);
  EXPECT_EQ(evicted[1].parent_key, keys[0]);
  EXPECT_EQ(evicted[1].tokens, iota_tokens(4, 104));
  EXPECT_EQ(evicted[1].block, a.table[1]);
}

}  // namespace
}  // namespace omnibus
