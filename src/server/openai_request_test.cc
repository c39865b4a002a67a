#include "server/openai_request.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

using nlohmann::json;

ParseLimits limits() {
  ParseLimits l;
  l.n_vocab = 1000;
  return l;
}

ApiResult<GenerationSpec> completion(const std::string& body) {
  return parse_completion_request(json::parse(body), limits());
}
ApiResult<GenerationSpec> chat(const std::string& body) {
  return parse_chat_request(json::parse(body), limits());
}

// The request is rejected with 400 naming `param`.
void expect_invalid(const ApiResult<GenerationSpec>& r, const std::string& param) {
  ASSERT_FALSE(r.ok()) << "accepted, expected an error on " << param;
  EXPECT_EQ(r.error().status, 400);
  EXPECT_EQ(r.error().type, "invalid_request_error");
  EXPECT_EQ(r.error().param, param) << r.error().message;
}

// Every body is rejected with 400 naming `param`.
void expect_all_invalid(ApiResult<GenerationSpec> (*parse)(const std::string&),
                        const std::string& param, const std::vector<std::string>& bodies) {
  for (const std::string& body : bodies) {
    SCOPED_TRACE(body);
    expect_invalid(parse(body), param);
  }
}

TEST(CompletionRequest, MapsFieldsToTheEngineRequest) {
  auto r =
      completion(R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0, "top_p": 0.5,
      "top_k": 40, "min_p": 0.1, "presence_penalty": 1, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
      "seed": 42, "n": 3, "stop": ["\n", "END"], "stop_token_ids": [2], "ignore_eos": true, "min_tokens": 2,
      "logprobs": 4, "echo": true, "logit_bias": {"17": -100}, "stream": true,
      "stream_options": {"include_usage": true}, "user": "u", "unknown_field": {"x": 1}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GenerationSpec& s = *r;
  EXPECT_EQ(s.model, "m");
  ASSERT_EQ(s.prompts.size(), 1u);
  EXPECT_EQ(s.prompts[0].text, "hi");
  EXPECT_EQ(s.base.max_tokens, 7);
  EXPECT_EQ(s.base.sampling.temperature, 0.0f);
  EXPECT_EQ(s.base.sampling.top_p, 0.5f);
  EXPECT_EQ(s.base.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(s.base.sampling.min_p, 0.1f);
  EXPECT_EQ(s.base.sampling.presence_penalty, 1.0f);
  EXPECT_EQ(s.base.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.base.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(s.base.sampling.has_seed);
  EXPECT_EQ(s.base.sampling.seed, 42u);
  EXPECT_EQ(s.base.n, 3);
  EXPECT_EQ(s.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(s.base.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(s.base.ignore_eos);
  EXPECT_EQ(s.base.min_tokens, 2);
  EXPECT_EQ(s.logprobs, 4);
  EXPECT_EQ(s.base.sampling.n_logprobs, 4);
  EXPECT_EQ(s.base.prompt_logprobs, 4);  // echo + logprobs
  ASSERT_EQ(s.base.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(s.base.sampling.logit_bias[0].first, 17);
  EXPECT_TRUE(s.stream);
  EXPECT_TRUE(s.include_usage);
  EXPECT_EQ(s.base.sampling.penalty_last_n, -1);
}

TEST(CompletionRequest, Defaults) {
  auto r = completion(R"({"prompt": "hi"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->base.max_tokens, 16);
  EXPECT_EQ(r->base.n, 1);
  EXPECT_EQ(r->logprobs, -1);
  EXPECT_EQ(r->base.prompt_logprobs, -1);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->base.sampling.has_seed);
  EXPECT_EQ(r->base.sampling.temperature, 1.0f);
}

TEST(CompletionRequest, PromptShapes) {
  auto a = completion(R"({"prompt": ["a", "b"]})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->prompts.size(), 2u);
  auto b = completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->prompts.size(), 1u);
  EXPECT_FALSE(b->prompts[0].is_text);
  EXPECT_EQ(b->prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  auto c = completion(R"({"prompt": [[1, 2], [3]]})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompts.size(), 2u);
  EXPECT_EQ(c->prompts[1].ids, std::vector<int32_t>{3});
}

TEST(CompletionRequest, RejectsBadPrompts) {
  expect_all_invalid(completion, "prompt",
                     {R"({})", R"({"prompt": ""})", R"({"prompt": []})", R"({"prompt": 5})",
                      R"({"prompt": [1, "a"]})", R"({"prompt": [[1], []]})",
                      R"({"prompt": [1, 1000]})",  // outside the vocabulary
                      R"({"prompt": [-1]})", R"({"prompt": {"text": "x"}})"});
}

// Each field of `prompt: "x"` requests, set to a value of the wrong type or
// out of range, is rejected naming that field.
TEST(CompletionRequest, RejectsBadFields) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Wrong types.
      {R"("max_tokens": "5")", "max_tokens"},
      {R"("max_tokens": 5.5)", "max_tokens"},
      {R"("temperature": "hot")", "temperature"},
      {R"("temperature": true)", "temperature"},
      {R"("stream": 1)", "stream"},
      {R"("n": 1.0)", "n"},
      {R"("stop": 3)", "stop"},
      {R"("stop": ["a", 3])", "stop"},
      {R"("seed": "1")", "seed"},
      {R"("logit_bias": [1])", "logit_bias"},
      {R"("model": 3)", "model"},
      {R"("stream_options": {"include_usage": true})", "stream_options"},
      {R"("stream": true, "stream_options": {"include_usage": "yes"})",
       "stream_options.include_usage"},
      {R"("prompt_logprobs": true)", "prompt_logprobs"},
      // Out of range.
      {R"("max_tokens": -1)", "max_tokens"},
      {R"("max_tokens": 0)", "max_tokens"},  // 0 only with echo
      {R"("temperature": 2.5)", "temperature"},
      {R"("temperature": -0.1)", "temperature"},
      {R"("top_p": 0)", "top_p"},
      {R"("top_p": 1.5)", "top_p"},
      {R"("top_k": -2)", "top_k"},
      {R"("min_p": 2)", "min_p"},
      {R"("presence_penalty": 3)", "presence_penalty"},
      {R"("frequency_penalty": -3)", "frequency_penalty"},
      {R"("repetition_penalty": 0)", "repetition_penalty"},
      {R"("n": 0)", "n"},
      {R"("n": 129)", "n"},
      {R"("logprobs": 21)", "logprobs"},
      {R"("prompt_logprobs": 21)", "prompt_logprobs"},
      {R"("prompt_logprobs": -1)", "prompt_logprobs"},
      {R"("logit_bias": {"5": 101})", "logit_bias"},
      {R"("logit_bias": {"5000": 1})", "logit_bias"},
      {R"("logit_bias": {"abc": 1})", "logit_bias"},
      {R"("stop": [""])", "stop"},
      {R"("stop_token_ids": [1000])", "stop_token_ids"},
      {R"("min_tokens": 5, "max_tokens": 4)", "min_tokens"},
      {R"("best_of": 3)", "best_of"},
      // vLLM: prompt logprobs are not streamed.
      {R"("stream": true, "prompt_logprobs": 1)", "prompt_logprobs"},
  };
  for (const auto& [field, param] : cases) {
    SCOPED_TRACE(field);
    expect_invalid(completion(R"({"prompt": "x", )" + field + "}"), param);
  }
}

// prompt_logprobs and echo + logprobs share the engine's one computation: it
// runs with the larger k.
// Limits set by serve flags: a request over one names the limit and the flag.
TEST(Request, ServerLimitsNameTheFlag) {
  ParseLimits l = limits();
  l.max_n = 4;
  l.max_logprobs = 5;
  const auto expect_over = [](const ApiResult<GenerationSpec>& r, const std::string& param,
                              const std::string& text) {
    expect_invalid(r, param);
    if (r.ok()) return;
    EXPECT_NE(r.error().message.find(text), std::string::npos) << r.error().message;
  };
  const auto comp = [&l](const std::string& fields) {
    return parse_completion_request(json::parse(R"({"prompt": "x", )" + fields + "}"), l);
  };
  const auto ch = [&l](const std::string& fields) {
    return parse_chat_request(
        json::parse(R"({"messages": [{"role": "user", "content": "x"}], )" + fields + "}"), l);
  };
  expect_over(comp(R"("n": 5)"), "n", "at most 4 (this server's --max-n)");
  expect_over(comp(R"("n": 4, "best_of": 5)"), "best_of", "--max-n");
  expect_over(comp(R"("logprobs": 6)"), "logprobs", "at most 5 (this server's --max-logprobs)");
  expect_over(comp(R"("prompt_logprobs": 6)"), "prompt_logprobs", "--max-logprobs");
  expect_over(ch(R"("n": 5)"), "n", "--max-n");
  expect_over(ch(R"("logprobs": true, "top_logprobs": 6)"), "top_logprobs", "--max-logprobs");
  // At the limits: accepted.
  EXPECT_TRUE(comp(R"("n": 4, "best_of": 4, "logprobs": 5, "prompt_logprobs": 5)").ok());
  EXPECT_TRUE(ch(R"("n": 4, "logprobs": true, "top_logprobs": 5)").ok());
}

TEST(CompletionRequest, PromptLogprobsAndEchoShareOneEngineComputation) {
  const std::vector<std::pair<std::string, int32_t>> cases = {
      {R"("prompt_logprobs": 3)", 3},
      {R"("prompt_logprobs": 0)", 0},
      {R"("logprobs": 4)", -1},  // without echo the prompt is not scored
      {R"("echo": true, "logprobs": 2)", 2},
      {R"("echo": true, "logprobs": 5, "prompt_logprobs": 2)", 5},
      {R"("echo": true, "logprobs": 1, "prompt_logprobs": 6)", 6},
      {R"("echo": true, "prompt_logprobs": 1)", 1},
  };
  for (const auto& [fields, k] : cases) {
    auto r = completion(R"({"prompt": "x", )" + fields + "}");
    ASSERT_TRUE(r.ok()) << fields << ": " << r.error().message;
    EXPECT_EQ(r->base.prompt_logprobs, k) << fields;
  }
  EXPECT_EQ(completion(R"({"prompt": "x", "prompt_logprobs": 3})")->prompt_logprobs, 3);
  EXPECT_EQ(completion(R"({"prompt": "x", "echo": true, "logprobs": 2})")->prompt_logprobs, -1);
}

TEST(CompletionRequest, EchoWithZeroMaxTokensScoresThePrompt) {
  auto r = completion(R"({"prompt": "x", "echo": true, "max_tokens": 0, "logprobs": 1})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->echo_only);
  EXPECT_EQ(r->base.max_tokens, 1);
  EXPECT_EQ(r->base.prompt_logprobs, 1);
}

TEST(ChatRequest, MessagesAndLimits) {
  auto r = chat(R"({"messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}], "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1].content, "hi there");
  EXPECT_EQ(r->messages[2].content, "");
  EXPECT_EQ(r->base.max_tokens, 9);
  EXPECT_TRUE(r->max_tokens_set);
  EXPECT_EQ(r->logprobs, 3);
  EXPECT_EQ(r->base.sampling.n_logprobs, 3);
  EXPECT_FALSE(r->add_special_tokens);
}

TEST(ChatRequest, WithoutALimitTheContextDecides) {
  auto r = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->max_tokens_set);
  EXPECT_EQ(r->logprobs, -1);
}

TEST(ChatRequest, RejectsBadMessages) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [1]})", "messages[0]"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": true, "prompt_logprobs": 0})",
       "prompt_logprobs"},
  };
  for (const auto& [body, param] : cases) {
    SCOPED_TRACE(body);
    expect_invalid(chat(body), param);
  }
}

TEST(ChatRequest, PromptLogprobs) {
  auto r = chat(R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 2})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->prompt_logprobs, 2);
  EXPECT_EQ(r->base.prompt_logprobs, 2);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}]})")->base.prompt_logprobs, -1);
}

TEST(Request, BodyMustBeAnObject) {
  auto r = parse_completion_request(json::array(), limits());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 400);
}

TEST(ApiError, OpenAiShape) {
  const json j = json::parse(ApiError::invalid("n", "bad n").to_json());
  EXPECT_EQ(j["error"]["message"], "bad n");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(ApiError::unauthorized("x").status, 401);
  EXPECT_EQ(ApiError::too_large("x").status, 413);
  EXPECT_EQ(ApiError::unavailable("x").status, 503);
}

}  // namespace
}  // namespace omnibus::server
