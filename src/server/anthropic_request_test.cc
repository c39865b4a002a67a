#include "server/anthropic_request.h"

#include <gtest/gtest.h>

#include "server/openai_request.h"

namespace omnibus::server {
namespace {

using Json = nlohmann::ordered_json;

ApiResult<AnthropicRequest> parse(const std::string& text,
                                  AnthropicEndpoint e = AnthropicEndpoint::kMessages) {
  return parse_anthropic_request(Json::parse(text), e);
}

// The converted body as the chat path reads it.
GenerationSpec chat_spec(const AnthropicRequest& r) {
  ParseLimits l;
  l.n_vocab = 1000;
  ApiResult<GenerationSpec> spec = parse_chat_request(nlohmann::json::parse(r.chat_body.dump()), l);
  EXPECT_TRUE(spec.ok()) << spec.error().message << "\n" << r.chat_body.dump();
  return spec.ok() ? *spec : GenerationSpec{};
}

void expect_invalid(const std::string& body, const std::string& param,
                    AnthropicEndpoint e = AnthropicEndpoint::kMessages) {
  SCOPED_TRACE(body);
  ApiResult<AnthropicRequest> r = parse(body, e);
  ASSERT_FALSE(r.ok()) << "accepted, expected an error on " << param;
  EXPECT_EQ(r.error().status, 400);
  EXPECT_EQ(r.error().param, param) << r.error().message;
  EXPECT_EQ(r.error().message.rfind(param + ": ", 0), 0u)
      << r.error().message;  // the message names the field
}

TEST(AnthropicRequest, PlainMessageMapsOntoChat) {
  auto r = parse(
      R"({"model": "m", "max_tokens": 64, "system": "Be brief.", "temperature": 0.5, "top_k": 5,
                     "top_p": 0.9, "stop_sequences": ["END"],
                     "messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->model, "m");
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->stop_sequences, std::vector<std::string>{"END"});
  GenerationSpec s = chat_spec(*r);
  ASSERT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(s.messages[0].role, "system");
  EXPECT_EQ(s.messages[0].content, "Be brief.");
  EXPECT_EQ(s.messages[1].role, "user");
  EXPECT_EQ(s.messages[1].content, "hi");
  EXPECT_EQ(s.base.max_tokens, 64);
  EXPECT_TRUE(s.max_tokens_set);
  EXPECT_FLOAT_EQ(s.base.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.base.sampling.top_p, 0.9f);
  EXPECT_EQ(s.base.sampling.top_k, 5);
  EXPECT_EQ(s.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(s.model, "m");
}

TEST(AnthropicRequest, SystemBlocksAndCacheControlAreText) {
  auto r = parse(R"({"model": "m", "max_tokens": 8,
                     "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B",
                                 "cache_control": {"type": "ephemeral"}}],
                     "messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
                                   {"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}]}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  GenerationSpec s = chat_spec(*r);
  ASSERT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(s.messages[0].content, "A\nB");
  EXPECT_EQ(s.messages[1].content, "xy");  // the chat path joins text parts
}

TEST(AnthropicRequest, ToolRoundTripBecomesToolCallsAndToolMessages) {
  auto r = parse(R"({"model": "m", "max_tokens": 8,
    "tools": [{"name": "get_weather", "description": "Weather", "input_schema":
               {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "messages": [{"role": "user", "content": "Weather in Paris?"},
                 {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                   {"type": "text", "text": "Let me look."},
                   {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                   "content": [{"type": "text", "text": "sunny"}]}, {"type": "text", "text": "thanks"}]}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->has_tools);
  EXPECT_EQ(r->chat_body["messages"][1]["reasoning_content"], "hmm");
  GenerationSpec s = chat_spec(*r);
  ASSERT_EQ(s.tools.functions.size(), 1u);
  EXPECT_EQ(s.tools.functions[0].name, "get_weather");
  EXPECT_EQ(s.tools.choice, ToolChoice::kRequired);
  EXPECT_FALSE(s.tools.parallel_tool_calls);
  ASSERT_EQ(s.messages.size(), 4u);
  EXPECT_EQ(s.messages[1].role, "assistant");
  EXPECT_EQ(s.messages[1].content, "Let me look.");
  ASSERT_EQ(s.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(s.messages[1].tool_calls[0].id, "toolu_1");
  EXPECT_EQ(s.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(s.messages[1].tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(s.messages[2].role, "tool");
  EXPECT_EQ(s.messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(s.messages[2].content, "sunny");
  EXPECT_EQ(s.messages[3].role, "user");
  EXPECT_EQ(s.messages[3].content, "thanks");
}

TEST(AnthropicRequest, ToolChoiceKinds) {
  const std::string head =
      R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "q"}],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": )";
  auto named = parse(head + R"({"type": "tool", "name": "f"}})");
  ASSERT_TRUE(named.ok()) << named.error().message;
  GenerationSpec s = chat_spec(*named);
  EXPECT_EQ(s.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(s.tools.named, "f");
  auto none = parse(head + R"({"type": "none"}})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_tools);
  EXPECT_EQ(chat_spec(*none).tools.choice, ToolChoice::kNone);
  auto automatic = parse(head + R"({"type": "auto"}})");
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(chat_spec(*automatic).tools.choice, ToolChoice::kAuto);
}

TEST(AnthropicRequest, InputSchemaKeepsItsKeyOrder) {
  auto r = parse(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "q"}],
    "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"zeta": {"type": "string"},
              "alpha": {"type": "integer"}}}}]})");
  ASSERT_TRUE(r.ok());
  const std::string text = r->chat_body["tools"][0]["function"]["parameters"].dump();
  EXPECT_LT(text.find("zeta"), text.find("alpha")) << text;
  auto call =
      parse(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "q"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"zeta": 1, "alpha": 2}}]}]})");
  ASSERT_TRUE(call.ok());
  EXPECT_EQ(chat_spec(*call).messages[1].tool_calls[0].arguments, R"({"zeta":1,"alpha":2})");
}

TEST(AnthropicRequest, StreamAsksForTheUsageChunk) {
  auto r = parse(
      R"({"model": "m", "max_tokens": 8, "stream": true, "messages": [{"role": "user", "content": "q"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stream);
  GenerationSpec s = chat_spec(*r);
  EXPECT_TRUE(s.stream);
  EXPECT_TRUE(s.include_usage);
}

TEST(AnthropicRequest, ThinkingIsValidatedAndKept) {
  auto r = parse(
      R"({"model": "m", "max_tokens": 100, "thinking": {"type": "enabled", "budget_tokens": 40},
                     "messages": [{"role": "user", "content": "q"}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->thinking_budget, 40);
  GenerationSpec s = chat_spec(*r);
  EXPECT_EQ(s.reasoning.thinking_budget, 40);
  EXPECT_EQ(s.reasoning.template_kwargs, R"({"enable_thinking":true})");
  EXPECT_TRUE(s.reasoning.include_reasoning);
  auto off = parse(R"({"model": "m", "max_tokens": 100, "thinking": {"type": "disabled"},
                       "messages": [{"role": "user", "content": "q"}]})");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->thinking_budget, -1);
  EXPECT_EQ(chat_spec(*off).reasoning.template_kwargs, R"({"enable_thinking":false})");
  auto adaptive = parse(
      R"({"model": "m", "max_tokens": 100, "thinking": {"type": "adaptive", "display": "omitted"},
                            "messages": [{"role": "user", "content": "q"}]})");
  ASSERT_TRUE(adaptive.ok());
  GenerationSpec a = chat_spec(*adaptive);
  EXPECT_EQ(a.reasoning.thinking_budget, -1);  // the server's default
  EXPECT_FALSE(a.reasoning.include_reasoning);
  auto absent =
      parse(R"({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "q"}]})");
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(chat_spec(*absent).reasoning.template_kwargs, "");  // the template's own default
}

TEST(AnthropicRequest, OutputConfigMapsOntoEffortAndStructuredOutput) {
  auto r = parse(R"({"model": "m", "max_tokens": 100, "cache_control": {"type": "ephemeral"},
                     "output_config": {"effort": "max", "format": {"type": "json_schema",
                       "schema": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}}},
                     "messages": [{"role": "user", "content": "q"}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->chat_body["reasoning_effort"], "high");
  GenerationSpec s = chat_spec(*r);
  EXPECT_EQ(s.structured.kind, grammar::StructuredOutput::Kind::kJsonSchema);
  EXPECT_EQ(s.schema_pointer, "/response_format/json_schema/schema");
  const std::string schema = r->chat_body["response_format"]["json_schema"]["schema"].dump();
  EXPECT_LT(schema.find("\"z\""), schema.find("\"a\"")) << schema;  // the order written
}

TEST(AnthropicRequest, CountTokensNeedsNoMaxTokens) {
  auto r = parse(R"({"model": "m", "messages": [{"role": "user", "content": "q"}]})",
                 AnthropicEndpoint::kCountTokens);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->chat_body.contains("max_tokens"));
  expect_invalid(R"({"model": "m", "messages": [{"role": "user", "content": "q"}]})", "max_tokens");
}

TEST(AnthropicRequest, MalformedFieldsNameTheirPath) {
  const std::string m = R"("model": "m", "max_tokens": 8, )";
  const std::string q = R"("messages": [{"role": "user", "content": "q"}])";
  expect_invalid(R"({"max_tokens": 8, )" + q + "}", "model");
  expect_invalid(R"({"model": 3, "max_tokens": 8, )" + q + "}", "model");
  expect_invalid(R"({"model": "m", "max_tokens": 0, )" + q + "}", "max_tokens");
  expect_invalid(R"({"model": "m", "max_tokens": "8", )" + q + "}", "max_tokens");
  expect_invalid("{" + m + R"("messages": []})", "messages");
  expect_invalid("{" + m + R"("messages": {}})", "messages");
  expect_invalid("{" + m + R"("messages": [{"role": "system", "content": "x"}]})",
                 "messages.0.role");
  expect_invalid("{" + m + R"("messages": [{"role": "user"}]})", "messages.0.content");
  expect_invalid(
      "{" + m + R"("messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})",
      "messages.0.content.0.type");
  expect_invalid("{" + m + R"("messages": [{"role": "user", "content": [{"type": "text"}]}]})",
                 "messages.0.content.0.text");
  expect_invalid(
      "{" + m + R"("messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})",
      "messages.0.content.0.tool_use_id");
  expect_invalid(
      "{" + m + R"("messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a",
                 "name": "f", "input": []}]}]})",
      "messages.0.content.0.input");
  expect_invalid(
      "{" + m + R"("messages": [{"role": "user", "content": [{"type": "text", "text": "x",
                 "cache_control": {"type": "forever"}}]}]})",
      "messages.0.content.0.cache_control.type");
  expect_invalid("{" + m + q + R"(, "system": 5})", "system");
  expect_invalid("{" + m + q + R"(, "system": [{"type": "image"}]})", "system.0.type");
  expect_invalid("{" + m + q + R"(, "temperature": 1.5})", "temperature");
  expect_invalid("{" + m + q + R"(, "top_p": 0})", "top_p");
  expect_invalid("{" + m + q + R"(, "top_k": -1})", "top_k");
  expect_invalid("{" + m + q + R"(, "stop_sequences": "END"})", "stop_sequences");
  expect_invalid("{" + m + q + R"(, "stop_sequences": ["ok", ""]})", "stop_sequences.1");
  expect_invalid("{" + m + q + R"(, "stream": "yes"})", "stream");
  expect_invalid("{" + m + q + R"(, "tools": [{"name": "f"}]})", "tools.0.input_schema");
  expect_invalid(
      "{" + m + q + R"(, "tools": [{"type": "web_search_20250305", "name": "web_search"}]})",
      "tools.0.type");
  expect_invalid(
      "{" + m + q +
          R"(, "tools": [{"name": "f", "input_schema": {}}, {"name": "f", "input_schema": {}}]})",
      "tools.1.name");
  expect_invalid(
      "{" + m + q + R"(, "tools": [{"name": "f", "input_schema": {}}], "tool_choice": "any"})",
      "tool_choice");
  expect_invalid(
      "{" + m + q +
          R"(, "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "x"}})",
      "tool_choice.type");
  expect_invalid("{" + m + q + R"(, "tools": [{"name": "f", "input_schema": {}}],
                 "tool_choice": {"type": "tool", "name": "g"}})",
                 "tool_choice.name");
  expect_invalid("{" + m + q + R"(, "tool_choice": {"type": "any"}})", "tool_choice");
  expect_invalid("{" + m + q + R"(, "thinking": {"type": "enabled"}})", "thinking.budget_tokens");
  expect_invalid("{" + m + q + R"(, "thinking": {"type": "enabled", "budget_tokens": 8}})",
                 "thinking.budget_tokens");
  expect_invalid("{" + m + q + R"(, "metadata": 1})", "metadata");
  expect_invalid("{" + m + q + R"(, "thinking": {"type": "sometimes"}})", "thinking.type");
  expect_invalid("{" + m + q + R"(, "thinking": {"type": "adaptive", "display": "loud"}})",
                 "thinking.display");
  expect_invalid("{" + m + q + R"(, "cache_control": {"type": "forever"}})", "cache_control.type");
  expect_invalid("{" + m + q + R"(, "output_config": {"effort": "huge"}})", "output_config.effort");
  expect_invalid("{" + m + q + R"(, "output_config": {"format": {"type": "xml"}}})",
                 "output_config.format.type");
  expect_invalid("{" + m + q + R"(, "output_config": {"format": {"type": "json_schema"}}})",
                 "output_config.format.schema");
  EXPECT_FALSE(parse_anthropic_request(Json::array(), AnthropicEndpoint::kMessages).ok());
}

}  // namespace
}  // namespace omnibus::server
