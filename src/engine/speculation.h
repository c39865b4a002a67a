// Speculative decoding inside the batch (docs/engine.md, "Speculative
// decoding"). A running sequence that decodes may carry a draft: k tokens
// guessed to follow its last one, by prompt lookup (ngram_proposer.h) or by a
// small draft model decoding greedily (draft_model.h).
// The scheduler gives it 1 + k tokens in the step (the last token and the
// draft), the forward pass returns a logits row for each, and verification
// (engine_speculation.cc) samples row j exactly as plain decoding would
// sample that position, with the sequence's own sampler and RNG: while the
// sampled token equals draft[j] the next row is valid too, so a step yields
// between 1 and k + 1 tokens. The KV slots of the rejected draft tokens are
// then dropped (KvCache::truncate) and only verified tokens ever join the
// prefix cache.
//
// Exactness: every emitted token is the sampler's pick from the logits of
// its true history (batch-invariant kernels: a row does not depend on how
// many tokens share the sequence's step), each draw consuming the RNG as
// plain decoding does, so greedy and seeded outputs are bit-identical with
// and without speculation, and logprobs are the target's. For a one-hot
// proposal (prompt lookup, a draft model's greedy guess) "sample, then compare" is the standard
// rejection rule: accepted with probability p(d) = min(1, p(d) / 1), and on rejection the token is
// distributed as p with d removed and renormalised.
//
// Backing off (prompt lookup cost 0.77x at eight slots in llama.cpp #6828):
// a verified draft token costs a token of the step's compute, which is free
// while the step is bound by reading the weights and not once it is bound by
// arithmetic. The engine measures both (StepTimeModel: the time of a step of
// B decodes alone, t_d, and what one more token adds, mu) and each sequence
// drafts only the positions whose chance of acceptance exceeds the cost
// ratio B * mu / t_d (draft_length): single streams of a model that streams
// from memory draft long, a full batch on an in-cache model drafts nothing.
// A step also carries at most max_step_tokens decode + draft tokens (the
// decodes come first), a hard bound whatever the measurements say.
//
// Thread-safety: values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "util/status.h"

namespace omnibus {

enum class SpeculativeKind { kNone, kNgram, kDraft };

// "none", "ngram" or "draft"; kInvalidArgument otherwise.
StatusOr<SpeculativeKind> parse_speculative_kind(const std::string& name);
const char* speculative_kind_name(SpeculativeKind kind);

// The most draft tokens a sequence may carry (the per-position metrics' size).
inline constexpr int32_t kMaxSpeculativeTokens = 16;

struct SpeculativeConfig {
  SpeculativeKind kind = SpeculativeKind::kNone;  // --speculative
  int32_t num_speculative_tokens = 4;             // --num-speculative-tokens: k, the most per step
  int32_t ngram_min = 1;                          // --spec-ngram-min
  int32_t ngram_max = 4;                          // --spec-ngram-max
  // --spec-max-step-tokens: a step speculates only while its decodes plus
  // their drafts stay within this many tokens (0: never).
  int32_t max_step_tokens = 32;
  // Back off by measured cost (draft_length's cost_ratio; --no-spec-backoff
  // turns it off: the acceptance alone decides, as in vLLM and llama.cpp).
  bool backoff = true;
};

// kInvalidArgument naming the flag when a value is out of range.
Status validate(const SpeculativeConfig& c);

// What a sequence has measured of its drafts.
struct DraftStats {
  // Exponential moving average of the fraction of each step's draft that
  // was accepted (a prefix: position i counts only when 0..i-1 were).
  double acceptance = 0.5;
  void observe(int32_t drafted, int32_t accepted);
};

// The draft length a sequence asks for: the longest d <= k whose last token
// is still accepted with probability >= max(10%, cost_ratio) (acceptance^d,
// taking the measured rate as each position's). cost_ratio is what a draft
// token costs relative to the tokens the step yields anyway: with B decodes in
// a step of t_d seconds and mu seconds per extra token, B * mu / t_d (0 while
// unmeasured). A position is drafted only while its expected accepted token
// is worth more than its cost, so as the batch fills and the step becomes
// compute-bound (mu -> t_d / B) drafts shrink to nothing. When no position
// pays: 0 if the cost ratio decided it, else 1 (a memory-bound step: keep
// measuring the rate, a draft token is nearly free).
int32_t draft_length(const SpeculativeConfig& c, const DraftStats& s, double cost_ratio = 0);

}  // namespace omnibus
