// The scheduler's side of speculative decoding (scheduler.h, speculation.h):
// a decode carries its draft within the step cap and the budget, a draft
// never preempts, update_from_output advances past the last token only, and
// accept_draft keeps the accepted slots and drops the rest.
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "util/check.h"

namespace omnibus {
namespace {

std::unique_ptr<KvCache> make_cache(int32_t n_blocks, int32_t block_size) {
  const KvGeometry g{.n_layers = 1,
                     .n_kv_heads = 1,
                     .head_dim = 1,
                     .block_size = block_size,
                     .format = KvFormat::kF32};
  StatusOr<std::unique_ptr<KvCache>> kv = KvCache::create(g, n_blocks, /*prefix_caching=*/true);
  OMNIBUS_CHECK(kv.is_ok());
  return std::move(kv).value();
}

struct Fixture {
  Fixture(int32_t n_blocks, int32_t budget, int32_t max_spec_step_tokens)
      : cache(make_cache(n_blocks, 4)),
        scheduler(SchedulerConfig{.max_num_seqs = 64,
                                  .max_num_batched_tokens = budget,
                                  .max_spec_step_tokens = max_spec_step_tokens},
                  *cache) {}

  // n sequences of `prompt_len` tokens, each through its prompt and first token.
  // REQUIRES: the budget holds every prompt.
  std::vector<Sequence*> decoding(int32_t n, int32_t prompt_len) {
    std::vector<Sequence*> out;
    for (int32_t i = 0; i < n; ++i) {
      prompts.push_back(std::make_unique<std::vector<int32_t>>(size_t(prompt_len), 100 + i));
      auto seq = std::make_unique<Sequence>();
      seq->prompt = prompts.back().get();
      seq->arrival = uint64_t(seqs.size());
      seqs.push_back(std::move(seq));
      scheduler.add(seqs.back().get());
      out.push_back(seqs.back().get());
    }
    // One step computes every prompt (the budget holds them all here).
    prefill_step();
    for (Sequence* s : out) {
      EXPECT_EQ(s->num_computed_tokens, s->num_tokens());
      s->output.push_back(7);
    }
    return out;
  }

  void prefill_step() {
    scheduler.schedule();
    scheduler.update_from_output();
  }

  std::unique_ptr<KvCache> cache;
  Scheduler scheduler;
  std::vector<std::unique_ptr<std::vector<int32_t>>> prompts;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

TEST(SchedulerSpeculation, ADraftRidesWithItsDecodeAndRollsBack) {
  Fixture f(64, 64, 32);
  std::vector<Sequence*> seqs = f.decoding(3, 6);
  for (Sequence* s : seqs) s->draft = {1, 2, 3, 4};
  const StepPlan& plan = f.scheduler.schedule();
  ASSERT_EQ(plan.seqs.size(), 3u);
  for (const ScheduledSeq& ss : plan.seqs) {
    EXPECT_EQ(ss.n_tokens, 5);
    EXPECT_EQ(ss.n_draft, 4);
    EXPECT_EQ(f.cache->n_tokens(ss.seq->kv_seq), ss.seq->num_computed_tokens + 5);
  }
  EXPECT_EQ(plan.n_tokens, 15);
  ASSERT_EQ(f.scheduler.update_from_output().size(), 3u);  // each samples its rows
  // Verification: seqs[0] took 2 draft tokens (+ 1 new), seqs[1] none, seqs[2] all 4 (+ 1).
  const int32_t accepted[] = {2, 0, 4};
  for (size_t i = 0; i < 3; ++i) {
    Sequence* s = seqs[i];
    EXPECT_EQ(s->num_computed_tokens, s->num_tokens());  // past its last token only
    for (int32_t j = 0; j <= accepted[i]; ++j) s->output.push_back(1 + j);
    f.scheduler.accept_draft(s, accepted[i]);
    EXPECT_TRUE(s->draft.empty());
    EXPECT_EQ(s->num_tokens() - s->num_computed_tokens, 1);
    EXPECT_EQ(f.cache->n_tokens(s->kv_seq), s->num_computed_tokens);
  }
  f.cache->check_integrity();
  // The next step is plain decoding again.
  const StepPlan& next = f.scheduler.schedule();
  for (const ScheduledSeq& ss : next.seqs) EXPECT_EQ(ss.n_tokens, 1);
}

TEST(SchedulerSpeculation, AFullBatchCarriesNoDraft) {
  Fixture f(128, 64, 4);
  std::vector<Sequence*> seqs = f.decoding(4, 3);
  for (Sequence* s : seqs) s->draft = {1, 2};
  const StepPlan& plan = f.scheduler.schedule();
  ASSERT_EQ(plan.seqs.size(), 4u);
  for (const ScheduledSeq& ss : plan.seqs) {
    EXPECT_EQ(ss.n_tokens, 1);
    EXPECT_EQ(ss.n_draft, 0);
    EXPECT_TRUE(ss.seq->draft.empty());
  }
}

TEST(SchedulerSpeculation, DraftsShareWhatTheCapAndBudgetLeave) {
  Fixture f(128, 64, 7);  // 2 decodes: 5 draft tokens for both
  std::vector<Sequence*> seqs = f.decoding(2, 3);
  for (Sequence* s : seqs) s->draft = {1, 2, 3, 4};
  const StepPlan& plan = f.scheduler.schedule();
  ASSERT_EQ(plan.seqs.size(), 2u);
  EXPECT_EQ(plan.seqs[0].n_draft, 4);  // oldest first
  EXPECT_EQ(plan.seqs[1].n_draft, 1);
  EXPECT_EQ(seqs[1]->draft.size(), 1u);
  Fixture g(128, 3, 32);  // a budget of 3 tokens: 1 + 2
  std::vector<Sequence*> one = g.decoding(1, 2);
  one[0]->draft = {1, 2, 3, 4};
  const StepPlan& p = g.scheduler.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].n_draft, 2);
}

TEST(SchedulerSpeculation, ADraftNeverPreempts) {
  // 2 sequences of 7 tokens + 1 output = 8 slots = 2 blocks each; the pool
  // has 4: a draft would need a fifth block.
  Fixture f(4, 64, 32);
  std::vector<Sequence*> seqs = f.decoding(2, 7);
  for (Sequence* s : seqs) s->draft = {1, 2, 3};
  const StepPlan& plan = f.scheduler.schedule();
  EXPECT_EQ(plan.n_preempted, 0);
  ASSERT_EQ(plan.seqs.size(), 2u);
  for (const ScheduledSeq& ss : plan.seqs) EXPECT_EQ(ss.n_draft, 0);
}

}  // namespace
}  // namespace omnibus
