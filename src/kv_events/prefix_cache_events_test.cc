// The events PrefixCache records: one per change of its key set (stored,
// removed, one for a clear), none for a duplicate, merged runs, and a random
// workload whose replayed events give exactly the cache's keys.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_events.h"
#include "kv/prefix_cache.h"

namespace omnibus {
namespace {

constexpr int32_t kBlock = 4;

TokenView view(const std::vector<int32_t>& t) { return TokenView{t, {}}; }

// The key set a subscriber rebuilds from the events.
void replay(std::set<uint64_t>& keys, const std::vector<KvEvent>& events) {
  for (const KvEvent& e : events) {
    if (const auto* s = std::get_if<KvBlockStored>(&e)) {
      for (uint64_t k : s->block_hashes)
        EXPECT_TRUE(keys.insert(k).second) << "stored twice: " << k;
    } else if (const auto* r = std::get_if<KvBlockRemoved>(&e)) {
      for (uint64_t k : r->block_hashes) EXPECT_EQ(keys.erase(k), 1u) << "removed, not held: " << k;
    } else {
      keys.clear();
    }
  }
}

TEST(PrefixCacheEvents, ARunOfBlocksIsOneStoredEventWithItsParentAndTokens) {
  PrefixCache c(8, kBlock);
  KvEventRecorder rec;
  c.set_event_recorder(&rec);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<uint64_t> keys;
  c.extend_keys(view(t), 2, keys);
  ASSERT_EQ(c.insert(3, keys[0], view(t), 0, {}), 3);
  ASSERT_EQ(c.insert(5, keys[1], view(t), 1, c.ref_of(3)), 5);
  std::vector<KvEvent> ev = rec.take();
  ASSERT_EQ(ev.size(), 1u);
  const auto& s = std::get<KvBlockStored>(ev[0]);
  EXPECT_EQ(s.block_hashes, keys);
  EXPECT_FALSE(s.parent_block_hash.has_value());
  EXPECT_EQ(s.token_ids, std::vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(s.block_size, kBlock);
  EXPECT_TRUE(rec.empty());

  // A later block after block 1: its own event, parented on keys[1].
  const std::vector<int32_t> u = {1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23};
  std::vector<uint64_t> ukeys;
  c.extend_keys(view(u), 3, ukeys);
  ASSERT_EQ(c.insert(6, ukeys[2], view(u), 2, c.ref_of(5)), 6);
  ev = rec.take();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(std::get<KvBlockStored>(ev[0]).parent_block_hash, std::optional<uint64_t>(keys[1]));
  EXPECT_EQ(std::get<KvBlockStored>(ev[0]).token_ids, std::vector<int32_t>({20, 21, 22, 23}));
}

TEST(PrefixCacheEvents, ADuplicateRecordsNothingAndEvictionRecordsARemoval) {
  PrefixCache c(8, kBlock);
  KvEventRecorder rec;
  c.set_event_recorder(&rec);
  const std::vector<int32_t> t = {1, 2, 3, 4};
  std::vector<uint64_t> keys;
  c.extend_keys(view(t), 1, keys);
  ASSERT_EQ(c.insert(0, keys[0], view(t), 0, {}), 0);
  rec.take();
  EXPECT_EQ(c.insert(1, keys[0], view(t), 0, {}), 0);  // computed twice: the first one stays
  EXPECT_TRUE(rec.empty());
  c.evict(1);  // never registered
  EXPECT_TRUE(rec.empty());
  c.evict(0);
  std::vector<KvEvent> ev = rec.take();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(std::get<KvBlockRemoved>(ev[0]).block_hashes, keys);
}

TEST(PrefixCacheEvents, AStaleEntryReplacedIsRemovedThenStored) {
  PrefixCache c(8, kBlock);
  KvEventRecorder rec;
  c.set_event_recorder(&rec);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint64_t> keys;
  c.extend_keys(view(t), 2, keys);
  c.insert(0, keys[0], view(t), 0, {});
  c.insert(1, keys[1], view(t), 1, c.ref_of(0));
  c.evict(0);  // block 1 stays registered, stale (its parent is gone)
  c.insert(2, keys[0], view(t), 0, {});
  c.insert(3, keys[1], view(t), 1, c.ref_of(2));  // replaces block 1's entry
  std::set<uint64_t> set;
  std::vector<KvEvent> ev = rec.take();
  replay(set, ev);
  EXPECT_EQ(set, std::set<uint64_t>(keys.begin(), keys.end()));
  EXPECT_EQ(int32_t(set.size()), c.n_cached());
  ASSERT_GE(ev.size(), 4u);
  EXPECT_TRUE(std::holds_alternative<KvBlockRemoved>(ev[ev.size() - 2]));
  EXPECT_EQ(std::get<KvBlockStored>(ev.back()).parent_block_hash, std::optional<uint64_t>(keys[0]));
}

TEST(PrefixCacheEvents, ClearIsOneAllBlocksClearedAndOnlyWhenSomethingWasCached) {
  PrefixCache c(8, kBlock);
  KvEventRecorder rec;
  c.set_event_recorder(&rec);
  c.clear();
  EXPECT_TRUE(rec.empty());  // nothing cached: no change
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<uint64_t> keys;
  c.extend_keys(view(t), 3, keys);
  c.insert(0, keys[0], view(t), 0, {});
  c.insert(1, keys[1], view(t), 1, c.ref_of(0));
  c.insert(2, keys[2], view(t), 2, c.ref_of(1));
  c.clear();
  std::vector<KvEvent> ev = rec.take();
  ASSERT_EQ(ev.size(), 2u);  // the stored run, then one clear (no removal per block)
  EXPECT_TRUE(std::holds_alternative<KvBlockStored>(ev[0]));
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(ev[1]));
  std::set<uint64_t> set = {42};
  replay(set, ev);
  EXPECT_TRUE(set.empty());
  EXPECT_EQ(c.n_cached(), 0);
  // Evicting a block that was cleared records nothing; re-registering stores again.
  c.evict(1);
  EXPECT_TRUE(rec.empty());
  c.insert(3, keys[0], view(t), 0, {});
  ev = rec.take();
  replay(set, ev);
  EXPECT_EQ(set, std::set<uint64_t>({keys[0]}));
  c.check_integrity();
}

TEST(PrefixCacheEvents, NoRecorderNoEvents) {
  PrefixCache c(2, kBlock);
  KvEventRecorder rec;
  const std::vector<int32_t> t = {1, 2, 3, 4};
  std::vector<uint64_t> keys;
  c.extend_keys(view(t), 1, keys);
  c.insert(0, keys[0], view(t), 0, {});
  c.set_event_recorder(&rec);
  c.set_event_recorder(nullptr);
  c.evict(0);
  EXPECT_TRUE(rec.empty());
}

// Prompts from a few shared prefixes through a pool too small to keep them:
// registrations, hits, evictions. After each step the replayed set has the
// cache's size, and holds the keys of every block the last run matched.
TEST(PrefixCacheEvents, ReplayedEventsFollowARandomWorkload) {
  KvCacheManager m(12, kBlock, true);
  KvEventRecorder rec;
  m.set_event_recorder(&rec);
  std::mt19937 rng(7);
  std::set<uint64_t> set;
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<int32_t> tokens;
    const int32_t prefix = int32_t(rng() % 4);
    const int32_t n = 5 + int32_t(rng() % 20);
    for (int32_t i = 0; i < n; ++i) tokens.push_back(i < 9 ? prefix * 100 + i : int32_t(rng() % 3));
    std::vector<uint64_t> keys;
    PrefixMatch match;
    m.match_prefix(view(tokens), (n - 1) / kBlock, keys, match);
    const int32_t seq = m.add_seq();
    m.attach_prefix(seq, match);
    std::vector<BlockCopy> copies;
    if (!m.allocate_slots(seq, n - m.n_tokens(seq), copies)) {
      m.free(seq);
      continue;
    }
    m.cache_full_blocks(seq, view(tokens), n, keys);
    replay(set, rec.take());
    ASSERT_EQ(int32_t(set.size()), m.n_cached_blocks()) << "iteration " << iter;
    const std::vector<uint64_t> cached = m.cached_block_keys();
    ASSERT_EQ(set, std::set<uint64_t>(cached.begin(), cached.end())) << "iteration " << iter;
    if (iter % 97 == 96) {  // now and then a flush, between sequences
      m.free(seq);
      m.clear_prefix_cache();
      replay(set, rec.take());
      ASSERT_TRUE(set.empty());
      continue;
    }
    for (int32_t b = 0; b < match.n_blocks(); ++b) EXPECT_TRUE(set.count(keys[size_t(b)])) << iter;
    m.free(seq);
    m.check_integrity();
  }
}

}  // namespace
}  // namespace omnibus
