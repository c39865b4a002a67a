#include "server/response_bounds.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

GenerationSpec completions(int32_t n, int32_t max_tokens, int32_t logprobs, bool echo) {
  GenerationSpec s;
  s.endpoint = Endpoint::kCompletions;
  s.base.n = n;
  s.base.max_tokens = max_tokens;
  s.logprobs = logprobs;
  s.echo = echo;
  s.base.prompt_logprobs = echo ? logprobs : -1;  // as parse_completion_request sets it
  return s;
}

TEST(ResponseBounds, NoLogprobsNoEntries) {
  EXPECT_EQ(response_logprob_entries(completions(16, 1000, -1, true), {4000}), 0);
}

TEST(ResponseBounds, CompletionsCountsEveryChoiceAndPrompt) {
  // Without echo: n * max_tokens * (k + 1) per prompt.
  EXPECT_EQ(response_logprob_entries(completions(3, 10, 4, false), {100, 7}), 2 * 3 * 10 * 5);
  // Echo + logprobs: the echoed prompt in each choice's logprobs, and
  // prompt_logprobs (implied, k) listed per choice.
  EXPECT_EQ(response_logprob_entries(completions(2, 10, 4, true), {100}),
            2 * ((10 + 100) * 5 + 100 * 5));
  // Scoring only (echo with max_tokens 0): no generated token is listed.
  GenerationSpec score = completions(1, 1, 1, true);
  score.echo_only = true;
  EXPECT_EQ(response_logprob_entries(score, {50}), 50 * 2 + 50 * 2);
}

TEST(ResponseBounds, ChatListsPromptLogprobsOnce) {
  GenerationSpec s;
  s.endpoint = Endpoint::kChat;
  s.base.n = 4;
  s.base.max_tokens = 100;
  s.logprobs = 2;
  s.base.prompt_logprobs = 5;
  EXPECT_EQ(response_logprob_entries(s, {30}), 4 * 100 * 3 + 30 * 6);
}

TEST(ResponseBounds, TheIssueSpikeIsRefusedNamingTheFlag) {
  // {"prompt": <~4000 words>, "max_tokens": 1, "echo": true, "logprobs": 20, "n": 128}
  const GenerationSpec spike = completions(128, 1, 20, true);
  const std::optional<ApiError> e = check_response_bounds(spike, {4000}, 1000000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "logprobs");
  EXPECT_EQ(e->code, "response_too_large");
  EXPECT_NE(e->message.find("--max-logprob-entries"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("1000000"), std::string::npos) << e->message;
}

TEST(ResponseBounds, AtTheLimitPassesZeroMeansNoBound) {
  const GenerationSpec s = completions(1, 10, 0, false);  // 10 entries
  EXPECT_FALSE(check_response_bounds(s, {5}, 10).has_value());
  EXPECT_TRUE(check_response_bounds(s, {5}, 9).has_value());
  EXPECT_FALSE(check_response_bounds(completions(128, 1, 20, true), {4000}, 0).has_value());
}

}  // namespace
}  // namespace omnibus::server
