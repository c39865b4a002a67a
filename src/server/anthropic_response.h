// The chat path's answers turned into the Anthropic Messages API's: error
// bodies, the non-streamed message, usage and stop reasons. The streamed
// events are anthropic_stream.h; the ResponseSink that applies both to a chat
// generation is anthropic_sink.h.
//
//   error:   HTTP <status> {"type": "error", "error": {"type": T, "message": M}}
//            T by status: 400 invalid_request_error, 401 authentication_error,
//            403 permission_error, 404 not_found_error, 405 invalid_request_error,
//            413 request_too_large, 415 invalid_request_error, 429 rate_limit_error,
//            503 overloaded_error, other api_error. M names the field: a chat-path
//            error's param is put in front ("max_tokens: ...") unless M starts with it.
//   message: {"id": "msg_...", "type": "message", "role": "assistant", "model",
//            "content": [text block?, tool_use blocks...], "stop_reason", "stop_sequence", "usage"}
//   usage:   input_tokens = prompt tokens not read from the prefix cache,
//            cache_read_input_tokens = prompt tokens read from it,
//            cache_creation_input_tokens = 0 (omnibus caches every full block as a side
//            effect at no extra cost, so nothing is billed as a cache write), output_tokens;
//            as Anthropic counts them, the prompt is the sum of the three input fields.
//   stop_reason: chat finish_reason stop -> end_turn (stop_sequence when the request
//            had stop_sequences and the chat choice names the one that matched in
//            stop_reason), length -> max_tokens, tool_calls -> tool_use.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace omnibus::server {

// What the request said that the answer needs.
struct AnthropicReplyInfo {
  std::string model;                        // echoed in the message
  std::vector<std::string> stop_sequences;  // the request's
  int64_t input_tokens = 0;                 // streaming: the prompt's tokens, for message_start
};

const char* anthropic_error_type(int status);
std::string anthropic_error_json(const ApiError& e);
// A chat-path error body ({"error": {"message", "param", ...}}) in Anthropic's shape.
std::string anthropic_error_from_chat(int status, const std::string& chat_body);

// The chat completion's id ("chatcmpl-X") as a message id ("msg_X").
std::string anthropic_message_id(const std::string& chat_id);
// A chat tool call id ("call_X") as a tool_use id ("toolu_X").
std::string anthropic_tool_use_id(const std::string& call_id);

nlohmann::json anthropic_usage(const nlohmann::json& chat_usage);
// {"stop_reason", "stop_sequence"} for a chat finish_reason and the choice's vLLM-style
// stop_reason (the stop string that matched, when one did).
nlohmann::json anthropic_stop(const std::string& finish_reason, const nlohmann::json& matched_stop,
                              const AnthropicReplyInfo& info);

// The whole non-streamed message from a chat completion response.
// REQUIRES: chat is the chat path's 200 body (one choice).
nlohmann::json anthropic_message(const nlohmann::json& chat, const AnthropicReplyInfo& info);

}  // namespace omnibus::server
