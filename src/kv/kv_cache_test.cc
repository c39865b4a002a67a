#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/attention.h"

namespace omnibus {
namespace {

// kivi2 (an fp16 window of one block), 2 layers of 3 KV heads x 64, blocks of 16.
std::unique_ptr<KvCache> kivi2_cache(int slots) {
  const KvGeometry g{.n_layers = 2,
                     .n_kv_heads = 3,
                     .head_dim = 64,
                     .block_size = 16,
                     .format = KvFormat::kKivi2,
                     .kv_residual_slots = slots};
  StatusOr<std::unique_ptr<KvCache>> kv = KvCache::create(g, 8, /*enable_prefix_caching=*/true);
  EXPECT_TRUE(kv.is_ok());
  return std::move(kv).value();
}

// Runs a new sequence of `tokens` through the cache as the engine does:
// match, allocate, store every layer, commit.
int32_t run(KvCache& kv, const std::vector<int32_t>& tokens, std::vector<uint64_t>& keys) {
  const TokenView t{tokens, {}};
  PrefixMatch m;
  kv.match_prefix(t, (t.size() - 1) / kv.block_size(), keys, m);
  std::vector<BlockCopy> copies;
  const int32_t n_cached = m.n_blocks() * kv.block_size();
  const int32_t seq = kv.allocate_new(m, t.size() - n_cached, 0, copies);
  EXPECT_GE(seq, 0);
  EXPECT_TRUE(copies.empty());
  const std::vector<float> k(size_t(t.size() - n_cached) * 3 * 64, 0.5f), v(k.size(), -0.25f);
  const AttentionSeq s{0, t.size() - n_cached, n_cached, kv.block_table(seq).data(), 0};
  for (int il = 0; il < 2; ++il) kv_store(kv.storage().layer(il), &s, 1, k.data(), v.data());
  kv.commit(seq, t, t.size(), keys);
  return seq;
}

// free() lets go of the freed blocks' residual slots itself (check_integrity
// aborts if a block no table holds keeps a pinned slot), and the sealed
// blocks' window rows stay retained for a later hit.
TEST(KvCache, FreeReleasesResidualSlots) {
  std::unique_ptr<KvCache> kv = kivi2_cache(16);
  std::vector<int32_t> tokens(40);
  std::iota(tokens.begin(), tokens.end(), 100);
  std::vector<uint64_t> keys;
  const int32_t seq = run(*kv, tokens, keys);
  const std::vector<int32_t> table(kv->block_table(seq).begin(), kv->block_table(seq).end());
  ASSERT_EQ(table.size(), 3u);
  EXPECT_TRUE(kv->storage().residual_pinned(table[2]));  // the open group
  kv->check_integrity();
  kv->free(seq);
  kv->check_integrity();
  for (int32_t b : table) EXPECT_FALSE(kv->storage().residual_pinned(b)) << b;
  EXPECT_EQ(kv->n_used_blocks(), 0);
  PrefixMatch m;
  kv->match_prefix(TokenView{tokens, {}}, 2, keys, m);
  EXPECT_EQ(m.n_blocks(), 2);  // block 1's window rows were retained
}

// A hit ends only where the window's fp16 rows are still held: once another
// sequence took block 1's slot, the hit on blocks 0, 1 is cut back.
TEST(KvCache, MatchKeepsOnlyHitsWhoseWindowIsHeld) {
  std::unique_ptr<KvCache> kv = kivi2_cache(2);
  std::vector<int32_t> a(40), b(20);
  std::iota(a.begin(), a.end(), 100);
  std::iota(b.begin(), b.end(), 500);
  std::vector<uint64_t> keys_a, keys_b;
  kv->free(run(*kv, a, keys_a));
  PrefixMatch m;
  kv->match_prefix(TokenView{a, {}}, 2, keys_a, m);
  EXPECT_EQ(m.n_blocks(), 2);
  const int32_t sb = run(*kv, b, keys_b);  // takes both slots
  kv->match_prefix(TokenView{a, {}}, 2, keys_a, m);
  EXPECT_EQ(m.n_blocks(), 0);
  EXPECT_EQ(m.n_free, 0);
  kv->free(sb);
  kv->check_integrity();
}

}  // namespace
}  // namespace omnibus
