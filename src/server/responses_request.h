// POST /v1/responses (OpenAI's Responses API) as a chat-completions call: the
// request body is checked and converted into the body of an equivalent
// /v1/chat/completions request, which the API server runs on the one chat
// path (templates, tools, grammars, reasoning parser, prefix cache). No
// second generation path: responses_output.h turns the chat answer back.
//
// Request -> chat body:
//   input (string | items)       -> messages: a string is one user message;
//     {"type": "message"?, "role", "content": string | [input_text|output_text parts]}
//                                -> that message ("developer" -> "system")
//     {"type": "function_call", "call_id", "name", "arguments"}
//                                -> tool_calls of the assistant message before it (or a new one)
//     {"type": "function_call_output", "call_id", "output"} -> a "tool" message
//     {"type": "reasoning", "content": [{"type": "reasoning_text", "text"}]}
//                                -> reasoning_content of the next assistant message
//   instructions                 -> a leading system message (not stored: OpenAI
//                                   does not carry instructions over previous_response_id)
//   tools [{"type": "function", "name", "description", "parameters", "strict"}]
//                                -> tools [{"type": "function", "function": {...}}]
//   tool_choice "auto"|"none"|"required"|{"type": "function", "name"} -> tool_choice
//   text.format {"type": "text"|"json_object"|"json_schema", "name", "schema", "strict"}
//                                -> response_format
//   reasoning.effort             -> reasoning_effort
//   max_output_tokens            -> max_tokens
//   temperature, top_p, parallel_tool_calls, stream, and the omnibus
//   extensions (top_k, seed, logit_bias, thinking_token_budget,
//   chat_template_kwargs, ...) pass through; the chat parser checks them.
//   store (default true), previous_response_id, metadata: kept by the caller.
// Errors are 400s in OpenAI's shape naming the Responses field
// (chat_param_to_responses maps the names the chat parser reports).
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"

namespace omnibus::server {

struct ResponsesCall {
  nlohmann::json chat_body;      // a /v1/chat/completions body
  nlohmann::json turn_messages;  // this turn's chat messages, history first (no instructions)
  nlohmann::json echo;           // request fields the Response object repeats
  bool stream = false;
  bool store = true;
  std::string previous_response_id;  // "" when none
};

// REQUIRES: nothing of the body (any JSON value is checked).
// history: the stored chat messages of previous_response_id's conversation
// (null when none); they come before this turn's input.
ApiResult<ResponsesCall> parse_responses_request(const nlohmann::json& body,
                                                 const nlohmann::json& history);

// previous_response_id of a body, "" when absent; an error when it is not a string.
ApiResult<std::string> previous_response_id_of(const nlohmann::json& body);

// The Responses field for a param the chat parser named ("max_tokens" ->
// "max_output_tokens", "messages[3]..." -> "input", "response_format..." ->
// "text.format...", "reasoning_effort" -> "reasoning.effort", "tools[i].function.x" ->
// "tools[i].x").
std::string chat_param_to_responses(const std::string& param);

}  // namespace omnibus::server
