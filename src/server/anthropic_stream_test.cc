// The chat path's answers rewritten for the Anthropic Messages API: errors,
// the non-streamed message, and the streamed events through AnthropicSink.
#include "server/anthropic_stream.h"

#include <gtest/gtest.h>

#include "server/anthropic_sink.h"
#include "server/sse.h"

namespace omnibus::server {
namespace {

using nlohmann::json;

TEST(AnthropicResponse, ErrorsTakeAnthropicShapeAndNameTheField) {
  const json e = json::parse(
      anthropic_error_json(ApiError::invalid("max_tokens", "'max_tokens' must be >= 1")));
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["message"], "max_tokens: 'max_tokens' must be >= 1");
  const json same = json::parse(anthropic_error_json(ApiError::invalid("a.b", "a.b: bad")));
  EXPECT_EQ(same["error"]["message"], "a.b: bad");  // already named: not twice
  const json chat =
      json::parse(anthropic_error_from_chat(404, ApiError::not_found("no such model").to_json()));
  EXPECT_EQ(chat["error"]["type"], "not_found_error");
  EXPECT_EQ(chat["error"]["message"], "no such model");
  EXPECT_STREQ(anthropic_error_type(401), "authentication_error");
  EXPECT_STREQ(anthropic_error_type(503), "overloaded_error");
  EXPECT_STREQ(anthropic_error_type(500), "api_error");
}

TEST(AnthropicResponse, UsageSplitsThePromptByTheCache) {
  const json u = anthropic_usage(
      json::parse(R"({"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                                                 "prompt_tokens_details": {"cached_tokens": 64}})"));
  EXPECT_EQ(u["input_tokens"], 36);
  EXPECT_EQ(u["cache_read_input_tokens"], 64);
  EXPECT_EQ(u["cache_creation_input_tokens"], 0);
  EXPECT_EQ(u["output_tokens"], 7);
}

TEST(AnthropicResponse, StopReasons) {
  const AnthropicReplyInfo info{"m", {"END", "STOP"}, 0};
  EXPECT_EQ(anthropic_stop("stop", nullptr, info)["stop_reason"], "end_turn");
  EXPECT_EQ(anthropic_stop("length", nullptr, info)["stop_reason"], "max_tokens");
  EXPECT_EQ(anthropic_stop("tool_calls", nullptr, info)["stop_reason"], "tool_use");
  const json s = anthropic_stop("stop", "STOP", info);
  EXPECT_EQ(s["stop_reason"], "stop_sequence");
  EXPECT_EQ(s["stop_sequence"], "STOP");
  EXPECT_TRUE(anthropic_stop("stop", nullptr, info)["stop_sequence"].is_null());
}

TEST(AnthropicResponse, MessageFromChatCompletion) {
  const json chat =
      json::parse(R"({"id": "chatcmpl-abc", "object": "chat.completion", "choices": [{"index": 0,
    "message": {"role": "assistant", "content": "Looking.", "tool_calls": [{"id": "call_x", "type": "function",
    "function": {"name": "f", "arguments": "{\"a\":1}"}}]}, "finish_reason": "tool_calls", "stop_reason": null}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 0}}})");
  const json m = anthropic_message(chat, AnthropicReplyInfo{"model-x", {}, 0});
  EXPECT_EQ(m["id"], "msg_abc");
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "model-x");
  ASSERT_EQ(m["content"].size(), 2u);
  EXPECT_EQ(m["content"][0], json::parse(R"({"type": "text", "text": "Looking."})"));
  EXPECT_EQ(
      m["content"][1],
      json::parse(R"({"type": "tool_use", "id": "toolu_x", "name": "f", "input": {"a": 1}})"));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["usage"]["input_tokens"], 10);
  EXPECT_EQ(m["usage"]["output_tokens"], 4);
}

// A sink that records what reaches the client.
struct RecordingSink : ResponseSink {
  int status = 0;
  std::string body;
  bool streaming = false, ended = false;
  using ResponseSink::respond;
  void respond(int s, std::string, std::string b, HttpHeaders) override {
    status = s, body = std::move(b);
  }
  void begin_stream(std::string) override { streaming = true; }
  void write(std::string d) override { body += d; }
  void end_stream() override { ended = true; }
  void on_disconnect(std::function<void()>) override {}
};

// The events of an SSE text as (event name, data) pairs.
std::vector<std::pair<std::string, json>> events(const std::string& text) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0, end;
  while ((end = text.find("\n\n", at)) != std::string::npos) {
    const std::string frame = text.substr(at, end - at);
    at = end + 2;
    const size_t nl = frame.find('\n');
    EXPECT_EQ(frame.rfind("event: ", 0), 0u) << frame;
    EXPECT_EQ(frame.compare(nl + 1, 6, "data: "), 0) << frame;
    out.emplace_back(frame.substr(7, nl - 7), json::parse(frame.substr(nl + 7)));
    EXPECT_EQ(out.back().first, out.back().second["type"]);
  }
  EXPECT_EQ(at, text.size());
  return out;
}

json chunk(const json& delta, const json& finish = nullptr) {
  json c{{"id", "chatcmpl-7"}, {"object", "chat.completion.chunk"}};
  c["choices"] = json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}});
  if (!finish.is_null()) c["choices"][0]["stop_reason"] = "END";
  return c;
}

TEST(AnthropicSink, StreamBecomesTheEventSequence) {
  auto client = std::make_shared<RecordingSink>();
  AnthropicSink sink(client, AnthropicReplyInfo{"m", {"END"}, 12});
  sink.begin_stream("text/event-stream");
  sink.write(sse_event(chunk({{"role", "assistant"}, {"content", ""}})));
  sink.write(sse_event(chunk({{"reasoning_content", "think"}})));
  const std::string two =
      sse_event(chunk({{"content", "Hel"}})) + sse_event(chunk({{"content", "lo"}}));
  sink.write(two.substr(0, 10));  // frames split anywhere
  sink.write(two.substr(10));
  sink.write(sse_event(chunk({{"tool_calls",
                               {{{"index", 0},
                                 {"id", "call_1"},
                                 {"type", "function"},
                                 {"function", {{"name", "f"}, {"arguments", "{\"a\":2}"}}}}}}})));
  sink.write(sse_event(chunk(json::object(), "stop")));
  sink.write(sse_event({{"id", "chatcmpl-7"},
                        {"choices", json::array()},
                        {"usage",
                         {{"prompt_tokens", 12},
                          {"completion_tokens", 5},
                          {"prompt_tokens_details", {{"cached_tokens", 4}}}}}}));
  sink.write(sse_done());
  sink.end_stream();
  EXPECT_TRUE(client->streaming);
  EXPECT_TRUE(client->ended);
  const auto ev = events(client->body);
  std::vector<std::string> names;
  for (const auto& [n, d] : ev) names.push_back(n);
  const std::vector<std::string> want = {"message_start",       "ping",
                                         "content_block_start", "content_block_delta",
                                         "content_block_stop",  "content_block_start",
                                         "content_block_delta", "content_block_delta",
                                         "content_block_stop",  "content_block_start",
                                         "content_block_delta", "content_block_stop",
                                         "message_delta",       "message_stop"};
  ASSERT_EQ(names, want) << client->body;
  EXPECT_EQ(ev[0].second["message"]["id"], "msg_7");
  EXPECT_EQ(ev[0].second["message"]["usage"]["input_tokens"], 12);
  EXPECT_EQ(ev[2].second["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[3].second["delta"],
            json::parse(R"({"type": "thinking_delta", "thinking": "think"})"));
  EXPECT_EQ(ev[5].second["index"], 1);
  EXPECT_EQ(ev[6].second["delta"]["text"], "Hel");
  EXPECT_EQ(ev[7].second["delta"]["text"], "lo");
  EXPECT_EQ(ev[9].second["content_block"],
            json::parse(R"({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}})"));
  EXPECT_EQ(ev[10].second["delta"],
            json::parse(R"({"type": "input_json_delta", "partial_json": "{\"a\":2}"})"));
  EXPECT_EQ(ev[11].second["index"], 2);
  EXPECT_EQ(ev[12].second["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(ev[12].second["delta"]["stop_sequence"], "END");
  EXPECT_EQ(ev[12].second["usage"]["input_tokens"], 8);
  EXPECT_EQ(ev[12].second["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(ev[12].second["usage"]["output_tokens"], 5);
}

TEST(AnthropicSink, AbortedStreamEndsWithAnErrorEvent) {
  auto client = std::make_shared<RecordingSink>();
  AnthropicSink sink(client, AnthropicReplyInfo{"m", {}, 3});
  sink.begin_stream("text/event-stream");
  sink.write(sse_event(chunk({{"content", "par"}})));
  sink.write(sse_event(chunk(json::object(), "abort")));
  sink.write(sse_done());
  const auto ev = events(client->body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().first, "error");
  EXPECT_EQ(ev.back().second["error"]["type"], "overloaded_error");
  EXPECT_EQ(ev[ev.size() - 2].first, "content_block_stop");
}

TEST(AnthropicSink, RespondRewritesErrorsAndMessages) {
  auto client = std::make_shared<RecordingSink>();
  AnthropicSink err(client, AnthropicReplyInfo{"m", {}, 0});
  err.respond(400, "application/json",
              ApiError::invalid("messages", "cannot apply the chat template").to_json());
  EXPECT_EQ(client->status, 400);
  EXPECT_EQ(json::parse(client->body)["error"]["message"],
            "messages: cannot apply the chat template");
  auto client2 = std::make_shared<RecordingSink>();
  AnthropicSink ok(client2, AnthropicReplyInfo{"m", {}, 0});
  ok.respond(200, "application/json",
             R"({"id": "chatcmpl-1", "choices": [{"message": {"content": "hi"},
                                         "finish_reason": "length"}], "usage": {"prompt_tokens": 3,
                                         "completion_tokens": 2}})");
  EXPECT_EQ(client2->status, 200);
  const json m = json::parse(client2->body);
  EXPECT_EQ(m["content"][0]["text"], "hi");
  EXPECT_EQ(m["stop_reason"], "max_tokens");
}

}  // namespace
}  // namespace omnibus::server
