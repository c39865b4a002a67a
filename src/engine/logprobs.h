// Raw log-softmax lookups on one row of logits, for prompt logprobs (the
// sampler computes the same quantities for sampled tokens, with the same
// formula: lse = max + log(sum(exp(l - max))) summed in double).
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>

#include "engine/request.h"

namespace omnibus {

// logits: [n_vocab]. The logprob of `token` and the top `k` alternatives
// (best first, ties by lower id). REQUIRES: 0 <= token < n_vocab, k >= 0.
PromptLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t token, int32_t k);

}  // namespace omnibus
