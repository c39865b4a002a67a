// The chat path's answer as a Responses API answer (responses_request.h has
// the request side).
//
// response_from_chat(): a chat.completion body -> a Response object:
//   output = [reasoning item (when the choice thought: content
//             [{"type": "reasoning_text"}], summary []),
//             message item (output_text; omitted when the choice only called tools),
//             function_call items (call_id = the chat tool call's id)]
//   status "completed", or "incomplete" with incomplete_details.reason
//   "max_output_tokens" when the choice hit the length limit;
//   usage {input_tokens, input_tokens_details {cached_tokens, cache_write_tokens},
//          output_tokens, output_tokens_details {reasoning_tokens}, total_tokens}.
// Item ids derive from the response id, so a stream and its final object agree.
//
// ResponsesStream: chat.completion.chunk objects in, Responses SSE events out,
// in the documented order: response.created, response.in_progress, then per
// item response.output_item.added, (response.content_part.added,
// response.reasoning_text.delta* | response.output_text.delta*,
// response.reasoning_text.done | response.output_text.done,
// response.content_part.done | response.function_call_arguments.delta,
// response.function_call_arguments.done), response.output_item.done; last
// response.completed (or response.incomplete) carrying the whole Response,
// built by response_from_chat() from what streamed. Every event has a
// sequence_number counting from 0.
//
// Neither throws on what the chat path never makes (a choice or tool call that
// is no object, a field of another type): such parts read as absent.
//
// Thread-safety: response_from_chat is pure; a ResponsesStream belongs to one
// response, one thread at a time.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace omnibus::server {

// "resp_" + 32 hex digits.
std::string new_response_id();

// echo: ResponsesCall::echo (request fields the object repeats).
nlohmann::json response_from_chat(const nlohmann::json& chat_completion, const std::string& id,
                                  int64_t created, const nlohmann::json& echo);

// The assistant chat message a chat.completion's first choice makes (for
// the store: the next turn's history).
nlohmann::json assistant_message_of(const nlohmann::json& chat_completion);

class ResponsesStream {
 public:
  ResponsesStream(std::string id, int64_t created, nlohmann::json echo);

  // The opening events (response.created, response.in_progress).
  std::string begin();
  // One chat.completion.chunk.
  std::string on_chunk(const nlohmann::json& chunk);
  // The end of the chat stream: closing events and response.completed.
  std::string finish();
  // The chat.completion the stream amounts to (valid after finish()).
  const nlohmann::json& completion() const { return completion_; }
  // The final Response object (valid after finish()).
  const nlohmann::json& response() const { return response_; }

 private:
  enum class Open { kNone, kReasoning, kMessage };
  std::string event(const char* type, nlohmann::json fields);
  std::string close_open();
  std::string open_item(Open kind);
  nlohmann::json skeleton(const char* status) const;

  const std::string id_;
  const int64_t created_;
  const nlohmann::json echo_;
  int64_t seq_ = 0;
  int output_index_ = -1;  // of the item last opened
  Open open_ = Open::kNone;
  std::string reasoning_, content_;  // the whole texts so far
  std::string item_text_;            // the open item's text so far
  nlohmann::json tool_calls_ = nlohmann::json::array();
  nlohmann::json finish_reason_ = nullptr;
  nlohmann::json usage_ = nullptr;
  nlohmann::json completion_, response_;
};

}  // namespace omnibus::server
