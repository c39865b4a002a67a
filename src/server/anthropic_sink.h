// AnthropicSink: the ResponseSink a /v1/messages call hands to the chat path
// in place of the client's. It forwards to the client's sink, rewriting what
// the chat path writes into the Anthropic Messages API's shapes
// (anthropic_response.h, anthropic_stream.h):
//   respond(status >= 400, OpenAI error)  -> the same status, Anthropic's error body
//   respond(200, chat completion)          -> the message
//   begin_stream, write(SSE "data:" frames), end_stream -> Anthropic's events
// on_disconnect goes straight to the client's sink.
//
// Thread-safety: any method from any thread (a mutex orders the rewriting;
// the chat path calls them from the handler and the pump thread).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "server/anthropic_response.h"
#include "server/anthropic_stream.h"
#include "server/http_types.h"

namespace omnibus::server {

class AnthropicSink : public ResponseSink {
 public:
  AnthropicSink(std::shared_ptr<ResponseSink> client, AnthropicReplyInfo info);

  using ResponseSink::respond;
  void respond(int status, std::string content_type, std::string body,
               HttpHeaders headers) override;
  void begin_stream(std::string content_type) override;
  void write(std::string data) override;
  void end_stream() override;
  void on_disconnect(std::function<void()> f) override;

 private:
  const std::shared_ptr<ResponseSink> client_;
  const AnthropicReplyInfo info_;
  std::mutex mu_;
  AnthropicStreamWriter writer_;  // guarded by mu_
  std::string pending_;           // guarded by mu_: an SSE frame not complete yet
};

}  // namespace omnibus::server
