// ApiServer: the OpenAI-compatible API behind the HTTP transport — routing,
// API-key checks, the plain endpoints, and generation calls handed to
// Generation + StreamPump. It knows nothing of sockets (see http_types.h).
//
// Routes (docs/server.md has the details):
//   GET  /health                 200 when ready, 503 while loading or draining   (no key)
//   GET  /metrics                Prometheus text                                 (no key)
//   GET  /  /index.html /app.js /style.css   the chat page                       (no key)
//   GET  /v1/models              POST /v1/completions   POST /v1/chat/completions
//   POST /v1/responses   GET | DELETE /v1/responses/{id}   (responses_endpoints.cc)
//   POST /v1/embeddings          (embeddings_request.h; models served with --task embed)
//   POST /v1/rerank  POST /v1/score   (rerank_request.h; rerankers, rank pooling)
//   POST /tokenize  POST /detokenize  GET /tokenizer_info  GET /v1/engine/state
//   GET  /v1/engine/kv_blocks    the prefix cache's block hashes (what KV events describe)
//   POST /v1/messages  /v1/messages/count_tokens   the Anthropic Messages API
//   (anthropic_request.h):
//        key as x-api-key or Bearer, errors in Anthropic's shape
//   For routers (worker_endpoints.cc), no key for the read-only ones:
//   GET  /get_load  /get_server_info  /server_info  /get_model_info  /health_generate
//   POST /flush_cache  /reset_prefix_cache   drop the prefix cache; 409 while requests run (key)
//   A known route asked with another method: 405 with an Allow header. A JSON
//   endpoint (completions, chat, tokenize, detokenize) whose Content-Type is
//   not JSON: 415 (no Content-Type is read as JSON). The API key is matched
//   as "Bearer <key>", the scheme in any case (request_checks.h).
//
// States: loading (from construction until set_backend), ready, draining
// (after begin_drain: generation calls get 503, running ones go on).
//
// Thread-safety: handle() from any number of I/O threads at once;
// set_backend() once, from any thread; the rest from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "grammar/structured_output.h"
#include "model/model_config.h"
#include "server/chat_renderer.h"
#include "server/generation.h"
#include "server/http_types.h"
#include "server/kv_transfer_service.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/reasoning_parser.h"
#include "server/responses_store.h"
#include "server/stream_pump.h"
#include "server/tool_parsers.h"
#include "tokenizer/tokenizer.h"

namespace omnibus::server {

struct ApiConfig {
  std::string served_model_name = "omnibus";
  std::string api_key;  // "" = no authentication
  int64_t max_waiting =
      1024;  // engine requests accepted but not started; beyond: 503 (0 = no bound)
  // Bounds on what one request may ask for; beyond them: 400 naming the flag.
  int32_t max_logprobs = 20;  // logprobs, top_logprobs, prompt_logprobs (--max-logprobs)
  int32_t max_n = 16;         // n and best_of (--max-n)
  int64_t max_logprob_entries = 1000000;  // response_bounds.h (--max-logprob-entries; 0 = no bound)
  // Tenant isolation (docs/security.md): the header a gateway sets to the
  // tenant (--prefix-cache-salt-header, lower case; "" = none). When set, a
  // request's prefix-cache salt is that header's value, then the body's
  // cache_salt: no body field can reach another tenant's blocks.
  std::string prefix_cache_salt_header;
  // /v1/engine/* (the engine's state and every cached block hash): without
  // --api-key they answer 404 unless this is set (--enable-debug-endpoints).
  bool enable_debug_endpoints = false;
  // Responses kept for GET/DELETE /v1/responses/{id} and previous_response_id
  // (--responses-store-size; 0: none are kept).
  int64_t responses_store_size = 1024;
  // /v1/embeddings: L2-normalise the pooled vectors (--normalize / --no-normalize).
  bool normalize_embeddings = true;
};

// What the API needs once the model is loaded. The pointers must outlive the ApiServer.
struct Backend {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ChatRenderer chat_renderer;
  std::string chat_template;  // the model's template source, for /tokenizer_info ("" if none)
  // A causal reranker's prompt (GGUF tokenizer.chat_template.rerank, with
  // {query} and {document}; Qwen3-Reranker); "": [BOS] query [EOS] document [EOS].
  std::string rerank_template;
  int32_t pad_id = -1;
  std::string model_path;
  const ModelConfig* model_config =
      nullptr;            // for /get_model_info and /get_server_info (may be null in tests)
  int32_t n_threads = 0;  // compute threads (0: unknown)
  std::string isa;        // the kernels' ISA tier (kernels/cpu_features.h)
  // The KV-event publisher's counters for /metrics; unset: not publishing.
  std::function<KvEventsCounts()> kv_events_counts;
  // Disaggregated prefill/decode (--kv-role); null: kv_transfer_params other
  // than null or all-false are refused with 400.
  KvTransferService* kv_transfer = nullptr;
  // Structured output (grammar/structured_output.h): compiled grammars over
  // this model's vocabulary; null: requests asking for a format get a 400.
  grammar::GrammarCache* grammars = nullptr;
  // How tool calls are read from chat output (omnibus serve --tool-call-parser;
  // auto: tool_parser_for_template of the chat template).
  ToolParserKind tool_parser = ToolParserKind::kHermes;
  // How chat output is split into reasoning and content (--reasoning-parser;
  // auto: reasoning_format_for_template), and the default thinking budget
  // (--reasoning-budget; -1: none) a request's thinking_token_budget overrides.
  ReasoningFormat reasoning_parser = ReasoningFormat::kNone;
  int32_t reasoning_budget = -1;
};

// A generation request read and checked (generation_prepare.cc), ready to
// submit: its spec, its tokenized prompts and what its kv_transfer_params ask.
struct PreparedGeneration {
  GenerationSpec spec;
  std::vector<PreparedPrompt> prompts;
  KvTransferService::Ask kv_ask = KvTransferService::Ask::kNone;
  nlohmann::json kv_params;  // the request's kv_transfer_params (null when absent)
};

// The client's disconnect for a generation that starts after its route
// handler returned (a remote prefill's claim): the sink's callback is set in
// the handler and cancels the generation whenever it exists. Thread-safe.
class DisconnectRelay {
 public:
  void disconnected();                         // the sink's on_disconnect
  void attach(std::weak_ptr<Generation> gen);  // the generation started
 private:
  std::mutex mu_;
  bool gone_ = false;              // guarded by mu_
  std::weak_ptr<Generation> gen_;  // guarded by mu_
};

class ApiServer {
 public:
  explicit ApiServer(ApiConfig config);
  ~ApiServer();  // stops the pump: call after the transport has stopped

  void set_backend(Backend backend);
  // From now on /health and new generation calls answer 503; running
  // generations go on (HttpTransport::wait_responses_written tells when
  // their responses are out).
  void begin_drain();
  // Aborts every generation in flight: their engine requests end; streams end
  // with finish_reason "abort" and [DONE], non-streamed calls get 503
  // (generation.h). Idempotent.
  void abort_all();
  int64_t n_active_generations() const { return counters_.n_active.load(); }
  // Generations abort_all() ended before they finished, counted before their
  // responses went to the transport (so, once HttpTransport::wait_responses_written
  // returns true, every cut response that was written is counted).
  int64_t n_cut_generations() const { return counters_.n_cut.load(); }

  // REQUIRES: the response is completed through `sink`, now or later.
  void handle(HttpRequest req, std::shared_ptr<ResponseSink> sink);
  // For TransportConfig::on_read_timeout: counted in /metrics. Any thread.
  void count_read_timeout(HttpReadPhase phase) { metrics_.count_read_timeout(phase); }

 private:
  enum class State { kLoading, kReady, kDraining };

  // POST /v1/completions and /v1/chat/completions: prepare, then launch
  // (after the KV claim, on the transfer agent's claim thread, for a remote prefill).
  // handle()'s steps (api_server.cc): the open endpoints (true when `path` was
  // one), the router's read-only ones, why a keyed request is refused, and
  // the handler of an admitted one.
  bool handle_open(const HttpRequest& req, const std::string& path, ResponseSink& sink);
  void handle_router_endpoint(const std::string& path, ResponseSink& sink);
  std::optional<ApiError> refuse(const HttpRequest& req, const std::string& path,
                                 bool json_body) const;
  void dispatch(const HttpRequest& req, const std::string& path, bool response_item_path,
                const std::shared_ptr<ResponseSink>& sink);
  ApiError not_ready() const;  // 503: loading or shutting down
  void handle_generation(Endpoint endpoint, const HttpRequest& req,
                         const std::shared_ptr<ResponseSink>& sink);
  ApiResult<PreparedGeneration> prepare_generation(
      Endpoint endpoint, const HttpRequest& req);  // generation_prepare.cc
  void launch_generation(PreparedGeneration g, std::shared_ptr<KvImport> kv_import,
                         const std::shared_ptr<ResponseSink>& sink,
                         const std::shared_ptr<DisconnectRelay>& relay = nullptr);
  ApiResult<std::shared_ptr<const grammar::TokenMasker>> compile_structured(
      GenerationSpec& spec, const std::string& raw_body);
  // POST /v1/messages and /v1/messages/count_tokens (anthropic_endpoints.cc):
  // converted onto handle_generation's chat path.
  void handle_anthropic(const HttpRequest& req, const std::string& path,
                        const std::shared_ptr<ResponseSink>& sink);
  // The prompt tokens a chat completions body renders to (what its usage reports as prompt_tokens).
  ApiResult<int64_t> chat_prompt_tokens(const std::string& chat_body) const;
  // POST /v1/embeddings, /v1/rerank (rerank) and /v1/score (embeddings_call.cc).
  void handle_embeddings(const HttpRequest& req, const std::shared_ptr<ResponseSink>& sink);
  void handle_pairs(bool rerank, const HttpRequest& req, const std::shared_ptr<ResponseSink>& sink);
  struct PooledCall;
  // One embedding request per prompt; call->body builds the response once all are in.
  void submit_pooled(std::vector<std::vector<int32_t>> prompts, std::shared_ptr<PooledCall> call);
  ApiResult<std::string> tokenize(const std::string& body) const;
  ApiResult<std::string> detokenize(const std::string& body) const;
  std::string tokenizer_info() const;
  std::string models() const;
  std::string engine_state();
  // Router-facing endpoints (worker_endpoints.cc).
  std::string load() const;
  std::string server_info() const;
  std::string model_info() const;
  std::string kv_blocks() const;             // waits for the engine thread (between two steps)
  void flush_cache(ResponseSink& sink);      // waits for the engine thread
  void health_generate(ResponseSink& sink);  // waits for one generated token (at most 30 s)
  // The Responses API (responses_endpoints.cc): POST /v1/responses on the chat path,
  // GET / DELETE /v1/responses/{id} from responses_.
  void handle_responses(const HttpRequest& req, const std::shared_ptr<ResponseSink>& sink);
  void response_item(const HttpRequest& req, const std::string& path, ResponseSink& sink);

  const ApiConfig config_;
  std::atomic<State> state_{State::kLoading};
  Backend backend_;  // written once before state_ becomes kReady
  ServerMetrics metrics_;
  GenerationCounters counters_;
  std::unique_ptr<StreamPump> pump_;
  std::unique_ptr<ResponsesStore> responses_;  // thread-safe itself
  const int64_t created_;

  std::mutex claims_mu_;
  std::condition_variable claims_cv_;  // claims_in_flight_ dropped
  int64_t claims_in_flight_ = 0;  // guarded by claims_mu_: remote prefills awaiting their claim

  std::mutex gens_mu_;
  std::vector<std::weak_ptr<Generation>> gens_;  // guarded by gens_mu_: for abort_all

  std::mutex rate_mu_;  // guarded: generation-rate samples for /v1/engine/state
  std::chrono::steady_clock::time_point rate_time_;
  uint64_t rate_tokens_ = 0;
  double rate_ = 0;
};

}  // namespace omnibus::server
