// ChoiceToolCalls: the tool calls of one chat choice, as the response carries
// them. It runs the choice's released text through a StreamingToolParser
// (tool_parsers.h), gives each call an id ("call_" + 24 random
// alphanumerics) and its index within the choice, and returns what the
// response adds: content text, and OpenAI's tool-call objects
//   {"index", "id", "type": "function", "function": {"name", "arguments"}}
// (streaming: delta.tool_calls, one whole call per entry; non-streaming:
// message.tool_calls, without "index").
//
// Thread-safety: one choice, one thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/tool_parsers.h"

namespace omnibus::server {

class ChoiceToolCalls {
 public:
  explicit ChoiceToolCalls(ToolParserKind kind,
                           std::shared_ptr<const ToolParamTypes> types = nullptr)
      : parser_(kind, std::move(types)) {}

  struct Delta {
    std::string content;
    nlohmann::json tool_calls = nlohmann::json::array();  // stream entries, with "index"
  };
  // The choice's next text; `end`: it is the last (releases held-back text).
  // After the end, returns empty deltas.
  Delta push(const std::string& text, bool end);

  bool ended() const { return parser_.finished(); }
  int n_calls() const { return int(calls_.size()); }
  // message.tool_calls: every call so far, without "index".
  const nlohmann::json& calls() const { return calls_; }

 private:
  StreamingToolParser parser_;
  nlohmann::json calls_ = nlohmann::json::array();
};

// "call_" + 24 random characters from [A-Za-z0-9].
std::string new_tool_call_id();

// The finish_reason of a choice that made n_calls calls: "tool_calls" when
// it ended normally ("stop") with at least one call, else `reason`.
std::string tool_finish_reason(const std::string& reason, int n_calls);

// message.content of a choice with tools: null when it made calls and the
// text around them is only whitespace; trimmed when it made calls; else the text.
nlohmann::json tool_message_content(const std::string& text, int n_calls);

}  // namespace omnibus::server
