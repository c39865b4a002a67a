#include "server/anthropic_stream.h"

#include "server/sse.h"

namespace omnibus::server {

std::string anthropic_sse(const nlohmann::json& event) {
  std::string out = "event: ";
  out += event.value("type", std::string("message"));
  out += "\ndata: ";
  out += json_dump(event);
  out += "\n\n";
  return out;
}

std::string AnthropicStreamWriter::start(const nlohmann::json& chunk) {
  started_ = true;
  nlohmann::json m;
  m["id"] = anthropic_message_id(chunk.value("id", std::string()));
  m["type"] = "message";
  m["role"] = "assistant";
  m["model"] = info_.model;
  m["content"] = nlohmann::json::array();
  m["stop_reason"] = nullptr;
  m["stop_sequence"] = nullptr;
  m["usage"] = {{"input_tokens", info_.input_tokens},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", 0},
                {"output_tokens", 0}};
  return anthropic_sse({{"type", "message_start"}, {"message", std::move(m)}}) +
         anthropic_sse({{"type", "ping"}});
}

std::string AnthropicStreamWriter::open(Block kind, nlohmann::json content_block) {
  std::string out = close();
  open_ = kind;
  ++index_;
  return out + anthropic_sse({{"type", "content_block_start"},
                              {"index", index_},
                              {"content_block", std::move(content_block)}});
}

std::string AnthropicStreamWriter::close() {
  if (open_ == Block::kNone) return "";
  open_ = Block::kNone;
  return anthropic_sse({{"type", "content_block_stop"}, {"index", index_}});
}

std::string AnthropicStreamWriter::delta(nlohmann::json d) {
  return anthropic_sse(
      {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}});
}

std::string AnthropicStreamWriter::on_choice(const nlohmann::json& choice) {
  std::string out;
  const nlohmann::json d = choice.value("delta", nlohmann::json::object());
  auto text_of = [&d](const char* key) {
    auto it = d.find(key);
    return it != d.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (const std::string t = text_of("reasoning_content"); !t.empty()) {
    if (open_ != Block::kThinking)
      out += open(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    out += delta({{"type", "thinking_delta"}, {"thinking", t}});
  }
  if (const std::string t = text_of("content"); !t.empty()) {
    if (open_ != Block::kText) out += open(Block::kText, {{"type", "text"}, {"text", ""}});
    out += delta({{"type", "text_delta"}, {"text", t}});
  }
  if (auto calls = d.find("tool_calls"); calls != d.end() && calls->is_array()) {
    for (const nlohmann::json& call : *calls) {
      if (!call.is_object()) continue;
      const nlohmann::json fn = call.value("function", nlohmann::json::object());
      out += open(Block::kToolUse, {{"type", "tool_use"},
                                    {"id", anthropic_tool_use_id(call.value("id", std::string()))},
                                    {"name", fn.value("name", std::string())},
                                    {"input", nlohmann::json::object()}});
      const std::string args = fn.value("arguments", std::string());
      if (!args.empty()) out += delta({{"type", "input_json_delta"}, {"partial_json", args}});
    }
  }
  if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) {
    finish_reason_ = f->get<std::string>();
    if (auto s = choice.find("stop_reason"); s != choice.end()) matched_stop_ = *s;
  }
  return out;
}

std::string AnthropicStreamWriter::on_chunk(const nlohmann::json& chunk) {
  if (ended_ || !chunk.is_object()) return "";
  std::string out = started_ ? "" : start(chunk);
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) usage_ = *u;
  if (auto cs = chunk.find("choices"); cs != chunk.end() && cs->is_array()) {
    for (const nlohmann::json& c : *cs) {
      if (c.is_object()) out += on_choice(c);
    }
  }
  return out;
}

std::string AnthropicStreamWriter::on_done() {
  if (ended_) return "";
  ended_ = true;
  std::string out = started_ ? "" : start(nlohmann::json::object());
  out += close();
  if (finish_reason_ == "abort" || finish_reason_.empty()) {
    return out + anthropic_sse({{"type", "error"},
                                {"error",
                                 {{"type", "overloaded_error"},
                                  {"message",
                                   "the server stopped this response before it finished "
                                   "(it is shutting down); retry it"}}}});
  }
  const nlohmann::json stop = anthropic_stop(finish_reason_, matched_stop_, info_);
  out += anthropic_sse(
      {{"type", "message_delta"}, {"delta", stop}, {"usage", anthropic_usage(usage_)}});
  return out + anthropic_sse({{"type", "message_stop"}});
}

}  // namespace omnibus::server
