// The scheduler (scheduler.h): each step's plan (decodes, prompt chunks, admissions, preemption)
// and, after the forward pass, the step's outcome (update_from_output).
#include "engine/scheduler.h"

#include <algorithm>
#include <tuple>

#include "util/check.h"

namespace omnibus {
namespace {

// Waiting order: priority, then arrival, then completion index.
bool runs_before(const Sequence* a, const Sequence* b) {
  return std::tie(a->priority, a->arrival, a->index) < std::tie(b->priority, b->arrival, b->index);
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, KvCache& kv) : config_(config), kv_(kv) {
  OMNIBUS_CHECK(config.max_num_seqs >= 1 && config.max_num_batched_tokens >= 1);
  OMNIBUS_CHECK(config.long_prefill_token_threshold >= 1 && config.max_num_partial_prefills >= 1);
  running_.reserve(size_t(config.max_num_seqs));
  plan_.seqs.reserve(size_t(config.max_num_seqs));
}

void Scheduler::enqueue_waiting(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, runs_before), seq);
}

void Scheduler::add(Sequence* seq) {
  OMNIBUS_CHECK(seq->kv_seq < 0 && seq->num_computed_tokens == 0);
  seq->arrival_step = step_;
  enqueue_waiting(seq);
}

void Scheduler::add_running(Sequence* seq) {
  OMNIBUS_CHECK(seq->kv_seq >= 0 && kv_.n_tokens(seq->kv_seq) == seq->num_computed_tokens);
  seq->status = SeqStatus::kRunning;
  seq->admitted = ++n_admitted_;
  running_.push_back(seq);
}

void Scheduler::finish(Sequence* seq) {
  if (seq->status == SeqStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else if (seq->status == SeqStatus::kWaiting || seq->status == SeqStatus::kPreempted) {
    auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    OMNIBUS_CHECK(it != waiting_.end());
    waiting_.erase(it);
  }
  if (seq->kv_seq >= 0) kv_.free(seq->kv_seq);
  seq->kv_seq = -1;
  seq->status = SeqStatus::kFinished;
}

Sequence* Scheduler::pick_victim() const {
  Sequence* victim = nullptr;
  for (Sequence* s : running_) {
    if (s->status != SeqStatus::kRunning || s->scheduled_step == step_) continue;
    if (victim == nullptr ||
        std::tie(s->priority, s->admitted) > std::tie(victim->priority, victim->admitted)) {
      victim = s;
    }
  }
  return victim;
}

void Scheduler::preempt(Sequence* seq) {
  seq->draft.clear();  // it is recomputed as a prompt first
  kv_.free(seq->kv_seq);
  seq->kv_seq = -1;
  seq->num_computed_tokens = 0;
  enqueue_waiting(seq);  // removed from running_ after planning
  seq->status = SeqStatus::kPreempted;
  ++plan_.n_preempted;
  ++n_preemptions_;
}

bool Scheduler::allocate_or_preempt(Sequence* seq, int32_t n_new) {
  while (!kv_.allocate_slots(seq->kv_seq, n_new, plan_.copies)) {
    Sequence* victim = pick_victim();
    OMNIBUS_CHECK(victim != nullptr);  // at least `seq` itself is a candidate
    preempt(victim);
    if (victim == seq) return false;
  }
  return true;
}

void Scheduler::schedule_running(bool decodes) {
  for (Sequence* seq : running_) {
    if (budget_ == 0) return;
    if (seq->status != SeqStatus::kRunning || seq->scheduled_step == step_) continue;
    const int32_t remaining = seq->num_tokens() - seq->num_computed_tokens;
    OMNIBUS_DCHECK(remaining >= 1);
    if ((remaining == 1) != decodes) continue;
    if (decodes && schedule_draft(seq)) continue;
    int32_t n = std::min(remaining, budget_);
    const bool long_prefill = is_long(remaining);
    if (long_prefill) n = std::min(n, config_.long_prefill_token_threshold);  // topped up later
    if (!allocate_or_preempt(seq, n)) continue;
    if (long_prefill) ++n_long_partial_;
    seq->scheduled_step = step_;
    plan_.seqs.push_back(ScheduledSeq{seq, n});
    plan_.n_decodes += decodes ? 1 : 0;
    plan_.n_tokens += n;
    budget_ -= n;
  }
}

bool Scheduler::schedule_draft(Sequence* seq) {
  if (seq->draft.empty()) return false;
  OMNIBUS_CHECK(!seq->output.empty());  // a decode, not a prompt's last token
  const int32_t k = std::min({int32_t(seq->draft.size()), draft_budget_, budget_ - 1});
  // A draft that does not fit without preempting is dropped, not forced.
  if (k <= 0 || !kv_.allocate_slots(seq->kv_seq, 1 + k, plan_.copies)) {
    seq->draft.clear();
    return false;
  }
  seq->draft.resize(size_t(k));
  seq->scheduled_step = step_;
  plan_.seqs.push_back(ScheduledSeq{seq, 1 + k, k});
  ++plan_.n_decodes;
  plan_.n_tokens += 1 + k;
  budget_ -= 1 + k;
  draft_budget_ -= k;
  return true;
}

void Scheduler::accept_draft(Sequence* seq, int32_t n_accepted) {
  OMNIBUS_CHECK(seq->status == SeqStatus::kRunning && n_accepted >= 0 &&
                n_accepted <= int32_t(seq->draft.size()));
  seq->num_computed_tokens += n_accepted;
  OMNIBUS_CHECK(seq->num_tokens() - seq->num_computed_tokens == 1);
  kv_.truncate(seq->kv_seq, seq->num_computed_tokens);
  kv_.commit(seq->kv_seq, seq->tokens(), seq->num_computed_tokens, seq->block_keys);
  kv_.slide(seq->kv_seq, seq->num_computed_tokens);
  seq->draft.clear();
}

void Scheduler::match(Sequence* seq) {
  if (!seq->may_use_cached_prefix) {
    match_.clear();
    return;
  }
  // At most up to the last token: its logits are needed, so it is computed.
  const int32_t max_blocks = (seq->num_tokens() - 1) / kv_.block_size();
  kv_.match_prefix(seq->tokens(), max_blocks, seq->block_keys, match_);
}

void Scheduler::order_waiting() {
  order_.assign(waiting_.begin(), waiting_.end());
  if (config_.policy == SchedulingPolicy::kFcfs || !kv_.prefix_caching()) return;
  // Rank the head of the queue only, so a long queue costs a bounded number of
  // lookups per step; the rest follow in FCFS order.
  constexpr size_t kMaxRanked = 512;
  const size_t n_ranked = std::min(order_.size(), kMaxRanked);
  struct Key {
    int32_t priority;
    bool fresh;    // not aged: waits behind the aged ones
    int64_t rank;  // aged: arrival; fresh: -(cached tokens)
    uint64_t arrival;
    int32_t index;
    auto tie() const { return std::tie(priority, fresh, rank, arrival, index); }
  };
  std::vector<std::pair<Key, Sequence*>> keyed;
  keyed.reserve(n_ranked);
  for (size_t i = 0; i < n_ranked; ++i) {
    Sequence* seq = order_[i];
    const bool fresh = !is_aged(seq);
    int64_t rank = int64_t(seq->arrival);
    if (fresh) {
      match(seq);
      rank = -int64_t(match_.n_blocks());
    }
    keyed.push_back({Key{seq->priority, fresh, rank, seq->arrival, seq->index}, seq});
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first.tie() < b.first.tie(); });
  for (size_t i = 0; i < keyed.size(); ++i) order_[i] = keyed[i].second;
}

void Scheduler::add_inflight(Sequence* seq) {
  const int32_t bs = kv_.block_size();
  const int32_t n_full = seq->num_tokens() / bs;
  kv_.extend_keys(seq->tokens(), n_full, seq->block_keys);
  for (int32_t i = seq->num_computed_tokens / bs; i < n_full; ++i)
    inflight_.insert(seq->block_keys[size_t(i)]);
}

bool Scheduler::next_block_inflight(const Sequence* seq) const {
  const size_t next = size_t(match_.n_blocks());
  return next < seq->block_keys.size() && inflight_.count(seq->block_keys[next]) > 0;
}

Scheduler::Admission Scheduler::try_admit(Sequence* seq, int32_t watermark) {
  OMNIBUS_DCHECK(seq->kv_seq < 0 && seq->num_computed_tokens == 0);
  match(seq);  // again: admissions before this one may have evicted blocks
  const int32_t n_cached = match_.n_blocks() * kv_.block_size();
  const int32_t remaining = seq->num_tokens() - n_cached;
  if (config_.whole_prompts && remaining > budget_) return Admission::kNoRoom;  // next step
  int32_t n = std::min(remaining, budget_);
  // A long prompt that will not finish this step is a partial prefill: it
  // waits for a slot, and starts with the guaranteed share (topped up later).
  const bool partial_long = is_long(remaining) && remaining > budget_;
  if (partial_long) {
    if (n_long_partial_ >= config_.max_num_partial_prefills) return Admission::kPassed;
    n = std::min(n, config_.long_prefill_token_threshold);
  }
  OMNIBUS_DCHECK(n >= 1);
  const int32_t kv_seq = kv_.allocate_new(match_, n, watermark, plan_.copies);
  if (kv_seq < 0) return Admission::kNoRoom;
  if (partial_long) ++n_long_partial_;
  if (kv_.prefix_caching() && seq->may_use_cached_prefix) {
    n_prefix_queries_ += uint64_t(seq->num_tokens());
    n_prefix_hits_ += uint64_t(n_cached);
  }
  if (seq->admitted == 0) {
    seq->num_cached_tokens = std::min(n_cached, seq->num_prompt_tokens());
    seq->first_scheduled = std::chrono::steady_clock::now();
  }
  seq->num_computed_tokens = n_cached;
  seq->kv_seq = kv_seq;
  seq->status = SeqStatus::kRunning;
  seq->admitted = ++n_admitted_;
  seq->scheduled_step = step_;
  running_.push_back(seq);
  plan_.seqs.push_back(ScheduledSeq{seq, n});
  plan_.n_tokens += n;
  budget_ -= n;
  return Admission::kAdmitted;
}

void Scheduler::admit_waiting(int32_t watermark) {
  if (waiting_.empty() || budget_ == 0 || int32_t(running_.size()) >= config_.max_num_seqs) return;
  order_waiting();
  const bool defer = config_.policy == SchedulingPolicy::kCacheAware && kv_.prefix_caching();
  if (defer) {
    inflight_.clear();
    for (Sequence* seq : running_) add_inflight(seq);
  }
  bool admitted = false;
  for (Sequence* seq : order_) {
    if (budget_ == 0 || int32_t(running_.size()) >= config_.max_num_seqs) break;
    if (defer && seq->may_use_cached_prefix && !is_aged(seq)) {
      match(seq);
      if (next_block_inflight(seq)) continue;  // it will hit once that block is computed
    }
    const Admission a = try_admit(seq, watermark);
    if (a == Admission::kNoRoom) break;
    if (a == Admission::kPassed) continue;
    if (defer) add_inflight(seq);
    admitted = true;
  }
  if (admitted) {
    std::erase_if(waiting_, [](const Sequence* s) { return s->status == SeqStatus::kRunning; });
  }
}

const StepPlan& Scheduler::schedule() {
  ++step_;
  plan_.seqs.clear();
  plan_.copies.clear();
  plan_.n_tokens = 0;
  plan_.n_decodes = 0;
  plan_.n_preempted = 0;
  const int32_t n_decodes = n_decoding();
  budget_ = config_.max_num_batched_tokens;
  if (step_cap_ > 0) budget_ = std::min(budget_, std::max(step_cap_, n_decodes));
  step_budget_ = budget_;
  n_long_partial_ = 0;
  draft_budget_ = 0;
  if (config_.max_spec_step_tokens > 0) {  // the decodes come first: drafts get what is left
    draft_budget_ = std::max(0, config_.max_spec_step_tokens - n_decodes);
  }
  // Keep ~1% of the pool free when admitting (and topping up), so that
  // running sequences can grow for a while before anything must be preempted
  // (vLLM's watermark).
  const int32_t watermark = running_.empty() ? 0 : kv_.n_blocks() / 100;

  schedule_running(/*decodes=*/true);
  schedule_running(/*decodes=*/false);
  if (plan_.n_preempted > 0) {
    std::erase_if(running_, [](const Sequence* s) { return s->status != SeqStatus::kRunning; });
  } else {
    admit_waiting(watermark);
  }
  top_up_prefills(watermark);
  OMNIBUS_DCHECK(plan_.n_tokens + budget_ == step_budget_);
  return plan_;
}

int32_t Scheduler::n_decoding() const {
  int32_t n = 0;
  for (const Sequence* seq : running_) {
    if (seq->num_tokens() - seq->num_computed_tokens == 1) ++n;
  }
  return n;
}

const std::vector<int32_t>& Scheduler::update_from_output() {
  to_sample_.clear();
  for (size_t i = 0; i < plan_.seqs.size(); ++i) {
    Sequence& seq = *plan_.seqs[i].seq;
    const int32_t n_draft = plan_.seqs[i].n_draft;
    seq.num_computed_tokens += plan_.seqs[i].n_tokens - n_draft;
    OMNIBUS_DCHECK(kv_.n_tokens(seq.kv_seq) == seq.num_computed_tokens + n_draft);
    kv_.commit(seq.kv_seq, seq.tokens(), seq.num_computed_tokens, seq.block_keys);
    kv_.slide(seq.kv_seq, seq.num_computed_tokens);
    if (seq.num_computed_tokens == seq.num_tokens()) to_sample_.push_back(int32_t(i));
  }
  return to_sample_;
}

void Scheduler::top_up_prefills(int32_t watermark) {
  for (ScheduledSeq& e : plan_.seqs) {
    if (budget_ == 0) return;
    Sequence* seq = e.seq;
    if (seq->status != SeqStatus::kRunning) continue;  // preempted after it was planned
    const int32_t left = seq->num_tokens() - seq->num_computed_tokens - e.n_tokens;
    if (left <= 0) continue;
    // Never preempt, nor dip below the watermark, for a top-up.
    const int32_t room =
        kv_.max_new_slots(seq->kv_seq, std::max(kv_.n_free_blocks() - watermark, 0));
    const int32_t extra = std::min({left, budget_, room});
    if (extra <= 0 || !kv_.allocate_slots(seq->kv_seq, extra, plan_.copies)) continue;
    e.n_tokens += extra;
    plan_.n_tokens += extra;
    budget_ -= extra;
  }
}

}  // namespace omnibus
