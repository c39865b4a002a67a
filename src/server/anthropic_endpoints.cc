// ApiServer's Anthropic Messages API routes: POST /v1/messages and
// POST /v1/messages/count_tokens. The body is converted to a chat completions
// body (anthropic_request.h) and served by handle_generation through an
// AnthropicSink (anthropic_sink.h); count_tokens renders and tokenizes the
// same chat body as the chat path does, so it equals the prompt's tokens.
// The key: x-api-key (Anthropic's SDKs) or Authorization: Bearer, checked
// against --api-key when set. anthropic-version and anthropic-beta are accepted
// and not read: there is one version of this API here.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/anthropic_sink.h"
#include "server/api_server.h"
#include "server/request_checks.h"
#include "server/sse.h"
#include "server/structured_request.h"

namespace omnibus::server {
namespace {

constexpr const char* kJson = "application/json";

// Constant-time comparison of the x-api-key header with the server's key.
bool x_api_key_matches(std::string_view presented, std::string_view key) {
  if (presented.size() != key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(presented[i] ^ key[i]);
  return diff == 0;
}

void respond(ResponseSink& sink, const ApiError& e, HttpHeaders headers = {}) {
  sink.respond(e.status, kJson, anthropic_error_json(e), std::move(headers));
}

}  // namespace

ApiResult<int64_t> ApiServer::chat_prompt_tokens(const std::string& chat_body) const {
  const nlohmann::json body = nlohmann::json::parse(chat_body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return ApiError::invalid("", "the request body is not a JSON object");
  ParseLimits limits;
  limits.n_vocab = backend_.tokenizer->n_vocab();
  limits.max_n = config_.max_n;
  limits.max_logprobs = config_.max_logprobs;
  ApiResult<GenerationSpec> spec = parse_chat_request(body, limits);
  if (!spec.ok()) return spec.error();
  use_written_tool_order(spec->tools, chat_body);
  StatusOr<std::string> text =
      backend_.chat_renderer(spec->messages, spec->add_generation_prompt, spec->tools.tool_jsons(),
                             spec->reasoning.template_kwargs);
  if (!text.is_ok()) {
    return ApiError::invalid("messages",
                             "cannot apply the chat template: " + text.status().message());
  }
  return int64_t(
      backend_.tokenizer->encode(*text, /*add_special=*/false, /*parse_special=*/true).size());
}

void ApiServer::handle_anthropic(const HttpRequest& req, const std::string& path,
                                 const std::shared_ptr<ResponseSink>& sink) {
  if (req.method != "POST") {
    return respond(
        *sink,
        ApiError{405,
                 fmt::format("method {} is not allowed on {} (allowed: POST)", req.method, path),
                 "invalid_request_error", "", ""},
        HttpHeaders{{"Allow", "POST"}});
  }
  if (!config_.api_key.empty() && !x_api_key_matches(req.header("x-api-key"), config_.api_key) &&
      !bearer_key_matches(req.authorization, config_.api_key)) {
    return respond(*sink, ApiError::unauthorized("invalid or missing API key (x-api-key: <key>)"));
  }
  if (!req.content_type.empty() && !is_json_media_type(req.content_type)) {
    return respond(*sink, ApiError{415,
                                   fmt::format("{} takes a JSON body: send it with Content-Type: "
                                               "application/json (this request says '{}')",
                                               path, req.content_type),
                                   "invalid_request_error", "", ""});
  }
  const State state = state_.load();
  if (state != State::kReady) {
    return respond(*sink,
                   ApiError::unavailable(state == State::kLoading ? "the model is loading"
                                                                  : "the server is shutting down"));
  }
  const nlohmann::ordered_json body =
      nlohmann::ordered_json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded())
    return respond(*sink, ApiError::invalid("", "the request body is not valid JSON"));
  const bool count = path == "/v1/messages/count_tokens";
  ApiResult<AnthropicRequest> r = parse_anthropic_request(
      body, count ? AnthropicEndpoint::kCountTokens : AnthropicEndpoint::kMessages);
  if (!r.ok()) return respond(*sink, r.error());
  HttpRequest chat = req;
  chat.body = r->chat_body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);

  AnthropicReplyInfo info{r->model, r->stop_sequences, 0};
  if (count || r->stream) {
    ApiResult<int64_t> n = chat_prompt_tokens(chat.body);
    if (!n.ok()) return respond(*sink, n.error());
    if (count && r->model != config_.served_model_name) {  // as the chat path answers a create
      return respond(*sink, ApiError::not_found(fmt::format(
                                "the model '{}' does not exist (this server serves '{}')", r->model,
                                config_.served_model_name)));
    }
    if (count) return sink->respond(200, kJson, json_dump({{"input_tokens", *n}}));
    info.input_tokens = *n;
  }
  handle_generation(Endpoint::kChat, chat, std::make_shared<AnthropicSink>(sink, std::move(info)));
}

}  // namespace omnibus::server
