// UcxTransport: the agent's progress thread, the only thread that touches the
// UCX worker after creation. It moves KV bytes both ways, as UCX active
// messages (messages.h: fetch and data):
//
//   decode side, pull(): sends one fetch naming the claim's token and the
//     byte ranges of the owner's region it wants, and copies each data
//     message that answers it into the local region at the range's local
//     offset (checked against both regions before anything is sent).
//   owner side: a fetch is checked by `authorize` (the agent: the token is a
//     live claim's, every range lies inside that offer's blocks) and answered
//     with one data message per range, sent from the owner's region itself;
//     a refused fetch gets one data message with status != 0 and the reason.
//
// Neither side maps memory for remote access: the UCP context has no RMA
// feature (ucx_context.h), so UCX installs no put/get handlers and a peer can
// read no byte the owner did not choose to send and write none anywhere
// (tests/ucx_attacker.c tries; docs/security.md).
//
// A pull still outstanding after io_timeout is aborted: the fetch's send is
// cancelled, the peer's endpoint force-closed, data that arrives later for it
// is dropped, and done runs with the error. Endpoints are created with
// UCP_ERR_HANDLING_MODE_PEER: a peer that dies fails its pulls, and its
// endpoint is dropped so the next pull to that address creates a new one (so
// does a peer whose worker address changed: the owner restarted).
//
// Idle, the thread sleeps in poll() on the worker's wakeup fd (after
// ucp_worker_arm) and the job eventfd: no spinning. With pulls or sends
// outstanding it polls with a 1 ms timeout (deadlines).
//
// Thread-safety: pull() may be called from any thread. done runs on the
// progress thread, exactly once, with OK (and the bytes read) or the error;
// authorize runs there too and must not block for long. The destructor fails
// queued pulls with kCancelled at once; pulls already sent run to their end
// (completion, or abort at their deadline) and report kCancelled, then every
// endpoint is force-closed. The UcxContext must outlive the transport.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kv_transfer/kv_transfer_agent.h"
#include "kv_transfer/messages.h"
#include "kv_transfer/ucx_context.h"
#include "util/status.h"

namespace omnibus::kv_transfer {

// What a claim taught about an owner; immutable once made.
struct RemotePeer {
  std::string name;            // "host:port": the endpoint cache key
  std::string worker_address;  // raw bytes
  uint64_t bytes = 0;          // the owner's region size
};

using PullDone = std::function<void(Status status, uint64_t bytes)>;
// Owner side: may a fetch with this token read these ranges of our region?
using FetchAuthorizer =
    std::function<Status(const std::string& token, const std::vector<FetchRange>& ranges)>;

class UcxTransport {
 public:
  UcxTransport(UcxContext* ucx, uint64_t local_bytes, std::chrono::milliseconds io_timeout,
               FetchAuthorizer authorize);
  ~UcxTransport();
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  // peer: null fails the pull (no claim) with kInvalidArgument. token: the
  // claim's (kFetchTokenBytes).
  void pull(std::shared_ptr<const RemotePeer> peer, std::string token,
            std::vector<KvSegment> segments, PullDone done);

  struct State;  // the progress thread's own (endpoints, pulls, sends)

 private:
  struct Job {
    std::shared_ptr<const RemotePeer> peer;
    std::string token;
    std::vector<KvSegment> segments;
    PullDone done;
  };
  void run();

  UcxContext* const ucx_;
  const uint64_t local_bytes_;
  const std::chrono::milliseconds io_timeout_;
  const FetchAuthorizer authorize_;
  const int job_fd_;  // eventfd: jobs_ grew, or stopping_
  std::mutex mu_;
  std::deque<Job> jobs_;   // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace omnibus::kv_transfer
