// Speculative decoding on the engine thread (engine/speculation.h): after a
// step, each sequence that ran with a draft is verified row by row exactly as
// plain decoding samples, the scheduler keeps the accepted tokens' K/V and
// drops the rest; then the sequences that go on decoding get their next draft
// (prompt lookup per sequence, or one batched call of the draft model).
#include <algorithm>
#include <span>

#include "engine/engine_impl.h"
#include "engine/ngram_proposer.h"
#include "util/check.h"

namespace omnibus {

void Engine::Impl::verify_drafts(std::vector<VerifyJob>& jobs, Clock::time_point now) {
  for (const VerifyJob& j : jobs) verify(*j.seq, j.rows, now);
  jobs.clear();
}

// Row j holds the logits after the sequence's last token and draft[0..j):
// valid while every earlier draft token was the one sampled. Each draw is
// the one plain decoding makes at that position (same history, same
// sampler state, and for a constrained sequence the same grammar state:
// emit() moves its matcher by the sampled tokens only, so a refused draft
// leaves nothing to roll back), so the output does not depend on the draft.
void Engine::Impl::verify(Sequence& seq, const float* rows, Clock::time_point now) {
  const int32_t n_draft = int32_t(seq.draft.size());
  int32_t accepted = 0;
  for (int32_t j = 0; j <= n_draft; ++j) {
    const float* row = rows + int64_t(j) * n_vocab;
    if (config.on_logits) {
      config.on_logits(seq.request->id, seq.index, seq.num_tokens() - 1,
                       std::span<const float>(row, size_t(n_vocab)));
    }
    double mask_seconds = -1;
    SampledToken t = draw(seq, row, scratch[0].data(), mask_seconds);
    record_mask_time(mask_seconds);
    const bool hit = j < n_draft && t.id == seq.draft[size_t(j)];
    emit(seq, std::move(t), now);
    if (hit) ++accepted;
    if (!hit || seq.status == SeqStatus::kFinished) break;
  }
  ++local.spec_drafts;
  local.spec_draft_tokens += uint64_t(n_draft);
  local.spec_accepted_tokens += uint64_t(accepted);
  for (int32_t p = 0; p < accepted; ++p) ++local.spec_accepted_per_pos[size_t(p)];
  seq.draft_stats.observe(n_draft, accepted);
  if (seq.status == SeqStatus::kFinished) {
    seq.draft.clear();  // its blocks went with it
  } else {
    scheduler.accept_draft(&seq, accepted);
  }
}

void Engine::Impl::propose(Sequence& seq, int32_t k) {
  const SpeculativeConfig& sc = config.speculative;
  if (config.propose_for_testing) {
    config.propose_for_testing(*seq.prompt, seq.index, seq.output, k, seq.draft);
    OMNIBUS_CHECK(int32_t(seq.draft.size()) <= k);
  } else {
    propose_ngram(*seq.prompt, seq.output, NgramParams{sc.ngram_min, sc.ngram_max}, k, seq.draft);
  }
}

void Engine::Impl::fit_draft_to_grammar(Sequence& seq) {
  if (!seq.matcher || seq.draft.empty()) return;
  grammar::GrammarMatcher m = *seq.matcher;  // where the next sampled token starts
  const grammar::TokenMasker& g = *seq.request->req.grammar;
  size_t keep = 0;
  while (keep < seq.draft.size()) {
    const int32_t t = seq.draft[keep];
    if (!g.accept_token(m, t)) break;
    ++keep;
    if (is_eog[size_t(t)]) break;  // the grammar ended: sampling stops there
  }
  local.spec_grammar_cut_tokens += seq.draft.size() - keep;
  seq.draft.resize(keep);
}

namespace {

// A running sequence whose request may be speculated at all (no thinking
// budget or pooling, and not opted out). A grammar's sequence drafts only
// what its grammar allows (fit_draft_to_grammar).
bool speculation_allowed(const Sequence& seq) {
  const Request& req = seq.request->req;
  return seq.status == SeqStatus::kRunning && req.speculative && !req.thinking && !req.embed;
}

}  // namespace

bool Engine::Impl::drafts_later(const Sequence& seq) const {
  return speculation_allowed(seq) && seq.output.empty() &&
         seq.num_computed_tokens < seq.num_prompt_tokens();
}

bool Engine::Impl::may_speculate(const Sequence& seq) const {
  // Decoding: its first token is sampled (queue_sampling forks n > 1 there,
  // and only then is the prompt's last row sampled), one token to compute.
  return speculation_allowed(seq) && !seq.output.empty() &&
         seq.num_tokens() - seq.num_computed_tokens == 1;
}

// The next draft of each sequence of the step that goes on decoding: at
// most what its acceptance asks for (draft_length) and what max_tokens
// leaves after the token every step yields anyway.
void Engine::Impl::propose_drafts(const StepPlan& plan) {
  const SpeculativeConfig& sc = config.speculative;
  if (sc.kind == SpeculativeKind::kNone) return;
  // What a draft token costs against a decode's share of the next step
  // (step_time_model.h). Now and then no drafts at all, so that the time of
  // a step of decodes alone stays measured; and after a long run without
  // extra tokens, drafts as if they were free for one step, so that their
  // cost (and each sequence's acceptance) is measured again.
  // A draft model's guesses cost its forwards too (kept out of the step
  // times, DraftModel::seconds_per_guess); the time of a step of decodes
  // alone is measured before its first draft, so that cost counts at once.
  const bool measure = sc.backoff && (step_time.wants_decode_only_step() ||
                                      (draft != nullptr && !step_time.has_decode_time()));
  const double cost_ratio =
      config.spec_cost_ratio_for_testing >= 0 ? config.spec_cost_ratio_for_testing
      : !sc.backoff || step_time.wants_extra_token_step()
          ? 0.0
          : step_time.cost_ratio(scheduler.n_decoding(),
                                 draft != nullptr ? draft->seconds_per_guess() : 0.0);
  for (const ScheduledSeq& ss : plan.seqs) {
    Sequence& seq = *ss.seq;
    seq.draft.clear();
    seq.shadow_draft = -1;
    if (draft != nullptr && drafts_later(seq)) {
      // Its prompt chunk goes through the draft model too, now: its first
      // drafting step then has no whole prompt to catch up on.
      draft_jobs.push_back(
          {&seq,
           TokenView{std::span<const int32_t>(*seq.prompt).first(size_t(seq.num_computed_tokens)),
                     {}},
           0, &seq.draft});
      continue;
    }
    if (measure || !may_speculate(seq)) continue;
    const int32_t left = seq.request->req.max_tokens - int32_t(seq.output.size()) - 1;
    if (left <= 0) continue;
    // q4 / kivi2: only what the KV cache can take back (KvCache::max_draft_in_block).
    const int32_t k = std::min({draft_length(sc, seq.draft_stats, cost_ratio), left,
                                kv.max_draft_in_block(seq.num_computed_tokens)});
    if (draft != nullptr) {  // batched below; a draft model's guess is never free: no shadow
      if (k > 0) draft_jobs.push_back({&seq, seq.tokens(), k, &seq.draft});
      continue;
    }
    propose(seq, std::max(k, 1));
    fit_draft_to_grammar(seq);
    if (k == 0 && !seq.draft.empty()) {  // too dear to verify: keep its first token as a shadow
      seq.shadow_draft = seq.draft[0];
      seq.draft.clear();
    }
  }
  if (draft != nullptr) {  // every step, drafts or none: its timing is per step
    draft->propose(draft_jobs);
    draft_jobs.clear();
    for (const ScheduledSeq& ss : plan.seqs) fit_draft_to_grammar(*ss.seq);
    local.spec_draft_model_seconds = draft->seconds();
    local.spec_draft_model_forwards = draft->n_forwards();
    local.spec_draft_model_guesses = draft->n_guesses();
  }
}

}  // namespace omnibus
