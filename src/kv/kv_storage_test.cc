#include "kv/kv_storage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/thread_pool.h"
#include "kv/kv_quant.h"
#include "kv/kv_quant_kivi.h"
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
  EXPECT_EQ(smollm_like(KvFormat::kQ8).bytes_per_token(), f16 * 17 / 32);  // 34 bytes per 32 values
  EXPECT_LT(smollm_like(KvFormat::kQ4).bytes_per_token(), f16 * 34 / 100);
  EXPECT_LE(smollm_like(KvFormat::kKivi2).bytes_per_token(), f16 / 5);
  EXPECT_EQ(smollm_like(KvFormat::kQ8).fixed_bytes(1000), 0u);
  // the KIVI formats' fp16 residual: 64 * (1 + window) slots x 30 layers x (K + V) x 3 heads x 16
  // rows x 64 x 2 bytes; the window is 1 block for kivi2, 0 for q4 by default; with a window,
  // kKvTransferSlots transfer slots of window x slot_bytes more
  const size_t slot_bytes = size_t(30) * 2 * 3 * 16 * 64 * 2;
  EXPECT_EQ(smollm_like(KvFormat::kKivi2).residual_slot_bytes(), slot_bytes);
  EXPECT_EQ(smollm_like(KvFormat::kKivi2).transfer_bytes(), 16 * slot_bytes);  // 5.625 MiB
  EXPECT_EQ(smollm_like(KvFormat::kKivi2).fixed_bytes(1000), (128 + 16) * slot_bytes);
  EXPECT_EQ(smollm_like(KvFormat::kQ4).fixed_bytes(1000), 64 * slot_bytes);
  EXPECT_EQ(smollm_like(KvFormat::kQ4).transfer_bytes(), 0u);
  KvGeometry g = smollm_like(KvFormat::kKivi2);
  g.kv_residual_blocks = 2;
  EXPECT_EQ(g.fixed_bytes(1000), (192 + 32) * slot_bytes);
  EXPECT_EQ(g.fixed_bytes(100), (100 + 32) * slot_bytes);  // never more residual slots than blocks
  g.kv_residual_slots = 10;
  EXPECT_EQ(g.fixed_bytes(1000), (10 + 32) * slot_bytes);
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
    EXPECT_EQ(kv.usable_prefix(hit), 2);     // retained, not dropped
    AttentionSeq sb{0, 20, 0, b.data(), 0};  // block 2 sealed in its window, 3 open: two slots
    for (int il = 0; il < 2; ++il) kv_store(kv.layer(il), &sb, 1, k.data(), v.data());
    EXPECT_EQ(kv.kivi_steals(), release ? 0u : 4u) << release;  // 2 claims x 2 layers
    EXPECT_EQ(kv.usable_prefix(hit), 0);  // block 1's rows gave way to the live sequence
  }
}

// kivi2's transfer slots lie in the region, after the blocks, and are
// counted in n_bytes; formats without a window have none.
TEST(KvStorage, TransferSlotsLieInTheRegionAfterTheBlocks) {
  KvGeometry g = smollm_like(KvFormat::kKivi2);
  g.n_layers = 2;
  auto st = KvStorage::create(g, 8);
  ASSERT_TRUE(st.is_ok());
  KvStorage& kv = **st;
  const size_t blocks_bytes = 8 * g.bytes_per_block();
  EXPECT_EQ(kv.transfer_slot_bytes(), g.residual_slot_bytes());
  EXPECT_EQ(kv.region_bytes(), blocks_bytes + size_t(kKvTransferSlots) * kv.transfer_slot_bytes());
  EXPECT_EQ(kv.n_bytes(), blocks_bytes + g.fixed_bytes(8));
  std::vector<int32_t> slots;
  for (int i = 0; i < kKvTransferSlots; ++i) {
    const int32_t s = kv.claim_transfer_slot();
    ASSERT_GE(s, 0);
    EXPECT_GE(kv.transfer_slot_offset(s), blocks_bytes);
    EXPECT_LE(kv.transfer_slot_offset(s) + kv.transfer_slot_bytes(), kv.region_bytes());
    for (int32_t t : slots) EXPECT_NE(t, s);
    slots.push_back(s);
  }
  EXPECT_EQ(kv.claim_transfer_slot(), -1);
  kv.release_transfer_slot(slots[3]);
  EXPECT_EQ(kv.claim_transfer_slot(), slots[3]);

  for (KvFormat f : {KvFormat::kF16, KvFormat::kQ4}) {
    auto other = KvStorage::create(smollm_like(f), 4);
    ASSERT_TRUE(other.is_ok());
    EXPECT_EQ((*other)->transfer_slot_bytes(), 0u);
    EXPECT_EQ((*other)->claim_transfer_slot(), -1);
    EXPECT_EQ((*other)->region_bytes(), 4 * smollm_like(f).bytes_per_block());
  }
}

// Disaggregated prefill/decode with kivi2: blocks copied byte for byte into
// another storage plus their window rows through a transfer slot
// (export_window_rows, then import_window_rows) read back exactly as in the
// source, and a query after the hit computes the same attention bitwise.
TEST(KvStorage, WindowRowsMoveWithTheBlocks) {
  KvGeometry g = smollm_like(KvFormat::kKivi2);
  g.n_layers = 2;
  auto sa = KvStorage::create(g, 8);
  auto sb = KvStorage::create(g, 12);  // another pool size: other offsets
  ASSERT_TRUE(sa.is_ok() && sb.is_ok());
  KvStorage& a = **sa;
  KvStorage& b = **sb;
  const int n = 40, nkv = 3, hd = 64;  // a prompt: blocks 5, 1 sealed (1 in the window), 6 open
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  std::vector<float> k(size_t(n) * nkv * hd), v(k.size());
  for (auto& x : k) x = d(rng);
  for (auto& x : v) x = d(rng);
  const std::vector<int32_t> prompt_a{5, 1, 6};
  AttentionSeq s{0, n, 0, prompt_a.data(), 0};
  for (int il = 0; il < 2; ++il) kv_store(a.layer(il), &s, 1, k.data(), v.data());

  // Rows not held: nothing to export.
  const int32_t slot_a = a.claim_transfer_slot();
  const std::vector<int32_t> never{0};
  EXPECT_FALSE(a.export_window_rows(never, slot_a));
  const std::vector<int32_t> window_a{1};
  ASSERT_TRUE(a.export_window_rows(window_a, slot_a));

  // Blocks 5, 1 of a -> 7, 2 of b, and the window rows, as the agent's segments do.
  const std::vector<int32_t> hit_a{5, 1}, hit_b{7, 2};
  auto* ra = static_cast<const uint8_t*>(a.region());
  auto* rb = static_cast<uint8_t*>(b.region());
  for (int il = 0; il < 2; ++il) {
    for (size_t i = 0; i < 2; ++i) {
      std::memcpy(rb + b.k_offset(il) + size_t(hit_b[i]) * b.k_block_bytes(),
                  ra + a.k_offset(il) + size_t(hit_a[i]) * a.k_block_bytes(), a.k_block_bytes());
      std::memcpy(rb + b.v_offset(il) + size_t(hit_b[i]) * b.v_block_bytes(),
                  ra + a.v_offset(il) + size_t(hit_a[i]) * a.v_block_bytes(), a.v_block_bytes());
    }
  }
  const int32_t slot_b = b.claim_transfer_slot();
  ASSERT_EQ(a.transfer_slot_bytes(), b.transfer_slot_bytes());
  std::memcpy(rb + b.transfer_slot_offset(slot_b), ra + a.transfer_slot_offset(slot_a),
              a.transfer_slot_bytes());
  EXPECT_EQ(b.usable_prefix(hit_b), 0);  // the blocks alone: no window rows
  const std::vector<int32_t> window_b{2};
  ASSERT_TRUE(b.import_window_rows(window_b, slot_b));
  a.release_transfer_slot(slot_a);
  b.release_transfer_slot(slot_b);
  EXPECT_EQ(b.usable_prefix(hit_b), 2);
  for (int32_t blk : hit_b) b.release_residual(blk);  // as KvCache::free does: retained, kept
  EXPECT_EQ(b.usable_prefix(hit_b), 2);
  b.check_residual_integrity();
  a.check_residual_integrity();

  // A new sequence after the hit: 8 new tokens in block 0 (a) / 3 (b).
  const std::vector<int32_t> table_a{5, 1, 0}, table_b{7, 2, 3};
  const AttentionSeq ra_seq{0, 0, 32, table_a.data(), 0}, rb_seq{0, 0, 32, table_b.data(), 0};
  for (int il = 0; il < 2; ++il) {
    for (int j = 16; j < 32; ++j) {
      for (int h = 0; h < nkv; ++h) {
        for (bool is_v : {false, true}) {
          const uint16_t* x = kivi_f16_row(a.layer(il), ra_seq, h, j, is_v);
          const uint16_t* y = kivi_f16_row(b.layer(il), rb_seq, h, j, is_v);
          ASSERT_NE(x, nullptr);
          ASSERT_NE(y, nullptr);
          ASSERT_EQ(0, std::memcmp(x, y, size_t(hd) * 2)) << "layer " << il << " j " << j;
        }
      }
    }
  }
  const int n_new = 8, n_head = 6;
  std::vector<float> k2(size_t(n_new) * nkv * hd), v2(k2.size()), q(size_t(n_new) * n_head * hd);
  for (auto& x : k2) x = d(rng);
  for (auto& x : v2) x = d(rng);
  for (auto& x : q) x = d(rng);
  ThreadPool tp(2);
  const AttentionParams p{n_head, nkv, hd, 1.f / std::sqrt(float(hd))};
  const AttentionSeq qa{0, n_new, 32, table_a.data(), 0}, qb{0, n_new, 32, table_b.data(), 0};
  for (int il = 0; il < 2; ++il) {
    kv_store(a.layer(il), &qa, 1, k2.data(), v2.data());
    kv_store(b.layer(il), &qb, 1, k2.data(), v2.data());
    std::vector<float> oa(q.size()), ob(q.size());
    paged_attention(q.data(), a.layer(il), &qa, 1, p, oa.data(), tp);
    paged_attention(q.data(), b.layer(il), &qb, 1, p, ob.data(), tp);
    ASSERT_EQ(0, std::memcmp(oa.data(), ob.data(), oa.size() * 4)) << "layer " << il;
  }
  b.check_residual_integrity();
}

// import_window_rows never steals a pinned slot: with every slot pinned by
// live sequences it fails (the hit is then cut back at admission).
TEST(KvStorage, ImportWindowRowsNeverSteals) {
  KvGeometry g = smollm_like(KvFormat::kKivi2);
  g.n_layers = 2;
  g.kv_residual_slots = 2;
  auto st = KvStorage::create(g, 8);
  ASSERT_TRUE(st.is_ok());
  KvStorage& kv = **st;
  std::vector<float> k(size_t(20) * 3 * 64, 0.5f), v(k.size(), -0.25f);
  const std::vector<int32_t> live{2, 3};  // block 2 sealed in the window, 3 open: both slots pinned
  AttentionSeq s{0, 20, 0, live.data(), 0};
  for (int il = 0; il < 2; ++il) kv_store(kv.layer(il), &s, 1, k.data(), v.data());
  const int32_t slot = kv.claim_transfer_slot();
  const std::vector<int32_t> window{5};
  EXPECT_FALSE(kv.import_window_rows(window, slot));
  EXPECT_EQ(kv.usable_prefix(window), 0);
  EXPECT_EQ(kv.kivi_steals(), 0u);
  EXPECT_TRUE(kv.residual_pinned(2) && kv.residual_pinned(3));
  kv.check_residual_integrity();
}

}  // namespace
}  // namespace omnibus
