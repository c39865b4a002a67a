#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "util/check.h"

namespace omnibus {
namespace {

// Drives a Scheduler the way the engine does, without a model: after each
// step the scheduled tokens count as computed and a sequence that caught up
// "samples" token 7, finishing after max_tokens. The cache is a minimal f32
// one (the storage is never touched).
std::unique_ptr<KvCache> make_cache(int32_t n_blocks, int32_t block_size, bool prefix_caching) {
  const KvGeometry g{.n_layers = 1,
                     .n_kv_heads = 1,
                     .head_dim = 1,
                     .block_size = block_size,
                     .format = KvFormat::kF32};
  StatusOr<std::unique_ptr<KvCache>> kv = KvCache::create(g, n_blocks, prefix_caching);
  OMNIBUS_CHECK(kv.is_ok());
  return std::move(kv).value();
}

struct Harness {
  Harness(int32_t n_blocks, int32_t block_size, SchedulerConfig config, bool prefix_caching = false)
      : cache(make_cache(n_blocks, block_size, prefix_caching)),
        kv(*cache),
        scheduler(config, kv) {}

  Sequence* add(int32_t prompt_len, int32_t max_tokens, int32_t priority = 0) {
    return add_tokens(std::vector<int32_t>(size_t(prompt_len), 1), max_tokens, priority);
  }

  Sequence* add_tokens(std::vector<int32_t> prompt, int32_t max_tokens, int32_t priority = 0) {
    prompts.push_back(std::make_unique<std::vector<int32_t>>(std::move(prompt)));
    auto seq = std::make_unique<Sequence>();
    seq->prompt = prompts.back().get();
    seq->priority = priority;
    seq->arrival = seqs.size();
    max_tokens_of.push_back(max_tokens);
    seqs.push_back(std::move(seq));
    scheduler.add(seqs.back().get());
    return seqs.back().get();
  }

  const StepPlan& step() {
    const StepPlan& plan = scheduler.schedule();
    for (const ScheduledSeq& s : plan.seqs) {
      EXPECT_EQ(kv.n_tokens(s.seq->kv_seq), s.seq->num_computed_tokens + s.n_tokens);
    }
    kv.check_integrity();
    std::vector<int32_t> before;
    for (const ScheduledSeq& s : plan.seqs) before.push_back(s.seq->num_computed_tokens);
    const std::vector<int32_t>& due = scheduler.update_from_output();
    for (size_t i = 0, d = 0; i < plan.seqs.size();
         ++i) {  // advanced; `due` are those done computing
      Sequence* seq = plan.seqs[i].seq;
      EXPECT_EQ(seq->num_computed_tokens, before[i] + plan.seqs[i].n_tokens);
      const bool is_due = d < due.size() && due[d] == int32_t(i);
      EXPECT_EQ(is_due, seq->num_computed_tokens == seq->num_tokens());
      if (!is_due) continue;
      ++d;
      seq->output.push_back(7);
      if (int32_t(seq->output.size()) >= max_tokens_of[size_t(seq->arrival)]) {
        scheduler.finish(seq);
        ++n_finished;
      }
    }
    return plan;
  }

  std::unique_ptr<KvCache> cache;
  KvCache& kv;
  Scheduler scheduler;
  std::vector<std::unique_ptr<std::vector<int32_t>>> prompts;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<int32_t> max_tokens_of;
  int n_finished = 0;
};

TEST(Scheduler, ChunksPromptsWithinTheTokenBudget) {
  Harness h(64, 4, SchedulerConfig{8, 16});
  Sequence* a = h.add(40, 3);
  Sequence* b = h.add(10, 3);
  const StepPlan& p1 = h.step();
  ASSERT_EQ(p1.seqs.size(), 1u);  // a's first chunk takes the whole budget
  EXPECT_EQ(p1.seqs[0].seq, a);
  EXPECT_EQ(p1.seqs[0].n_tokens, 16);
  const StepPlan& p2 = h.step();
  ASSERT_EQ(p2.seqs.size(), 1u);
  EXPECT_EQ(p2.seqs[0].n_tokens, 16);
  const StepPlan& p3 = h.step();  // a's last 8, then b's first 8
  ASSERT_EQ(p3.seqs.size(), 2u);
  EXPECT_EQ(p3.seqs[0].seq, a);
  EXPECT_EQ(p3.seqs[0].n_tokens, 8);
  EXPECT_EQ(p3.seqs[1].seq, b);
  EXPECT_EQ(p3.seqs[1].n_tokens, 8);
  EXPECT_EQ(a->output.size(), 1u);  // a sampled its first token
  const StepPlan& p4 = h.step();    // a decodes first, then b's last 2
  ASSERT_EQ(p4.seqs.size(), 2u);
  EXPECT_EQ(p4.seqs[0].seq, a);
  EXPECT_EQ(p4.seqs[0].n_tokens, 1);
  EXPECT_EQ(p4.seqs[1].seq, b);
  EXPECT_EQ(p4.seqs[1].n_tokens, 2);
  while (h.scheduler.has_work()) h.step();
  EXPECT_EQ(h.n_finished, 2);
  EXPECT_EQ(h.kv.n_used_blocks(), 0);
  h.kv.check_integrity();
}

TEST(Scheduler, DecodesRunBeforePromptChunks) {
  Harness h(64, 4, SchedulerConfig{8, 4});
  Sequence* a = h.add(2, 10);
  h.step();  // a's prompt, first token
  Sequence* b = h.add(12, 2);
  for (int i = 0; i < 3; ++i) {
    const StepPlan& p = h.step();
    ASSERT_GE(p.seqs.size(), 1u);
    EXPECT_EQ(p.seqs[0].seq, a);  // a's decode is never starved by b's prompt
    EXPECT_EQ(p.seqs[0].n_tokens, 1);
    EXPECT_LE(p.n_tokens, 4);
  }
  EXPECT_GT(b->num_computed_tokens, 0);
}

TEST(Scheduler, AStepTokenCapLeavesPromptsWhatTheDecodesDoNotTake) {
  Harness h(256, 4, SchedulerConfig{8, 64});
  Sequence* a = h.add(2, 50);
  Sequence* b = h.add(2, 50);
  h.step();  // both prompts, first tokens
  Sequence* c = h.add(200, 2);
  h.scheduler.set_step_token_cap(10);
  EXPECT_EQ(h.scheduler.n_decoding(), 2);
  const StepPlan& p = h.step();
  ASSERT_EQ(p.seqs.size(), 3u);
  EXPECT_EQ(p.seqs[0].seq, a);
  EXPECT_EQ(p.seqs[1].seq, b);
  EXPECT_EQ(p.seqs[2].seq, c);
  EXPECT_EQ(p.seqs[2].n_tokens, 8);  // the cap's 10 less the two decodes
  EXPECT_EQ(p.n_tokens, 10);
  EXPECT_EQ(p.n_decodes, 2);
  h.scheduler.set_step_token_cap(1);  // below the decodes: they still all run
  const StepPlan& q = h.step();
  ASSERT_EQ(q.seqs.size(), 2u);
  EXPECT_EQ(q.n_tokens, 2);
  h.scheduler.set_step_token_cap(0);  // uncapped: the configured budget again
  const StepPlan& r = h.step();
  EXPECT_EQ(r.n_tokens, 64);
}

TEST(Scheduler, RespectsMaxNumSeqs) {
  Harness h(64, 4, SchedulerConfig{2, 64});
  for (int i = 0; i < 5; ++i) h.add(3, 4);
  const StepPlan& p = h.step();
  EXPECT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(h.scheduler.n_running(), 2);
  EXPECT_EQ(h.scheduler.n_waiting(), 3);
  while (h.scheduler.has_work()) {
    EXPECT_LE(h.step().seqs.size(), 2u);
  }
  EXPECT_EQ(h.n_finished, 5);
}

TEST(Scheduler, AdmitsByPriorityThenArrival) {
  Harness h(64, 4, SchedulerConfig{1, 64});
  Sequence* low = h.add(3, 1, /*priority=*/5);
  Sequence* high = h.add(3, 1, /*priority=*/-1);
  Sequence* mid = h.add(3, 1, /*priority=*/0);
  Sequence* mid2 = h.add(3, 1, /*priority=*/0);
  std::vector<Sequence*> order;
  while (h.scheduler.has_work()) order.push_back(h.step().seqs.at(0).seq);
  EXPECT_EQ(order, (std::vector<Sequence*>{high, mid, mid2, low}));
}

TEST(Scheduler, PreemptsTheLatestAdmittedAndRecomputesIt) {
  // 6 blocks of 4 slots = 24 slots; three sequences growing to 12 tokens each.
  Harness h(6, 4, SchedulerConfig{8, 64});
  Sequence* a = h.add(4, 8);
  Sequence* b = h.add(4, 8);
  Sequence* c = h.add(4, 8);
  bool saw_c_preempted = false;
  int steps = 0;
  while (h.scheduler.has_work() && ++steps < 200) {
    const StepPlan& p = h.step();
    if (p.n_preempted > 0 && c->status == SeqStatus::kPreempted) {
      saw_c_preempted = true;
      EXPECT_EQ(c->num_computed_tokens, 0);
      EXPECT_EQ(c->kv_seq, -1);
      EXPECT_NE(a->status, SeqStatus::kPreempted);  // the oldest is never the victim here
    }
  }
  EXPECT_TRUE(saw_c_preempted);
  EXPECT_GT(h.scheduler.n_preemptions(), 0u);
  EXPECT_EQ(h.n_finished, 3);
  EXPECT_EQ(a->output.size(), 8u);
  EXPECT_EQ(b->output.size(), 8u);
  EXPECT_EQ(c->output.size(), 8u);
  EXPECT_EQ(h.kv.n_used_blocks(), 0);
}

TEST(Scheduler, PreemptsLowestPriorityFirst) {
  Harness h(6, 4, SchedulerConfig{8, 64});
  Sequence* urgent = h.add(4, 8, /*priority=*/-1);
  Sequence* relaxed = h.add(4, 8, /*priority=*/3);
  Sequence* normal = h.add(4, 8, /*priority=*/0);
  std::vector<Sequence*> preempted;
  while (h.scheduler.has_work()) {
    h.step();
    for (Sequence* s : {urgent, relaxed, normal}) {
      if (s->status == SeqStatus::kPreempted && s->output.size() > 0 &&
          (preempted.empty() || preempted.back() != s)) {
        preempted.push_back(s);
      }
    }
  }
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted.front(), relaxed);
  EXPECT_EQ(h.n_finished, 3);
}

TEST(Scheduler, FinishReturnsBlocksImmediately) {
  Harness h(16, 4, SchedulerConfig{8, 64});
  Sequence* a = h.add(10, 100);
  h.step();
  EXPECT_EQ(h.kv.n_used_blocks(), 3);
  h.scheduler.finish(a);  // abort
  EXPECT_EQ(h.kv.n_used_blocks(), 0);
  EXPECT_FALSE(h.scheduler.has_work());
  Sequence* b = h.add(10, 100);
  h.scheduler.finish(b);  // abort while waiting
  EXPECT_FALSE(h.scheduler.has_work());
  h.kv.check_integrity();
}

std::vector<int32_t> tokens_from(int32_t start, int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = start + i;
  return t;
}

std::vector<int32_t> with_suffix(std::vector<int32_t> t, std::vector<int32_t> suffix) {
  t.insert(t.end(), suffix.begin(), suffix.end());
  return t;
}

TEST(Scheduler, AdmissionStartsAfterTheCachedPrefix) {
  Harness h(64, 4, SchedulerConfig{8, 64}, /*prefix_caching=*/true);
  const std::vector<int32_t> prefix = tokens_from(100, 16);
  h.add_tokens(with_suffix(prefix, {1}), 1);
  while (h.scheduler.has_work()) h.step();
  Sequence* b = h.add_tokens(with_suffix(prefix, {2, 3}), 1);
  const StepPlan& p = h.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].n_tokens, 2);  // 16 cached, 2 computed
  EXPECT_EQ(b->num_cached_tokens, 16);
  EXPECT_EQ(h.scheduler.n_prefix_cache_queries(), 17u + 18u);
  EXPECT_EQ(h.scheduler.n_prefix_cache_hits(), 16u);
  // A fully cached prompt still computes its last token (one block's worth here).
  Sequence* c = h.add_tokens(prefix, 1);
  EXPECT_EQ(h.step().seqs.at(0).n_tokens, 4);
  EXPECT_EQ(c->num_cached_tokens, 12);
}

// Cache-aware: a later request whose prefix is cached goes before an earlier
// one without; FCFS keeps arrival order.
TEST(Scheduler, CacheAwarePrefersTheLongestCachedPrefix) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kCacheAware}) {
    Harness h(64, 4, SchedulerConfig{8, 8, policy, 100}, /*prefix_caching=*/true);
    const std::vector<int32_t> prefix = tokens_from(100, 16);
    h.add_tokens(with_suffix(prefix, {1}), 1);
    while (h.scheduler.has_work()) h.step();
    Sequence* cold = h.add_tokens(tokens_from(500, 12), 1);
    Sequence* short_hit = h.add_tokens(with_suffix(tokens_from(100, 8), {9, 9, 9}), 1);
    Sequence* long_hit = h.add_tokens(with_suffix(prefix, {2, 3}), 1);
    const StepPlan& p = h.step();
    ASSERT_FALSE(p.seqs.empty());
    if (policy == SchedulingPolicy::kFcfs) {
      EXPECT_EQ(p.seqs[0].seq, cold);
    } else {
      ASSERT_EQ(p.seqs.size(), 3u);
      EXPECT_EQ(p.seqs[0].seq, long_hit);   // 16 cached, computes 2
      EXPECT_EQ(p.seqs[1].seq, short_hit);  // 8 cached, computes 3
      EXPECT_EQ(p.seqs[2].seq, cold);       // the budget's last 3 tokens
      EXPECT_EQ(p.seqs[2].n_tokens, 3);
    }
    while (h.scheduler.has_work()) h.step();
    h.kv.check_integrity();
  }
}

// A burst sharing a prefix: cache-aware computes the prefix once (the others
// wait one step for it, then hit); FCFS admits them all at once.
TEST(Scheduler, CacheAwareDefersRequestsWhosePrefixIsBeingComputed) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kCacheAware}) {
    Harness h(64, 4, SchedulerConfig{8, 64, policy, 100}, /*prefix_caching=*/true);
    const std::vector<int32_t> prefix = tokens_from(100, 16);
    for (int32_t i = 0; i < 4; ++i) h.add_tokens(with_suffix(prefix, {i}), 2);
    const StepPlan& p1 = h.step();
    EXPECT_EQ(p1.seqs.size(), policy == SchedulingPolicy::kFcfs ? 4u : 1u);
    const StepPlan& p2 = h.step();
    if (policy == SchedulingPolicy::kCacheAware) {
      ASSERT_EQ(p2.seqs.size(), 4u);  // the first one's decode + three admitted with 16 cached
      for (size_t i = 1; i < 4; ++i) {
        EXPECT_EQ(p2.seqs[i].n_tokens, 1);
        EXPECT_EQ(p2.seqs[i].seq->num_cached_tokens, 16);
      }
    }
    while (h.scheduler.has_work()) h.step();
    EXPECT_EQ(h.scheduler.n_prefix_cache_hits(), policy == SchedulingPolicy::kFcfs ? 0u : 48u);
  }
}

// Aging: a request that has waited max_wait_steps goes before fresh ones,
// however much of theirs is cached.
TEST(Scheduler, CacheAwareAgingPreventsStarvation) {
  for (int32_t max_wait : {3, 1000}) {
    Harness h(64, 4, SchedulerConfig{1, 64, SchedulingPolicy::kCacheAware, max_wait},
              /*prefix_caching=*/true);
    const std::vector<int32_t> prefix = tokens_from(100, 16);
    h.add_tokens(with_suffix(prefix, {1}), 1);
    h.step();
    Sequence* busy = h.add_tokens(tokens_from(300, 3), 6);  // holds the only slot for 6 steps
    h.step();
    Sequence* cold = h.add_tokens(tokens_from(500, 5), 1);
    for (int i = 0; i < 4; ++i) h.step();
    Sequence* hit = h.add_tokens(with_suffix(prefix, {2}), 1);
    while (busy->status != SeqStatus::kFinished) h.step();
    const StepPlan& p = h.step();
    ASSERT_EQ(p.seqs.size(), 1u);
    EXPECT_EQ(p.seqs[0].seq, max_wait == 3 ? cold : hit) << max_wait;
    while (h.scheduler.has_work()) h.step();
  }
}

// Fair prefill (issue 21's acceptance, on the scheduler): a 16-token request
// arriving while a 4096-token prompt is prefilled in 512-token steps gets its
// first token within 3 steps, and the long prompt's steps to its first token
// grow by at most 25% (here: not at all; it loses 16 tokens of budget once).
SchedulerConfig fair_config(int32_t budget, int32_t threshold, int32_t max_partial) {
  SchedulerConfig c{64, budget};
  c.long_prefill_token_threshold = threshold;
  c.max_num_partial_prefills = max_partial;
  return c;
}

int steps_to_first_token(Harness& h, const Sequence* seq) {
  int n = 0;
  while (seq->output.empty()) {
    h.step();
    ++n;
  }
  return n;
}

TEST(Scheduler, ShortPromptIsNotStuckBehindALongOne) {
  int alone = 0;
  {
    Harness h(1024, 16, fair_config(512, 128, 2));
    Sequence* doc = h.add(4096, 4);
    alone = steps_to_first_token(h, doc);
    EXPECT_EQ(alone, 8);  // alone, the long prompt gets the whole budget every step
  }
  Harness h(1024, 16, fair_config(512, 128, 2));
  Sequence* doc = h.add(4096, 4);
  h.step();
  h.step();
  Sequence* chat = h.add(16, 4);
  EXPECT_LE(steps_to_first_token(h, chat), 1);        // admitted at once, whole prompt
  EXPECT_TRUE(doc->output.empty());                   // the document is still being prefilled
  EXPECT_GE(doc->num_computed_tokens, 3 * 512 - 16);  // and lost at most the short one's tokens
  while (h.scheduler.has_work()) h.step();
  EXPECT_EQ(h.n_finished, 2);
  h.kv.check_integrity();
}

TEST(Scheduler, LongPromptStepsGrowByAtMostAQuarter) {
  Harness h(1024, 16, fair_config(512, 128, 2));
  Sequence* doc = h.add(4096, 4);
  int steps = 0;
  while (doc->output.empty()) {
    if (steps == 2) h.add(16, 4);
    if (steps == 4) h.add(100, 4);
    h.step();
    ++steps;
  }
  EXPECT_LE(steps, 10);  // 8 alone
  while (h.scheduler.has_work()) h.step();
}

// Many prompts: the long ones are each guaranteed the threshold, at most
// max_num_partial_prefills of them run at once, and short ones behind a
// passed-over long one are admitted; every step that leaves work waiting uses
// the whole budget.
TEST(Scheduler, PartialPrefillsAreBoundedAndTheBudgetIsUsed) {
  Harness h(4096, 16, fair_config(512, 128, 2));
  Sequence* l1 = h.add(2000, 2);
  Sequence* l2 = h.add(2000, 2);
  Sequence* l3 = h.add(2000, 2);
  Sequence* s1 = h.add(50, 2);
  const StepPlan& p = h.step();
  int n_long = 0;
  bool s1_in = false;
  for (const ScheduledSeq& e : p.seqs) {
    if (e.seq == l1 || e.seq == l2 || e.seq == l3) {
      ++n_long;
      EXPECT_GE(e.n_tokens, 128);
    }
    if (e.seq == s1) {
      s1_in = true;
      EXPECT_EQ(e.n_tokens, 50);
    }
  }
  EXPECT_EQ(n_long, 2);
  EXPECT_TRUE(s1_in);  // passed l3, which waits for a partial-prefill slot
  EXPECT_EQ(l3->status, SeqStatus::kWaiting);
  EXPECT_EQ(p.n_tokens, 512);
  while (h.scheduler.has_work()) {
    const StepPlan& q = h.step();
    int long_partial = 0;
    for (const ScheduledSeq& e : q.seqs) {
      const int32_t left_before =
          e.seq->num_prompt_tokens() - (e.seq->num_computed_tokens - e.n_tokens);
      const bool unfinished = e.seq->num_computed_tokens < e.seq->num_prompt_tokens();
      if (unfinished && left_before > 128) ++long_partial;
    }
    EXPECT_LE(long_partial, 2);
  }
  EXPECT_EQ(h.n_finished, 4);
  h.kv.check_integrity();
}

// Mid-sized prompts (long, but each fits in what is left of a step) are
// admitted whole, several a step, as before fair prefill.
TEST(Scheduler, LongPromptsThatFitAreAdmittedWhole) {
  Harness h(4096, 16, fair_config(512, 128, 1));
  for (int i = 0; i < 6; ++i) h.add(200, 2);
  const StepPlan& p = h.step();
  ASSERT_EQ(p.seqs.size(), 3u);  // 200 + 200 + 112 (the third a partial long, topped up)
  EXPECT_EQ(p.seqs[0].n_tokens, 200);
  EXPECT_EQ(p.seqs[1].n_tokens, 200);
  EXPECT_EQ(p.seqs[2].n_tokens, 112);
  EXPECT_EQ(p.n_tokens, 512);
  while (h.scheduler.has_work()) h.step();
  EXPECT_EQ(h.n_finished, 6);
}

}  // namespace
}  // namespace omnibus
