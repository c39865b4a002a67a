#include "engine/speculation.h"

#include <gtest/gtest.h>

namespace omnibus {
namespace {

DraftStats with_rate(double a) {
  DraftStats s;
  s.acceptance = a;
  return s;
}

TEST(DraftLength, FollowsTheAcceptanceInAMemoryBoundStep) {
  SpeculativeConfig c;
  c.num_speculative_tokens = 8;
  EXPECT_EQ(draft_length(c, with_rate(1.0)), 8);
  EXPECT_EQ(draft_length(c, with_rate(0.8)), 8);   // 0.8^10 = 0.107 >= 0.1: all 8
  EXPECT_EQ(draft_length(c, with_rate(0.5)), 3);   // 0.5^3 = 0.125, 0.5^4 < 0.1
  EXPECT_EQ(draft_length(c, with_rate(0.05)), 1);  // keeps measuring: a draft token is cheap
  EXPECT_EQ(draft_length(c, with_rate(0.0)), 1);
}

TEST(DraftLength, APositionIsDraftedOnlyWhileItPaysForItself) {
  SpeculativeConfig c;
  c.num_speculative_tokens = 8;
  // Cost ratio 0.4 (a draft token costs 40% of a decode's share of the step).
  EXPECT_EQ(draft_length(c, with_rate(0.8), 0.4), 4);  // 0.8^4 = 0.41, 0.8^5 = 0.33
  EXPECT_EQ(draft_length(c, with_rate(0.5), 0.4), 1);
  EXPECT_EQ(draft_length(c, with_rate(0.3), 0.4), 0);  // not even the first
  // A compute-bound step (ratio >= 1): even certain drafts only break even.
  EXPECT_EQ(draft_length(c, with_rate(0.95), 1.2), 0);
  EXPECT_EQ(draft_length(c, with_rate(1.0), 1.2), 0);
  // A cost below the 10% floor changes nothing.
  EXPECT_EQ(draft_length(c, with_rate(0.5), 0.05), draft_length(c, with_rate(0.5)));
}

TEST(DraftStats, MovesTowardsEachStepsRate) {
  DraftStats s;
  s.observe(4, 4);
  EXPECT_GT(s.acceptance, 0.5);
  const double up = s.acceptance;
  s.observe(4, 0);
  EXPECT_LT(s.acceptance, up);
  s.observe(0, 0);  // nothing drafted: nothing learnt
  EXPECT_LT(s.acceptance, up);
}

}  // namespace
}  // namespace omnibus
