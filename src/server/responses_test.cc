// The Responses API conversion layer without a server: request -> chat body,
// chat answer -> Response object, chat chunks -> the event sequence, and the
// bounded store.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/responses_output.h"
#include "server/responses_request.h"
#include "server/responses_store.h"

namespace omnibus::server {
namespace {

using json = nlohmann::json;

TEST(ResponsesRequest, ItemsBecomeChatMessages) {
  const json body = json::parse(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 7, "temperature": 0.5, "store": false,
    "input": [
      {"role": "developer", "content": "Rules."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather? "},
                                                       {"type": "input_text", "text": "Paris."}]},
      {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Need the tool."}]},
      {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call_output", "call_id": "c1", "output": "Sunny"}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}},
    "reasoning": {"effort": "low"}})");
  const json history = json::array({{{"role", "user"}, {"content", "Earlier."}}});
  ApiResult<ResponsesCall> call = parse_responses_request(body, history);
  ASSERT_TRUE(call.ok()) << call.error().message;
  const json want_messages = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Earlier."},
    {"role": "system", "content": "Rules."},
    {"role": "user", "content": "Weather? Paris."},
    {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "Sunny"}])");
  const json& chat = call->chat_body;
  EXPECT_EQ(chat["messages"], want_messages);
  EXPECT_EQ(call->turn_messages.size(), 5u);  // no instructions: they are not carried over
  EXPECT_EQ(chat["max_tokens"], 7);
  EXPECT_EQ(chat["temperature"], 0.5);
  EXPECT_EQ(chat["reasoning_effort"], "low");
  EXPECT_EQ(chat["tools"][0],
            json::parse(R"({"type": "function", "function": {"name": "get_weather",
                                              "parameters": {"type": "object"}}})"));
  EXPECT_EQ(chat["tool_choice"],
            json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"));
  EXPECT_EQ(chat["response_format"]["type"], "json_schema");
  EXPECT_EQ(chat["response_format"]["json_schema"]["name"], "w");
  EXPECT_FALSE(call->store);
  EXPECT_FALSE(chat.contains("stream_options"));
  EXPECT_EQ(call->echo["instructions"], "Be brief.");
}

TEST(ResponsesRequest, ErrorsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "input"},
      {R"({"input": {"a": 1}})", "input"},
      {R"({"input": [1]})", "input[0]"},
      {R"({"input": [{"role": "user"}]})", "input[0].content"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})",
       "input[0].content[0].type"},
      {R"({"input": [{"type": "function_call_output", "call_id": "c"}]})", "input[0].output"},
      {R"({"input": "x", "tools": {}})", "tools"},
      {R"({"input": "x", "tool_choice": 3})", "tool_choice"},
      {R"({"input": "x", "text": {"format": {"type": 1}}})", "text.format.type"},
      {R"({"input": "x", "reasoning": "high"})", "reasoning"},
      {R"({"input": "x", "max_output_tokens": -1})", "max_output_tokens"},
      {R"({"input": "x", "instructions": 5})", "instructions"},
      {R"({"input": "x", "metadata": []})", "metadata"},
      {R"({"input": "x", "previous_response_id": ""})", "previous_response_id"},
  };
  for (const auto& [text, param] : cases) {
    ApiResult<ResponsesCall> call = parse_responses_request(json::parse(text), nullptr);
    ASSERT_FALSE(call.ok()) << text;
    EXPECT_EQ(call.error().status, 400) << text;
    EXPECT_EQ(call.error().param, param) << text;
  }
  EXPECT_FALSE(parse_responses_request(json::array(), nullptr).ok());
  EXPECT_EQ(chat_param_to_responses("max_tokens"), "max_output_tokens");
  EXPECT_EQ(chat_param_to_responses("messages[2].content"), "input");
  EXPECT_EQ(chat_param_to_responses("response_format.json_schema.schema"), "text.format.schema");
  EXPECT_EQ(chat_param_to_responses("tools[1].function.parameters"), "tools[1].parameters");
  EXPECT_EQ(chat_param_to_responses("temperature"), "temperature");
}

json chat_answer() {
  return json::parse(
      R"({"model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
    "role": "assistant", "content": "Checking.", "reasoning_content": "Hmm.",
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 6, "prompt_tokens_details": {"cached_tokens": 4},
              "completion_tokens_details": {"reasoning_tokens": 3}}})");
}

TEST(ResponsesOutput, TheChatAnswerAsAResponse) {
  const json r = response_from_chat(chat_answer(), "resp_ab", 5, json{{"store", true}});
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hmm.");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Checking.");
  EXPECT_EQ(r["output"][2]["call_id"], "call_1");
  EXPECT_EQ(r["output"][2]["arguments"], "{\"a\":1}");
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
  EXPECT_EQ(r["usage"]["total_tokens"], 16);
  EXPECT_TRUE(r["store"]);
  json cut = chat_answer();
  cut["choices"][0]["finish_reason"] = "length";
  const json rc = response_from_chat(cut, "resp_ab", 5, json::object());
  EXPECT_EQ(rc["status"], "incomplete");
  EXPECT_EQ(rc["incomplete_details"]["reason"], "max_output_tokens");
  const json m = assistant_message_of(chat_answer());
  EXPECT_EQ(m["reasoning_content"], "Hmm.");
  EXPECT_EQ(m["tool_calls"].size(), 1u);
}

std::vector<json> events_of(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    out.push_back(json::parse(sse.substr(pos + 6, end - pos - 6)));
    pos = end;
  }
  return out;
}

TEST(ResponsesOutput, TheStreamIsTheDocumentedSequenceAndEndsWithTheSameResponse) {
  ResponsesStream s("resp_ab", 5, json::object());
  std::string sse = s.begin();
  auto chunk = [](json delta, json finish = nullptr) {
    return json{
        {"choices", json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
  };
  sse += s.on_chunk(chunk({{"role", "assistant"}, {"content", ""}}));
  sse += s.on_chunk(chunk({{"reasoning_content", "Hm"}, {"reasoning", "Hm"}}));
  sse += s.on_chunk(chunk({{"reasoning_content", "m."}, {"reasoning", "m."}}));
  sse += s.on_chunk(chunk({{"content", "Check"}}));
  sse += s.on_chunk(chunk({{"content", "ing."}}));
  json call = chat_answer()["choices"][0]["message"]["tool_calls"][0];
  call["index"] = 0;
  sse += s.on_chunk(chunk({{"tool_calls", json::array({call})}}, "tool_calls"));
  sse += s.on_chunk(json{{"choices", json::array()}, {"usage", chat_answer()["usage"]}});
  sse += s.finish();
  std::vector<std::string> types;
  const std::vector<json> events = events_of(sse);
  for (size_t i = 0; i < events.size(); ++i) {
    types.push_back(events[i]["type"]);
    EXPECT_EQ(events[i]["sequence_number"], int64_t(i));
  }
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(types, want);
  json whole = chat_answer();
  whole.erase("model");
  EXPECT_EQ(s.response(), response_from_chat(whole, "resp_ab", 5, json::object()));
  EXPECT_EQ(events[8]["item"]["content"][0]["text"], "Hmm.");
  EXPECT_EQ(events[9]["output_index"], 1);
}

// Parts the chat path never makes (found by fuzz/responses_request_fuzz.cc: a
// choice that was a number threw from nlohmann's value()) read as absent: the
// well-formed parts still come through, nothing throws.
TEST(ResponsesOutput, MalformedChunkPartsAreSkipped) {
  ResponsesStream s("resp_ab", 5, json::object());
  std::string sse = s.begin();
  sse += s.on_chunk(json{{"choices", json::array({5, "x", nullptr})}});
  sse +=
      s.on_chunk(json{{"choices", json::array({{{"delta", 3}}, {{"delta", {{"content", 7}}}}})}});
  sse += s.on_chunk(json{{"choices", json::array({{{"delta", {{"content", "ok"}}}}})}});
  sse += s.on_chunk(json{
      {"choices", json::array({{{"delta", {{"tool_calls", json::array({1, {{"function", 2}}})}}}},
                               {{"delta", {{"tool_calls", "no"}}}, {"finish_reason", "stop"}}})}});
  sse += s.on_chunk(json{{"choices", json::array()},
                         {"usage", {{"prompt_tokens", "3"}, {"completion_tokens", 2}}}});
  ASSERT_NO_THROW(sse += s.finish());
  const json& r = s.response();
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 2u);  // the text, and the one call that was an object
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "ok");
  EXPECT_EQ(r["output"][1]["name"], "");
  EXPECT_EQ(r["output"][1]["arguments"], "{}");
  EXPECT_EQ(r["usage"]["input_tokens"], 0);
  EXPECT_EQ(r["usage"]["output_tokens"], 2);
  // The same tolerance for a whole answer.
  const json odd = {{"choices", json::array({{{"message", {{"tool_calls", json::array({4})}}}}})},
                    {"usage", 1}};
  json whole;
  ASSERT_NO_THROW(whole = response_from_chat(odd, "resp_ab", 5, json::object()));
  EXPECT_EQ(whole["output"].size(), 1u);  // the (empty) message only
  EXPECT_TRUE(whole["usage"].is_null());
  EXPECT_NO_THROW((void)assistant_message_of(json{{"choices", 3}}));
}

TEST(ResponsesStore, KeepsTheMostRecentlyUsed) {
  ResponsesStore store(2);
  store.put("a", {json{{"id", "a"}}, json::array()});
  store.put("b", {json{{"id", "b"}}, json::array()});
  ASSERT_TRUE(store.get("a").has_value());  // a is now the most recent
  store.put("c", {json{{"id", "c"}}, json::array()});
  EXPECT_FALSE(store.get("b").has_value());
  EXPECT_TRUE(store.get("a").has_value());
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_EQ(store.size(), 1u);
  ResponsesStore none(0);
  none.put("x", {json::object(), json::array()});
  EXPECT_FALSE(none.get("x").has_value());
}

}  // namespace
}  // namespace omnibus::server
