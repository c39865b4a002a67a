#include "server/tool_request.h"

#include <gtest/gtest.h>

#include "server/openai_request.h"

namespace omnibus::server {
namespace {

using nlohmann::json;

ApiResult<GenerationSpec> chat(const std::string& extra) {
  ParseLimits l;
  l.n_vocab = 1000;
  return parse_chat_request(
      json::parse(R"({"messages": [{"role": "user", "content": "hi"}])" + extra + "}"), l);
}

constexpr const char* kTools = R"(, "tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "noop"}}])";

void expect_invalid(const std::string& extra, const std::string& param) {
  SCOPED_TRACE(extra);
  ApiResult<GenerationSpec> r = chat(extra);
  ASSERT_FALSE(r.ok()) << "accepted, expected an error on " << param;
  EXPECT_EQ(r.error().status, 400);
  EXPECT_EQ(r.error().param, param) << r.error().message;
}

TEST(ToolRequest, ParsesToolsAndDefaults) {
  ApiResult<GenerationSpec> r = chat(kTools);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ToolsSpec& t = r->tools;
  ASSERT_EQ(t.functions.size(), 2u);
  EXPECT_EQ(t.functions[0].name, "get_weather");
  EXPECT_EQ(t.functions[0].description, "Weather now");
  EXPECT_EQ(json::parse(t.functions[0].parameters)["required"], json::array({"city"}));
  EXPECT_EQ(t.functions[1].parameters, "");
  EXPECT_EQ(t.choice, ToolChoice::kAuto);
  EXPECT_TRUE(t.parallel_tool_calls);
  EXPECT_TRUE(t.parse_output());
  const json tool0 = json::parse(t.tool_jsons()[0]);
  EXPECT_EQ(tool0["type"], "function");
  EXPECT_EQ(tool0["function"]["name"], "get_weather");

  ApiResult<GenerationSpec> none = chat("");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->tools.choice, ToolChoice::kNone);
  EXPECT_FALSE(none->tools.parse_output());
}

TEST(ToolRequest, ToolChoiceForms) {
  auto choice = [](const std::string& tc) {
    ApiResult<GenerationSpec> r = chat(std::string(kTools) + R"(, "tool_choice": )" + tc);
    EXPECT_TRUE(r.ok()) << tc << ": " << r.error().message;
    return r.ok() ? r->tools : ToolsSpec{};
  };
  EXPECT_EQ(choice(R"("none")").choice, ToolChoice::kNone);
  EXPECT_FALSE(choice(R"("none")").parse_output());
  EXPECT_EQ(choice(R"("auto")").choice, ToolChoice::kAuto);
  EXPECT_EQ(choice(R"("required")").choice, ToolChoice::kRequired);
  ToolsSpec named = choice(R"({"type": "function", "function": {"name": "noop"}})");
  EXPECT_EQ(named.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.named, "noop");
  ApiResult<GenerationSpec> serial =
      chat(std::string(kTools) + R"(, "parallel_tool_calls": false)");
  ASSERT_TRUE(serial.ok());
  EXPECT_FALSE(serial->tools.parallel_tool_calls);
}

TEST(ToolRequest, ErrorsNameTheFieldPath) {
  expect_invalid(R"(, "tools": {})", "tools");
  expect_invalid(R"(, "tools": [3])", "tools[0]");
  expect_invalid(
      R"(, "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "retrieval"}])",
      "tools[1].type");
  expect_invalid(R"(, "tools": [{"type": "function"}])", "tools[0].function");
  expect_invalid(R"(, "tools": [{"type": "function", "function": {}}])", "tools[0].function.name");
  expect_invalid(R"(, "tools": [{"type": "function", "function": {"name": "a b"}}])",
                 "tools[0].function.name");
  expect_invalid(
      R"(, "tools": [{"type": "function", "function": {"name": "a", "parameters": []}}])",
      "tools[0].function.parameters");
  expect_invalid(R"(, "tools": [{"type": "function", "function": {"name": "a", "strict": 1}}])",
                 "tools[0].function.strict");
  expect_invalid(R"(, "tools": [{"type": "function", "function": {"name": "a"}},
                                {"type": "function", "function": {"name": "a"}}])",
                 "tools[1].function.name");
  expect_invalid(std::string(kTools) + R"(, "tool_choice": "always")", "tool_choice");
  expect_invalid(std::string(kTools) + R"(, "tool_choice": 1)", "tool_choice");
  expect_invalid(std::string(kTools) +
                     R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})",
                 "tool_choice.function.name");
  expect_invalid(
      std::string(kTools) + R"(, "tool_choice": {"type": "x", "function": {"name": "noop"}})",
      "tool_choice.type");
  expect_invalid(std::string(kTools) + R"(, "tool_choice": {"type": "function"})",
                 "tool_choice.function.name");
  expect_invalid(R"(, "tool_choice": "required")", "tool_choice");
  expect_invalid(R"(, "tool_choice": {"type": "function", "function": {"name": "x"}})",
                 "tool_choice.function.name");
  expect_invalid(std::string(kTools) + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls");
}

ApiResult<GenerationSpec> chat_messages(const std::string& messages) {
  ParseLimits l;
  l.n_vocab = 1000;
  return parse_chat_request(json::parse(R"({"messages": )" + messages + "}"), l);
}

TEST(ToolRequest, MessagesWithToolCallsAndResults) {
  ApiResult<GenerationSpec> r = chat_messages(R"([
    {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "22 C"}])");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0].content, "Weather in Paris?");
  const ChatMessage& a = r->messages[1];
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].id, "call_1");
  EXPECT_EQ(a.tool_calls[0].name, "get_weather");
  EXPECT_EQ(a.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(r->messages[2].role, "tool");
  EXPECT_EQ(r->messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r->messages[2].name, "get_weather");
  EXPECT_EQ(r->messages[2].content, "22 C");
}

TEST(ToolRequest, MessageErrorsNameTheFieldPath) {
  auto invalid = [](const std::string& messages, const std::string& param) {
    SCOPED_TRACE(messages);
    ApiResult<GenerationSpec> r = chat_messages(messages);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().param, param) << r.error().message;
  };
  invalid(R"([{"role": "assistant", "tool_calls": {}}])", "messages[0].tool_calls");
  invalid(R"([{"role": "user", "content": "x", "tool_calls": []}])", "messages[0].tool_calls");
  invalid(R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])",
          "messages[0].tool_calls[0].function.name");
  invalid(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}])",
          "messages[0].tool_calls[0].function.arguments");
  invalid(R"([{"role": "tool", "content": "x", "tool_call_id": 5}])", "messages[0].tool_call_id");
  invalid(R"([{"role": "tool"}])", "messages[0].content");
}

// Issue 34: both were accepted (and reached the chat template).
TEST(ToolRequest, ToolResultsNeedACallIdAndArgumentsMustParse) {
  auto invalid = [](const std::string& messages, const std::string& param) {
    SCOPED_TRACE(messages);
    ApiResult<GenerationSpec> r = chat_messages(messages);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().status, 400);
    EXPECT_EQ(r.error().param, param) << r.error().message;
  };
  invalid(R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "22 C"}])",
          "messages[1].tool_call_id");
  invalid(R"([{"role": "tool", "content": "22 C", "tool_call_id": null}])",
          "messages[0].tool_call_id");
  invalid(
      R"([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{\"city\": "}}]}])",
      "messages[0].tool_calls[0].function.arguments");
  invalid(
      R"([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "not json"}}]}])",
      "messages[0].tool_calls[0].function.arguments");
  // Still fine: JSON text, an object, or no arguments at all.
  for (const char* args : {R"("arguments": "{\"city\": \"Paris\"}")",
                           R"("arguments": {"city": "Paris"})", R"("x": 1)"}) {
    ApiResult<GenerationSpec> r = chat_messages(
        std::string(
            R"([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", )") +
        args + R"(}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}])");
    EXPECT_TRUE(r.ok()) << args << ": " << r.error().message;
  }
}

}  // namespace
}  // namespace omnibus::server
