// `omnibus serve`: the OpenAI-compatible HTTP server with the web chat page.
//
// Startup: listen first (so /health answers 503 while loading), load the model
// with a progress bar, start the engine, then report ready. SIGINT/SIGTERM:
// answer new requests with 503, let running generations finish for up to
// --grace-period seconds, then abort the rest; a second signal aborts them at
// once. Aborted requests are told (streams: finish_reason "abort" and [DONE];
// others: 503), and the process exits once every response is out (at most
// kAbortWait after the abort): 0 when every request finished, 1 when any was
// cut. A signal while the model loads exits 0 at once.
//
// --kv-events-endpoint: every change of the prefix cache is published over
// ZeroMQ in vLLM's format (docs/kv-events.md); the sockets are opened before
// anything else, and an endpoint ZeroMQ refuses exits with status 2.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/loaded_model.h"
#include "cli/signal_waiter.h"
#include "engine/engine.h"
#include "engine/grammar_vocab.h"
#include "gguf/gguf_fingerprint.h"
#include "grammar/structured_output.h"
#include "kernels/cpu_features.h"
#include "kv/kv_format.h"
#include "kv_events/kv_event_publisher.h"
#include "kv_transfer/offer_params.h"
#include "server/api_server.h"
#include "server/http_transport.h"
#include "template/chat_template.h"
#include "util/heap_trim.h"

namespace omnibus {
namespace {

// Compiled grammars kept (LRU by grammar text): distinct schemas served
// without recompiling. Each keeps up to GrammarCache::kMaskCacheBytes of
// token masks, so this bounds that memory at 1 GiB.
constexpr size_t kGrammarCacheEntries = 64;

struct ServeOptions {
  ModelFlags model;
  EngineFlags engine;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string served_model_name;  // "": the -m argument
  int http_threads = 2;
  int64_t max_body_bytes = 8 << 20;
  double http_header_timeout_s = 30;  // TransportConfig::header_timeout
  double http_body_timeout_s = 60;    // TransportConfig::body_timeout
  int64_t max_waiting = 1024;
  int32_t max_logprobs = 20;
  int32_t max_n = 16;
  int64_t max_logprob_entries = 1000000;
  int64_t responses_store_size = 1024;
  double grace_period_s = 30.0;
  std::string kv_events_endpoint;         // "": no KV events
  std::string kv_events_replay_endpoint;  // "": no replay socket
  std::string kv_events_topic;
  // Disaggregated prefill/decode (docs/disaggregation.md).
  std::string kv_role = "both";
  std::string tool_call_parser = "auto";  // docs/server.md, Tool calling
  std::string reasoning_parser = "none";  // docs/server.md, Reasoning models
  int32_t reasoning_budget = -1;
  std::string kv_transfer_host;  // "": --host, or 127.0.0.1 when that is 0.0.0.0
  int kv_transfer_port = 0;
  double kv_transfer_timeout_s = 120.0;
  bool kv_transfer = false;             // --kv-transfer: role both serves either side of a transfer
  std::string kv_transfer_secret;       // --kv-transfer-secret (prefer the file)
  std::string kv_transfer_secret_file;  // --kv-transfer-secret-file
  std::string kv_transfer_peers;        // --kv-transfer-peers
  std::string kv_transfer_max_pinned = "25%";
  std::string prefix_cache_salt_header;  // --prefix-cache-salt-header
  bool enable_debug_endpoints = false;
  bool normalize = true;  // --normalize / --no-normalize (embeddings)
};

// The KV-event publisher the flags ask for (nullptr: none), wired to the
// engine's on_kv_events. Returns the exit status on failure: 2, after saying why.
std::unique_ptr<KvEventPublisher> open_kv_events(const ServeOptions& o, EngineConfig& cfg,
                                                 int& exit_code) {
  if (o.kv_events_endpoint.empty()) {
    if (!o.kv_events_replay_endpoint.empty() || !o.kv_events_topic.empty()) {
      std::fprintf(stderr,
                   "omnibus serve: --kv-events-replay-endpoint and --kv-events-topic need "
                   "--kv-events-endpoint\n");
      exit_code = 2;
    }
    return nullptr;
  }
  KvEventPublisherOptions po;
  po.endpoint = o.kv_events_endpoint;
  po.replay_endpoint = o.kv_events_replay_endpoint;
  po.topic = o.kv_events_topic;
  StatusOr<std::unique_ptr<KvEventPublisher>> p = KvEventPublisher::create(std::move(po));
  if (!p.is_ok()) {
    std::fprintf(stderr, "omnibus serve: %s\n", p.status().to_string().c_str());
    exit_code = 2;
    return nullptr;
  }
  KvEventPublisher* pub = p->get();
  cfg.on_kv_events = [pub](std::vector<KvEvent> events) { pub->publish(std::move(events)); };
  fmt::print(stderr, "omnibus serve: KV-cache events on {}{}{}\n", pub->endpoint(),
             pub->replay_endpoint().empty() ? "" : ", replay on ", pub->replay_endpoint());
  if (cfg.enable_prefix_caching == false) {
    fmt::print(stderr,
               "omnibus serve: --no-prefix-caching: no KV-cache events will be published\n");
  }
  return std::move(p).value();
}

// The KV-transfer service the flags ask for (docs/disaggregation.md).
StatusOr<std::unique_ptr<server::KvTransferService>> start_kv_transfer(const ServeOptions& o,
                                                                       server::KvRole role,
                                                                       const GgufFile& model_file,
                                                                       Engine& engine) {
  server::KvTransferServiceOptions ko;
  ko.role = role;
  if (o.kv_transfer_secret_file.empty() == o.kv_transfer_secret.empty()) {
    return Status::invalid_argument(
        "KV transfer needs the deployment's secret, the same on every prefill and decode "
        "worker: --kv-transfer-secret-file FILE (mode 600; e.g. `openssl rand -hex 32 > "
        "FILE`) or --kv-transfer-secret S (visible in ps: prefer the file), not both");
  }
  StatusOr<kv_transfer::TransferAuth> auth =
      o.kv_transfer_secret_file.empty()
          ? kv_transfer::TransferAuth::create(o.kv_transfer_secret)
          : kv_transfer::TransferAuth::from_file(o.kv_transfer_secret_file);
  if (!auth.is_ok()) return auth.status();
  ko.auth = std::make_shared<const kv_transfer::TransferAuth>(std::move(auth).value());
  OMNIBUS_ASSIGN_OR_RETURN(ko.peers, kv_transfer::PeerList::parse(o.kv_transfer_peers));
  if (ko.peers.empty()) {
    return Status::invalid_argument(
        "KV transfer needs --kv-transfer-peers: the hosts (or CIDRs) of the workers this "
        "one trusts, e.g. --kv-transfer-peers 127.0.0.1 on one machine");
  }
  const bool wildcard = o.host == "0.0.0.0" || o.host == "::";
  ko.host = !o.kv_transfer_host.empty() ? o.kv_transfer_host : wildcard ? "127.0.0.1" : o.host;
  ko.listen_host = o.kv_transfer_host.empty() ? o.host : o.kv_transfer_host;
  ko.port = o.kv_transfer_port;
  ko.timeout = std::chrono::seconds(int64_t(o.kv_transfer_timeout_s));
  ko.model_fingerprint =
      kv_transfer::hex64(gguf_fingerprint(model_file));  // the disk tier's identity too
  return server::KvTransferService::create(
      engine, std::string(kv_format_name(engine.info().kv_format)), std::move(ko));
}

int run_serve(const ServeOptions& o) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "omnibus serve: %s\n", s.to_string().c_str());
    return 1;
  };
  // A large response's memory goes back to the OS once it is written
  // (util/heap_trim.h; HttpTransport trims after it).
  set_heap_release_thresholds();
  // First, so that every thread started below inherits the mask; never freed
  // (its thread lives until the process ends).
  SignalWaiter& signals = *new SignalWaiter();

  StatusOr<EngineConfig> cfg = to_engine_config(o.engine);
  if (!cfg.is_ok()) return fail(cfg.status());
  // A prefill or decode worker moves blocks of every layer to its peers.
  const bool kv_transfer_on = o.kv_role != "both" || o.kv_transfer;
  if (kv_transfer_on) cfg->sliding_window_kv = false;
  if (o.kv_transfer_max_pinned.ends_with('%')) {
    cfg->max_pinned_fraction = std::stod(o.kv_transfer_max_pinned) / 100.0;
  } else {
    cfg->max_pinned_blocks = int32_t(std::stol(o.kv_transfer_max_pinned));
  }
  int kv_events_exit = 0;
  // Outlives the engine, whose thread calls it (declared before it).
  std::unique_ptr<KvEventPublisher> kv_events = open_kv_events(o, *cfg, kv_events_exit);
  if (kv_events_exit != 0) return kv_events_exit;

  server::ApiConfig api_cfg;
  api_cfg.served_model_name = o.served_model_name.empty() ? o.model.model : o.served_model_name;
  api_cfg.api_key = o.api_key;
  api_cfg.max_waiting = o.max_waiting;
  api_cfg.max_logprobs = o.max_logprobs;
  api_cfg.max_n = o.max_n;
  api_cfg.max_logprob_entries = o.max_logprob_entries;
  api_cfg.responses_store_size = o.responses_store_size;
  api_cfg.prefix_cache_salt_header = o.prefix_cache_salt_header;
  for (char& c : api_cfg.prefix_cache_salt_header)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  api_cfg.enable_debug_endpoints = o.enable_debug_endpoints;
  api_cfg.normalize_embeddings = o.normalize;
  auto api = std::make_unique<server::ApiServer>(api_cfg);
  server::TransportConfig tcfg{o.host, o.port, o.http_threads, o.max_body_bytes};
  tcfg.header_timeout = std::chrono::milliseconds(int64_t(o.http_header_timeout_s * 1000));
  tcfg.body_timeout = std::chrono::milliseconds(int64_t(o.http_body_timeout_s * 1000));
  tcfg.on_read_timeout = [a = api.get()](server::HttpReadPhase p) { a->count_read_timeout(p); };
  StatusOr<std::unique_ptr<server::HttpTransport>> transport = server::HttpTransport::create(
      tcfg, [a = api.get()](server::HttpRequest req, std::shared_ptr<server::ResponseSink> sink) {
        a->handle(std::move(req), std::move(sink));
      });
  if (!transport.is_ok()) return fail(transport.status());
  (*transport)->start();
  fmt::print(
      stderr,
      "omnibus serve: listening on http://{}:{} (model '{}' loading; /health is 503 until ready)\n",
      o.host, (*transport)->port(), api_cfg.served_model_name);

  StatusOr<LoadedModel> m = load_model_for_cli(o.model);
  if (!m.is_ok()) return fail(m.status());
  set_model_identity(*m, *cfg);
  if (Status d = load_draft_model_for_cli(o.engine.draft_model, *m, *cfg); !d.is_ok())
    return fail(d);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(*m->model, *cfg);
  if (!engine.is_ok()) return fail(engine.status());

  server::Backend backend;
  backend.engine = engine->get();
  backend.tokenizer = m->tokenizer.get();
  const Tokenizer& tok = *m->tokenizer;
  auto token_text = [&tok](int32_t id) {
    return id >= 0 ? tok.token_to_piece(id, /*render_special=*/true) : "";
  };
  if (StatusOr<ChatTemplate> t = chat_template_from_gguf(*m->file); t.is_ok()) {
    backend.chat_template = t->source();
    backend.chat_renderer = server::template_renderer(
        std::move(t).value(), token_text(tok.bos_id()), token_text(tok.eos_id()));
  } else {
    fmt::print(stderr,
               "omnibus serve: the model's chat template is not usable ({}); using ChatML\n",
               t.status().to_string());
    backend.chat_renderer = server::chatml_renderer();
  }
  backend.tool_parser = o.tool_call_parser == "auto"
                            ? server::tool_parser_for_template(backend.chat_template)
                            : server::tool_parser_from_name(o.tool_call_parser)
                                  .value_or(server::ToolParserKind::kHermes);
  backend.reasoning_parser = o.reasoning_parser == "auto"
                                 ? server::reasoning_format_for_template(backend.chat_template)
                                 : server::reasoning_format_from_name(o.reasoning_parser)
                                       .value_or(server::ReasoningFormat::kNone);
  backend.reasoning_budget = o.reasoning_budget;
  backend.pad_id = int32_t(m->file->get_int("tokenizer.ggml.padding_token_id").value_or(-1));
  backend.rerank_template =
      std::string(m->file->get_string("tokenizer.chat_template.rerank").value_or(""));
  // Structured output: one trie over the vocabulary, grammars compiled once per text.
  auto grammars = std::make_unique<grammar::GrammarCache>([&tok] { return grammar_trie(tok); },
                                                          kGrammarCacheEntries);
  backend.grammars = grammars.get();
  backend.model_path = m->path;
  backend.model_config = &m->model->config();
  backend.n_threads = m->pool ? int32_t(m->pool->n_threads()) : 1;
  backend.isa = isa_name(cpu_features().chosen);
  // KV transfer: off unless --kv-role prefill/decode or --kv-transfer asks
  // for it (docs/security.md); then it must start, or the server does not.
  std::unique_ptr<server::KvTransferService> kv_transfer;
  const server::KvRole role = o.kv_role == "prefill"  ? server::KvRole::kPrefill
                              : o.kv_role == "decode" ? server::KvRole::kDecode
                                                      : server::KvRole::kBoth;
  if (kv_transfer_on) {
    StatusOr<std::unique_ptr<server::KvTransferService>> svc =
        start_kv_transfer(o, role, *m->file, **engine);
    if (!svc.is_ok()) return fail(svc.status());
    kv_transfer = std::move(*svc);
    backend.kv_transfer = kv_transfer.get();
  }
  if (kv_transfer) {
    fmt::print(stderr,
               "omnibus serve: KV transfer ({}) on {}:{} (UCX), peers {}; unpulled prompts "
               "unpinned after {:.0f} s, "
               "at most {} blocks pinned\n",
               server::kv_role_name(kv_transfer->role()),
               o.kv_transfer_host.empty() ? o.host : o.kv_transfer_host, kv_transfer->port(),
               o.kv_transfer_peers, o.kv_transfer_timeout_s, o.kv_transfer_max_pinned);
  }
  if (kv_events) {
    backend.kv_events_counts = [p = kv_events.get()] {
      const KvEventPublisherCounters c = p->counters();
      return server::KvEventsCounts{c.published_events, c.dropped_events};
    };
  }
  api->set_backend(std::move(backend));
  // Set before the first signal can arrive, so that no second one finds it unset.
  signals.set_on_second([a = api.get()] {
    a->begin_drain();
    a->abort_all();
  });
  signals.set_loading(false);
  const EngineInfo& info = (*engine)->info();
  fmt::print(stderr,
             "omnibus serve: ready on http://{}:{} — model '{}', max_model_len {}, KV cache {} "
             "blocks of {} tokens "
             "({:.0f} MiB), kernels at ISA tier {}; chat page at /, API at /v1\n",
             o.host, (*transport)->port(), api_cfg.served_model_name, info.max_model_len,
             info.n_blocks, info.block_size, double(info.kv_cache_bytes) / double(1 << 20),
             isa_name(cpu_features().chosen));

  // Drain: /health and new generation calls answer 503 from here on (the
  // listener stays open so that clients get that answer), the running
  // generations go on. Done when the engine is idle and every response has
  // been written out: two handshakes, no polling.
  const int sig = signals.wait();
  fmt::print(
      stderr,
      "omnibus serve: {}: no new requests; waiting up to {:.0f} s for {} running (a second signal "
      "aborts them now)\n",
      sig == SIGINT ? "SIGINT" : "SIGTERM", o.grace_period_s, api->n_active_generations());
  api->begin_drain();
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(o.grace_period_s));
  auto left = [&deadline] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  bool drained =
      (*engine)->wait_idle(left()).has_value() && (*transport)->wait_responses_written(left());
  if (!drained) {
    fmt::print(stderr, "omnibus serve: grace period over; aborting {} requests\n",
               api->n_active_generations());
    api->abort_all();  // streams end with finish_reason "abort", the others get 503
    drained = (*engine)->wait_idle(kAbortWait).has_value() &&
              (*transport)->wait_responses_written(kAbortWait);
    if (!drained) {
      fmt::print(stderr, "omnibus serve: responses still unwritten; closing their connections\n");
    }
  }
  // Counted before their responses went out: complete once drained.
  const int64_t n_cut = api->n_cut_generations();
  signals.set_on_second(nullptr);  // before the API goes; a signal from here on exits 1 at once
  (*transport)->stop_accepting();
  (*transport)->stop();
  api.reset();  // the pump and every Generation (they use the engine)
  if (kv_transfer) kv_transfer->detach_engine();  // its agent stays up for fetches in flight
  engine->reset();  // aborts whatever is left, joins the engine thread
  kv_transfer.reset();
  transport->reset();  // sessions are gone with the API; now the io_context
  if (n_cut > 0 || !drained) {
    fmt::print(stderr, "omnibus serve: stopped; {} requests were cut short{}\n", n_cut,
               drained ? "" : " (some responses unwritten)");
    return 1;
  }
  fmt::print(stderr, "omnibus serve: stopped\n");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto [cmd, o] =
      add_model_command<ServeOptions>(app, exit_code, "serve",
                                      "OpenAI-compatible HTTP server (/v1/completions, "
                                      "/v1/chat/completions, /metrics) with a chat page at /",
                                      run_serve);
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port to listen on (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option(
         "--api-key", o->api_key,
         "Require 'Authorization: Bearer KEY' (every route but /health, /metrics and the page)")
      ->envname("OMNIBUS_API_KEY");
  cmd->add_option("--served-model-name", o->served_model_name,
                  "Model name in the API (default: the -m argument)");
  cmd->add_option("--http-threads", o->http_threads, "I/O threads for HTTP connections")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--max-body-bytes", o->max_body_bytes,
                  "Largest request body; larger ones get 413")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1024), int64_t(1) << 32));
  cmd->add_option(
         "--http-header-timeout", o->http_header_timeout_s,
         "Seconds a connection has to send a request's line and headers (from its opening or its "
         "last "
         "response); slower ones are closed and counted in omnibus:http_read_timeouts_total")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--http-body-timeout", o->http_body_timeout_s,
                  "Seconds a request's body has to arrive after its headers; slower ones are "
                  "closed and counted")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option(
         "--max-waiting", o->max_waiting,
         "Most requests accepted but not yet started; beyond it requests get 503 (0 = no bound)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--max-logprobs", o->max_logprobs,
                  "Most logprob alternatives a request may ask for (completions 'logprobs', chat "
                  "'top_logprobs', "
                  "'prompt_logprobs'); more get 400")
      ->capture_default_str()
      ->check(CLI::Range(0, 20));
  cmd->add_option("--max-n", o->max_n, "Most choices per prompt ('n', 'best_of'); more get 400")
      ->capture_default_str()
      ->check(CLI::Range(1, 128));
  cmd->add_option(
         "--max-logprob-entries", o->max_logprob_entries,
         "Most logprob entries one response may hold: n x (echoed prompt tokens + max_tokens) x "
         "(logprobs + 1), plus prompt_logprobs; requests that could return more get 400 (0 = no "
         "bound)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option(
         "--grace-period", o->grace_period_s,
         "Seconds running requests may take to finish after SIGINT/SIGTERM; then (or on a second "
         "signal) they are aborted, streams end with finish_reason 'abort', others get 503, exit "
         "status 1")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  add_engine_flags(*cmd, o->engine);
  add_task_flags(*cmd, o->model);
  cmd->add_flag("--normalize,!--no-normalize", o->normalize,
                "Embeddings: L2-normalise the pooled vectors (default on)");
  cmd->add_option(
      "--kv-events-endpoint", o->kv_events_endpoint,
      "Publish prefix-cache events (vLLM's format) on this ZeroMQ PUB endpoint, e.g. tcp://*:5557 "
      "(bound when it has * or ::, connected otherwise)");
  cmd->add_option("--kv-events-replay-endpoint", o->kv_events_replay_endpoint,
                  "ZeroMQ ROUTER endpoint answering replay requests for the last 10000 batches, "
                  "e.g. tcp://*:5558");
  cmd->add_option("--kv-events-topic", o->kv_events_topic, "Topic frame of every KV-event message")
      ->capture_default_str();
  cmd->add_option(
         "--tool-call-parser", o->tool_call_parser,
         "How tool calls are read from chat output: 'hermes' (<tool_call>{...}</tool_call>), "
         "'llama3_json' ([<|python_tag|>]{\"name\", \"parameters\"}), 'mistral' "
         "([TOOL_CALLS][...]), "
         "'qwen3_coder' (<tool_call><function=f><parameter=p>...), 'pythonic' ([f(a=1)], Llama "
         "3.2/4), "
         "or 'auto' (from the chat template; hermes when it has no tool format)")
      ->capture_default_str()
      ->check(
          CLI::IsMember({"auto", "hermes", "llama3_json", "mistral", "qwen3_coder", "pythonic"}));
  cmd->add_option("--reasoning-parser", o->reasoning_parser,
                  "How chat output is split into reasoning_content and content: 'qwen3' "
                  "(<think>...</think> when "
                  "the output opens it), 'deepseek_r1' (the output starts thinking; ends at "
                  "</think>), 'auto' "
                  "(from the chat template) or 'none'")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "qwen3", "deepseek_r1", "none"}));
  cmd->add_option("--responses-store-size", o->responses_store_size,
                  "Responses kept in memory for GET/DELETE /v1/responses/{id} and "
                  "previous_response_id (the least "
                  "recently used is evicted; evicted ids answer 404; 0: keep none)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24));
  cmd->add_option("--reasoning-budget", o->reasoning_budget,
                  "Default hard thinking budget: after this many tokens inside the thinking block "
                  "the engine "
                  "forces </think> (a request's thinking_token_budget overrides it; -1: no budget)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_option(
         "--kv-role", o->kv_role,
         "Disaggregated serving behind vllm-router --vllm-pd-disaggregation: 'prefill' computes "
         "prompts "
         "and keeps their KV blocks for a decode worker, 'decode' pulls them and generates, 'both' "
         "serves plain requests and either side of a transfer (docs/disaggregation.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"both", "prefill", "decode"}));
  cmd->add_option("--kv-transfer-host", o->kv_transfer_host,
                  "Address of this worker that KV-transfer peers reach it at (advertised as "
                  "remote_host; default: "
                  "--host, or 127.0.0.1 for a wildcard host)");
  cmd->add_option(
         "--kv-transfer-port", o->kv_transfer_port,
         "Port of the KV-transfer side channel (advertised as remote_port; 0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--kv-transfer-timeout", o->kv_transfer_timeout_s,
                  "Seconds a prefill worker keeps a prompt's blocks pinned for a decode worker "
                  "that never pulls them")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_flag("--kv-transfer", o->kv_transfer,
                "With --kv-role both: serve either side of a KV transfer (off by default: a plain "
                "server refuses "
                "kv_transfer_params)");
  cmd->add_option("--kv-transfer-secret-file", o->kv_transfer_secret_file,
                  "File (mode 600) holding the secret every prefill and decode worker of the "
                  "deployment shares: it "
                  "signs offers and side-channel messages (docs/security.md); needed whenever KV "
                  "transfer is on");
  cmd->add_option("--kv-transfer-secret", o->kv_transfer_secret,
                  "The shared secret itself (at least 16 bytes; visible in ps: prefer "
                  "--kv-transfer-secret-file)");
  cmd->add_option(
      "--kv-transfer-peers", o->kv_transfer_peers,
      "Comma-separated hosts, addresses or CIDRs of the workers this one trusts: its side channel "
      "answers only them, and kv_transfer_params naming another remote_host are refused (400)");
  cmd->add_option(
         "--kv-transfer-max-pinned", o->kv_transfer_max_pinned,
         "At most this many KV blocks (N, or P% of the pool) pinned for decode workers at once; a "
         "prefill "
         "beyond it is answered without kv_transfer_params (the decode worker computes the prompt)")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        try {
          size_t used = 0;
          const double x = std::stod(v, &used);
          const bool pct = used + 1 == v.size() && v.back() == '%';
          if ((used == v.size() || pct) && x >= 0 && (!pct || x <= 100)) return "";
        } catch (const std::exception&) {
        }
        return "must be a block count N or a percentage P% of the pool";
      });
  cmd->add_option("--prefix-cache-salt-header", o->prefix_cache_salt_header,
                  "HTTP header a gateway sets to the tenant (e.g. X-Tenant-Id): requests share "
                  "prefix-cache blocks "
                  "only within one value of it (then within one body cache_salt)");
  cmd->add_flag("--enable-debug-endpoints", o->enable_debug_endpoints,
                "Serve /v1/engine/state and /v1/engine/kv_blocks without --api-key (they list "
                "every cached block "
                "hash: keep them off on shared servers)");
}

}  // namespace omnibus
