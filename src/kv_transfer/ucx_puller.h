// UcxPuller: the agent's progress thread, the only thread that touches the
// UCX worker after creation.
//
// pull() queues a job (mutex + eventfd) and returns. On the thread, a job
// checks its segments against both regions, gets (or creates, lazily) the
// endpoint and unpacked rkey of its peer, issues one ucp_get_nbx per segment
// and completes when every get has completed (request callbacks). Any error
// status fails the pull (kUnavailable); a pull still outstanding after
// io_timeout is aborted: its requests are cancelled and the peer's endpoint
// is force-closed (which purges whatever UCX still holds), and done runs once
// every request was released. Endpoints are created with
// UCP_ERR_HANDLING_MODE_PEER: a peer that dies fails its gets, and its
// endpoint is dropped so the next pull to that address creates a new one. A
// peer whose worker address or rkey changed (the owner restarted) gets a new
// endpoint too.
//
// Idle, the thread sleeps in poll() on the worker's wakeup fd (after
// ucp_worker_arm) and the job eventfd: no spinning. With gets outstanding it
// polls with a 1 ms timeout (deadlines, transports that do not signal the fd).
// The owner side needs this too: UCX may emulate gets with active messages
// (tcp, shared memory without cma), which the owner's worker answers.
//
// Thread-safety: pull() may be called from any thread. done runs on the
// progress thread, exactly once, with OK (and the bytes read) or the error.
// The destructor fails queued pulls with kCancelled at once; pulls already
// issued run to their end (completion, or abort at their deadline: at most
// about 2 x io_timeout) and then report kCancelled too, so no get is in
// flight when it returns. Then it force-closes every endpoint. (Why not
// cancel at once: see shutdown() in ucx_puller.cc.) The UcxContext must
// outlive the puller.
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
#include "kv_transfer/ucx_context.h"
#include "util/status.h"

namespace omnibus::kv_transfer {

// What a claim taught about an owner; immutable once made.
struct RemotePeer {
  std::string name;            // "host:port": the endpoint cache key
  std::string worker_address;  // raw bytes
  std::string rkey;            // packed, raw bytes
  uint64_t base = 0;           // the owner's region address (its process)
  uint64_t bytes = 0;          // the owner's region size
};

using PullDone = std::function<void(Status status, uint64_t bytes)>;

class UcxPuller {
 public:
  UcxPuller(UcxContext* ucx, uint64_t local_bytes, std::chrono::milliseconds io_timeout);
  ~UcxPuller();
  UcxPuller(const UcxPuller&) = delete;
  UcxPuller& operator=(const UcxPuller&) = delete;

  // peer: null fails the pull (no claim) with kInvalidArgument.
  void pull(std::shared_ptr<const RemotePeer> peer, std::vector<KvSegment> segments, PullDone done);

  struct State;  // the progress thread's own (endpoints, operations)

 private:
  struct Job {
    std::shared_ptr<const RemotePeer> peer;
    std::vector<KvSegment> segments;
    PullDone done;
  };
  void run();

  UcxContext* const ucx_;
  const uint64_t local_bytes_;
  const std::chrono::milliseconds io_timeout_;
  const int job_fd_;  // eventfd: jobs_ grew, or stopping_
  std::mutex mu_;
  std::deque<Job> jobs_;  // guarded by mu_
  bool stopping_ = false; // guarded by mu_
  std::thread thread_;
};

}  // namespace omnibus::kv_transfer
