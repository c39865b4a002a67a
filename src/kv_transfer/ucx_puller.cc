#include "kv_transfer/ucx_puller.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <list>
#include <unordered_map>
#include <unordered_set>

#include "util/check.h"

namespace omnibus::kv_transfer {

namespace {

using Clock = std::chrono::steady_clock;

// One cached connection to an owner: its endpoint and unpacked rkey.
struct Endpoint {
  std::shared_ptr<const RemotePeer> peer;
  ucp_ep_h ep = nullptr;
  ucp_rkey_h rkey = nullptr;
  int active_ops = 0;        // pulls with gets outstanding on it
  bool failed = false;       // set by the error handler
  ucs_status_t fail_status = UCS_OK;
};

// One pull in progress.
struct Op {
  PullDone done;
  Endpoint* endpoint = nullptr;           // null until gets were issued
  std::unordered_set<void*> requests;     // gets not yet completed
  Status error;                           // the first error
  bool aborted = false;                   // requests cancelled, endpoint closed
  uint64_t bytes = 0;
  Clock::time_point deadline;
};

// An endpoint being force-closed; its rkey is destroyed once the close
// completed (when gets were outstanding) or before it started (when idle).
struct Closing {
  std::unique_ptr<Endpoint> endpoint;
  void* request = nullptr;
};

bool same_peer(const RemotePeer& a, const RemotePeer& b) {
  return a.worker_address == b.worker_address && a.rkey == b.rkey && a.base == b.base && a.bytes == b.bytes;
}

void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* e = static_cast<Endpoint*>(arg);
  e->failed = true;
  e->fail_status = status;
}

void on_get_done(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  op->requests.erase(request);
  if (status != UCS_OK && op->error.is_ok()) {
    op->error = Status::unavailable("ucp_get: {}", ucs_status_string(status));
  }
  ucp_request_free(request);
}

bool outside(uint64_t offset, uint64_t bytes, uint64_t region) {
  return offset > region || bytes > region - offset;
}

}  // namespace

struct UcxPuller::State {
  UcxPuller* self;
  ucp_worker_h worker;
  std::unordered_map<std::string, std::unique_ptr<Endpoint>> endpoints;
  std::list<std::unique_ptr<Op>> ops;
  std::list<Closing> closing;
  bool stopping = false;  // the puller is being destroyed: pulls end as kCancelled

  void progress() {
    while (ucp_worker_progress(worker) != 0) {
    }
  }

  void finish(Op& op) {
    OMNIBUS_CHECK(op.requests.empty());
    if (op.endpoint != nullptr) --op.endpoint->active_ops;
    if (stopping) op.error = Status::cancelled("the KV transfer agent is shutting down");
    op.done(op.error, op.error.is_ok() ? op.bytes : 0);
  }

  // Force-closes `name`'s endpoint (if it is `only`, when given).
  void drop(const std::string& name, const Endpoint* only = nullptr) {
    auto it = endpoints.find(name);
    if (it == endpoints.end() || (only != nullptr && it->second.get() != only)) return;
    std::unique_ptr<Endpoint> e = std::move(it->second);
    endpoints.erase(it);
    if (e->active_ops == 0 && e->rkey != nullptr) {  // UCX: rkeys go before their endpoint
      ucp_rkey_destroy(e->rkey);
      e->rkey = nullptr;
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;  // no flush: the peer may be dead
    void* r = ucp_ep_close_nbx(e->ep, &p);
    closing.push_back({std::move(e), UCS_PTR_IS_PTR(r) ? r : nullptr});
  }

  // Completed closes: free the request, then the rkey of an endpoint that had
  // gets outstanding (force close purged them).
  void reap_closing() {
    for (auto it = closing.begin(); it != closing.end();) {
      if (it->request != nullptr) {
        if (ucp_request_check_status(it->request) == UCS_INPROGRESS) {
          ++it;
          continue;
        }
        ucp_request_free(it->request);
      }
      if (it->endpoint->rkey != nullptr && it->endpoint->active_ops == 0) {
        ucp_rkey_destroy(it->endpoint->rkey);
        it->endpoint->rkey = nullptr;
      }
      if (it->endpoint->rkey == nullptr) {
        it = closing.erase(it);
      } else {
        ++it;  // an aborted pull still holds requests on it
      }
    }
  }

  StatusOr<Endpoint*> endpoint(const std::shared_ptr<const RemotePeer>& peer) {
    auto it = endpoints.find(peer->name);
    if (it != endpoints.end()) {
      if (!it->second->failed && same_peer(*it->second->peer, *peer)) return it->second.get();
      drop(peer->name);  // dead, or the owner restarted
    }
    auto e = std::make_unique<Endpoint>();
    e->peer = peer;
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t*>(peer->worker_address.data());
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_ep_error;
    p.err_handler.arg = e.get();
    ucs_status_t s = ucp_ep_create(worker, &p, &e->ep);
    if (s != UCS_OK) return Status::unavailable("ucp_ep_create to {}: {}", peer->name, ucs_status_string(s));
    Endpoint* raw = e.get();
    endpoints.emplace(peer->name, std::move(e));
    s = ucp_ep_rkey_unpack(raw->ep, peer->rkey.data(), &raw->rkey);
    if (s != UCS_OK) {
      drop(peer->name);
      return Status::unavailable("ucp_ep_rkey_unpack from {}: {}", peer->name, ucs_status_string(s));
    }
    return raw;
  }

  // Cancels op's gets; if UCX still holds some, force-closes the endpoint.
  void abort(Op& op) {
    op.aborted = true;
    std::vector<void*> requests(op.requests.begin(), op.requests.end());
    for (void* r : requests) {
      if (op.requests.count(r) != 0) ucp_request_cancel(worker, r);  // may complete others
    }
    if (!op.requests.empty() && op.endpoint != nullptr) drop(op.endpoint->peer->name, op.endpoint);
  }

  void start(Job job) {
    auto op = std::make_unique<Op>();
    op->done = std::move(job.done);
    op->deadline = Clock::now() + self->io_timeout_;
    op->error = check(job);
    if (op->error.is_ok()) issue(*op, job);
    if (!op->error.is_ok() && !op->requests.empty()) abort(*op);
    ops.push_back(std::move(op));  // finished by sweep(), also when nothing is outstanding
  }

  Status check(const Job& job) const {
    if (job.peer == nullptr) return Status::invalid_argument("pull from a peer that was not claimed");
    for (size_t i = 0; i < job.segments.size(); ++i) {
      const KvSegment& s = job.segments[i];
      if (outside(s.remote_offset, s.bytes, job.peer->bytes)) {
        return Status::invalid_argument("segment {}: remote [{}, +{}) outside {}'s region of {} bytes", i,
                                        s.remote_offset, s.bytes, job.peer->name, job.peer->bytes);
      }
      if (outside(s.local_offset, s.bytes, self->local_bytes_)) {
        return Status::invalid_argument("segment {}: local [{}, +{}) outside the region of {} bytes", i,
                                        s.local_offset, s.bytes, self->local_bytes_);
      }
    }
    return Status::ok();
  }

  void issue(Op& op, const Job& job) {
    auto e = endpoint(job.peer);
    if (!e.is_ok()) {
      op.error = e.status();
      return;
    }
    op.endpoint = *e;
    ++op.endpoint->active_ops;
    auto* local = reinterpret_cast<char*>(self->ucx_->base());
    for (const KvSegment& s : job.segments) {
      if (s.bytes == 0) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.send = on_get_done;
      p.user_data = &op;
      void* r = ucp_get_nbx(op.endpoint->ep, local + s.local_offset, s.bytes,
                            job.peer->base + s.remote_offset, op.endpoint->rkey, &p);
      if (UCS_PTR_IS_ERR(r)) {
        op.error = Status::unavailable("ucp_get_nbx from {}: {}", job.peer->name,
                                       ucs_status_string(UCS_PTR_STATUS(r)));
        return;
      }
      if (r != nullptr) op.requests.insert(r);
      op.bytes += s.bytes;
    }
  }

  void sweep() {
    for (auto it = endpoints.begin(); it != endpoints.end();) {
      auto next = std::next(it);
      if (it->second->failed) drop(it->first);
      it = next;
    }
    auto now = Clock::now();
    for (auto it = ops.begin(); it != ops.end();) {
      Op& op = **it;
      if (op.requests.empty()) {
        finish(op);
        it = ops.erase(it);
        continue;
      }
      if (!op.aborted && now >= op.deadline) {
        op.error = Status::unavailable("pull timed out after {} ms with {} gets outstanding",
                                       self->io_timeout_.count(), op.requests.size());
        abort(op);
      } else if (op.aborted && now >= op.deadline + self->io_timeout_) {
        // Cancelled and force-closed an io_timeout ago, and UCX still holds
        // gets (it should not): fail the pull rather than hang its caller, and
        // leave the Op to UCX's late callbacks.
        std::fprintf(stderr, "omnibus: kv_transfer: %zu gets never completed after a force close\n",
                     op.requests.size());
        if (op.endpoint != nullptr) --op.endpoint->active_ops;
        if (stopping) op.error = Status::cancelled("the KV transfer agent is shutting down");
        op.done(op.error.is_ok() ? Status::unavailable("pull aborted") : op.error, 0);
        (void)it->release();
        it = ops.erase(it);
        continue;
      }
      ++it;
    }
    reap_closing();
  }

  // Sleeps until the worker or the job queue has something (or 1 ms while
  // gets or closes are outstanding).
  void wait() {
    int timeout = ops.empty() && closing.empty() ? -1 : 1;
    ucs_status_t s = ucp_worker_arm(worker);
    if (s == UCS_ERR_BUSY) return;  // events arrived meanwhile: progress again
    if (s != UCS_OK) timeout = 1;
    pollfd fds[2] = {{self->ucx_->event_fd(), POLLIN, 0}, {self->job_fd_, POLLIN, 0}};
    int n = poll(fds, 2, timeout);
    OMNIBUS_CHECK(n >= 0 || errno == EINTR);
  }

  // Pulls in flight run to their end (completion, or their deadline's abort)
  // and report kCancelled; then every endpoint is force-closed. Closing an
  // endpoint whose wireup is still under way would leave the owner answering
  // a vanished worker, which UCX 1.13's tcp transport turns into an assertion
  // failure in the owner's process (openucx/ucx#8175): pulls end first, and a
  // finished pull means a finished wireup.
  void shutdown() {
    stopping = true;
    while (!ops.empty()) {
      progress();
      sweep();
      if (!ops.empty()) wait();
    }
    while (!endpoints.empty()) drop(endpoints.begin()->first);
    auto deadline = Clock::now() + self->io_timeout_;
    for (;;) {
      progress();
      reap_closing();
      if (closing.empty() || Clock::now() >= deadline) break;
      pollfd fd{self->ucx_->event_fd(), POLLIN, 0};
      (void)poll(&fd, 1, 1);
    }
    if (!closing.empty()) {
      std::fprintf(stderr, "omnibus: kv_transfer: %zu endpoint closes still pending at shutdown\n",
                   closing.size());
      for (auto& c : closing) (void)c.endpoint.release();  // UCX may still call back into them
    }
  }
};

UcxPuller::UcxPuller(UcxContext* ucx, uint64_t local_bytes, std::chrono::milliseconds io_timeout)
    : ucx_(ucx), local_bytes_(local_bytes), io_timeout_(io_timeout),
      job_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  OMNIBUS_CHECK(job_fd_ >= 0);
  thread_ = std::thread([this] { run(); });
}

UcxPuller::~UcxPuller() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  uint64_t one = 1;
  OMNIBUS_CHECK(::write(job_fd_, &one, sizeof(one)) == sizeof(one));
  thread_.join();
  ::close(job_fd_);
}

void UcxPuller::pull(std::shared_ptr<const RemotePeer> peer, std::vector<KvSegment> segments, PullDone done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    OMNIBUS_CHECK(!stopping_);
    jobs_.push_back({std::move(peer), std::move(segments), std::move(done)});
  }
  uint64_t one = 1;
  OMNIBUS_CHECK(::write(job_fd_, &one, sizeof(one)) == sizeof(one));
}

void UcxPuller::run() {
  State st{this, ucx_->worker(), {}, {}, {}};
  for (;;) {
    st.progress();
    uint64_t count = 0;
    (void)::read(job_fd_, &count, sizeof(count));  // reset before looking at the queue
    std::deque<Job> jobs;
    bool stop = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs.swap(jobs_);
      stop = stopping_;
    }
    if (stop) {
      for (Job& job : jobs) job.done(Status::cancelled("the KV transfer agent is shutting down"), 0);
      break;
    }
    for (Job& job : jobs) st.start(std::move(job));
    st.sweep();
    st.wait();
  }
  st.shutdown();
}

}  // namespace omnibus::kv_transfer
