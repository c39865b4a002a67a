#include "kv_transfer/ucx_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <unordered_map>

#include "util/check.h"

namespace omnibus::kv_transfer {

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kFetchAm = 1;  // decode -> owner
constexpr unsigned kDataAm = 2;   // owner -> decode

// One cached connection to an owner.
struct Endpoint {
  std::shared_ptr<const RemotePeer> peer;
  ucp_ep_h ep = nullptr;
  int active_ops = 0;   // pulls in flight on it
  bool failed = false;  // set by the error handler
};

// One pull in progress (decode side).
struct Op {
  uint64_t fetch_id = 0;
  PullDone done;
  Endpoint* endpoint = nullptr;
  std::vector<KvSegment> segments;
  std::vector<bool> received;
  size_t n_received = 0;
  std::string fetch;             // the encoded fetch: alive until its send completes
  void* send_request = nullptr;  // the fetch's send, while UCX holds it
  Status error;
  bool aborted = false;
  uint64_t bytes = 0;
  Clock::time_point deadline;

  bool complete() const {
    return send_request == nullptr && (!error.is_ok() || aborted || n_received == segments.size());
  }
};

// One data message the owner is sending; freed when UCX is done with it.
struct Send {
  DataHeader header;
  std::string text;  // a refusal's reason
  // State::sends_in_flight, shared: a late completion after the thread ended must not touch it.
  std::shared_ptr<int> in_flight;
};

struct Closing {
  std::unique_ptr<Endpoint> endpoint;
  void* request = nullptr;
};

void on_ep_error(void* arg, ucp_ep_h, ucs_status_t) { static_cast<Endpoint*>(arg)->failed = true; }

bool outside(uint64_t offset, uint64_t bytes, uint64_t region) {
  return offset > region || bytes > region - offset;
}

void on_data_sent(void* request, ucs_status_t, void* user_data) {
  auto* s = static_cast<Send*>(user_data);
  --*s->in_flight;
  delete s;
  ucp_request_free(request);
}

}  // namespace

struct UcxTransport::State {
  State(UcxTransport* s, ucp_worker_h w) : self(s), worker(w) {}
  UcxTransport* self;
  ucp_worker_h worker;
  std::unordered_map<std::string, std::unique_ptr<Endpoint>> endpoints;
  std::list<std::unique_ptr<Op>> ops;
  std::unordered_map<uint64_t, Op*> by_fetch_id;  // ops still accepting data
  uint64_t next_fetch_id = 1;
  std::list<Closing> closing;
  struct PendingFetch {
    ucp_ep_h reply_ep;
    StatusOr<FetchRequest> fetch;
  };
  std::vector<PendingFetch> fetches;  // owner side: received, answered after progress()
  std::shared_ptr<int> in_flight = std::make_shared<int>(0);  // data sends UCX still holds
  int sends_in_flight() const { return *in_flight; }
  bool stopping = false;

  // Progresses UCX and answers the fetches it delivered (at once: the
  // thread may sleep next, and nothing else would wake it for them).
  void progress() {
    do {
      while (ucp_worker_progress(worker) != 0) {
      }
      serve_fetches();
    } while (ucp_worker_progress(worker) != 0);
  }

  // --- owner side ---

  static ucs_status_t on_fetch(void* arg, const void*, size_t, void* data, size_t length,
                               const ucp_am_recv_param_t* param) {
    auto* st = static_cast<State*>(arg);
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0 || param->reply_ep == nullptr)
      return UCS_OK;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0)
      return UCS_ERR_UNSUPPORTED;  // fetches are small
    st->fetches.push_back(
        {param->reply_ep, parse_fetch(std::string_view(static_cast<const char*>(data), length))});
    return UCS_OK;
  }

  void send_data(ucp_ep_h ep, std::unique_ptr<Send> s, const void* buffer, size_t bytes) {
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    p.cb.send = on_data_sent;
    s->in_flight = in_flight;
    Send* raw = s.release();
    if (buffer == nullptr) {
      buffer = raw->text.data();
      bytes = raw->text.size();
    }
    p.user_data = raw;
    void* r = ucp_am_send_nbx(ep, kDataAm, &raw->header, sizeof(raw->header), buffer, bytes, &p);
    if (UCS_PTR_IS_PTR(r)) {
      ++*in_flight;
    } else {
      delete raw;  // done at once (or failed: the peer's pull times out)
    }
  }

  void answer(PendingFetch& f) {
    Status ok =
        f.fetch.is_ok() ? self->authorize_(f.fetch->token, f.fetch->ranges) : f.fetch.status();
    const uint64_t id = f.fetch.is_ok() ? f.fetch->fetch_id : 0;
    if (ok.is_ok()) {
      for (const FetchRange& g : f.fetch->ranges) {
        ok = outside(g.offset, g.bytes, self->ucx_->bytes())
                 ? Status::invalid_argument("range [{}, +{}) outside the region", g.offset, g.bytes)
                 : Status::ok();
        if (!ok.is_ok()) break;
      }
    }
    if (!ok.is_ok()) {
      auto s = std::make_unique<Send>();
      s->header = DataHeader{id, 0, 1};
      s->text = "fetch refused: " + ok.message();
      send_data(f.reply_ep, std::move(s), nullptr, 0);
      return;
    }
    const auto* base = reinterpret_cast<const char*>(self->ucx_->base());
    for (uint32_t i = 0; i < f.fetch->ranges.size(); ++i) {
      const FetchRange& g = f.fetch->ranges[i];
      auto s = std::make_unique<Send>();
      s->header = DataHeader{id, i, 0};
      send_data(f.reply_ep, std::move(s), base + g.offset, g.bytes);
    }
  }

  // --- decode side ---

  static ucs_status_t on_data(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param) {
    auto* st = static_cast<State*>(arg);
    if (header_length != sizeof(DataHeader) ||
        (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
      return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 ? UCS_ERR_UNSUPPORTED : UCS_OK;
    }
    DataHeader h;
    std::memcpy(&h, header, sizeof(h));
    auto it = st->by_fetch_id.find(h.fetch_id);
    Op& op = *it->second;
    if (h.status != 0) {
      if (op.error.is_ok()) {
        op.error = Status::invalid_argument(
            "{}", std::string(static_cast<const char*>(data), std::min<size_t>(length, 512)));
      }
      return UCS_OK;
    }
    if (h.range >= op.segments.size() || op.received[h.range] ||
        length != op.segments[h.range].bytes) {
      if (op.error.is_ok())
        op.error = Status::unavailable("the owner sent data the pull did not ask for");
      return UCS_OK;
    }
    auto* local = reinterpret_cast<char*>(st->self->ucx_->base());
    std::memcpy(local + op.segments[h.range].local_offset, data, length);
    op.received[h.range] = true;
    ++op.n_received;
    return UCS_OK;
  }

  void finish(Op& op) {
    by_fetch_id.erase(op.fetch_id);
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
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;  // no flush: the peer may be dead
    void* r = ucp_ep_close_nbx(e->ep, &p);
    closing.push_back({std::move(e), UCS_PTR_IS_PTR(r) ? r : nullptr});
  }

  void reap_closing() {
    for (auto it = closing.begin(); it != closing.end();) {
      if (it->request != nullptr && ucp_request_check_status(it->request) == UCS_INPROGRESS) {
        ++it;
        continue;
      }
      if (it->request != nullptr) ucp_request_free(it->request);
      it->request = nullptr;
      if (it->endpoint->active_ops == 0) {
        it = closing.erase(it);
      } else {
        ++it;  // an aborted pull still refers to it
      }
    }
  }

  StatusOr<Endpoint*> endpoint(const std::shared_ptr<const RemotePeer>& peer) {
    auto it = endpoints.find(peer->name);
    if (it != endpoints.end()) {
      if (!it->second->failed && it->second->peer->worker_address == peer->worker_address)
        return it->second.get();
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
    if (s != UCS_OK)
      return Status::unavailable("ucp_ep_create to {}: {}", peer->name, ucs_status_string(s));
    Endpoint* raw = e.get();
    endpoints.emplace(peer->name, std::move(e));
    return raw;
  }

  void abort(Op& op) {
    op.aborted = true;
    by_fetch_id.erase(op.fetch_id);  // late data is dropped
    if (op.send_request != nullptr) ucp_request_cancel(worker, op.send_request);
    if (op.endpoint != nullptr) drop(op.endpoint->peer->name, op.endpoint);
  }

  Status check(const Job& job) const {
    if (job.peer == nullptr)
      return Status::invalid_argument("pull from a peer that was not claimed");
    if (job.token.size() != kFetchTokenBytes)
      return Status::invalid_argument("pull without the claim's token");
    if (job.segments.size() > kMaxFetchRanges)
      return Status::invalid_argument("{} segments", job.segments.size());
    for (size_t i = 0; i < job.segments.size(); ++i) {
      const KvSegment& s = job.segments[i];
      if (outside(s.remote_offset, s.bytes, job.peer->bytes)) {
        return Status::invalid_argument(
            "segment {}: remote [{}, +{}) outside {}'s region of {} bytes", i, s.remote_offset,
            s.bytes, job.peer->name, job.peer->bytes);
      }
      if (outside(s.local_offset, s.bytes, self->local_bytes_)) {
        return Status::invalid_argument(
            "segment {}: local [{}, +{}) outside the region of {} bytes", i, s.local_offset,
            s.bytes, self->local_bytes_);
      }
    }
    return Status::ok();
  }

  static void on_fetch_sent(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<Op*>(user_data);
    if (status != UCS_OK && op->error.is_ok()) {
      op->error = Status::unavailable("sending the fetch: {}", ucs_status_string(status));
    }
    op->send_request = nullptr;
    ucp_request_free(request);
  }

  void issue(Op& op, Job& job) {
    auto e = endpoint(job.peer);
    if (!e.is_ok()) {
      op.error = e.status();
      return;
    }
    op.endpoint = *e;
    ++op.endpoint->active_ops;
    FetchRequest f;
    f.fetch_id = op.fetch_id;
    f.token = std::move(job.token);
    for (const KvSegment& s : op.segments) {
      f.ranges.push_back({s.remote_offset, s.bytes});
      op.bytes += s.bytes;
    }
    op.fetch = encode_fetch(f);
    by_fetch_id[op.fetch_id] = &op;
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    p.cb.send = on_fetch_sent;
    p.user_data = &op;
    void* r = ucp_am_send_nbx(op.endpoint->ep, kFetchAm, nullptr, 0, op.fetch.data(),
                              op.fetch.size(), &p);
    if (UCS_PTR_IS_ERR(r)) {
      op.error = Status::unavailable("ucp_am_send_nbx to {}: {}", job.peer->name,
                                     ucs_status_string(UCS_PTR_STATUS(r)));
    } else if (r != nullptr) {
      op.send_request = r;
    }
  }

  void start(Job job) {
    auto op = std::make_unique<Op>();
    op->fetch_id = next_fetch_id++;
    op->done = std::move(job.done);
    op->deadline = Clock::now() + self->io_timeout_;
    op->error = check(job);
    if (op->error.is_ok()) {
      op->segments = std::move(job.segments);
      std::erase_if(op->segments, [](const KvSegment& s) { return s.bytes == 0; });
      op->received.assign(op->segments.size(), false);
      if (!op->segments.empty()) issue(*op, job);
    }
    ops.push_back(std::move(op));  // finished by sweep()
  }

  void sweep() {
    for (auto it = endpoints.begin(); it != endpoints.end();) {
      auto next = std::next(it);
      if (it->second->failed) {
        for (auto& op : ops) {
          if (op->endpoint == it->second.get() && op->error.is_ok() && !op->complete()) {
            op->error = Status::unavailable("the connection to {} failed", it->first);
          }
        }
        drop(it->first);
      }
      it = next;
    }
    const auto now = Clock::now();
    for (auto it = ops.begin(); it != ops.end();) {
      Op& op = **it;
      // A refusal (or stray data) ends the pull; the connection stays: the
      // owner answered. Later data for it is dropped (finish forgets the id).
      if (op.complete()) {
        finish(op);
        it = ops.erase(it);
        continue;
      }
      if (!op.aborted && now >= op.deadline) {
        op.error =
            Status::unavailable("pull timed out after {} ms with {} of {} ranges received",
                                self->io_timeout_.count(), op.n_received, op.segments.size());
        abort(op);
      } else if (op.aborted && now >= op.deadline + self->io_timeout_) {
        // Cancelled and force-closed an io_timeout ago and UCX still holds the
        // fetch's send (it should not): fail the pull rather than hang its
        // caller, and leave the Op to UCX's late callback.
        std::fprintf(stderr,
                     "omnibus: kv_transfer: a fetch's send never completed after a force close\n");
        if (op.endpoint != nullptr) --op.endpoint->active_ops;
        op.done(op.error.is_ok() ? Status::unavailable("pull aborted") : op.error, 0);
        (void)it->release();
        it = ops.erase(it);
        continue;
      }
      ++it;
    }
    reap_closing();
  }

  void wait() {
    int timeout = ops.empty() && closing.empty() && sends_in_flight() == 0 ? -1 : 1;
    ucs_status_t s = ucp_worker_arm(worker);
    if (s == UCS_ERR_BUSY) return;  // events arrived meanwhile: progress again
    if (s != UCS_OK) timeout = 1;
    pollfd fds[2] = {{self->ucx_->event_fd(), POLLIN, 0}, {self->job_fd_, POLLIN, 0}};
    int n = poll(fds, 2, timeout);
    OMNIBUS_CHECK(n >= 0 || errno == EINTR);
  }

  void serve_fetches() {
    std::vector<PendingFetch> pending;
    pending.swap(fetches);
    for (PendingFetch& f : pending) answer(f);
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
      while (ucp_worker_progress(worker) != 0) {
      }
      fetches.clear();  // no more answers
      reap_closing();
      if ((closing.empty() && sends_in_flight() == 0) || Clock::now() >= deadline) break;
      pollfd fd{self->ucx_->event_fd(), POLLIN, 0};
      (void)poll(&fd, 1, 1);
    }
    if (sends_in_flight() > 0) {
      std::fprintf(stderr, "omnibus: kv_transfer: %d data sends still pending at shutdown\n",
                   sends_in_flight());
    }
    if (!closing.empty()) {
      std::fprintf(stderr, "omnibus: kv_transfer: %zu endpoint closes still pending at shutdown\n",
                   closing.size());
      for (auto& c : closing) (void)c.endpoint.release();  // UCX may still call back into them
    }
  }
};

UcxTransport::UcxTransport(UcxContext* ucx, uint64_t local_bytes,
                           std::chrono::milliseconds io_timeout, FetchAuthorizer authorize)
    : ucx_(ucx),
      local_bytes_(local_bytes),
      io_timeout_(io_timeout),
      authorize_(std::move(authorize)),
      job_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  OMNIBUS_CHECK(job_fd_ >= 0);
  thread_ = std::thread([this] { run(); });
}

UcxTransport::~UcxTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  uint64_t one = 1;
  OMNIBUS_CHECK(::write(job_fd_, &one, sizeof(one)) == sizeof(one));
  thread_.join();
  ::close(job_fd_);
}

void UcxTransport::pull(std::shared_ptr<const RemotePeer> peer, std::string token,
                        std::vector<KvSegment> segments, PullDone done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    OMNIBUS_CHECK(!stopping_);
    jobs_.push_back({std::move(peer), std::move(token), std::move(segments), std::move(done)});
  }
  uint64_t one = 1;
  OMNIBUS_CHECK(::write(job_fd_, &one, sizeof(one)) == sizeof(one));
}

void UcxTransport::run() {
  State st(this, ucx_->worker());
  for (unsigned id : {kFetchAm, kDataAm}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = id;
    hp.cb = id == kFetchAm ? &State::on_fetch : &State::on_data;
    hp.arg = &st;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    OMNIBUS_CHECK(ucp_worker_set_am_recv_handler(st.worker, &hp) == UCS_OK);
  }
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
      for (Job& job : jobs)
        job.done(Status::cancelled("the KV transfer agent is shutting down"), 0);
      break;
    }
    for (Job& job : jobs) st.start(std::move(job));
    st.progress();
    st.sweep();
    st.wait();
  }
  st.shutdown();
}

}  // namespace omnibus::kv_transfer
