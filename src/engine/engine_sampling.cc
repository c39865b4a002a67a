// Sampling a step's tokens: each logits row is masked (min_tokens, grammar)
// and sampled, in parallel over the model's pool, then each token is appended
// and its event pushed, in order, with the stop conditions applied.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/grammar_masks.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "grammar/token_mask.h"
#include "kernels/thread_pool.h"

namespace omnibus {

// Samples every job's token (in parallel over the model's pool: each job
// touches only its own sequence's sampler and a per-thread scratch row), then
// applies them in job order on this thread. The result is the same as
// sampling the jobs one after another.
void Engine::Impl::sample_all(std::vector<SampleJob>& jobs, Clock::time_point now) {
  if (config.on_logits) {
    for (const SampleJob& j : jobs) {
      config.on_logits(j.seq->request->id, j.seq->index, j.seq->num_tokens() - 1,
                       std::span<const float>(j.row, size_t(n_vocab)));
    }
  }
  ThreadPool* pool = model.thread_pool();
  if (pool != nullptr && jobs.size() > 1) {
    pool->parallel_for(int64_t(jobs.size()), [&](int64_t i, int thread) {
      SampleJob& j = jobs[size_t(i)];
      j.token = draw(*j.seq, j.row, scratch[size_t(thread)].data(), j.mask_seconds);
    });
  } else {
    for (SampleJob& j : jobs) j.token = draw(*j.seq, j.row, scratch[0].data(), j.mask_seconds);
  }
  for (SampleJob& j : jobs) {
    record_mask_time(j.mask_seconds);
    emit(*j.seq, std::move(j.token), now);
  }
}

void Engine::Impl::record_mask_time(double mask_seconds) {
  if (mask_seconds < 0) return;
  const auto& bounds = EngineStats::kMaskBounds;
  const size_t b =
      size_t(std::lower_bound(bounds.begin(), bounds.end(), mask_seconds) - bounds.begin());
  ++local.structured_mask_buckets[b];
  ++local.structured_masks;
  local.structured_mask_seconds += mask_seconds;
}

// The sampler's pick for seq from its logits row (min_tokens and grammar
// masking applied to a copy in scratch_row, [n_vocab]). Touches only seq's
// sampler and mask.
SampledToken Engine::Impl::draw(Sequence& seq, const float* row, float* scratch_row,
                                double& mask_seconds) {
  const Request& req = seq.request->req;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (const std::optional<int32_t> forced = seq.thinking.forced_token()) {
    // The thinking budget ran out: the closing tag is the only token.
    std::fill(scratch_row, scratch_row + n_vocab, kNegInf);
    scratch_row[size_t(*forced)] = row[size_t(*forced)];
    return seq.sampler->sample(scratch_row, *seq.prompt, seq.output);
  }
  std::copy(row, row + n_vocab, scratch_row);
  if (seq.matcher && seq.thinking.in_block()) {  // the answer the grammar waits for comes first
    for (int32_t id : config.eog_ids) {
      if (id >= 0 && id < n_vocab) scratch_row[size_t(id)] = kNegInf;
    }
  }
  if (int32_t(seq.output.size()) < req.min_tokens) {
    if (!req.ignore_eos) {
      for (int32_t id : config.eog_ids) {
        if (id >= 0 && id < n_vocab) scratch_row[size_t(id)] = kNegInf;
      }
    }
    for (int32_t id : req.stop_token_ids) scratch_row[size_t(id)] = kNegInf;
  }
  if (seq.matcher && seq.thinking.next_is_answer()) {
    // Before every sampling stage: what the grammar forbids does not exist.
    const Clock::time_point t0 = Clock::now();
    std::shared_ptr<const grammar::TokenBitmask> mask =
        seq.next_mask ? GrammarMasks::get(*seq.next_mask) : req.grammar->allowed(*seq.matcher);
    // A mask that allows nothing (a grammar the vocabulary cannot continue)
    // is not applied: emit() then finds the token rejected and ends the sequence.
    const bool any = std::any_of(mask->begin(), mask->end(), [](uint64_t w) { return w != 0; });
    if (any) {
      const std::optional<int32_t> open = seq.thinking.may_open();  // the block may still open
      const float open_logit = open ? scratch_row[size_t(*open)] : 0.0f;
      grammar::TokenMasker::apply(*mask, scratch_row, n_vocab);
      if (open) scratch_row[size_t(*open)] = open_logit;
    }
    mask_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return seq.sampler->sample(scratch_row, *seq.prompt, seq.output);
}

// Appends t to seq's output, pushes its event and applies the stop conditions.
void Engine::Impl::emit(Sequence& seq, SampledToken t, Clock::time_point now) {
  RequestState& r = *seq.request;
  const Request& req = r.req;
  seq.output.push_back(t.id);
  ++local.n_tokens_generated;
  if (seq.shadow_draft >= 0) {  // speculation.h: acceptance measured without a draft
    seq.draft_stats.observe(1, t.id == seq.shadow_draft ? 1 : 0);
    seq.shadow_draft = -1;
  }

  EngineEvent e;
  e.seq_index = seq.index;
  e.token = t.id;
  e.logprob = t.logprob;
  e.top_logprobs = std::move(t.top_logprobs);
  e.n_prompt_tokens = seq.num_prompt_tokens();
  e.n_cached_tokens = std::max(0, seq.num_cached_tokens - seq.num_imported_tokens);
  e.n_output_tokens = int32_t(seq.output.size());
  e.time = now;
  e.first_scheduled = seq.first_scheduled;
  if (seq.index == 0 && seq.output.size() == 1 && req.prompt_logprobs >= 0) {
    e.prompt_logprobs = std::move(r.prompt_logprobs);
  }
  const bool stop_token = std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), t.id) !=
                          req.stop_token_ids.end();
  // Constrained: an end token means the grammar ended (it is only allowed
  // where it may), whatever ignore_eos says. A token the grammar rejects
  // (only drawn when it allowed none: the matcher cannot continue) ends the
  // sequence without being printed: "stop" where the output so far is a whole
  // sentence of the grammar, else kGrammarDeadEnd (never "stop" for an output
  // that does not match).
  const bool answer = seq.thinking.on_token(t.id);
  e.n_reasoning_tokens = seq.thinking.n_reasoning_tokens();
  bool grammar_end = false;
  bool dead_end = false;
  if (seq.matcher && answer) {
    seq.next_mask.reset();
    const bool accepted = req.grammar->accept_token(*seq.matcher, t.id);  // an end token: can_end()
    if (!accepted) ++local.structured_rejections;
    grammar_end = is_eog[size_t(t.id)] || !accepted;
    dead_end = grammar_end && !seq.matcher->can_end();
  }
  if (dead_end) {
    finish(seq, FinishReason::kGrammarDeadEnd, e);
  } else if ((!req.ignore_eos && is_eog[size_t(t.id)]) || stop_token || grammar_end) {
    finish(seq, FinishReason::kStop, e);
  } else if (int32_t(seq.output.size()) >= req.max_tokens) {
    finish(seq, FinishReason::kLength, e);
  } else if (seq.matcher && seq.thinking.next_is_answer()) {
    seq.next_mask = masks.submit(req.grammar, *seq.matcher);  // computed during the next forward
  }
  r.stream->push(std::move(e));
}

}  // namespace omnibus
