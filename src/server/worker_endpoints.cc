// The endpoints a router reads from (or sends to) a worker, as vllm-router
// and SGLang's router use them; ApiServer::handle routes here. What the
// router parses (vllm-router 0.1.17, src/routers/http/router.rs):
//   GET  /get_load          "load" (i64): power_of_two picks the less loaded of two
//   GET  /get_server_info   "dp_size" (u64): --dp-aware expands a worker into dp_size ranks
//   GET  /get_model_info    proxied to clients as is
//   POST /flush_cache       sent to every worker by the router's /flush_cache; 2xx = flushed
//   GET  /health_generate   proxied: 200 once the engine generated a token (SGLang's deep check)
// The rest of each answer is for people and dashboards (docs/server.md).
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "server/api_server.h"
#include "server/sse.h"

namespace omnibus::server {

std::string ApiServer::load() const {
  const EngineStats st = backend_.engine->stats();
  nlohmann::json r;
  r["load"] = int64_t(st.n_running) + int64_t(st.n_waiting);
  r["num_requests_running"] = st.n_running;
  r["num_requests_waiting"] = st.n_waiting;
  r["kv_cache_usage"] = st.kv_cache_usage();
  return json_dump(r);
}

std::string ApiServer::server_info() const {
  const EngineInfo& info = backend_.engine->info();
  const EngineStats st = backend_.engine->stats();
  nlohmann::json r;
  r["engine"] = "omnibus";
  r["served_model_name"] = config_.served_model_name;
  r["model_path"] = backend_.model_path;
  r["dp_size"] = 1;  // one engine per process: scale out with more replicas
  r["tp_size"] = 1;
  r["n_threads"] = backend_.n_threads;
  r["isa"] = backend_.isa;
  r["max_model_len"] = info.max_model_len;
  r["max_num_seqs"] = info.max_num_seqs;
  r["max_num_batched_tokens"] = info.max_num_batched_tokens;
  r["scheduling_policy"] = scheduling_policy_name(info.scheduling_policy);
  r["max_waiting"] = config_.max_waiting;
  nlohmann::json kv;
  kv["dtype"] = std::string(kv_format_name(info.kv_format));
  kv["block_size"] = info.block_size;
  kv["num_blocks"] = info.n_blocks;
  kv["num_tokens"] = int64_t(info.n_blocks) * info.block_size;
  kv["bytes"] = info.kv_cache_bytes;
  kv["prefix_caching"] = info.prefix_caching;
  // Sliding-window KV (docs/sliding-window-kv.md): > 1 layer groups, each
  // block then holds one group's layers (num_tokens counts block slots).
  kv["layer_groups"] = info.kv_layer_groups;
  kv["blocks_used"] = st.kv_blocks_used;
  kv["blocks_cached"] = st.kv_blocks_cached;
  r["kv_cache"] = std::move(kv);
  // Disaggregated prefill/decode (docs/disaggregation.md): null when KV transfer is off.
  if (const KvTransferService* t = backend_.kv_transfer) {
    r["kv_transfer"] = {{"kv_role", kv_role_name(t->role())},
                        {"engine_id", t->engine_id()},
                        {"port", t->port()},
                        {"pinned_blocks", st.kv_blocks_pinned}};
  } else {
    r["kv_transfer"] = nullptr;
  }
  r["num_requests_running"] = st.n_running;
  r["num_requests_waiting"] = st.n_waiting;
  return json_dump(r);
}

std::string ApiServer::model_info() const {
  const EngineInfo& info = backend_.engine->info();
  nlohmann::json r;
  r["model_path"] = backend_.model_path;
  r["tokenizer_path"] = backend_.model_path;  // the GGUF carries its tokenizer
  r["served_model_name"] = config_.served_model_name;
  r["is_generation"] = !backend_.engine->info().encoder;
  r["max_model_len"] = info.max_model_len;
  r["vocab_size"] = info.n_vocab;
  if (const ModelConfig* mc = backend_.model_config) {
    r["architecture"] = mc->arch;
    r["name"] = mc->name;
    r["n_ctx_train"] = mc->n_ctx_train;
    r["n_layer"] = mc->n_layer;
    r["n_embd"] = mc->n_embd;
  }
  return json_dump(r);
}

std::string ApiServer::kv_blocks() const {
  const std::vector<uint64_t> keys = backend_.engine->cached_block_hashes();
  nlohmann::json r;
  r["block_size"] = backend_.engine->info().block_size;
  r["n_cached"] = keys.size();
  r["block_hashes"] = keys;
  return json_dump(r);
}

void ApiServer::health_generate(ResponseSink& sink) {
  // One greedy token after the BOS token (or token 0): the engine thread and
  // the model answer, not just the HTTP server.
  Request r;
  const int32_t bos = backend_.tokenizer->bos_id();
  r.prompt = {bos >= 0 ? bos : 0};
  r.max_tokens = 1;
  StatusOr<std::shared_ptr<RequestStream>> stream = backend_.engine->submit(std::move(r));
  if (!stream.is_ok()) {
    const ApiError e = ApiError::internal(stream.status().to_string());
    return sink.respond(e.status, "application/json", e.to_json());
  }
  constexpr std::chrono::seconds kTimeout(30);
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    std::optional<EngineEvent> ev = left.count() > 0 ? (*stream)->pop(left) : std::nullopt;
    if (!ev) {
      backend_.engine->abort((*stream)->id());
      const ApiError e = ApiError::unavailable("the engine produced no token within 30 s");
      return sink.respond(e.status, "application/json", e.to_json());
    }
    if (ev->final) return sink.respond(200, "application/json", R"({"status":"ok"})");
  }
}

void ApiServer::flush_cache(ResponseSink& sink) {
  const int32_t before = backend_.engine->stats().kv_blocks_cached;
  if (!backend_.engine->flush_prefix_cache()) {
    ApiError e{
        409, "the prefix cache was not flushed: requests are running or waiting (retry when idle)",
        "invalid_request_error", "", "requests_running"};
    return sink.respond(e.status, "application/json", e.to_json());
  }
  nlohmann::json r;
  r["flushed"] = true;
  r["num_blocks_dropped"] = before;  // as of the last published stats
  sink.respond(200, "application/json", json_dump(r));
}

}  // namespace omnibus::server
