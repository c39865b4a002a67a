#include "server/api_server.h"

#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/json_fields.h"
#include "server/request_checks.h"
#include "server/response_bounds.h"
#include "server/sse.h"
#include "server/structured_request.h"
#include "server/tool_grammar.h"
#include "server/web_assets.h"

namespace omnibus::server {
namespace {

constexpr const char* kJson = "application/json";

void respond_error(ResponseSink& sink, const ApiError& e) { sink.respond(e.status, kJson, e.to_json()); }

// 405 naming the methods the route takes (also in the Allow header).
void respond_method_not_allowed(ResponseSink& sink, const HttpRequest& req, const std::string& path,
                                const char* allow) {
  const ApiError e{405, fmt::format("method {} is not allowed on {} (allowed: {})", req.method, path, allow),
                   "invalid_request_error", "", "method_not_allowed"};
  sink.respond(e.status, kJson, e.to_json(), HttpHeaders{{"Allow", allow}});
}

ApiResult<nlohmann::json> parse_body(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return ApiError::invalid("", "the request body is not valid JSON", "invalid_json");
  if (!j.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  return j;
}

}  // namespace

ApiServer::ApiServer(ApiConfig config)
    : config_(std::move(config)),
      metrics_(config_.served_model_name),
      pump_(std::make_unique<StreamPump>()),
      created_(int64_t(std::time(nullptr))) {}

ApiServer::~ApiServer() { pump_.reset(); }

void ApiServer::set_backend(Backend backend) {
  backend_ = std::move(backend);
  if (!backend_.chat_renderer) backend_.chat_renderer = chatml_renderer();
  State expected = State::kLoading;
  state_.compare_exchange_strong(expected, State::kReady);
}

void ApiServer::begin_drain() { state_ = State::kDraining; }

void ApiServer::abort_all() {
  std::vector<std::shared_ptr<Generation>> live;
  {
    std::lock_guard<std::mutex> lock(gens_mu_);
    for (const auto& w : gens_) {
      if (auto g = w.lock()) live.push_back(std::move(g));
    }
  }
  for (const auto& g : live) g->abort();
}

void ApiServer::handle(HttpRequest req, std::shared_ptr<ResponseSink> sink) {
  std::string path = req.target.substr(0, req.target.find('?'));
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";
  const State state = state_.load();
  const bool ready = state != State::kLoading;

  const auto not_ready = [state] {
    return ApiError::unavailable(state == State::kLoading ? "the model is loading" : "the server is shutting down");
  };

  constexpr const char* kGetMethods = "GET, HEAD";
  if (path == "/health") {
    if (!get) return respond_method_not_allowed(*sink, req, path, kGetMethods);
    if (state == State::kReady) return sink->respond(200, kJson, R"({"status":"ok"})");
    return respond_error(*sink, not_ready());
  }
  if (path == "/") path = "/index.html";
  if (const WebAsset* a = find_web_asset(path)) {
    if (!get) return respond_method_not_allowed(*sink, req, path, kGetMethods);
    return sink->respond(200, std::string(a->content_type), std::string(a->body));
  }
  if (path == "/metrics") {
    if (!get) return respond_method_not_allowed(*sink, req, path, kGetMethods);
    EngineStats st;
    if (ready) st = backend_.engine->stats();
    std::optional<KvEventsCounts> kv_events;
    if (ready && backend_.kv_events_counts) kv_events = backend_.kv_events_counts();
    std::string text = metrics_.render(st, kv_events);
    if (ready && backend_.kv_transfer != nullptr) {
      text += backend_.kv_transfer->metrics_text(fmt::format("model_name=\"{}\"", config_.served_model_name), st);
    }
    return sink->respond(200, "text/plain; version=0.0.4; charset=utf-8", text);
  }

  struct Route {
    const char* path;
    bool post;
    bool keyed = true;       // false: the read-only router endpoints (vllm-router sends no key), like /health
    bool json_body = false;  // the body is a JSON object: a Content-Type other than JSON gets 415
  };
  static const Route kRoutes[] = {{"/v1/models", false},
                                  {"/v1/completions", true, true, true},
                                  {"/v1/chat/completions", true, true, true},
                                  {"/v1/embeddings", true, true, true},
                                  {"/v1/rerank", true, true, true},
                                  {"/v1/score", true, true, true},
                                  {"/tokenize", true, true, true},
                                  {"/detokenize", true, true, true},
                                  {"/tokenizer_info", false},
                                  {"/v1/engine/state", false},
                                  {"/v1/engine/kv_blocks", false},
                                  {"/flush_cache", true},
                                  {"/reset_prefix_cache", true},
                                  {"/get_load", false, false},
                                  {"/get_server_info", false, false},
                                  {"/server_info", false, false},
                                  {"/get_model_info", false, false},
                                  {"/health_generate", false, false}};
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (path == r.path) route = &r;
  }
  if (!route) return respond_error(*sink, ApiError::not_found(fmt::format("no route for {} {}", req.method, path)));
  if (route->post ? !post : !get) {
    return respond_method_not_allowed(*sink, req, path, route->post ? "POST" : kGetMethods);
  }
  if (!route->keyed) {  // router endpoints: only while ready (a draining worker is leaving the pool)
    if (state != State::kReady) return respond_error(*sink, not_ready());
    if (path == "/get_load") return sink->respond(200, kJson, load());
    if (path == "/health_generate") return health_generate(*sink);
    if (path == "/get_model_info") return sink->respond(200, kJson, model_info());
    return sink->respond(200, kJson, server_info());
  }
  if (!config_.api_key.empty() && !bearer_key_matches(req.authorization, config_.api_key)) {
    return respond_error(*sink, ApiError::unauthorized("invalid or missing API key (Authorization: Bearer <key>)"));
  }
  // A missing Content-Type is read as JSON (clients that send none still work).
  if (route->json_body && !req.content_type.empty() && !is_json_media_type(req.content_type)) {
    return respond_error(*sink, ApiError{415, fmt::format("{} takes a JSON body: send it with Content-Type: "
                                                          "application/json (this request says '{}')",
                                                          path, req.content_type),
                                         "invalid_request_error", "", "unsupported_media_type"});
  }
  if (path.rfind("/v1/engine/", 0) == 0 && config_.api_key.empty() && !config_.enable_debug_endpoints) {
    return respond_error(*sink, ApiError::not_found(fmt::format("{} is a debug endpoint: start the server with "
                                                                "--api-key (then it needs the key) or "
                                                                "--enable-debug-endpoints",
                                                                path)));
  }
  if (path == "/v1/engine/state") return sink->respond(200, kJson, engine_state());
  if (!ready) return respond_error(*sink, ApiError::unavailable("the model is loading"));

  if (path == "/v1/models") return sink->respond(200, kJson, models());
  if (path == "/v1/engine/kv_blocks") return sink->respond(200, kJson, kv_blocks());
  if (path == "/flush_cache" || path == "/reset_prefix_cache") return flush_cache(*sink);
  if (path == "/tokenizer_info") return sink->respond(200, kJson, tokenizer_info());
  if (path == "/tokenize" || path == "/detokenize") {
    ApiResult<std::string> r = path == "/tokenize" ? tokenize(req.body) : detokenize(req.body);
    if (!r.ok()) return respond_error(*sink, r.error());
    return sink->respond(200, kJson, std::move(*r));
  }
  if (path == "/v1/embeddings") return handle_embeddings(req, sink);
  if (path == "/v1/rerank" || path == "/v1/score") return handle_pairs(path == "/v1/rerank", req, sink);
  handle_generation(path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChat, req, sink);
}

// The masker for the request's structured output (GrammarCache: compiled once
// per distinct grammar), or a 400 naming the field and what is unsupported.
ApiResult<std::shared_ptr<const grammar::TokenMasker>> ApiServer::compile_structured(GenerationSpec& spec,
                                                                                     const std::string& raw_body) {
  if (backend_.grammars == nullptr) {
    return ApiError::invalid(spec.structured_field, "this server does not support structured output");
  }
  if (!spec.schema_pointer.empty()) {
    std::string ordered = ordered_schema_text(raw_body, spec.schema_pointer);
    if (!ordered.empty()) spec.structured.text = std::move(ordered);
  }
  StatusOr<std::shared_ptr<const grammar::TokenMasker>> g = backend_.grammars->get(spec.structured);
  if (!g.is_ok()) {
    return ApiError::invalid(spec.structured_field, fmt::format("'{}': {}", spec.structured_field,
                                                                g.status().message()));
  }
  return std::move(g).value();
}

void ApiServer::handle_generation(Endpoint endpoint, const HttpRequest& req,
                                  const std::shared_ptr<ResponseSink>& sink) {
  ApiResult<nlohmann::json> body = parse_body(req.body);
  if (!body.ok()) return respond_error(*sink, body.error());
  const Tokenizer& tok = *backend_.tokenizer;
  Engine& engine = *backend_.engine;
  const int32_t max_model_len = engine.info().max_model_len;
  ParseLimits limits;
  limits.n_vocab = tok.n_vocab();
  limits.max_n = config_.max_n;
  limits.max_logprobs = config_.max_logprobs;
  ApiResult<GenerationSpec> spec =
      endpoint == Endpoint::kChat ? parse_chat_request(*body, limits) : parse_completion_request(*body, limits);
  if (!spec.ok()) return respond_error(*sink, spec.error());
  if (!config_.prefix_cache_salt_header.empty()) {  // the gateway's tenant first: see ApiConfig
    spec->base.cache_salt = req.header(config_.prefix_cache_salt_header) + '\x1f' + spec->base.cache_salt;
  }
  if (!spec->model.empty() && spec->model != config_.served_model_name) {
    return respond_error(*sink, ApiError::not_found(fmt::format("the model '{}' does not exist (this server serves "
                                                                "'{}')", spec->model, config_.served_model_name),
                                                    "model_not_found"));
  }
  if (spec->structured.kind != grammar::StructuredOutput::Kind::kNone) {
    ApiResult<std::shared_ptr<const grammar::TokenMasker>> g = compile_structured(*spec, req.body);
    if (!g.ok()) return respond_error(*sink, g.error());
    spec->base.grammar = *g;
  }

  // The tools' parameter schemas in the order they were written (the body
  // was read with sorted keys): what the template shows and the grammar forces.
  if (!spec->tools.functions.empty()) {
    std::vector<std::string> pointers;
    for (size_t i = 0; i < spec->tools.functions.size(); ++i) {
      pointers.push_back(fmt::format("/tools/{}/function/parameters", i));
      pointers.push_back(fmt::format("/tools/{}", i));
    }
    std::vector<std::string> ordered = ordered_schema_texts(req.body, pointers);
    for (size_t i = 0; i < spec->tools.functions.size(); ++i) {
      ToolFunction& f = spec->tools.functions[i];
      if (!ordered[2 * i].empty()) f.parameters = std::move(ordered[2 * i]);
      if (!ordered[2 * i + 1].empty()) f.tool_json = std::move(ordered[2 * i + 1]);
    }
  }
  // tool_choice "required" or a named function: the grammar that forces a call
  // (compiled into Request::grammar with the structured-output grammars).
  if (spec->tools.choice == ToolChoice::kRequired || spec->tools.choice == ToolChoice::kNamed) {
    if (spec->structured.kind != grammar::StructuredOutput::Kind::kNone) {
      return respond_error(*sink, ApiError::invalid("tool_choice", fmt::format("a forced tool call (tool_choice) "
                                                                               "and '{}' cannot both constrain the "
                                                                               "output", spec->structured_field)));
    }
    StatusOr<std::string> g = tool_call_grammar(spec->tools, backend_.tool_parser);
    if (!g.is_ok()) return respond_error(*sink, ApiError::invalid("tools", g.status().message()));
    spec->tool_grammar = std::move(*g);
    if (backend_.grammars == nullptr) {
      return respond_error(*sink, ApiError::invalid("tool_choice", "this server cannot force tool calls"));
    }
    StatusOr<std::shared_ptr<const grammar::TokenMasker>> m = backend_.grammars->get(spec->tool_grammar);
    if (!m.is_ok()) return respond_error(*sink, ApiError::invalid("tools", m.status().message()));
    spec->base.grammar = std::move(m).value();
  }

  // Prompts -> token ids.
  std::vector<PreparedPrompt> prompts;
  const char* param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (endpoint == Endpoint::kChat) {
    StatusOr<std::string> text = backend_.chat_renderer(spec->messages, spec->add_generation_prompt,
                                                         spec->tools.tool_jsons());
    if (!text.is_ok()) {
      return respond_error(*sink, ApiError::invalid("messages", "cannot apply the chat template: " +
                                                                    text.status().message()));
    }
    prompts.push_back(PreparedPrompt{tok.encode(*text, /*add_special=*/false, /*parse_special=*/true), ""});
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
  for (const PreparedPrompt& p : prompts) {
    if (p.ids.empty()) return respond_error(*sink, ApiError::invalid(param, "the prompt is empty after tokenization"));
    longest = std::max(longest, int32_t(p.ids.size()));
  }
  if (!spec->max_tokens_set) spec->base.max_tokens = std::max(1, max_model_len - longest);
  if (int64_t(longest) + spec->base.max_tokens > max_model_len) {
    return respond_error(
        *sink, ApiError::invalid(param,
                                 fmt::format("this model's maximum context length is {} tokens, but {} tokens were "
                                             "requested ({} in the prompt, {} for the completion); shorten the "
                                             "prompt or lower max_tokens",
                                             max_model_len, int64_t(longest) + spec->base.max_tokens, longest,
                                             spec->base.max_tokens),
                                 "context_length_exceeded"));
  }
  if (spec->base.min_tokens > spec->base.max_tokens) {
    return respond_error(*sink, ApiError::invalid("min_tokens", "'min_tokens' must not exceed the tokens the context "
                                                                "leaves for the completion"));
  }
  {
    std::vector<int64_t> prompt_tokens;
    for (const PreparedPrompt& p : prompts) prompt_tokens.push_back(int64_t(p.ids.size()));
    if (std::optional<ApiError> e = check_response_bounds(*spec, prompt_tokens, config_.max_logprob_entries)) {
      return respond_error(*sink, *e);
    }
  }

  // Disaggregated prefill/decode (kv_transfer_service.h).
  const auto params_it = body->find("kv_transfer_params");
  const nlohmann::json* kv_params = params_it == body->end() ? nullptr : &*params_it;
  KvTransferService::Ask kv_ask = KvTransferService::Ask::kNone;
  if (backend_.kv_transfer != nullptr) {
    ApiResult<KvTransferService::Ask> ask = backend_.kv_transfer->classify(kv_params);
    if (!ask.ok()) return respond_error(*sink, ask.error());
    kv_ask = *ask;
  } else if (kv_params != nullptr && !kv_params->is_null()) {
    const bool asks = kv_params->is_object() && (kv_params->value("do_remote_decode", false) == true ||
                                                 kv_params->value("do_remote_prefill", false) == true);
    if (asks) {
      return respond_error(*sink, ApiError::invalid("kv_transfer_params",
                                                    "this worker does not transfer KV blocks: start it with "
                                                    "--kv-role prefill or decode (or --kv-transfer), "
                                                    "--kv-transfer-secret-file and --kv-transfer-peers "
                                                    "(docs/security.md); if it was, its start-up log says why "
                                                    "the service is off",
                                                    "kv_transfer_disabled"));
    }
  }
  if (kv_ask != KvTransferService::Ask::kNone && prompts.size() != 1) {
    return respond_error(*sink, ApiError::invalid("kv_transfer_params", "kv_transfer_params needs a single prompt"));
  }
  if (kv_ask == KvTransferService::Ask::kRemoteDecode && spec->stream) {
    return respond_error(*sink, ApiError::invalid("stream", "a prefill for a remote decode (kv_transfer_params."
                                                            "do_remote_decode) answers with stream: false"));
  }

  if (state_.load() == State::kDraining) {
    return respond_error(*sink, ApiError::unavailable("the server is shutting down"));
  }
  const int64_t n_new = int64_t(prompts.size());
  if (config_.max_waiting > 0 && counters_.n_pending.load() + n_new > config_.max_waiting) {
    return respond_error(*sink, ApiError::unavailable(fmt::format("the server is overloaded: {} requests are waiting "
                                                                  "(bound {}); retry later",
                                                                  counters_.n_pending.load(), config_.max_waiting),
                                                      "server_overloaded"));
  }

  std::shared_ptr<KvImport> kv_import;
  if (kv_ask == KvTransferService::Ask::kRemotePrefill) {
    ApiResult<std::shared_ptr<KvImport>> im =
        backend_.kv_transfer->prepare_import(*kv_params, prompts[0].ids, spec->base.cache_salt);
    if (!im.ok()) return respond_error(*sink, im.error());
    kv_import = *im;
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const PreparedPrompt& p : prompts) {
    Request r = spec->base;
    r.prompt = p.ids;
    r.pin_prompt_blocks = kv_ask == KvTransferService::Ask::kRemoteDecode;
    r.kv_import = kv_import;
    StatusOr<std::shared_ptr<RequestStream>> s = engine.submit(std::move(r));
    if (!s.is_ok()) {
      for (const auto& done : streams) engine.abort(done->id());
      if (kv_import) kv_import->finished(0, 0, false);  // the prefill worker may unpin now
      return respond_error(*sink, ApiError::invalid("", s.status().message()));
    }
    streams.push_back(std::move(*s));
  }
  counters_.n_pending.fetch_add(n_new);

  GenerationContext ctx{&engine, &tok, &metrics_, &counters_, config_.served_model_name,
                        kv_ask == KvTransferService::Ask::kRemoteDecode ? backend_.kv_transfer : nullptr,
                        backend_.tool_parser};
  auto gen =
      std::make_shared<Generation>(std::move(ctx), std::move(*spec), std::move(prompts), sink);
  std::weak_ptr<Generation> weak = gen;
  sink->on_disconnect([weak] {
    if (auto g = weak.lock()) g->cancel();
  });
  gen->start(streams);
  {
    // After start(): abort_all (another thread) may use it from here on.
    std::lock_guard<std::mutex> lock(gens_mu_);
    std::erase_if(gens_, [](const std::weak_ptr<Generation>& w) { return w.expired(); });
    gens_.push_back(gen);
  }
  for (size_t k = 0; k < streams.size(); ++k) {
    pump_->add(streams[k], [gen, k](std::vector<EngineEvent>& events) { gen->on_events(k, events); });
  }
}

ApiResult<std::string> ApiServer::tokenize(const std::string& body_text) const {
  ApiResult<nlohmann::json> body = parse_body(body_text);
  if (!body.ok()) return body.error();
  JsonFields f(*body);
  std::string prompt;
  bool add_special = true;
  if (!f.find("prompt")) f.fail(ApiError::invalid("prompt", "'prompt' is required"));
  f.get_string("prompt", prompt);
  f.get_bool("add_special_tokens", add_special);
  if (!f.ok()) return *f.error();
  const std::vector<int32_t> ids = backend_.tokenizer->encode(prompt, add_special, /*parse_special=*/true);
  nlohmann::json r;
  r["tokens"] = ids;
  r["count"] = ids.size();
  r["max_model_len"] = backend_.engine->info().max_model_len;
  return json_dump(r);
}

ApiResult<std::string> ApiServer::detokenize(const std::string& body_text) const {
  ApiResult<nlohmann::json> body = parse_body(body_text);
  if (!body.ok()) return body.error();
  const int32_t n_vocab = backend_.tokenizer->n_vocab();
  auto it = body->find("tokens");
  if (it == body->end() || !it->is_array()) return ApiError::invalid("tokens", "'tokens' must be a list of token ids");
  std::vector<int32_t> ids;
  for (const nlohmann::json& x : *it) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= n_vocab) {
      return ApiError::invalid("tokens", fmt::format("'tokens' must be token ids in [0, {})", n_vocab));
    }
    ids.push_back(x.get<int32_t>());
  }
  return json_dump({{"prompt", backend_.tokenizer->decode(ids)}});
}

std::string ApiServer::tokenizer_info() const {
  const Tokenizer& tok = *backend_.tokenizer;
  auto token_text = [&tok](int32_t id) -> nlohmann::json {
    if (id < 0 || id >= tok.n_vocab()) return nullptr;
    return tok.token_to_piece(id, /*render_special=*/true);
  };
  nlohmann::json r;
  r["bos_token"] = token_text(tok.bos_id());
  r["eos_token"] = token_text(tok.eos_id());
  r["pad_token"] = token_text(backend_.pad_id);
  r["chat_template"] = backend_.chat_template.empty() ? nlohmann::json(nullptr) : nlohmann::json(backend_.chat_template);
  r["vocab_size"] = tok.n_vocab();
  r["add_bos_token"] = tok.add_bos();
  return json_dump(r);
}

std::string ApiServer::models() const {
  nlohmann::json m;
  m["id"] = config_.served_model_name;
  m["object"] = "model";
  m["created"] = created_;
  m["owned_by"] = "omnibus";
  m["root"] = backend_.model_path;
  m["max_model_len"] = backend_.engine->info().max_model_len;
  return json_dump({{"object", "list"}, {"data", nlohmann::json::array({m})}});
}

std::string ApiServer::engine_state() {
  const State state = state_.load();
  nlohmann::json r;
  r["state"] = state == State::kLoading ? "loading" : state == State::kReady ? "ready" : "draining";
  r["model"] = config_.served_model_name;
  if (state == State::kLoading) return json_dump(r);
  const EngineStats st = backend_.engine->stats();
  const EngineInfo& info = backend_.engine->info();
  const uint64_t tokens = metrics_.generation_tokens();
  double rate = 0;
  {
    // Generated tokens per second over the last >= 1 s window.
    std::lock_guard<std::mutex> lock(rate_mu_);
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - rate_time_).count();
    if (rate_time_ == std::chrono::steady_clock::time_point{} || dt > 10.0) {
      rate_time_ = now;
      rate_tokens_ = tokens;
      rate_ = 0;
    } else if (dt >= 1.0) {
      rate_ = double(tokens - rate_tokens_) / dt;
      rate_time_ = now;
      rate_tokens_ = tokens;
    }
    rate = rate_;
  }
  r["num_requests_running"] = st.n_running;
  r["num_requests_waiting"] = st.n_waiting;
  r["kv_blocks_used"] = st.kv_blocks_used;
  r["kv_blocks_total"] = st.kv_blocks_total;
  r["kv_cache_usage"] = st.kv_cache_usage();
  r["block_size"] = info.block_size;
  r["max_model_len"] = info.max_model_len;
  r["num_preemptions"] = st.n_preemptions;
  r["kv_residual_steals"] = st.kv_residual_steals;
  r["max_num_seqs"] = info.max_num_seqs;
  r["engine_steps"] = st.n_steps;
  r["generation_tokens_total"] = tokens;
  r["generation_tokens_per_s"] = rate;
  r["mean_batch_size"] = st.mean_batch_size;
  r["http_generations_active"] = counters_.n_active.load();
  return json_dump(r);
}

}  // namespace omnibus::server
