#include "kv/kv_cache_size.h"

#include <gtest/gtest.h>

#include <string>

namespace omnibus {
namespace {

TEST(ParseByteSize, AcceptsBinaryDecimalAndPlainSizes) {
  EXPECT_EQ(*parse_byte_size("2GiB"), int64_t(2) << 30);
  EXPECT_EQ(*parse_byte_size("512MiB"), int64_t(512) << 20);
  EXPECT_EQ(*parse_byte_size("512mib"), int64_t(512) << 20);
  EXPECT_EQ(*parse_byte_size("64K"), int64_t(64) << 10);
  EXPECT_EQ(*parse_byte_size("1.5GiB"), int64_t(3) << 29);
  EXPECT_EQ(*parse_byte_size("3GB"), int64_t(3000000000));
  EXPECT_EQ(*parse_byte_size("1000000"), 1000000);
}

TEST(ParseByteSize, RejectsGarbage) {
  EXPECT_FALSE(parse_byte_size("").is_ok());
  EXPECT_FALSE(parse_byte_size("GiB").is_ok());
  EXPECT_FALSE(parse_byte_size("2 parsecs").is_ok());
  EXPECT_FALSE(parse_byte_size("1.2.3").is_ok());
  EXPECT_FALSE(parse_byte_size("0").is_ok());
  EXPECT_FALSE(parse_byte_size("-5").is_ok());
}

TEST(DefaultKvCacheBytes, IsWithinItsBounds) {
  const int64_t b = default_kv_cache_bytes();
  EXPECT_GE(b, int64_t(64) << 20);
  EXPECT_LE(b, int64_t(4) << 30);
}

KvGeometry small(KvFormat f) {
  return KvGeometry{.n_layers = 2, .n_kv_heads = 1, .head_dim = 16, .block_size = 4, .format = f};
}

KvCacheLimits limits_of(int64_t bytes, int32_t max_num_seqs = 256) {
  KvCacheLimits l;
  l.kv_cache_bytes = bytes;
  l.max_num_seqs = max_num_seqs;
  return l;
}

TEST(PlanKvCache, GivenBudgetIsWholeBlocks) {
  const KvGeometry g = small(KvFormat::kF32);
  const int64_t bb = int64_t(g.bytes_per_block());
  for (int64_t extra : {int64_t(0), bb - 1}) {
    StatusOr<KvCachePlan> p = plan_kv_cache(g, limits_of(100 * bb + extra));
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_EQ(p->n_blocks, 100);
    EXPECT_EQ(p->max_num_seqs, 256);   // no residual: not capped
    EXPECT_EQ(p->max_model_len, 400);  // the pool, n_ctx_train unknown
    EXPECT_EQ(p->geometry.fixed_bytes(p->n_blocks), 0u);
  }
}

TEST(PlanKvCache, DefaultBudgetIsCappedToFullContexts) {
  const KvGeometry g = small(KvFormat::kF16);
  const int64_t bb = int64_t(g.bytes_per_block());
  KvCacheLimits l = limits_of(0, 2);
  l.default_bytes = 1000 * bb;
  l.n_ctx_train = 64;  // 2 sequences x 16 blocks
  StatusOr<KvCachePlan> p = plan_kv_cache(g, l);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->n_blocks, 32);
  EXPECT_EQ(p->max_model_len, 64);
  l.n_ctx_train = 0;  // unknown: 4096 per sequence
  l.default_bytes = 100 * bb;
  p = plan_kv_cache(g, l);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->n_blocks, 100);
  EXPECT_EQ(p->max_model_len, 400);
  l.max_model_len = 200;
  p = plan_kv_cache(g, l);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->max_model_len, 200);
}

TEST(PlanKvCache, LongMaxModelLenOnlyWhenAllowed) {
  const KvGeometry g = small(KvFormat::kF16);
  const int64_t bb = int64_t(g.bytes_per_block());
  KvCacheLimits l = limits_of(0, 2);
  l.default_bytes = 1000 * bb;
  l.n_ctx_train = 64;
  l.max_model_len = 65;  // one past the training context (perplexity at ctx 64)
  StatusOr<KvCachePlan> p = plan_kv_cache(g, l);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("exceeds the model's context length"), std::string::npos);
  l.allow_beyond_n_ctx_train = true;
  p = plan_kv_cache(g, l);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->max_model_len, 65);
  EXPECT_EQ(p->n_blocks, 2 * 17);  // the default pool covers 2 sequences of 65 tokens (blocks of 4)
}

// --kv-cache-memory covers the blocks and the residual slots: the largest
// pool whose blocks plus slots fit.
TEST(PlanKvCache, FixedBytesComeOutOfTheBudget) {
  for (KvFormat f : {KvFormat::kKivi2, KvFormat::kQ4}) {
    const KvGeometry g = small(f);
    const int64_t bb = int64_t(g.bytes_per_block());
    const int64_t per_seq = 1 + g.residual_blocks(), slot = int64_t(g.residual_slot_bytes());
    for (int64_t extra : {int64_t(0), bb / 2, bb - 1}) {
      const int64_t fixed =
          4 * per_seq * slot + int64_t(g.transfer_bytes());  // kivi2: + transfer slots
      StatusOr<KvCachePlan> p = plan_kv_cache(g, limits_of(300 * bb + fixed + extra, 4));
      ASSERT_TRUE(p.is_ok());
      EXPECT_EQ(p->n_blocks, 300) << kv_format_name(f);
      EXPECT_EQ(p->geometry.kv_residual_slots, 4 * per_seq);
      EXPECT_EQ(int64_t(p->geometry.fixed_bytes(p->n_blocks)), fixed);
    }
  }
}

// Residual slots for max_num_seqs sequences within half of the budget, past
// kResidualSeqsAlways within an eighth; the sequences capped to them.
TEST(PlanKvCache, ResidualSlotsCapTheSequences) {
  for (KvFormat f : {KvFormat::kKivi2, KvFormat::kQ4}) {
    const KvGeometry g = small(f);
    const int64_t seq = (1 + g.residual_blocks()) * int64_t(g.residual_slot_bytes());
    const auto seqs = [&](int64_t bytes, int32_t max_num_seqs) {
      // kivi2's transfer slots come off the top of the budget
      StatusOr<KvCachePlan> p =
          plan_kv_cache(g, limits_of(bytes + int64_t(g.transfer_bytes()), max_num_seqs));
      EXPECT_TRUE(p.is_ok());
      EXPECT_EQ(p->geometry.kv_residual_slots, p->max_num_seqs * (1 + g.residual_blocks()));
      return p->max_num_seqs;
    };
    EXPECT_EQ(seqs(2 * 10 * seq, 256), 10) << kv_format_name(f);
    EXPECT_EQ(seqs(2 * 10 * seq, 4), 4);
    EXPECT_EQ(seqs(1000 * seq, 256), 1000 / 8);            // past 64: an eighth
    EXPECT_EQ(seqs(200 * seq, 256), kResidualSeqsAlways);  // half 100, an eighth 25
    EXPECT_EQ(seqs(100 * seq, 256), 50);                   // half 50
    ASSERT_LT(int64_t(g.bytes_per_block()), seq);
    EXPECT_EQ(seqs(seq + int64_t(g.bytes_per_block()), 256), 1);  // half holds none: one
    KvCacheLimits l = limits_of(0, 256);
    l.default_bytes = 1000 * 256 * seq;  // the default budget: slots for all of them
    StatusOr<KvCachePlan> p = plan_kv_cache(g, l);
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(p->max_num_seqs, 256);
  }
}

TEST(PlanKvCache, RejectsWhatCannotFit) {
  const KvGeometry g = small(KvFormat::kF32);
  const int64_t bb = int64_t(g.bytes_per_block());
  StatusOr<KvCachePlan> p = plan_kv_cache(g, limits_of(bb - 1));
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("--kv-cache-memory"), std::string::npos);
  KvCacheLimits l = limits_of(10 * bb);
  l.max_model_len = 41;  // the pool holds 40 tokens
  p = plan_kv_cache(g, l);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("--max-model-len"), std::string::npos);
  l.max_model_len = 30;
  l.n_ctx_train = 20;
  EXPECT_FALSE(plan_kv_cache(g, l).is_ok());
  l.n_ctx_train = 40;
  EXPECT_TRUE(plan_kv_cache(g, l).is_ok());
  KvGeometry w = small(KvFormat::kKivi2);
  w.kv_residual_blocks = -2;
  p = plan_kv_cache(w, limits_of(100 * bb));
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("--kv-residual-blocks"), std::string::npos);
}

}  // namespace
}  // namespace omnibus
