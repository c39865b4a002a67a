// Prompt lookup proposals (ngram_proposer.h): a backwards scan for the most
// recent earlier occurrence of the history's last n tokens.
#include "engine/ngram_proposer.h"

#include <algorithm>

#include "util/check.h"

namespace omnibus {

void propose_ngram(std::span<const int32_t> prompt, std::span<const int32_t> output,
                   const NgramParams& p, int32_t k, std::vector<int32_t>& out) {
  OMNIBUS_CHECK(p.min_n >= 1 && p.max_n >= p.min_n && k >= 0);
  out.clear();
  const int64_t n_prompt = int64_t(prompt.size());
  const int64_t len = n_prompt + int64_t(output.size());
  auto at = [&](int64_t i) {
    return i < n_prompt ? prompt[size_t(i)] : output[size_t(i - n_prompt)];
  };
  if (k == 0) return;
  // n <= len - 1: an occurrence must end before the suffix does.
  for (int64_t n = std::min<int64_t>(p.max_n, len - 1); n >= p.min_n; --n) {
    const int64_t suffix = len - n;
    for (int64_t s = suffix - 1; s >= 0; --s) {
      int64_t j = n - 1;  // the last token first: most candidates differ there
      while (j >= 0 && at(s + j) == at(suffix + j)) --j;
      if (j >= 0) continue;
      const int64_t end = std::min(s + n + k, len);
      for (int64_t i = s + n; i < end; ++i) out.push_back(at(i));
      return;
    }
  }
}

}  // namespace omnibus
