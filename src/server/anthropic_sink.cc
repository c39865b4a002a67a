#include "server/anthropic_sink.h"

#include "server/sse.h"

namespace omnibus::server {

AnthropicSink::AnthropicSink(std::shared_ptr<ResponseSink> client, AnthropicReplyInfo info)
    : client_(std::move(client)), info_(info), writer_(std::move(info)) {}

void AnthropicSink::respond(int status, std::string content_type, std::string body,
                            HttpHeaders headers) {
  if (status >= 400) {
    return client_->respond(status, "application/json", anthropic_error_from_chat(status, body),
                            std::move(headers));
  }
  const nlohmann::json chat = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (chat.is_discarded() || !chat.is_object()) {
    return client_->respond(status, std::move(content_type), std::move(body), std::move(headers));
  }
  client_->respond(status, "application/json", json_dump(anthropic_message(chat, info_)),
                   std::move(headers));
}

void AnthropicSink::begin_stream(std::string content_type) {
  client_->begin_stream(std::move(content_type));
}

void AnthropicSink::write(std::string data) {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ += data;
    size_t end;
    while ((end = pending_.find("\n\n")) != std::string::npos) {
      std::string frame = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (frame.rfind("data: ", 0) != 0) continue;
      frame.erase(0, 6);
      if (frame == "[DONE]") {
        out += writer_.on_done();
        continue;
      }
      const nlohmann::json chunk =
          nlohmann::json::parse(frame, nullptr, /*allow_exceptions=*/false);
      if (!chunk.is_discarded()) out += writer_.on_chunk(chunk);
    }
  }
  if (!out.empty()) client_->write(std::move(out));
}

void AnthropicSink::end_stream() { client_->end_stream(); }

void AnthropicSink::on_disconnect(std::function<void()> f) { client_->on_disconnect(std::move(f)); }

}  // namespace omnibus::server
