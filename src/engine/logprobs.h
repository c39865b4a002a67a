// Raw log-softmax lookups on one row of logits: prompt logprobs (the engine)
// and the sampler's logprobs of sampled tokens use the same functions, so both
// report lse = max + log(sum(exp(l - max))) summed in double (kernels/ops.h)
// and the same order: higher logit first, ties by lower id.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace omnibus {

// logits: [n_vocab]; lse: their log-sum-exp. The k best (id, logits[id] - lse),
// best first. REQUIRES: k >= 0.
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t n_vocab, int32_t k,
                                                    float lse);

// logits: [n_vocab]. The logprob of `token`, its rank in that order (1: the
// best; equal to its position in a top list that holds it) and the top `k`
// alternatives. REQUIRES: 0 <= token < n_vocab, k >= 0.
PromptLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t token, int32_t k);

}  // namespace omnibus
