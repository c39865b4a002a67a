// The KV transfer side channel: JSON messages over plain TCP.
//
// Wire format (both directions): a 4-byte big-endian length, then that many
// bytes of UTF-8 JSON: a sealed envelope (messages.h: seal/unseal) around the
// message, signed with the deployment's secret (transfer_auth.h). A
// connection carries one request and its reply, then the server closes it.
//
// Who may use it: the server accepts connections only from the hosts in its
// PeerList (others are closed unanswered) and answers only messages sealed
// with its secret (others get an unsealed error reply that says only
// "unauthenticated"); side_channel_call accepts only replies sealed with it. Frames longer than
// kMaxFrameBytes, or empty ones, are refused (an error reply, then close); a frame that is not a
// JSON object gets an error reply. The server faces the network: no input can crash it.
//
// SideChannelServer: binds, then serves each connection on a short-lived
// thread of its own (at most kMaxConnections at once; more are closed at
// once), so a client that stalls mid-frame delays nobody but itself (each
// read is bounded by io_timeout). The handler runs on those threads,
// concurrently. The destructor stops the accept thread and every connection
// thread (woken through an eventfd, no sleeps) and returns after they exit.
//
// side_channel_call: one client round trip (non-blocking connect + poll,
// bounded by `timeout` overall; an optional `cancel_fd` that becomes readable
// aborts it with kCancelled).
//
// Thread-safety: SideChannelServer's methods may be called from any thread;
// side_channel_call is reentrant.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "kv_transfer/peer_list.h"
#include "kv_transfer/transfer_auth.h"
#include "util/status.h"

namespace omnibus::kv_transfer {

inline constexpr uint32_t kMaxFrameBytes = 16u << 20;
inline constexpr int kMaxConnections = 32;

// Request (a JSON object) -> reply (a JSON object).
using SideChannelHandler = std::function<nlohmann::json(const nlohmann::json& request)>;

// Who the server answers. Both must outlive the server.
struct SideChannelSecurity {
  const TransferAuth* auth = nullptr;
  const PeerList* peers = nullptr;
};

// What the server turned away, for metrics.
struct SideChannelRefusals {
  uint64_t not_a_peer = 0;       // connections from a host outside the peer list
  uint64_t unauthenticated = 0;  // messages without a valid seal (or stale)
};

class SideChannelServer {
 public:
  // Binds host:port (port 0: ephemeral) with SO_REUSEADDR and starts the
  // accept thread. kUnavailable (with errno's text) when the address cannot be
  // had.
  // REQUIRES: security.auth and security.peers set.
  static StatusOr<std::unique_ptr<SideChannelServer>> start(const std::string& host, int port,
                                                            std::chrono::milliseconds io_timeout,
                                                            SideChannelSecurity security,
                                                            SideChannelHandler handler);
  ~SideChannelServer();
  SideChannelServer(const SideChannelServer&) = delete;
  SideChannelServer& operator=(const SideChannelServer&) = delete;

  int port() const { return port_; }
  SideChannelRefusals refusals() const;

 private:
  SideChannelServer(int listen_fd, int stop_fd, int port, std::chrono::milliseconds io_timeout,
                    SideChannelSecurity security, SideChannelHandler handler);
  void accept_loop();
  void serve(int fd);
  void reap_finished();  // joins connection threads that are done; REQUIRES mu_

  struct Connection {
    std::thread thread;
    std::atomic<bool> finished{false};
  };

  const int listen_fd_;
  const int stop_fd_;  // eventfd: readable once the destructor wants everyone gone
  const int port_;
  const std::chrono::milliseconds io_timeout_;
  const SideChannelSecurity security_;
  const SideChannelHandler handler_;
  std::atomic<uint64_t> refused_peer_{0}, refused_auth_{0};
  std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_;  // guarded by mu_
  std::thread accept_thread_;
};

// Sends `request` sealed with `auth` to host:port and returns the reply object.
//   kUnavailable:      connect refused, timeout, I/O error, a malformed reply;
//   kPermissionDenied: the reply is not sealed with our secret (the server
//                      has another one, or is not an omnibus worker);
//   kCancelled:        cancel_fd (if >= 0) became readable.
StatusOr<nlohmann::json> side_channel_call(const std::string& host, int port,
                                           const nlohmann::json& request, const TransferAuth& auth,
                                           std::chrono::milliseconds timeout, int cancel_fd = -1);

}  // namespace omnibus::kv_transfer
