// KvTransferAgent: moves KV-cache bytes between omnibus workers over UCX
// (disaggregated prefill and decode, docs/disaggregation.md).
//
// Each worker registers one memory region (its KV pool, KvStorage) with UCX
// once and serves a small TCP side channel on --kv-transfer-port:
//
//   decode worker                              prefill worker (owner)
//   claim(host, port, id, blocks, keys) ---->  checks id against its offers:
//                                  <----       ok + its region layout, worker
//                                              address and rkey (cached per peer)
//   pull(segments) : ucp_get_nbx of each (remote_offset -> local_offset, bytes)
//                    straight from the owner's registered region (one-sided;
//                    the owner's CPU is not involved)
//   release(id, n_blocks) ---------------->    on_release(id): the owner unpins
//
// A prefill worker offer()s a transfer when it pins a finished prompt's
// blocks; `id` is unguessable (kv_transfer_params.remote_request_id) and a
// claim must name exactly the offered blocks and keys, so forged or stale
// kv_transfer_params are refused before anything is read (HTTP 400).
// withdraw() (the owner's --kv-transfer-timeout) makes later claims fail.
//
// Transports are UCX's choice (UCX_TLS). Endpoints use
// UCP_ERR_HANDLING_MODE_PEER so that a dead owner fails the gets instead of
// hanging them; UCX 1.13 then excludes its shared-memory transports (posix,
// sysv, self: "no peer failure handler"; cma has no active messages), so the
// default is tcp even on one host, and gets are emulated with active messages
// the owner's progress thread answers (about 0.5 GB/s on loopback). cma is
// therefore never used and ptrace restrictions do not matter; UCX_TLS is not
// touched. A pull that is still outstanding after io_timeout is aborted.
//
// Errors: kUnavailable (peer or UCX unreachable, timeouts), kInvalidArgument
// (refused claims, bad segments), kCancelled (the agent is being destroyed):
// codes added to util/status.h for this module.
//
// Thread-safety: every public method may be called from any thread. UCX is
// driven by the agent's own thread only; pull() hands a job to it and
// returns. Callbacks (on_release, pull's done) run on agent threads and must
// not block for long.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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
  std::string id;                // unguessable, [A-Za-z0-9_-], <= 128 chars
  std::vector<int32_t> blocks;   // block ids in the owner's pool, prompt order
  std::vector<uint64_t> keys;    // their prefix-cache keys (hash chain), same length
};

// What a successful claim returns: the owner's layout (base = nullptr: a
// remote address space; offsets are relative to its region).
struct KvClaim {
  KvRegionLayout remote;
};

// One byte range to read: remote region offset -> local region offset.
struct KvSegment {
  uint64_t remote_offset = 0;
  uint64_t local_offset = 0;
  uint64_t bytes = 0;
};

struct KvTransferOptions {
  std::string listen_host = "0.0.0.0";  // side channel bind address
  int port = 0;                         // 0: an ephemeral port (see port())
  std::string engine_id;                // this worker's id (kv_transfer_params.remote_engine_id)
  KvRegionLayout layout;                // this worker's region
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

  int port() const;                    // the side channel's bound port
  const std::string& engine_id() const;

  // --- owner (prefill) side ---
  // Makes `offer` claimable. REQUIRES: a new id, blocks.size() == keys.size().
  void offer(KvOffer offer);
  // The offer is gone (timed out or released): later claims are refused.
  void withdraw(const std::string& id);

  // --- decode side ---
  // Asks the owner at (host, port) whether offer `id` holds exactly `blocks`
  // with `keys` and a compatible layout. Blocks the caller for one round trip.
  //   kInvalidArgument: the owner refused (unknown id, other blocks or keys,
  //                     incompatible layout): the request was forged or stale;
  //   kUnavailable:     the owner could not be reached in io_timeout.
  StatusOr<KvClaim> claim(const std::string& host, int port, const std::string& id,
                          const std::vector<int32_t>& blocks, const std::vector<uint64_t>& keys);
  // Reads every segment from the owner's region into this agent's region, off
  // the calling thread; `done` is called exactly once (agent thread) with OK
  // or the error, after the last byte landed or the last get was cancelled.
  // REQUIRES: a successful claim of (host, port) earlier; segments inside
  // both regions (checked: kInvalidArgument through done).
  void pull(const std::string& host, int port, std::vector<KvSegment> segments,
            std::function<void(Status)> done);
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
