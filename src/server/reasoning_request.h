// The chat request fields of reasoning models, parsed into a GenerationSpec:
//
//   chat_template_kwargs   object: extra variables for the chat template, as
//                          HF's apply_chat_template(**kwargs) takes them
//                          (Qwen 3: {"enable_thinking": false})
//   reasoning_effort       "none" | "minimal" | "low" | "medium" | "high":
//                          passed to the template as `reasoning_effort` (unless
//                          chat_template_kwargs sets it); "none" also sets
//                          enable_thinking false when the kwargs do not
//   thinking_token_budget  integer >= 0: the hard thinking budget (tokens
//                          inside the thinking block; engine/thinking.h);
//                          absent: the server's --reasoning-budget
//   include_reasoning      bool (default true): false drops the thinking
//                          text from the response (it is still split off)
//   messages[i].reasoning_content | .reasoning  string: an assistant turn's
//                          thinking, for templates that show it
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace omnibus::server {

struct ReasoningRequest {
  std::string template_kwargs;   // JSON object text ("" when none)
  int32_t thinking_budget = -1;  // -1: the server's default
  bool include_reasoning = true;
};

// Reads the fields above from a chat body's fields (errors go to f).
void parse_reasoning_request(JsonFields& f, ReasoningRequest& out);

// An assistant message's thinking: "reasoning_content", else "reasoning",
// else "". An error names `where`.reasoning_content when it is not a string.
std::optional<ApiError> parse_message_reasoning(const nlohmann::json& message,
                                                const std::string& where, std::string& out);

}  // namespace omnibus::server
