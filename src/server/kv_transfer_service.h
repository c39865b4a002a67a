// KvTransferService: the server's side of disaggregated prefill and decode
// (docs/disaggregation.md). It speaks vLLM's `kv_transfer_params` protocol,
// the one vllm-router's --vllm-pd-disaggregation mode drives:
//
// Off unless asked for: a default server (--kv-role both without
// --kv-transfer) has no service and refuses kv_transfer_params (400). Who may
// use what (docs/security.md): only hosts in --kv-transfer-peers reach the
// side channel, and only with the deployment's secret; every offer is signed
// ("omnibus.mac", HMAC-SHA256 over the fields a decode worker acts on), and a
// decode worker checks the signature and that remote_host is a listed peer
// before it connects anywhere; UCX peers can read only the blocks of an offer
// they claimed (kv_transfer/ucx_transport.h).
//
//   prefill worker: a request with kv_transfer_params.do_remote_decode = true
//     runs with its prompt blocks pinned (Request::pin_prompt_blocks); its
//     response carries kv_transfer_params for the decode worker (offer()):
//     do_remote_prefill, remote_engine_id, remote_request_id (unguessable),
//     remote_block_ids, remote_host, remote_port, tp_size, and under
//     "omnibus" the block-hash chain, the compatibility string (model
//     fingerprint, KV dtype, block size), the prompt length, and for kivi2
//     "window": {offset, bytes} of the last blocks' fp16 window rows in its
//     KV region (KvPinned::window_offset; kv/kv_storage.h transfer slots),
//     which a decode worker pulls with the blocks, and "mac". The blocks stay
//     pinned until the decode worker releases them or --kv-transfer-timeout
//     passes; at most --kv-transfer-max-pinned blocks are pinned at once
//     (EngineConfig::max_pinned_blocks), beyond which a request is answered
//     without kv_transfer_params.
//   decode worker: a request with kv_transfer_params.do_remote_prefill = true
//     is checked (prepare_import(): types, ranges, compatibility, the hash
//     chain against its own tokenization of the prompt — any mismatch is a
//     400 that touches nothing; kivi2 without a window: computed here),
//     claimed from the prefill worker (which
//     refuses forged or stale ids: 400), and submitted with a KvImport: the
//     engine matches its own prefix cache and the agent pulls only the
//     missing blocks straight into the pool; then the prefill worker is told
//     to unpin. An unreachable prefill worker is not an error: the prompt is
//     computed here and omnibus:kv_transfer_fallbacks_total counts it.
//
// Metrics (metrics_text(), appended to /metrics): blocks and bytes moved per
// direction, pull latency, pinned blocks, timeouts, fallbacks, claims refused.
//
// Thread-safety: every method may be called from any thread (HTTP I/O
// threads, the engine thread through KvImport, the agent's threads).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "kv_transfer/kv_transfer_agent.h"
#include "kv_transfer/offer_params.h"
#include "server/api_error.h"
#include "server/metrics.h"

namespace omnibus::server {

enum class KvRole { kBoth, kPrefill, kDecode };
const char* kv_role_name(KvRole r);

struct KvTransferServiceOptions {
  KvRole role = KvRole::kBoth;
  std::shared_ptr<const kv_transfer::TransferAuth> auth;  // required
  kv_transfer::PeerList peers;                            // --kv-transfer-peers
  std::string host = "127.0.0.1";  // advertised in remote_host (--kv-transfer-host)
  std::string listen_host = "0.0.0.0";
  int port = 0;                       // --kv-transfer-port (0: ephemeral)
  std::chrono::seconds timeout{120};  // --kv-transfer-timeout: unpin what was never pulled
  std::string model_fingerprint;      // hex of gguf_fingerprint() of the served GGUF
  std::chrono::milliseconds io_timeout{5000};
};

class KvTransferService {
 public:
  // Starts the agent over the engine's KV pool. REQUIRES: the engine outlives
  // the service, prefix caching on.
  static StatusOr<std::unique_ptr<KvTransferService>> create(Engine& engine,
                                                             const std::string& kv_dtype,
                                                             KvTransferServiceOptions options);
  // Stops the timeout thread and the agent (pulls in flight end, their
  // callbacks run). Pins left are the engine's to free at its shutdown.
  ~KvTransferService();
  // Shutdown, before the engine goes: releases and timeouts no longer reach
  // it. The agent keeps running, so the engine's fetches in flight can end.
  void detach_engine();

  KvRole role() const { return options_.role; }
  int port() const { return agent_->port(); }
  const std::string& engine_id() const { return agent_->engine_id(); }

  // What a request's kv_transfer_params ask of this worker.
  enum class Ask { kNone, kRemoteDecode, kRemotePrefill };
  // kNone for null/absent or both flags false. 400 for wrong types, or a side
  // this worker's role does not serve.
  ApiResult<Ask> classify(const nlohmann::json* params) const;

  // Prefill side: offers a pinned prompt and returns the response's
  // kv_transfer_params. The pin is released by the decode worker's release,
  // by the timeout, or by drop().
  nlohmann::json offer(const KvPinned& pinned, int32_t n_prompt_tokens);
  // Prefill side: the response will not be delivered (client gone): unpin now.
  void drop(const KvPinned& pinned);

  // Decode side: checks `params` (signature first, then remote_host against
  // the peers, then the rest) against the tokenized prompt and its cache
  // salt, and claims the blocks. A failed check is returned (a 400; nothing
  // connects and `done` is never called). Otherwise `done` is called exactly
  // once with the import, or a null import when there is nothing to fetch or
  // the prefill worker is unreachable (the prompt is then computed here), or
  // the owner's refusal (a 400): on the calling thread when no claim is
  // needed, else on the agent's claim thread after the round trip (up to
  // --kv-transfer-timeout), so the caller (an HTTP I/O thread) never waits.
  using ImportDone = std::function<void(ApiResult<std::shared_ptr<KvImport>>)>;
  std::optional<ApiError> start_import(const nlohmann::json& params,
                                       const std::vector<int32_t>& prompt,
                                       const std::string& cache_salt, ImportDone done);

  // Prometheus lines (HELP/TYPE included) of the transfer metrics.
  std::string metrics_text(const std::string& labels, const EngineStats& stats) const;

 private:
  KvTransferService(Engine& engine, KvTransferServiceOptions options, std::string compat);
  // nullptr: the signature; else the peers, compatibility and window shape.
  std::optional<ApiError> check_offer(const nlohmann::json& params,
                                      const kv_transfer::ImportParams* parsed);
  ApiResult<std::shared_ptr<KvImport>> make_import(const kv_transfer::ImportParams& p,
                                                   KvClaim claim);
  // The claim's answer -> the import (or null, or the refusal).
  ApiResult<std::shared_ptr<KvImport>> claimed(const kv_transfer::ImportParams& p,
                                               StatusOr<KvClaim> claim);
  std::optional<ApiError> check_chain(const kv_transfer::ImportParams& p,
                                      const std::vector<int32_t>& prompt,
                                      const std::string& cache_salt) const;
  void on_release(const std::string& id, int32_t n_blocks);
  void expire_loop();  // the timeout thread

  Engine* engine_;  // guarded by mu_ (null after detach_engine)
  const KvTransferServiceOptions options_;
  const std::string compat_;
  const KvRegionInfo region_;
  const int32_t block_size_;
  std::unique_ptr<KvTransferAgent> agent_;

  struct Offer {
    uint64_t pin_id = 0;
    int32_t n_blocks = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;           // wakes the timeout thread
  std::map<std::string, Offer> offers_;  // guarded by mu_
  bool stop_ = false;                    // guarded by mu_
  // Metrics, guarded by mu_.
  uint64_t blocks_pulled_ = 0, bytes_pulled_ = 0, blocks_local_ = 0;
  uint64_t blocks_served_ = 0, bytes_served_ = 0;
  uint64_t offers_total_ = 0, timeouts_ = 0, fallbacks_ = 0, refused_ = 0, pull_failures_ = 0;
  uint64_t forged_ = 0, not_a_peer_ = 0;  // decode side: bad signature, remote_host not listed
  Histogram pull_seconds_;
  std::thread expirer_;
};

}  // namespace omnibus::server
