#include "engine/step_time_model.h"

#include <gtest/gtest.h>

#include <cmath>

namespace omnibus {
namespace {

TEST(StepTimeModel, NothingDecodingIsNotPaced) {
  StepTimeModel m;
  EXPECT_EQ(m.token_budget(0.010, 0, 512), 512);
}

TEST(StepTimeModel, ProbesUntilAMixedStepIsSeen) {
  StepTimeModel m;
  for (int i = 0; i < 5; ++i) m.observe(8, 0, 0.010);  // decodes alone
  double t_d, mu;
  EXPECT_FALSE(m.estimates(&t_d, &mu));
  EXPECT_EQ(m.token_budget(0.030, 8, 512), 8 + StepTimeModel::kProbeTokens);
}

TEST(StepTimeModel, PacesPromptTokensToTheTarget) {
  StepTimeModel m;
  m.observe(8, 0, 0.010);
  m.observe(8, 32, 0.010 + 32 * 0.001);  // a prompt token adds 1 ms
  double t_d, mu;
  ASSERT_TRUE(m.estimates(&t_d, &mu));
  EXPECT_NEAR(t_d, 0.010, 1e-12);
  EXPECT_NEAR(mu, 0.001, 1e-12);
  EXPECT_EQ(m.token_budget(0.1105, 8, 512), 8 + 100);  // 100.5 prompt tokens fit
  // The decodes alone miss the target: prompts still get the floor.
  EXPECT_EQ(m.token_budget(0.005, 8, 512), 8 + StepTimeModel::kMinPromptTokens);
  EXPECT_EQ(m.token_budget(10.0, 8, 512), 512);  // never above the configured budget
  EXPECT_EQ(m.token_budget(0.005, 12, 12), 12);  // nor the floor
}

TEST(StepTimeModel, FollowsPromptTokensGettingDearer) {
  StepTimeModel m(0.5);
  m.observe(8, 0, 0.010);
  for (int i = 0; i < 30; ++i) m.observe(8, 40, 0.010 + 40 * 0.003);  // deep in a long prompt
  double t_d, mu;
  ASSERT_TRUE(m.estimates(&t_d, &mu));
  EXPECT_NEAR(mu, 0.003, 1e-9);
  EXPECT_EQ(m.token_budget(0.040, 8, 512), 8 + 10);
  EXPECT_EQ(m.token_budget(0.100, 8, 512), 8 + 30);
}

TEST(StepTimeModel, NoiseNeverMakesPromptsFree) {
  StepTimeModel m;
  m.observe(8, 0, 0.020);
  m.observe(8, 16, 0.015);  // faster than decodes alone: counted as a tenth of the step each
  double t_d, mu;
  ASSERT_TRUE(m.estimates(&t_d, &mu));
  EXPECT_NEAR(mu, 0.0015 / 16, 1e-12);
}

TEST(StepTimeModel, IgnoresEmptyStepsAndBadTimes) {
  StepTimeModel m;
  m.observe(0, 0, 1.0);
  m.observe(8, 0, -1.0);
  m.observe(8, 0, std::nan(""));
  double t_d, mu;
  EXPECT_FALSE(m.estimates(&t_d, &mu));
}

TEST(StepTimeModel, CostRatioOfAnExtraToken) {
  StepTimeModel m;
  EXPECT_EQ(m.cost_ratio(4), 0.0);  // unmeasured
  m.observe(4, 0, 0.008);           // 4 decodes: 2 ms each
  m.observe(4, 4, 0.012);           // 4 draft tokens added 1 ms each
  EXPECT_NEAR(m.cost_ratio(4), 0.5, 1e-12);
  EXPECT_NEAR(m.cost_ratio(1), 0.125, 1e-12);
  EXPECT_EQ(m.cost_ratio(0), 0.0);
}

// A draft model's cost per guess, timed apart from the steps, adds to mu;
// it counts as soon as the decode time is known, before any mixed step.
TEST(StepTimeModel, CostRatioWithADraftModelsCost) {
  StepTimeModel m;
  EXPECT_EQ(m.cost_ratio(1, 0.002), 0.0);  // no decode time yet
  EXPECT_FALSE(m.has_decode_time());
  m.observe(1, 0, 0.010);  // one decode: 10 ms
  EXPECT_TRUE(m.has_decode_time());
  EXPECT_NEAR(m.cost_ratio(1, 0.002), 0.2, 1e-12);  // mu unmeasured: the draft alone
  m.observe(1, 4, 0.014);                           // verifying 4 more tokens: 1 ms each
  EXPECT_NEAR(m.cost_ratio(1, 0.002), 0.3, 1e-12);
  EXPECT_NEAR(m.cost_ratio(2, 0.002), 0.6, 1e-12);
  EXPECT_NEAR(m.cost_ratio(1), 0.1, 1e-12);
}

TEST(StepTimeModel, AsksForADecodeOnlyStepWhenTheDecodeTimeIsStale) {
  StepTimeModel m;
  m.observe(4, 0, 0.008);
  for (int i = 0; i < StepTimeModel::kRemeasureSteps - 1; ++i) m.observe(4, 4, 0.012);
  EXPECT_FALSE(m.wants_decode_only_step());
  m.observe(4, 4, 0.012);
  EXPECT_TRUE(m.wants_decode_only_step());
  m.observe(4, 0, 0.009);
  EXPECT_FALSE(m.wants_decode_only_step());
  for (int i = 0; i < StepTimeModel::kRemeasureSteps - 2; ++i) m.observe(4, 0, 0.008);
  EXPECT_FALSE(m.wants_extra_token_step());  // the 0.009 step and these: one short
  m.observe(4, 0, 0.008);
  EXPECT_TRUE(m.wants_extra_token_step());  // drafts backed off for long: measure mu again
  m.observe(4, 2, 0.010);
  EXPECT_FALSE(m.wants_extra_token_step());
}

}  // namespace
}  // namespace omnibus
