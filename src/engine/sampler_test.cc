#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace omnibus {
namespace {

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  p.has_seed = true;
  return p;
}

// A deterministic pseudo-random logit vector: [n_vocab] values in [-8, 8).
std::vector<float> make_logits(int32_t n_vocab, uint64_t seed) {
  SamplerRng rng(seed);
  std::vector<float> v(n_vocab);
  for (float& x : v) x = static_cast<float>(rng.next_double() * 16.0 - 8.0);
  return v;
}

std::vector<int32_t> draw(Sampler& s, std::vector<float> logits, int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(s.sample(logits.data(), {}, {}).id);
  return ids;
}

// How often each id comes up in n draws of a new Sampler(p) from `logits`.
std::map<int32_t, int> draw_counts(const SamplingParams& p, const std::vector<float>& logits,
                                   int n) {
  Sampler s(p, int32_t(logits.size()));
  std::map<int32_t, int> seen;
  for (int32_t id : draw(s, logits, n)) ++seen[id];
  return seen;
}

TEST(SamplerRngTest, KnownStreamIsPlatformIndependent) {
  // Pinned values (from an independent implementation of splitmix64 +
  // xoshiro256**): a change here changes every seeded request's output.
  SamplerRng pinned(42);
  EXPECT_EQ(pinned.next_u64(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(pinned.next_u64(), 0x6104d9866d113a7eull);
  EXPECT_EQ(pinned.next_u64(), 0xae17533239e499a1ull);
  SamplerRng pinned_double(42);
  EXPECT_EQ(pinned_double.next_double(),
            static_cast<double>(0x15780b2e0c2ec716ull >> 11) * 0x1.0p-53);
  SamplerRng a(42), b(42), c(43);
  const uint64_t first = a.next_u64();
  EXPECT_EQ(first, b.next_u64());
  EXPECT_NE(first, c.next_u64());
  SamplerRng d(0);
  for (int i = 0; i < 1000; ++i) {
    const double u = d.next_double();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p = greedy();
  Sampler s(p, 5);
  std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  EXPECT_EQ(s.sample(logits.data(), {}, {}).id, 1);
  std::vector<float> big = make_logits(1000, 7);
  Sampler s2(p, 1000);
  const int32_t want = static_cast<int32_t>(std::max_element(big.begin(), big.end()) - big.begin());
  EXPECT_EQ(s2.sample(big.data(), {}, {}).id, want);
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  const std::vector<float> logits = make_logits(512, 1);
  SamplingParams p = seeded(123);
  Sampler a(p, 512), b(p, 512);
  Sampler c(seeded(124), 512);
  const auto sa = draw(a, logits, 64), sb = draw(b, logits, 64), sc = draw(c, logits, 64);
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(SamplerTest, TopK1AndTinyTopPAreGreedy) {
  const std::vector<float> logits = make_logits(4096, 3);
  const int32_t want =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  SamplingParams k1 = seeded(5);
  k1.top_k = 1;
  SamplingParams tiny_p = seeded(5);
  tiny_p.top_p = 1e-6f;
  Sampler sk(k1, 4096), sp(tiny_p, 4096);
  for (int32_t id : draw(sk, logits, 50)) EXPECT_EQ(id, want);
  for (int32_t id : draw(sp, logits, 50)) EXPECT_EQ(id, want);
}

TEST(SamplerTest, TopKKeepsOnlyTheKBest) {
  std::vector<float> logits(100, 0.0f);  // flat, except three favourites
  logits[10] = 1.0f;
  logits[20] = 1.0f;
  logits[30] = 0.5f;
  SamplingParams p = seeded(9);
  p.top_k = 3;
  std::map<int32_t, int> seen = draw_counts(p, logits, 600);
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_GT(seen[10], 0);
  EXPECT_GT(seen[20], 0);
  EXPECT_GT(seen[30], 0);
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixReachingP) {
  // probs 0.5, 0.3, 0.2 (as logits). top_p 0.7 keeps {0, 1}: 0.5 < 0.7 <= 0.8.
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p = seeded(11);
  p.top_p = 0.7f;
  std::map<int32_t, int> seen = draw_counts(p, logits, 2000);
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_GT(seen[0], seen[1]);
  EXPECT_GT(seen[1], 0);
}

TEST(SamplerTest, TopPOnALargeFlatVocabulary) {
  // 3000 equally likely tokens plus a low tail: top_p 0.9 must keep ~2700 of
  // the flat ones (all in one histogram bin) and none of the tail.
  const int32_t n = 6000;
  std::vector<float> logits(n, -10.0f);
  for (int32_t i = 0; i < n; i += 2) logits[i] = 5.0f;
  SamplingParams p = seeded(2);
  p.top_p = 0.9f;
  Sampler s(p, n);
  std::map<int32_t, int> seen;
  for (int32_t id : draw(s, logits, 1500)) {
    ASSERT_EQ(id % 2, 0) << id;
    ++seen[id];
  }
  EXPECT_GT(seen.size(), 800u);  // spread over the kept set
  // Ties are broken by id, so the kept set is the lowest ~2700 even ids.
  EXPECT_LT(seen.rbegin()->first, 2 * 2701 + 2);
}

TEST(SamplerTest, TopPHistogramKeepsTheSameSetAsAFullSort) {
  const int32_t n = 20000;  // large enough for the histogram path
  const std::vector<float> logits = make_logits(n, 31);
  const float top_p = 0.6f;
  // Reference: full sort by (logit desc, id asc), smallest prefix reaching p.
  std::vector<int32_t> order(n);
  for (int32_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const float max_logit = logits[order[0]];
  double mass = 0.0;
  for (float l : logits) mass += std::exp(static_cast<double>(l - max_logit));
  size_t kept = 0;
  double cum = 0.0;
  while (kept < order.size()) {
    cum += std::exp(static_cast<double>(logits[order[kept]] - max_logit));
    ++kept;
    if (cum >= top_p * mass) break;
  }
  ASSERT_GT(kept, 100u);
  std::vector<uint8_t> in_set(n, 0);
  for (size_t i = 0; i < kept; ++i) in_set[order[i]] = 1;

  SamplingParams p = seeded(6);
  p.top_p = top_p;
  Sampler s(p, n);
  int near_edge = 0;
  for (int32_t id : draw(s, logits, 600)) {
    ASSERT_TRUE(in_set[id]) << "id " << id << " is outside the top-p set";
    near_edge += in_set[id] && logits[id] < logits[order[kept - 1]] + 0.05f;
  }
  EXPECT_GT(near_edge, 0);  // the boundary region is reachable, not cut short
}

TEST(SamplerTest, MinPFiltersRelativeToTheTopToken) {
  // probs ~ 0.6, 0.3, 0.1: min_p 0.2 keeps tokens with p >= 0.12, so not id 2.
  std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingParams p = seeded(4);
  p.min_p = 0.2f;
  std::map<int32_t, int> seen = draw_counts(p, logits, 2000);
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_GT(seen[1], 0);
  // With min_p 0.1 (threshold 0.06) id 2 survives.
  p.min_p = 0.1f;
  EXPECT_GT(draw_counts(p, logits, 2000)[2], 0);
}

// Penalties are observable through the greedy choice: find the logit values
// the sampler used by giving one candidate a known competitor.
TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;
  Sampler s(p, 4);
  // id 0: 4.0 -> 2.0 (in prompt) loses to id 1: 3.0; id 2: -1 -> -2.
  std::vector<float> logits = {4.0f, 3.0f, -1.0f, -1.5f};
  const std::vector<int32_t> prompt = {0, 2};
  EXPECT_EQ(s.sample(logits.data(), prompt, {}).id, 1);
  // Logits are restored for the caller.
  EXPECT_EQ(logits[0], 4.0f);
  EXPECT_EQ(logits[2], -1.0f);
  // Negative side: only ids 2 and 3 compete (0 and 1 banned by bias):
  // 2 is penalised to -2.0 < -1.5, so 3 wins; without the penalty 2 would win.
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}};
  Sampler s2(p, 4);
  EXPECT_EQ(s2.sample(logits.data(), prompt, {}).id, 3);
  EXPECT_EQ(s2.sample(logits.data(), {}, {}).id, 2);
}

TEST(SamplerTest, FrequencyAndPresenceCountOutputOnly) {
  SamplingParams p = greedy();
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 1.0f;
  Sampler s(p, 3);
  // id 0 appears twice in the output: 5.0 - 2*0.5 - 1.0 = 3.0 < id 1's 3.5.
  std::vector<float> logits = {5.0f, 3.5f, 0.0f};
  const std::vector<int32_t> out2 = {0, 0};
  EXPECT_EQ(s.sample(logits.data(), {}, out2).id, 1);
  // Once only: 5.0 - 0.5 - 1.0 = 3.5 == id 1's 3.5: tie -> lowest id 0.
  const std::vector<int32_t> out1 = {0};
  EXPECT_EQ(s.sample(logits.data(), {}, out1).id, 0);
  // In the prompt, id 0 is not penalised at all by frequency/presence.
  const std::vector<int32_t> prompt = {0, 0, 0, 0};
  EXPECT_EQ(s.sample(logits.data(), prompt, {}).id, 0);
}

TEST(SamplerTest, PenaltyWindowCoversOnlyTheLastN) {
  SamplingParams p = greedy();
  p.frequency_penalty = 2.0f;
  p.penalty_last_n = 2;
  Sampler s(p, 3);
  std::vector<float> logits = {5.0f, 3.5f, 0.0f};
  // id 0 three times but outside the last two positions: not penalised.
  const std::vector<int32_t> out = {0, 0, 0, 2, 2};
  EXPECT_EQ(s.sample(logits.data(), {}, out).id, 0);
  const std::vector<int32_t> out_recent = {2, 2, 2, 0, 0};  // 5 - 2*2 = 1 < 3.5
  EXPECT_EQ(s.sample(logits.data(), {}, out_recent).id, 1);
  // The window spans prompt ++ output: prompt's tail is inside it.
  SamplingParams r = greedy();
  r.repetition_penalty = 2.0f;
  r.penalty_last_n = 2;
  Sampler sr(r, 3);
  const std::vector<int32_t> out2 = {2};
  const std::vector<int32_t> prompt_old = {0, 2};  // window {2, 2}: 0 keeps 5.0
  EXPECT_EQ(sr.sample(logits.data(), prompt_old, out2).id, 0);
  const std::vector<int32_t> prompt_new = {2, 0};  // window {0, 2}: 0 drops to 2.5 < 3.5
  EXPECT_EQ(sr.sample(logits.data(), prompt_new, out2).id, 1);
  r.penalty_last_n = 0;  // disabled
  Sampler s0(r, 3);
  const std::vector<int32_t> zeros = {0, 0, 0};
  EXPECT_EQ(s0.sample(logits.data(), zeros, zeros).id, 0);
}

TEST(SamplerTest, LogitBiasBansAndForces) {
  const std::vector<float> logits = make_logits(256, 8);
  const int32_t top =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  SamplingParams ban = seeded(1);
  ban.temperature = 0.0f;
  ban.logit_bias = {{top, -100.0f}};
  Sampler sb(ban, 256);
  EXPECT_NE(draw(sb, logits, 1)[0], top);

  SamplingParams force = seeded(1);
  force.temperature = 1.5f;
  const int32_t forced = (top + 17) % 256;
  force.logit_bias = {{forced, 100.0f}};
  Sampler sf(force, 256);
  for (int32_t id : draw(sf, logits, 200)) EXPECT_EQ(id, forced);
}

TEST(SamplerTest, TemperatureOneMatchesSoftmax) {
  // Chi-square goodness of fit, 3 degrees of freedom, fixed seed: the 0.1%
  // critical value is 16.27. A biased draw (e.g. an off-by-one in the
  // cumulative walk) lands far above it.
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> logits;
  for (double q : probs) logits.push_back(static_cast<float>(std::log(q)) + 2.0f);
  Sampler s(seeded(2024), 4);
  const int n = 40000;
  std::vector<int> counts(4, 0);
  for (int32_t id : draw(s, logits, n)) ++counts[id];
  double chi2 = 0.0;
  for (int i = 0; i < 4; ++i) {
    const double expected = probs[i] * n;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  EXPECT_LT(chi2, 16.27) << counts[0] << " " << counts[1] << " " << counts[2] << " " << counts[3];
}

TEST(SamplerTest, LowTemperatureSharpens) {
  const std::vector<float> logits = {1.0f, 0.0f};  // p(0) = 0.73 at T = 1
  SamplingParams p = seeded(3);
  p.temperature = 0.1f;  // p(0) = 1 - 4.5e-5
  Sampler s(p, 2);
  int zeros = 0;
  for (int32_t id : draw(s, logits, 1000)) zeros += id == 0;
  EXPECT_GE(zeros, 998);
}

TEST(SamplerTest, NoLogprobsUnlessAsked) {
  std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams p = greedy();
  ASSERT_EQ(p.n_logprobs, -1);  // the default: none
  const SampledToken none = Sampler(p, 4).sample(logits.data(), {}, {});
  EXPECT_EQ(none.id, 0);
  EXPECT_EQ(none.logprob, 0.0f);
  EXPECT_TRUE(none.top_logprobs.empty());
  p.n_logprobs = 0;  // the sampled token's only
  const SampledToken one = Sampler(p, 4).sample(logits.data(), {}, {});
  EXPECT_EQ(one.id, 0);
  EXPECT_LT(one.logprob, 0.0f);
  EXPECT_TRUE(one.top_logprobs.empty());
}

TEST(SamplerTest, LogprobsAreRawLogSoftmax) {
  std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams p = greedy();
  p.n_logprobs = 3;
  p.logit_bias = {{3, 50.0f}};  // forces id 3, but logprobs stay raw
  Sampler s(p, 4);
  const SampledToken t = s.sample(logits.data(), {}, {});
  double z = 0.0;
  for (float l : logits) z += std::exp(l);
  const double lse = std::log(z);
  EXPECT_EQ(t.id, 3);
  EXPECT_NEAR(t.logprob, -1.0 - lse, 1e-5);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.top_logprobs[i].first, i);
    EXPECT_NEAR(t.top_logprobs[i].second, logits[i] - lse, 1e-5);
  }
}

TEST(SamplerTest, ValidateRejectsOutOfRange) {
  const int32_t n = 100;
  EXPECT_TRUE(validate(SamplingParams{}, n).is_ok());
  auto bad = [&](auto mutate) {
    SamplingParams p;
    mutate(p);
    Status st = validate(p, n);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    return st.message();
  };
  EXPECT_NE(bad([](SamplingParams& p) { p.temperature = -0.5f; }).find("temperature"),
            std::string::npos);
  bad([](SamplingParams& p) { p.temperature = NAN; });
  EXPECT_NE(bad([](SamplingParams& p) { p.top_p = 0.0f; }).find("top_p"), std::string::npos);
  bad([](SamplingParams& p) { p.top_p = 1.5f; });
  bad([](SamplingParams& p) { p.min_p = -0.1f; });
  bad([](SamplingParams& p) { p.min_p = 1.1f; });
  bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; });
  bad([](SamplingParams& p) { p.presence_penalty = 2.5f; });
  bad([](SamplingParams& p) { p.frequency_penalty = -3.0f; });
  bad([](SamplingParams& p) { p.penalty_last_n = -2; });
  bad([](SamplingParams& p) { p.logit_bias = {{100, 1.0f}}; });
  bad([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; });
  bad([](SamplingParams& p) { p.logit_bias = {{5, 101.0f}}; });
  bad([](SamplingParams& p) { p.n_logprobs = 21; });
  bad([](SamplingParams& p) { p.n_logprobs = -2; });
  EXPECT_FALSE(validate(SamplingParams{}, 0).is_ok());
  SamplingParams edge;
  edge.top_p = 1.0f;
  edge.min_p = 1.0f;
  edge.temperature = 0.0f;
  edge.penalty_last_n = -1;
  edge.n_logprobs = 20;
  edge.top_k = -1;
  EXPECT_TRUE(validate(edge, n).is_ok());
}

TEST(SamplerTest, LargeVocabularyCombinedFiltersStayInTheKeptSet) {
  const int32_t n = 262144;  // Gemma-sized
  std::vector<float> logits = make_logits(n, 77);
  SamplingParams p = seeded(77);
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.n_logprobs = 5;
  Sampler s(p, n);
  std::vector<std::pair<float, int32_t>> order;
  for (int32_t i = 0; i < n; ++i) order.emplace_back(-logits[i], i);
  // At most 20 ids get penalised, so the top 40 after penalties lie within
  // the raw top 60.
  std::partial_sort(order.begin(), order.begin() + 60, order.end());
  std::vector<int32_t> top60;
  for (int i = 0; i < 60; ++i) top60.push_back(order[i].second);
  std::vector<int32_t> history;
  for (int step = 0; step < 20; ++step) {
    const SampledToken t = s.sample(logits.data(), {}, history);
    EXPECT_NE(std::find(top60.begin(), top60.end(), t.id), top60.end()) << t.id;
    ASSERT_EQ(t.top_logprobs.size(), 5u);
    EXPECT_EQ(t.top_logprobs[0].first, top60[0]);
    history.push_back(t.id);
  }
}

}  // namespace
}  // namespace omnibus
