// The Anthropic Messages API's request bodies (POST /v1/messages and
// POST /v1/messages/count_tokens) converted into the body of an OpenAI chat
// completions request, which the chat path (api_server.cc, handle_generation)
// then serves: templates, tools, forced-call grammars and the prefix cache are
// the chat path's, never a second implementation. This file only converts.
//
// Field mapping (Anthropic -> chat completions):
//   model -> model            max_tokens -> max_tokens (required for messages)
//   system (string | [text blocks]) -> a leading "system" message
//   messages[i] (role user | assistant; content string | blocks):
//     text              -> content parts [{"type": "text", "text"}]
//     tool_use          -> assistant tool_calls [{"id", "type": "function", "function": {"name",
//     "arguments": input}}] tool_result       -> a "tool" message {"tool_call_id": tool_use_id,
//     "content": its text}, placed
//                          before the user's text of the same message (Anthropic puts results
//                          first)
//     thinking          -> the assistant message's reasoning_content (templates that show past
//                          thinking read it; others ignore it); redacted_thinking is dropped
//   tools [{name, description?, input_schema}] -> [{"type": "function", "function": {name,
//   description, parameters}}] tool_choice {type: auto | any | tool (+ name) | none,
//   disable_parallel_tool_use?}
//                     -> "auto" | "required" | {"type": "function", "function": {"name"}} | "none",
//                        parallel_tool_calls = !disable_parallel_tool_use
//   stop_sequences -> stop    temperature (0..1), top_p, top_k -> the same
//   stream -> stream, with stream_options.include_usage (the final usage feeds message_delta)
//   thinking {type: enabled, budget_tokens} -> chat_template_kwargs {"enable_thinking": true},
//                        thinking_token_budget (the engine's hard budget); {type: adaptive}: the
//                        same without a budget; {type: disabled} -> enable_thinking false;
//                        display "omitted" -> include_reasoning false. Absent: the template's
//                        default.
//   output_config {effort -> reasoning_effort (xhigh, max -> high), format {type: json_schema,
//                        schema} -> response_format json_schema}
//   cache_control (top level or on any block): accepted, a hint (the prefix cache is
//                        automatic); metadata, other Anthropic-only fields: ignored.
// Key order: the body is read as ordered_json and the chat body keeps it, so
// input_schema reaches the template and the tool grammar in the order written.
//
// Errors are 400 invalid_request_error ApiErrors whose param is the field's
// path in Anthropic's style ("messages.1.content.0.tool_use_id") and whose
// message starts with that path; image and document blocks and server tools
// are refused by name (this server reads text only).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace omnibus::server {

enum class AnthropicEndpoint { kMessages, kCountTokens };

struct AnthropicRequest {
  nlohmann::ordered_json chat_body;  // the chat completions request
  std::string model;
  bool stream = false;
  std::vector<std::string> stop_sequences;  // to report which one ended the message
  bool has_tools = false;
  int32_t thinking_budget = -1;  // thinking enabled: budget_tokens (adaptive: 0); -1: not enabled
};

// REQUIRES: nothing (any JSON value is refused or converted).
ApiResult<AnthropicRequest> parse_anthropic_request(const nlohmann::ordered_json& body,
                                                    AnthropicEndpoint endpoint);

}  // namespace omnibus::server
