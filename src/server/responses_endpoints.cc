// POST /v1/responses, GET and DELETE /v1/responses/{id}: the Responses API
// on the chat path. The request is converted (responses_request.h), run by
// handle_generation() as a chat completion whose answer goes to a
// ResponsesSink, which converts it back (responses_output.h) for the client
// and keeps it in the ResponsesStore when `store` is true.
#include <fmt/format.h>

#include <ctime>

#include "server/api_server.h"
#include "server/responses_output.h"
#include "server/responses_request.h"
#include "server/responses_store.h"
#include "server/sse.h"

namespace omnibus::server {
namespace {

constexpr const char* kJson = "application/json";

// The chat path's answer in, the Responses answer out. Generation calls it
// from one thread at a time (start(), then the pump), as it would a client's sink.
class ResponsesSink : public ResponseSink {
 public:
  ResponsesSink(std::shared_ptr<ResponseSink> client, ResponsesCall call, std::string id,
                ResponsesStore* store)
      : client_(std::move(client)),
        call_(std::move(call)),
        id_(std::move(id)),
        created_(int64_t(std::time(nullptr))),
        store_(store),
        stream_(id_, created_, call_.echo) {}

  void respond(int status, std::string content_type, std::string body,
               HttpHeaders headers) override {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (status != 200) {  // an error in OpenAI's shape: name the Responses field
      if (j.is_object() && j.contains("error") && j["error"].is_object() &&
          j["error"]["param"].is_string()) {
        j["error"]["param"] = chat_param_to_responses(j["error"]["param"].get<std::string>());
        body = j.dump();
      }
      return client_->respond(status, std::move(content_type), std::move(body), std::move(headers));
    }
    nlohmann::json r = response_from_chat(j, id_, created_, call_.echo);
    keep(j, r);
    client_->respond(200, kJson, r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                     std::move(headers));
  }
  void begin_stream(std::string) override {
    client_->begin_stream("text/event-stream");
    client_->write(stream_.begin());
  }
  void write(std::string data) override {
    buf_ += data;
    size_t end;
    while ((end = buf_.find("\n\n")) != std::string::npos) {
      const std::string ev = buf_.substr(0, end);
      buf_.erase(0, end + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      const std::string payload = ev.substr(6);
      if (payload == "[DONE]") {
        client_->write(stream_.finish());
        keep(stream_.completion(), stream_.response());
        continue;
      }
      nlohmann::json chunk = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (chunk.is_object()) client_->write(stream_.on_chunk(chunk));
    }
  }
  void end_stream() override { client_->end_stream(); }
  void on_disconnect(std::function<void()> f) override { client_->on_disconnect(std::move(f)); }

 private:
  void keep(const nlohmann::json& completion, const nlohmann::json& response) {
    if (!call_.store || store_ == nullptr) return;
    nlohmann::json conversation = call_.turn_messages;
    conversation.push_back(assistant_message_of(completion));
    store_->put(id_, ResponsesStore::Entry{response, std::move(conversation)});
  }

  const std::shared_ptr<ResponseSink> client_;
  const ResponsesCall call_;
  const std::string id_;
  const int64_t created_;
  ResponsesStore* const store_;
  ResponsesStream stream_;
  std::string buf_;  // chat SSE text not yet parsed
};

ApiError unknown_response(const std::string& id, const char* param) {
  return ApiError{
      404,
      fmt::format("no stored response with id '{}' (never stored, deleted, or evicted from this "
                  "server's --responses-store-size most recent)",
                  id),
      "invalid_request_error", param, "response_not_found"};
}

}  // namespace

void ApiServer::handle_responses(const HttpRequest& req,
                                 const std::shared_ptr<ResponseSink>& sink) {
  nlohmann::json body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    const ApiError e = ApiError::invalid("", "the request body is not valid JSON", "invalid_json");
    return sink->respond(e.status, kJson, e.to_json());
  }
  ApiResult<std::string> prev = previous_response_id_of(body);
  if (!prev.ok()) return sink->respond(prev.error().status, kJson, prev.error().to_json());
  nlohmann::json history = nullptr;
  if (!prev->empty()) {
    std::optional<ResponsesStore::Entry> e = responses_->get(*prev);
    if (!e) {
      const ApiError err = unknown_response(*prev, "previous_response_id");
      return sink->respond(err.status, kJson, err.to_json());
    }
    history = std::move(e->conversation);
  }
  ApiResult<ResponsesCall> call = parse_responses_request(body, history);
  if (!call.ok()) return sink->respond(call.error().status, kJson, call.error().to_json());
  call->echo["model"] = config_.served_model_name;
  HttpRequest chat = req;
  chat.target = "/v1/chat/completions";
  chat.body = call->chat_body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto adapter =
      std::make_shared<ResponsesSink>(sink, std::move(*call), new_response_id(), responses_.get());
  handle_generation(Endpoint::kChat, chat, adapter);
}

void ApiServer::response_item(const HttpRequest& req, const std::string& path, ResponseSink& sink) {
  const std::string id = path.substr(std::string_view("/v1/responses/").size());
  if (req.method == "DELETE") {
    if (!responses_->erase(id)) {
      const ApiError e = unknown_response(id, "");
      return sink.respond(e.status, kJson, e.to_json());
    }
    return sink.respond(
        200, kJson, nlohmann::json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump());
  }
  std::optional<ResponsesStore::Entry> e = responses_->get(id);
  if (!e) {
    const ApiError err = unknown_response(id, "");
    return sink.respond(err.status, kJson, err.to_json());
  }
  sink.respond(200, kJson,
               e->response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace omnibus::server
