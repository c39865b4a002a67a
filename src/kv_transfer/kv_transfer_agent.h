// KvTransferAgent: moves KV-cache bytes between omnibus workers over UCX
// (disaggregated prefill and decode, docs/disaggregation.md; who may use what:
// docs/security.md).
//
// Each worker serves a small TCP side channel on --kv-transfer-port, open
// only to the hosts of its peer list and to messages sealed with the
// deployment's secret (side_channel.h, transfer_auth.h):
//
//   decode worker                              prefill worker (owner)
//   claim(host, port, id, blocks, keys) ---->  checks id against its offers
//                                              (each offer is claimed once):
//                                  <----       ok + its region layout, its UCX
//                                              worker address, a fresh token
//   pull(token, segments): one fetch active message ---->  the owner checks
//                    that the token is the claim's and every byte range lies
//                    inside the offered blocks, then sends those bytes
//                    <---- one data message per range, copied into the pool
//   release(id, n_blocks) ---------------->    on_release(id): the owner unpins
//
// A prefill worker offer()s a transfer when it pins a finished prompt's
// blocks; `id` is unguessable (kv_transfer_params.remote_request_id) and a
// claim must name exactly the offered blocks and keys, so forged or stale
// kv_transfer_params are refused before anything is read (HTTP 400).
// withdraw() (the owner's --kv-transfer-timeout) makes later claims and
// fetches fail. No memory is exposed to UCX peers: the owner sends what a
// fetch may read and nothing else (ucx_transport.h).
//
// Transports are UCX's choice (UCX_TLS). Endpoints use
// UCP_ERR_HANDLING_MODE_PEER so that a dead owner fails the pulls instead of
// hanging them; UCX 1.13 then excludes its shared-memory transports, so the
// default is tcp even on one host. A pull still outstanding after io_timeout
// is aborted.
//
// Errors: kUnavailable (peer or UCX unreachable, timeouts), kInvalidArgument
// (refused claims, bad segments), kPermissionDenied (the peer does not share
// the secret), kCancelled (the agent is being destroyed).
//
// Thread-safety: every public method may be called from any thread. UCX is
// driven by the agent's own thread only; pull() hands a job to it and
// returns; claim_async() hands its round trip to the claim thread. Callbacks (on_release, pull's
// done) run on agent threads and must not block for long.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv_transfer/peer_list.h"
#include "kv_transfer/transfer_auth.h"
#include "util/status.h"

namespace omnibus {

// Where a worker's KV blocks sit inside its registered region: block b of
// layer l has its K bytes at k_offset[l] + b * k_block_bytes and its V bytes
// at v_offset[l] + b * v_block_bytes (KvStorage's layout: per layer a K pool
// then a V pool of [n_blocks, n_kv_heads] units).
struct KvRegionLayout {
  void* base = nullptr;  // the region: registered with UCX once
  uint64_t bytes = 0;
  int32_t n_blocks = 0;
  std::vector<uint64_t> k_offset;  // [n_layers]
  std::vector<uint64_t> v_offset;  // [n_layers]
  uint64_t k_block_bytes = 0;
  uint64_t v_block_bytes = 0;
  // Free-form compatibility string (model fingerprint, KV format, block
  // size): a claim between agents whose strings differ fails (kInvalidArgument).
  std::string compat;
};

// One pinned prompt a prefill worker offers to a decode worker.
struct KvOffer {
  std::string id;               // unguessable, [A-Za-z0-9_-], <= 128 chars
  std::vector<int32_t> blocks;  // block ids in the owner's pool, prompt order
  std::vector<uint64_t> keys;   // their prefix-cache keys (hash chain), same length
  // kivi2: the last blocks' fp16 window rows, a fetch may read them too.
  int64_t window_offset = -1;  // in the region; -1: none
  uint64_t window_bytes = 0;
};

// What a successful claim returns: the owner's layout (base = nullptr: a
// remote address space; offsets are relative to its region) and the token
// its pull presents.
struct KvClaim {
  KvRegionLayout remote;
  std::string token;
};

// One byte range to read: remote region offset -> local region offset.
struct KvSegment {
  uint64_t remote_offset = 0;
  uint64_t local_offset = 0;
  uint64_t bytes = 0;
};

struct KvTransferOptions {
  std::shared_ptr<const kv_transfer::TransferAuth> auth;  // required: the deployment's secret
  kv_transfer::PeerList peers;                            // who may connect to the side channel
  std::string listen_host = "0.0.0.0";                    // side channel bind address
  int port = 0;                                           // 0: an ephemeral port (see port())
  std::string engine_id;  // this worker's id (kv_transfer_params.remote_engine_id)
  KvRegionLayout layout;  // this worker's region
  std::chrono::milliseconds io_timeout{5000};  // one side-channel round trip, one pull
  // Owner side: a decode worker is done with offer `id` (pulled, or gave up).
  // n_blocks: how many of its blocks it read. Called on an agent thread.
  std::function<void(const std::string& id, int32_t n_blocks)> on_release;
};

struct KvTransferStats {
  uint64_t claims_ok = 0, claims_refused = 0, claims_failed = 0;  // decode side
  uint64_t pulls_ok = 0, pulls_failed = 0;
  uint64_t bytes_pulled = 0;
  uint64_t releases_received = 0;  // owner side
  uint64_t blocks_served = 0;      // owner side: n_blocks reported by releases
  uint64_t fetches_refused = 0;    // owner side: a token or range outside a live claim
  uint64_t not_a_peer = 0;         // owner side: side-channel connections from unlisted hosts
  uint64_t unauthenticated = 0;    // owner side: side-channel messages without a valid seal
};

class KvTransferAgent {
 public:
  // Initialises UCX, registers options.layout's region, binds the side
  // channel and starts the agent's threads. kUnavailable when UCX or the
  // port cannot be had (the message says which).
  static StatusOr<std::unique_ptr<KvTransferAgent>> create(KvTransferOptions options);
  // Stops the threads. Pulls still pending finish with kCancelled (their
  // done called) before it returns; no write into the region happens after.
  ~KvTransferAgent();
  KvTransferAgent(const KvTransferAgent&) = delete;
  KvTransferAgent& operator=(const KvTransferAgent&) = delete;

  int port() const;  // the side channel's bound port
  const std::string& engine_id() const;

  // --- owner (prefill) side ---
  // Makes `offer` claimable. REQUIRES: a new id, blocks.size() == keys.size().
  void offer(KvOffer offer);
  // The offer is gone (timed out or released): later claims are refused.
  void withdraw(const std::string& id);

  // --- decode side ---
  // Asks the owner at (host, port) whether offer `id` holds exactly `blocks`
  // with `keys` and a compatible layout. Blocks the caller for one round trip.
  //   kInvalidArgument:  the owner refused (unknown or already claimed id,
  //                      other blocks or keys, incompatible layout): the
  //                      request was forged, replayed or stale;
  //   kPermissionDenied: the owner does not share our secret;
  //   kUnavailable:      the owner could not be reached in io_timeout.
  StatusOr<KvClaim> claim(const std::string& host, int port, const std::string& id,
                          const std::vector<int32_t>& blocks, const std::vector<uint64_t>& keys);
  // claim() off the calling thread: the round trip runs on the agent's claim
  // thread (one at a time, in order), and `done` runs there, exactly once,
  // with claim()'s answer, or kCancelled when the agent is destroyed first.
  // So an HTTP I/O thread never waits for a prefill worker.
  void claim_async(std::string host, int port, std::string id, std::vector<int32_t> blocks,
                   std::vector<uint64_t> keys, std::function<void(StatusOr<KvClaim>)> done);
  // Reads every segment from the owner's region into this agent's region, off
  // the calling thread; `done` is called exactly once (agent thread) with OK
  // or the error, after the last byte landed or the last get was cancelled.
  // REQUIRES: a successful claim of (host, port) earlier, whose token this
  // is; segments inside both regions (checked: kInvalidArgument through done)
  // and inside the claimed offer (the owner checks: kInvalidArgument).
  void pull(const std::string& host, int port, const std::string& token,
            std::vector<KvSegment> segments, std::function<void(Status)> done);
  // Tells the owner it may unpin offer `id` (n_blocks read). Fire and forget:
  // a dead owner is ignored (its timeout unpins).
  void release(const std::string& host, int port, const std::string& id, int32_t n_blocks);

  KvTransferStats stats() const;

  struct Impl;

 private:
  explicit KvTransferAgent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace omnibus
