#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "util/check.h"

namespace omnibus {

PromptLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t token, int32_t k) {
  OMNIBUS_CHECK(token >= 0 && token < n_vocab && k >= 0);
  // the same normaliser as the sampler's logprobs (kernels/ops.h)
  const float max_logit = logits[argmax(logits, n_vocab)];
  const float lse = log_sum_exp(logits, n_vocab, max_logit);
  PromptLogprob out;
  out.token = token;
  out.logprob = logits[token] - lse;
  if (k == 0) return out;
  // Partial selection of the k best (logit desc, id asc).
  auto better = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  std::vector<std::pair<int32_t, float>> best;
  best.reserve(size_t(std::min(k, n_vocab)) + 1);
  for (int32_t i = 0; i < n_vocab; ++i) {
    const std::pair<int32_t, float> c{i, logits[i]};
    if (int32_t(best.size()) < k) {
      best.push_back(c);
      std::push_heap(best.begin(), best.end(), better);
    } else if (better(c, best.front())) {
      std::pop_heap(best.begin(), best.end(), better);
      best.back() = c;
      std::push_heap(best.begin(), best.end(), better);
    }
  }
  std::sort_heap(best.begin(), best.end(), better);
  for (auto& [id, l] : best) l -= lse;
  out.top_logprobs = std::move(best);
  return out;
}

}  // namespace omnibus
