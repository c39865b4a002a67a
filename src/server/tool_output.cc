#include "server/tool_output.h"

#include <random>

namespace omnibus::server {

std::string new_tool_call_id() {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, int(sizeof(kChars)) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[pick(rng)];
  return id;
}

ChoiceToolCalls::Delta ChoiceToolCalls::push(const std::string& text, bool end) {
  Delta d;
  if (parser_.finished()) return d;
  ToolParseOutput out = parser_.push(text);
  if (end) {
    ToolParseOutput rest = parser_.finish();
    out.content += rest.content;
    for (ParsedToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  }
  d.content = std::move(out.content);
  for (ParsedToolCall& c : out.calls) {
    nlohmann::json call = {
        {"id", new_tool_call_id()},
        {"type", "function"},
        {"function", {{"name", std::move(c.name)}, {"arguments", std::move(c.arguments)}}}};
    nlohmann::json entry = call;
    entry["index"] = calls_.size();
    calls_.push_back(std::move(call));
    d.tool_calls.push_back(std::move(entry));
  }
  return d;
}

std::string tool_finish_reason(const std::string& reason, int n_calls) {
  return reason == "stop" && n_calls > 0 ? "tool_calls" : reason;
}

nlohmann::json tool_message_content(const std::string& text, int n_calls) {
  if (n_calls == 0) return text;
  const size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return nullptr;
  const size_t e = text.find_last_not_of(" \t\r\n");
  return text.substr(b, e - b + 1);
}

}  // namespace omnibus::server
