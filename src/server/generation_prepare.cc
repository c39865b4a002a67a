// Generation preparation (api_server.h): an OpenAI completion or chat body
// -> a PreparedGeneration (parsed, grammar compiled, prompts rendered and
// tokenized, checked as the engine checks: engine/request_validation.h), or
// the ApiError to answer. Nothing here submits or writes a response.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/request_validation.h"
#include "server/api_server.h"
#include "server/json_fields.h"
#include "server/reasoning_output.h"
#include "server/response_bounds.h"
#include "server/structured_request.h"
#include "server/tool_grammar.h"

namespace omnibus::server {

ApiResult<PreparedGeneration> ApiServer::prepare_generation(Endpoint endpoint,
                                                            const HttpRequest& req) {
  ApiResult<nlohmann::json> body = parse_json_body(req.body);
  if (!body.ok()) return body.error();
  const Tokenizer& tok = *backend_.tokenizer;
  Engine& engine = *backend_.engine;
  const int32_t max_model_len = engine.info().max_model_len;
  ParseLimits limits;
  limits.n_vocab = tok.n_vocab();
  limits.max_n = config_.max_n;
  limits.max_logprobs = config_.max_logprobs;
  ApiResult<GenerationSpec> spec = endpoint == Endpoint::kChat
                                       ? parse_chat_request(*body, limits)
                                       : parse_completion_request(*body, limits);
  if (!spec.ok()) return spec.error();
  if (!config_.prefix_cache_salt_header.empty()) {  // the gateway's tenant first: see ApiConfig
    spec->base.cache_salt =
        req.header(config_.prefix_cache_salt_header) + '\x1f' + spec->base.cache_salt;
  }
  if (!spec->model.empty() && spec->model != config_.served_model_name) {
    return ApiError::not_found(fmt::format("the model '{}' does not exist (this server serves "
                                           "'{}')",
                                           spec->model, config_.served_model_name),
                               "model_not_found");
  }
  if (spec->structured.kind != grammar::StructuredOutput::Kind::kNone) {
    ApiResult<std::shared_ptr<const grammar::TokenMasker>> g = compile_structured(*spec, req.body);
    if (!g.ok()) return g.error();
    spec->base.grammar = *g;
  }

  // The tools' parameter schemas in the order they were written (the body
  // was read with sorted keys): what the template shows and the grammar forces.
  use_written_tool_order(spec->tools, req.body);
  // tool_choice "required" or a named function: the grammar that forces a call
  // (compiled into Request::grammar with the structured-output grammars).
  if (spec->tools.choice == ToolChoice::kRequired || spec->tools.choice == ToolChoice::kNamed) {
    if (spec->structured.kind != grammar::StructuredOutput::Kind::kNone) {
      return ApiError::invalid("tool_choice", fmt::format("a forced tool call (tool_choice) "
                                                          "and '{}' cannot both constrain the "
                                                          "output",
                                                          spec->structured_field));
    }
    StatusOr<std::string> g = tool_call_grammar(spec->tools, backend_.tool_parser);
    if (!g.is_ok()) return ApiError::invalid("tools", g.status().message());
    spec->tool_grammar = std::move(*g);
    if (backend_.grammars == nullptr) {
      return ApiError::invalid("tool_choice", "this server cannot force tool calls");
    }
    StatusOr<std::shared_ptr<const grammar::TokenMasker>> m =
        backend_.grammars->get(spec->tool_grammar);
    if (!m.is_ok()) return ApiError::invalid("tools", m.status().message());
    spec->base.grammar = std::move(m).value();
  }

  // Prompts -> token ids.
  std::vector<PreparedPrompt> prompts;
  const char* param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (endpoint == Endpoint::kChat) {
    StatusOr<std::string> text =
        backend_.chat_renderer(spec->messages, spec->add_generation_prompt,
                               spec->tools.tool_jsons(), spec->reasoning.template_kwargs);
    if (!text.is_ok()) {
      return ApiError::invalid("messages",
                               "cannot apply the chat template: " + text.status().message());
    }
    prompts.push_back(
        PreparedPrompt{tok.encode(*text, /*add_special=*/false, /*parse_special=*/true), ""});
    if (backend_.reasoning_parser != ReasoningFormat::kNone) {
      spec->starts_in_reasoning = starts_in_reasoning(backend_.reasoning_parser, *text);
      spec->base.thinking =
          thinking_rule(tok, backend_.reasoning_parser, spec->starts_in_reasoning,
                        spec->reasoning.thinking_budget >= 0 ? spec->reasoning.thinking_budget
                                                             : backend_.reasoning_budget);
    }
  } else {
    for (const PromptInput& in : spec->prompts) {
      PreparedPrompt p;
      if (in.is_text) {
        p.ids = tok.encode(in.text, spec->add_special_tokens, /*parse_special=*/true);
        p.echo_text = in.text;
      } else {
        p.ids = in.ids;
        if (spec->echo) p.echo_text = tok.decode(in.ids);
      }
      prompts.push_back(std::move(p));
    }
  }
  int32_t longest = 0;
  for (const PreparedPrompt& p : prompts) longest = std::max(longest, int32_t(p.ids.size()));
  if (!spec->max_tokens_set) spec->base.max_tokens = std::max(1, max_model_len - longest);
  // The engine's checks (engine/request_validation.h), on each prompt as it will be submitted.
  for (const PreparedPrompt& p : prompts) {
    Request r = spec->base;
    r.prompt = p.ids;
    if (std::optional<RequestError> e = validate_request(r, tok.n_vocab(), max_model_len)) {
      // The prompt's own faults (empty, too long for the context) are the prompt's or messages'
      // field.
      const bool prompt_field = e->field == "prompt" || e->code == "context_length_exceeded";
      return ApiError::invalid(prompt_field ? param : e->field, e->message, e->code);
    }
  }
  {
    std::vector<int64_t> prompt_tokens;
    for (const PreparedPrompt& p : prompts) prompt_tokens.push_back(int64_t(p.ids.size()));
    if (std::optional<ApiError> e =
            check_response_bounds(*spec, prompt_tokens, config_.max_logprob_entries)) {
      return *e;
    }
  }

  // Disaggregated prefill/decode (kv_transfer_service.h).
  const auto params_it = body->find("kv_transfer_params");
  const nlohmann::json* kv_params = params_it == body->end() ? nullptr : &*params_it;
  KvTransferService::Ask kv_ask = KvTransferService::Ask::kNone;
  if (backend_.kv_transfer != nullptr) {
    ApiResult<KvTransferService::Ask> ask = backend_.kv_transfer->classify(kv_params);
    if (!ask.ok()) return ask.error();
    kv_ask = *ask;
  } else if (kv_params != nullptr && !kv_params->is_null()) {
    const bool asks =
        kv_params->is_object() && (kv_params->value("do_remote_decode", false) == true ||
                                   kv_params->value("do_remote_prefill", false) == true);
    if (asks) {
      return ApiError::invalid("kv_transfer_params",
                               "this worker does not transfer KV blocks: start it with "
                               "--kv-role prefill or decode (or --kv-transfer), "
                               "--kv-transfer-secret-file and --kv-transfer-peers "
                               "(docs/security.md); if it was, its start-up log says why "
                               "the service is off",
                               "kv_transfer_disabled");
    }
  }
  if (kv_ask != KvTransferService::Ask::kNone && prompts.size() != 1) {
    return ApiError::invalid("kv_transfer_params", "kv_transfer_params needs a single prompt");
  }
  if (kv_ask == KvTransferService::Ask::kRemoteDecode && spec->stream) {
    return ApiError::invalid("stream",
                             "a prefill for a remote decode (kv_transfer_params."
                             "do_remote_decode) answers with stream: false");
  }

  if (state_.load() == State::kDraining) {
    return ApiError::unavailable("the server is shutting down");
  }
  const int64_t n_new = int64_t(prompts.size());
  if (config_.max_waiting > 0 && counters_.n_pending.load() + n_new > config_.max_waiting) {
    return ApiError::unavailable(fmt::format("the server is overloaded: {} requests are waiting "
                                             "(bound {}); retry later",
                                             counters_.n_pending.load(), config_.max_waiting),
                                 "server_overloaded");
  }

  PreparedGeneration out;
  out.spec = std::move(*spec);
  out.prompts = std::move(prompts);
  out.kv_ask = kv_ask;
  if (kv_params != nullptr) out.kv_params = *kv_params;
  return out;
}

}  // namespace omnibus::server
