// propose_ngram against a brute-force reference written from the definition
// (ngram_proposer.h), on random histories over small vocabularies (many
// repeats) and on hand-made cases.
#include "engine/ngram_proposer.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace omnibus {
namespace {

// The definition, literally: for n from max_n down, every earlier start
// whose n tokens equal the last n; the latest wins; its next (at most k) tokens.
std::vector<int32_t> reference(const std::vector<int32_t>& h, NgramParams p, int32_t k) {
  const int64_t len = int64_t(h.size());
  for (int64_t n = p.max_n; n >= p.min_n; --n) {
    if (n >= len) continue;
    int64_t best = -1;
    for (int64_t s = 0; s + n < len; ++s) {
      if (std::equal(h.begin() + s, h.begin() + s + n, h.end() - n)) best = s;
    }
    if (best >= 0) {
      const int64_t end = std::min(best + n + k, len);
      return std::vector<int32_t>(h.begin() + best + n, h.begin() + end);
    }
  }
  return {};
}

TEST(NgramProposer, ProposesWhatFollowedTheLatestMatch) {
  // "1 2 3 7 8 9 | 1 2 3 5 6 | 1 2 3": the latest "1 2 3" was followed by 5 6.
  const std::vector<int32_t> prompt{1, 2, 3, 7, 8, 9, 1, 2, 3, 5, 6};
  const std::vector<int32_t> output{1, 2, 3};
  std::vector<int32_t> out;
  propose_ngram(prompt, output, NgramParams{1, 3}, 4, out);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 6, 1, 2}));
  propose_ngram(prompt, output, NgramParams{1, 3}, 1, out);
  EXPECT_EQ(out, (std::vector<int32_t>{5}));
}

TEST(NgramProposer, ALongerMatchWinsOverARecentShortOne) {
  // Suffix "4 1 2": "4 1 2" occurred once (then 7); "1 2" later (then 9).
  const std::vector<int32_t> h{4, 1, 2, 7, 0, 1, 2, 9, 4, 1, 2};
  std::vector<int32_t> out;
  propose_ngram(h, {}, NgramParams{1, 3}, 1, out);
  EXPECT_EQ(out, (std::vector<int32_t>{7}));
  propose_ngram(h, {}, NgramParams{1, 2}, 1, out);
  EXPECT_EQ(out, (std::vector<int32_t>{9}));
}

TEST(NgramProposer, NothingWithoutAMatchOrRoom) {
  std::vector<int32_t> out{42};
  propose_ngram(std::vector<int32_t>{1, 2, 3, 4}, {}, NgramParams{1, 4}, 3, out);
  EXPECT_TRUE(out.empty());
  propose_ngram(std::vector<int32_t>{5}, {}, NgramParams{1, 4}, 3, out);
  EXPECT_TRUE(out.empty());
  propose_ngram(std::vector<int32_t>{5, 5}, {}, NgramParams{1, 4}, 0, out);
  EXPECT_TRUE(out.empty());
  propose_ngram(std::vector<int32_t>{5, 5}, {}, NgramParams{2, 4}, 3, out);  // n = 2 needs 3
  EXPECT_TRUE(out.empty());
}

TEST(NgramProposer, EqualsTheReferenceOnRandomHistories) {
  std::mt19937 rng(7);
  std::vector<int32_t> out;
  for (int trial = 0; trial < 3000; ++trial) {
    const int32_t vocab = 2 + int32_t(rng() % 6);
    const size_t len = rng() % 40;
    std::vector<int32_t> h(len);
    for (int32_t& t : h) t = int32_t(rng() % uint32_t(vocab));
    const size_t n_prompt = len == 0 ? 0 : rng() % (len + 1);
    const NgramParams p{1 + int32_t(rng() % 3), 0};
    const NgramParams q{p.min_n, p.min_n + int32_t(rng() % 4)};
    const int32_t k = int32_t(rng() % 6);
    propose_ngram(std::span<const int32_t>(h.data(), n_prompt),
                  std::span<const int32_t>(h.data() + n_prompt, len - n_prompt), q, k, out);
    ASSERT_EQ(out, reference(h, q, k)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace omnibus
