#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"

namespace omnibus {
namespace {

// ids 1 and 3 tie at the top: the lower id comes first, in the top list and in ranks.
const std::vector<float> kLogits = {0.0f, 2.0f, -1.0f, 2.0f, 1.0f};

float lse() {
  double z = 0.0;
  for (float l : kLogits) z += std::exp(double(l));
  return float(std::log(z));
}

std::vector<int32_t> ids(const std::vector<std::pair<int32_t, float>>& top) {
  std::vector<int32_t> out;
  for (const auto& [id, lp] : top) out.push_back(id);
  return out;
}

TEST(TokenLogprob, RankAndTopListFollowOneOrder) {
  const PromptLogprob tied = token_logprob(kLogits.data(), 5, 3, 2);
  EXPECT_EQ(tied.token, 3);
  EXPECT_NEAR(tied.logprob, 2.0f - lse(), 1e-6);
  EXPECT_EQ(tied.rank, 2);  // id 1 is ahead of it
  EXPECT_EQ(ids(tied.top_logprobs), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(tied.top_logprobs[1].second, tied.logprob);

  const PromptLogprob third = token_logprob(kLogits.data(), 5, 4, 3);
  EXPECT_EQ(third.rank, 3);  // its position in a top list that holds it
  EXPECT_EQ(third.top_logprobs[2].first, 4);

  const PromptLogprob last = token_logprob(kLogits.data(), 5, 2, 0);
  EXPECT_EQ(last.rank, 5);
  EXPECT_TRUE(last.top_logprobs.empty());
}

TEST(TopLogprobs, AKBeyondTheVocabularyListsEveryIdBestFirst) {
  const auto top = top_logprobs(kLogits.data(), 5, 20, lse());
  EXPECT_EQ(ids(top), (std::vector<int32_t>{1, 3, 4, 0, 2}));
  for (const auto& [id, lp] : top) EXPECT_EQ(lp, kLogits[size_t(id)] - lse());
}

// The sampler reports its alternatives through the same function.
TEST(TopLogprobs, TheSamplerListsTheSameAlternatives) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.n_logprobs = 3;
  std::vector<float> row = kLogits;
  const SampledToken t = Sampler(p, 5).sample(row.data(), {}, {});
  EXPECT_EQ(t.id, 1);
  EXPECT_EQ(t.top_logprobs, token_logprob(kLogits.data(), 5, 1, 3).top_logprobs);
  EXPECT_EQ(t.logprob, token_logprob(kLogits.data(), 5, 1, 3).logprob);
}

}  // namespace
}  // namespace omnibus
