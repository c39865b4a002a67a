// AnthropicStreamWriter: the chat path's streamed chunks (OpenAI
// chat.completion.chunk objects, then [DONE]) rewritten as the Anthropic
// Messages API's server-sent events:
//
//   event: message_start        {"message": {id, model, content: [], usage: {input_tokens, ...}}}
//   event: ping
//   per content block i, in the order the text arrives:
//     event: content_block_start  {"index": i, "content_block": {"type": "text" | "thinking" |
//     "tool_use", ...}} event: content_block_delta  {"index": i, "delta": text_delta |
//     thinking_delta | input_json_delta} event: content_block_stop   {"index": i}
//   event: message_delta        {"delta": {stop_reason, stop_sequence}, "usage": {output_tokens,
//   input_tokens, ...}} event: message_stop
//
// delta.content opens (or continues) a text block, delta.reasoning_content a
// thinking block, each delta.tool_calls entry (omnibus sends whole calls) a
// tool_use block whose arguments come as one input_json_delta. The first chunk
// (the chat path's role chunk) starts the message; message_start's
// input_tokens is AnthropicReplyInfo::input_tokens (the cache split is known
// only at the end: message_delta's usage carries the final counts, which
// replace message_start's, as Anthropic's SDKs read them). A choice that ended
// with finish_reason "abort" (the server shut down) ends the stream with an
// `error` event (overloaded_error) instead of message_delta and message_stop.
//
// Thread-safety: one stream, one thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/anthropic_response.h"

namespace omnibus::server {

// One event: "event: <type>\ndata: <json>\n\n".
std::string anthropic_sse(const nlohmann::json& event);

class AnthropicStreamWriter {
 public:
  explicit AnthropicStreamWriter(AnthropicReplyInfo info) : info_(std::move(info)) {}

  // The events one chat chunk makes (possibly none).
  std::string on_chunk(const nlohmann::json& chunk);
  // The events that end the message ([DONE] arrived).
  std::string on_done();

 private:
  enum class Block { kNone, kText, kThinking, kToolUse };
  std::string start(const nlohmann::json& chunk);
  std::string open(Block kind, nlohmann::json content_block);
  std::string close();
  std::string delta(nlohmann::json d);
  std::string on_choice(const nlohmann::json& choice);

  const AnthropicReplyInfo info_;
  bool started_ = false;
  bool ended_ = false;
  Block open_ = Block::kNone;
  int index_ = -1;             // the open (or last) block's index
  std::string finish_reason_;  // the chat choice's, once it ended
  nlohmann::json matched_stop_;
  nlohmann::json usage_;  // the chat usage chunk's
};

}  // namespace omnibus::server
