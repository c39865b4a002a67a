#include "kv/kv_storage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kv/kv_quant.h"
#include "kv/kv_quant_paged.h"

namespace omnibus {
namespace {

KvGeometry smollm_like(KvFormat t) {
  KvGeometry g;
  g.n_layers = 30;
  g.n_kv_heads = 3;
  g.head_dim = 64;
  g.block_size = 16;
  g.format = t;
  return g;
}

TEST(KvStorage, BytesPerTokenFollowTheFormat) {
  const size_t f16 = smollm_like(KvFormat::kF16).bytes_per_token();
  EXPECT_EQ(f16, 2u * 30 * 3 * 64 * 2);
  EXPECT_EQ(smollm_like(KvFormat::kF32).bytes_per_token(), 2 * f16);
  EXPECT_LT(smollm_like(KvFormat::kQ8).bytes_per_token(), f16 * 53 / 100);
  EXPECT_LT(smollm_like(KvFormat::kQ4).bytes_per_token(), f16 * 34 / 100);
  EXPECT_LE(smollm_like(KvFormat::kKivi2).bytes_per_token(), f16 / 5);
  EXPECT_EQ(smollm_like(KvFormat::kQ8).fixed_bytes(1000), 0u);
  // the KIVI formats' fp16 residual: 64 * (1 + window) slots x 30 layers x (K + V) x 3 heads x 16 rows x 64
  // x 2 bytes; the window is 1 block for kivi2, 0 for q4 by default
  const size_t slot_bytes = size_t(30) * 2 * 3 * 16 * 64 * 2;
  EXPECT_EQ(smollm_like(KvFormat::kKivi2).fixed_bytes(1000), 128 * slot_bytes);
  EXPECT_EQ(smollm_like(KvFormat::kQ4).fixed_bytes(1000), 64 * slot_bytes);
  KvGeometry g = smollm_like(KvFormat::kKivi2);
  g.kv_residual_blocks = 2;
  EXPECT_EQ(g.fixed_bytes(1000), 192 * slot_bytes);
  EXPECT_EQ(g.fixed_bytes(100), 100 * slot_bytes);  // never more slots than blocks
  g.kv_residual_slots = 10;
  EXPECT_EQ(g.fixed_bytes(1000), 10 * slot_bytes);
}

TEST(KvStorage, RejectsHeadDimTheFormatCannotHold) {
  KvGeometry g = smollm_like(KvFormat::kKivi2);
  g.head_dim = 6;
  EXPECT_FALSE(KvStorage::create(g, 4).is_ok());
  g.format = KvFormat::kQ4;
  EXPECT_TRUE(KvStorage::create(g, 4).is_ok());
}

// copy_block carries a block whole, kivi2's open group included: the copy
// reads back exactly like the source.
TEST(KvStorage, CopyBlockCopiesEveryFormat) {
  for (KvFormat t : {KvFormat::kF16, KvFormat::kQ8, KvFormat::kQ4, KvFormat::kKivi2}) {
    KvGeometry g = smollm_like(t);
    g.n_layers = 2;
    auto st = KvStorage::create(g, 6);
    ASSERT_TRUE(st.is_ok());
    KvStorage& kv = **st;
    const int n = 20;  // block 0 full, block 1 open with 4 rows
    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    std::vector<float> k(size_t(n) * 3 * 64), v(k.size());
    for (auto& x : k) x = d(rng);
    for (auto& x : v) x = d(rng);
    const std::vector<int32_t> src_table{2, 4}, dst_table{3, 5};
    AttentionSeq s{0, n, 0, src_table.data(), 0};
    for (int il = 0; il < 2; ++il) kv_store(kv.layer(il), &s, 1, k.data(), v.data());
    kv.copy_block(2, 3);
    kv.copy_block(4, 5);
    // Read as a later step would (nothing new in this call: n_past = n).
    AttentionSeq a{0, 0, n, src_table.data(), 0}, b{0, 0, n, dst_table.data(), 0};
    std::vector<float> ya(64), yb(64);
    for (int il = 0; il < 2; ++il) {
      for (int j = 0; j < n; ++j) {
        for (bool is_v : {false, true}) {
          kv_read_row(kv.layer(il), a, is_v, j, 1, n, ya.data());
          kv_read_row(kv.layer(il), b, is_v, j, 1, n, yb.data());
          ASSERT_EQ(0, std::memcmp(ya.data(), yb.data(), 64 * 4))
              << kv_format_name(t) << " j " << j;
          ASSERT_TRUE(std::isfinite(ya[0]));
        }
      }
    }
  }
}

// kivi2 with its fp16 window of one block: a prefix-cache hit on blocks
// [0, m) is usable only while block m - 1 still holds its fp16 rows in every
// layer. A long prompt chunk keeps the rows of the blocks it leaves behind in
// spare slots; with too few slots they are gone and the hit is cut back.
TEST(KvStorage, UsablePrefixNeedsTheWindowRows) {
  for (int slots : {16, 2}) {
    KvGeometry g = smollm_like(KvFormat::kKivi2);
    g.n_layers = 2;
    g.kv_residual_slots = slots;
    auto st = KvStorage::create(g, 8);
    ASSERT_TRUE(st.is_ok());
    KvStorage& kv = **st;
    const int n = 40;  // blocks 0, 1 sealed; 2 open
    std::vector<float> k(size_t(n) * 3 * 64, 0.5f), v(k.size(), -0.25f);
    const std::vector<int32_t> table{5, 1, 6};
    AttentionSeq s{0, n, 0, table.data(), 0};
    for (int il = 0; il < 2; ++il) kv_store(kv.layer(il), &s, 1, k.data(), v.data());
    const std::vector<int32_t> two{5, 1}, one{5};
    // block 1 is in the window of the sequence's next query: always held
    EXPECT_EQ(kv.usable_prefix(two), 2) << slots;
    // block 0 was left behind within the chunk: held only in a spare slot
    EXPECT_EQ(kv.usable_prefix(one), slots == 16 ? 1 : 0) << slots;
  }
  // Formats without a window take any hit.
  auto f16 = KvStorage::create(smollm_like(KvFormat::kF16), 4);
  ASSERT_TRUE(f16.is_ok());
  const std::vector<int32_t> blocks{0, 1, 2};
  EXPECT_EQ((*f16)->usable_prefix(blocks), 3);
}

// When no sequence holds a block any more (KvCache::free releases it),
// its residual slot stops being pinned: a sealed block's window rows are
// retained for a prefix-cache hit, an open block's slot is freed. Later
// sequences then claim slots without stealing from live ones.
TEST(KvStorage, ReleasedBlocksLetGoOfTheirSlots) {
  for (bool release : {false, true}) {
    KvGeometry g = smollm_like(KvFormat::kKivi2);
    g.n_layers = 2;
    g.kv_residual_slots = 2;
    auto st = KvStorage::create(g, 8);
    ASSERT_TRUE(st.is_ok());
    KvStorage& kv = **st;
    std::vector<float> k(size_t(40) * 3 * 64, 0.5f), v(k.size(), -0.25f);
    const std::vector<int32_t> a{5, 1, 6}, b{2, 3};
    AttentionSeq sa{0, 40, 0, a.data(), 0};  // blocks 5, 1 sealed (1 in the window), 6 open
    for (int il = 0; il < 2; ++il) kv_store(kv.layer(il), &sa, 1, k.data(), v.data());
    const std::vector<int32_t> hit{5, 1};
    EXPECT_EQ(kv.usable_prefix(hit), 2);
    if (release) {
      for (int32_t blk : a) kv.release_residual(blk);
    }
    EXPECT_EQ(kv.usable_prefix(hit), 2);  // retained, not dropped
    AttentionSeq sb{0, 20, 0, b.data(), 0};  // block 2 sealed in its window, 3 open: two slots
    for (int il = 0; il < 2; ++il) kv_store(kv.layer(il), &sb, 1, k.data(), v.data());
    EXPECT_EQ(kv.kivi_steals(), release ? 0u : 4u) << release;  // 2 claims x 2 layers
    EXPECT_EQ(kv.usable_prefix(hit), 0);  // block 1's rows gave way to the live sequence
  }
}

}  // namespace
}  // namespace omnibus
