// The API (api_server.h): routes and keys, and the generation handler, which prepares a request
// (generation_prepare.cc) and launches it on the engine, after the KV claim for a remote prefill.
#include "server/api_server.h"

#include <fmt/format.h>

#include <ctime>
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

void respond_error(ResponseSink& sink, const ApiError& e) {
  sink.respond(e.status, kJson, e.to_json());
}

// 405 naming the methods the route takes (also in the Allow header).
void respond_method_not_allowed(ResponseSink& sink, const HttpRequest& req, const std::string& path,
                                const char* allow) {
  const ApiError e{
      405, fmt::format("method {} is not allowed on {} (allowed: {})", req.method, path, allow),
      "invalid_request_error", "", "method_not_allowed"};
  sink.respond(e.status, kJson, e.to_json(), HttpHeaders{{"Allow", allow}});
}

}  // namespace

void DisconnectRelay::disconnected() {
  std::weak_ptr<Generation> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone_ = true;
    g = gen_;
  }
  if (auto live = g.lock()) live->cancel();
}

void DisconnectRelay::attach(std::weak_ptr<Generation> gen) {
  bool gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone = gone_;
    gen_ = gen;
  }
  if (auto live = gen.lock(); live && gone) live->cancel();
}

ApiServer::ApiServer(ApiConfig config)
    : config_(std::move(config)),
      metrics_(config_.served_model_name),
      pump_(std::make_unique<StreamPump>()),
      responses_(std::make_unique<ResponsesStore>(
          size_t(std::max<int64_t>(0, config_.responses_store_size)))),
      created_(int64_t(std::time(nullptr))) {}

ApiServer::~ApiServer() {
  {
    // A claim's completion launches a generation on the pump: let those in flight end first.
    std::unique_lock<std::mutex> lock(claims_mu_);
    claims_cv_.wait(lock, [this] { return claims_in_flight_ == 0; });
  }
  pump_.reset();
}

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

namespace {

// A keyed or read-only endpoint of the route table (the open ones, /health,
// the web page and /metrics, and the Anthropic API come before it).
struct Route {
  const char* path;
  bool post;
  bool keyed = true;       // false: the read-only router endpoints (vllm-router sends no key)
  bool json_body = false;  // the body is a JSON object: a Content-Type other than JSON gets 415
};
constexpr Route kRoutes[] = {{"/v1/models", false},
                             {"/v1/completions", true, true, true},
                             {"/v1/chat/completions", true, true, true},
                             {"/v1/responses", true, true, true},
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
constexpr Route kResponseItem{"/v1/responses/{id}", false};  // GET or DELETE
constexpr const char* kGetMethods = "GET, HEAD";

const Route* find_route(const std::string& path) {
  if (path.rfind("/v1/responses/", 0) == 0 && path.size() > 14) return &kResponseItem;
  for (const Route& r : kRoutes) {
    if (path == r.path) return &r;
  }
  return nullptr;
}

bool is_get(const HttpRequest& req) { return req.method == "GET" || req.method == "HEAD"; }

}  // namespace

ApiError ApiServer::not_ready() const {
  return ApiError::unavailable(state_.load() == State::kLoading ? "the model is loading"
                                                                : "the server is shutting down");
}

void ApiServer::handle(HttpRequest req, std::shared_ptr<ResponseSink> sink) {
  std::string path = req.target.substr(0, req.target.find('?'));
  if (path == "/") path = "/index.html";
  if (handle_open(req, path, *sink)) return;
  // The Anthropic Messages API (anthropic_endpoints.cc): its own key header and error shape.
  if (path == "/v1/messages" || path == "/v1/messages/count_tokens")
    return handle_anthropic(req, path, sink);
  const Route* route = find_route(path);
  if (!route) {
    return respond_error(*sink,
                         ApiError::not_found(fmt::format("no route for {} {}", req.method, path)));
  }
  if (route == &kResponseItem) {
    if (!is_get(req) && req.method != "DELETE")
      return respond_method_not_allowed(*sink, req, path, "GET, HEAD, DELETE");
  } else if (route->post ? req.method != "POST" : !is_get(req)) {
    return respond_method_not_allowed(*sink, req, path, route->post ? "POST" : kGetMethods);
  }
  if (!route->keyed) return handle_router_endpoint(path, *sink);
  if (std::optional<ApiError> e = refuse(req, path, route->json_body))
    return respond_error(*sink, *e);
  if (path == "/v1/engine/state") return sink->respond(200, kJson, engine_state());
  if (state_.load() == State::kLoading) return respond_error(*sink, not_ready());
  dispatch(req, path, route == &kResponseItem, sink);
}

// /health, the web page and /metrics: no key, any state.
bool ApiServer::handle_open(const HttpRequest& req, const std::string& path, ResponseSink& sink) {
  const State state = state_.load();
  const WebAsset* asset = find_web_asset(path);
  if (path != "/health" && path != "/metrics" && asset == nullptr) return false;
  if (!is_get(req)) {
    respond_method_not_allowed(sink, req, path, kGetMethods);
  } else if (path == "/health") {
    if (state == State::kReady) {
      sink.respond(200, kJson, R"({"status":"ok"})");
    } else {
      respond_error(sink, not_ready());
    }
  } else if (asset != nullptr) {
    sink.respond(200, std::string(asset->content_type), std::string(asset->body));
  } else {
    const bool ready = state != State::kLoading;
    EngineStats st;
    if (ready) st = backend_.engine->stats();
    std::optional<KvEventsCounts> kv_events;
    if (ready && backend_.kv_events_counts) kv_events = backend_.kv_events_counts();
    std::string text = metrics_.render(st, kv_events);
    if (ready && backend_.kv_transfer != nullptr) {
      text += backend_.kv_transfer->metrics_text(
          fmt::format("model_name=\"{}\"", config_.served_model_name), st);
    }
    sink.respond(200, "text/plain; version=0.0.4; charset=utf-8", text);
  }
  return true;
}

// The read-only endpoints vllm-router polls (it sends no key): only while
// ready (a draining worker is leaving the pool).
void ApiServer::handle_router_endpoint(const std::string& path, ResponseSink& sink) {
  if (state_.load() != State::kReady) return respond_error(sink, not_ready());
  if (path == "/get_load") return sink.respond(200, kJson, load());
  if (path == "/health_generate") return health_generate(sink);
  if (path == "/get_model_info") return sink.respond(200, kJson, model_info());
  sink.respond(200, kJson, server_info());
}

// Why a keyed request may not go on: its key, its body's media type, or a
// debug endpoint that this server does not expose.
std::optional<ApiError> ApiServer::refuse(const HttpRequest& req, const std::string& path,
                                          bool json_body) const {
  if (!config_.api_key.empty() && !bearer_key_matches(req.authorization, config_.api_key)) {
    return ApiError::unauthorized("invalid or missing API key (Authorization: Bearer <key>)");
  }
  // A missing Content-Type is read as JSON (clients that send none still work).
  if (json_body && !req.content_type.empty() && !is_json_media_type(req.content_type)) {
    return ApiError{415,
                    fmt::format("{} takes a JSON body: send it with Content-Type: "
                                "application/json (this request says '{}')",
                                path, req.content_type),
                    "invalid_request_error", "", "unsupported_media_type"};
  }
  if (path.rfind("/v1/engine/", 0) == 0 && config_.api_key.empty() &&
      !config_.enable_debug_endpoints) {
    return ApiError::not_found(
        fmt::format("{} is a debug endpoint: start the server with "
                    "--api-key (then it needs the key) or "
                    "--enable-debug-endpoints",
                    path));
  }
  return std::nullopt;
}

// An admitted keyed request, the model loaded: to its handler.
void ApiServer::dispatch(const HttpRequest& req, const std::string& path, bool response_item_path,
                         const std::shared_ptr<ResponseSink>& sink) {
  if (path == "/v1/models") return sink->respond(200, kJson, models());
  if (path == "/v1/responses") return handle_responses(req, sink);
  if (response_item_path) return response_item(req, path, *sink);
  if (path == "/v1/engine/kv_blocks") return sink->respond(200, kJson, kv_blocks());
  if (path == "/flush_cache" || path == "/reset_prefix_cache") return flush_cache(*sink);
  if (path == "/tokenizer_info") return sink->respond(200, kJson, tokenizer_info());
  if (path == "/tokenize" || path == "/detokenize") {
    ApiResult<std::string> r = path == "/tokenize" ? tokenize(req.body) : detokenize(req.body);
    if (!r.ok()) return respond_error(*sink, r.error());
    return sink->respond(200, kJson, std::move(*r));
  }
  if (path == "/v1/embeddings") return handle_embeddings(req, sink);
  if (path == "/v1/rerank" || path == "/v1/score")
    return handle_pairs(path == "/v1/rerank", req, sink);
  handle_generation(path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChat, req,
                    sink);
}

// The masker for the request's structured output (GrammarCache: compiled once
// per distinct grammar), or a 400 naming the field and what is unsupported.
ApiResult<std::shared_ptr<const grammar::TokenMasker>> ApiServer::compile_structured(
    GenerationSpec& spec, const std::string& raw_body) {
  if (backend_.grammars == nullptr) {
    return ApiError::invalid(spec.structured_field,
                             "this server does not support structured output");
  }
  if (!spec.schema_pointer.empty()) {
    std::string ordered = ordered_schema_text(raw_body, spec.schema_pointer);
    if (!ordered.empty()) spec.structured.text = std::move(ordered);
  }
  StatusOr<std::shared_ptr<const grammar::TokenMasker>> g = backend_.grammars->get(spec.structured);
  if (!g.is_ok()) {
    return ApiError::invalid(spec.structured_field,
                             fmt::format("'{}': {}", spec.structured_field, g.status().message()));
  }
  return std::move(g).value();
}

void ApiServer::handle_generation(Endpoint endpoint, const HttpRequest& req,
                                  const std::shared_ptr<ResponseSink>& sink) {
  ApiResult<PreparedGeneration> prepared = prepare_generation(endpoint, req);
  if (!prepared.ok()) return respond_error(*sink, prepared.error());
  if (prepared->kv_ask != KvTransferService::Ask::kRemotePrefill) {
    return launch_generation(std::move(*prepared), nullptr, sink);
  }
  // A decode worker's remote prefill: claiming the blocks is a round trip to
  // the prefill worker, which runs on the transfer agent's claim thread, not
  // on this HTTP I/O thread; the generation starts from its completion.
  auto g = std::make_shared<PreparedGeneration>(std::move(*prepared));
  // A client gone while the claim is in flight cancels the generation once it exists.
  auto relay = std::make_shared<DisconnectRelay>();
  sink->on_disconnect([relay] { relay->disconnected(); });
  {
    std::lock_guard<std::mutex> lock(claims_mu_);
    ++claims_in_flight_;
  }
  auto on_claimed = [this, g, sink, relay](ApiResult<std::shared_ptr<KvImport>> im) {
    if (!im.ok()) {
      respond_error(*sink, im.error());
    } else {
      launch_generation(std::move(*g), *im, sink, relay);
    }
    std::lock_guard<std::mutex> lock(
        claims_mu_);  // notified under the lock: ~ApiServer waits on it
    --claims_in_flight_;
    claims_cv_.notify_all();
  };
  const std::vector<int32_t>& prompt = g->prompts[0].ids;
  if (std::optional<ApiError> e = backend_.kv_transfer->start_import(
          g->kv_params, prompt, g->spec.base.cache_salt, std::move(on_claimed))) {
    respond_error(*sink, *e);
    std::lock_guard<std::mutex> lock(claims_mu_);
    --claims_in_flight_;
    claims_cv_.notify_all();
  }
}

// Submits a prepared generation (with the blocks to import, for a remote
// prefill) and hands its streams to the pump. Any thread.
void ApiServer::launch_generation(PreparedGeneration g, std::shared_ptr<KvImport> kv_import,
                                  const std::shared_ptr<ResponseSink>& sink,
                                  const std::shared_ptr<DisconnectRelay>& relay) {
  Engine& engine = *backend_.engine;
  const Tokenizer& tok = *backend_.tokenizer;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const PreparedPrompt& p : g.prompts) {
    Request r = g.spec.base;
    r.prompt = p.ids;
    r.pin_prompt_blocks = g.kv_ask == KvTransferService::Ask::kRemoteDecode;
    r.kv_import = kv_import;
    StatusOr<std::shared_ptr<RequestStream>> s = engine.submit(std::move(r));
    if (!s.is_ok()) {
      for (const auto& done : streams) engine.abort(done->id());
      if (kv_import) kv_import->finished(0, 0, false);  // the prefill worker may unpin now
      return respond_error(*sink, ApiError::invalid("", s.status().message()));
    }
    streams.push_back(std::move(*s));
  }
  counters_.n_pending.fetch_add(int64_t(streams.size()));

  GenerationContext ctx{
      &engine,
      &tok,
      &metrics_,
      &counters_,
      config_.served_model_name,
      g.kv_ask == KvTransferService::Ask::kRemoteDecode ? backend_.kv_transfer : nullptr,
      backend_.tool_parser,
      backend_.reasoning_parser};
  auto gen =
      std::make_shared<Generation>(std::move(ctx), std::move(g.spec), std::move(g.prompts), sink);
  std::weak_ptr<Generation> weak = gen;
  if (relay == nullptr) {  // in the route handler: the sink takes the callback now
    sink->on_disconnect([weak] {
      if (auto live = weak.lock()) live->cancel();
    });
  }
  gen->start(streams);
  if (relay != nullptr) relay->attach(weak);
  {
    // After start(): abort_all (another thread) may use it from here on.
    std::lock_guard<std::mutex> lock(gens_mu_);
    std::erase_if(gens_, [](const std::weak_ptr<Generation>& w) { return w.expired(); });
    gens_.push_back(gen);
  }
  for (size_t k = 0; k < streams.size(); ++k) {
    pump_->add(streams[k],
               [gen, k](std::vector<EngineEvent>& events) { gen->on_events(k, events); });
  }
}

ApiResult<std::string> ApiServer::tokenize(const std::string& body_text) const {
  ApiResult<nlohmann::json> body = parse_json_body(body_text);
  if (!body.ok()) return body.error();
  JsonFields f(*body);
  std::string prompt;
  bool add_special = true;
  if (!f.find("prompt")) f.fail(ApiError::invalid("prompt", "'prompt' is required"));
  f.get_string("prompt", prompt);
  f.get_bool("add_special_tokens", add_special);
  if (!f.ok()) return *f.error();
  const std::vector<int32_t> ids =
      backend_.tokenizer->encode(prompt, add_special, /*parse_special=*/true);
  nlohmann::json r;
  r["tokens"] = ids;
  r["count"] = ids.size();
  r["max_model_len"] = backend_.engine->info().max_model_len;
  return json_dump(r);
}

ApiResult<std::string> ApiServer::detokenize(const std::string& body_text) const {
  ApiResult<nlohmann::json> body = parse_json_body(body_text);
  if (!body.ok()) return body.error();
  const int32_t n_vocab = backend_.tokenizer->n_vocab();
  auto it = body->find("tokens");
  if (it == body->end() || !it->is_array())
    return ApiError::invalid("tokens", "'tokens' must be a list of token ids");
  std::vector<int32_t> ids;
  for (const nlohmann::json& x : *it) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= n_vocab) {
      return ApiError::invalid("tokens",
                               fmt::format("'tokens' must be token ids in [0, {})", n_vocab));
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
  r["chat_template"] = backend_.chat_template.empty() ? nlohmann::json(nullptr)
                                                      : nlohmann::json(backend_.chat_template);
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
