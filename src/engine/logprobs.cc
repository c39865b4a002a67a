#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "engine/top_k.h"
#include "kernels/ops.h"
#include "util/check.h"

namespace omnibus {

std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t n_vocab, int32_t k,
                                                    float lse) {
  OMNIBUS_CHECK(k >= 0);
  std::vector<std::pair<int32_t, float>> best;
  if (k == 0) return best;
  auto better = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  const size_t kept = size_t(std::min(k, n_vocab));
  best.reserve(kept);
  for (int32_t i = 0; i < n_vocab; ++i) offer_to_top_k(best, kept, {i, logits[i]}, better);
  std::sort_heap(best.begin(), best.end(), better);
  for (auto& [id, l] : best) l -= lse;
  return best;
}

PromptLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t token, int32_t k) {
  OMNIBUS_CHECK(token >= 0 && token < n_vocab && k >= 0);
  // the same normaliser as the sampler's logprobs (kernels/ops.h)
  const float max_logit = logits[argmax(logits, n_vocab)];
  const float lse = log_sum_exp(logits, n_vocab, max_logit);
  PromptLogprob out;
  out.token = token;
  out.logprob = logits[token] - lse;
  const float l = logits[token];
  int32_t ahead = 0;  // tokens before `token` in the top order
  for (int32_t i = 0; i < n_vocab; ++i) ahead += logits[i] > l || (logits[i] == l && i < token);
  out.rank = ahead + 1;
  out.top_logprobs = top_logprobs(logits, n_vocab, k, lse);
  return out;
}

}  // namespace omnibus
