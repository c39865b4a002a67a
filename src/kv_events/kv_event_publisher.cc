#include "kv_events/kv_event_publisher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <zmq.hpp>

#include "kv_events/kv_event_encoding.h"

namespace omnibus {
namespace {

std::string be64(int64_t v) {
  std::string out(8, '\0');
  const uint64_t u = uint64_t(v);
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((u >> (56 - 8 * i)) & 0xff);
  return out;
}

uint64_t from_be64(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | b[i];
  return u;
}

// vLLM's rule: bind when the address is a wildcard or local, else connect.
bool should_bind(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr int kLingerMs = 200;  // at close: how long ZeroMQ may keep sending what is queued

}  // namespace

struct KvEventPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;
  int wake_fd = -1;  // eventfd: publish() and the destructor wake the sender thread
  std::deque<std::pair<uint64_t, std::string>> sent;  // (seq, payload), for replay

  ~Sockets() {
    if (wake_fd >= 0) ::close(wake_fd);
  }
};

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::create(
    KvEventPublisherOptions options) {
  if (options.endpoint.empty()) return Status::invalid_argument("KV events: the endpoint is empty");
  auto s = std::make_unique<Sockets>();
  const std::string* current = &options.endpoint;
  try {
    s->pub.set(zmq::sockopt::sndhwm, options.send_hwm);
    s->pub.set(zmq::sockopt::linger, kLingerMs);
    if (should_bind(options.endpoint)) {
      s->pub.bind(options.endpoint);
    } else {
      s->pub.connect(options.endpoint);
    }
    if (!options.replay_endpoint.empty()) {
      current = &options.replay_endpoint;
      s->replay.emplace(s->ctx, zmq::socket_type::router);
      s->replay->set(zmq::sockopt::linger, kLingerMs);
      // Room for one whole replay (4 frames a batch, plus the end marker): a
      // ROUTER drops, rather than waits, beyond its high-water mark.
      s->replay->set(zmq::sockopt::sndhwm,
                     int(std::min<size_t>(4 * (options.replay_buffer_batches + 1), 1 << 30)));
      s->replay->bind(options.replay_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return Status::invalid_argument("KV events: cannot open endpoint '{}': {}", *current, e.what());
  }
  s->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd < 0) return Status::io("KV events: eventfd: {}", std::strerror(errno));
  std::string endpoint =
      should_bind(options.endpoint) ? s->pub.get(zmq::sockopt::last_endpoint) : options.endpoint;
  std::string replay_endpoint =
      s->replay ? s->replay->get(zmq::sockopt::last_endpoint) : std::string();
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(options), std::move(s)));
  p->endpoint_ = std::move(endpoint);
  p->replay_endpoint_ = std::move(replay_endpoint);
  p->thread_ = std::thread([q = p.get()] { q->run(); });
  return p;
}

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions options,
                                   std::unique_ptr<Sockets> sockets)
    : options_(std::move(options)), sockets_(std::move(sockets)) {}

KvEventPublisher::~KvEventPublisher() {
  flush(std::chrono::seconds(1));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake();
  thread_.join();
}

void KvEventPublisher::wake() {
  const uint64_t one = 1;
  // Fails only when the counter would overflow, i.e. the sender is already due to wake.
  [[maybe_unused]] ssize_t n = ::write(sockets_->wake_fd, &one, sizeof one);
}

void KvEventPublisher::publish(std::vector<KvEvent> events) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t seq = next_seq_++;
    if (queue_.size() >= options_.max_queue_batches) {
      ++counters_.dropped_batches;
      counters_.dropped_events += events.size();
      return;
    }
    queue_.push_back(Batch{seq, wall_seconds(), std::move(events)});
  }
  wake();
}

KvEventPublisherCounters KvEventPublisher::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

bool KvEventPublisher::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return sent_cv_.wait_for(lock, timeout, [this] { return queue_.empty() && in_flight_ == 0; });
}

void KvEventPublisher::set_paused_for_testing(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
  }
  wake();
}

void KvEventPublisher::run() {
  Sockets& s = *sockets_;
  const zmq::const_buffer topic(options_.topic.data(), options_.topic.size());
  std::vector<zmq::pollitem_t> items;
  items.push_back({nullptr, s.wake_fd, ZMQ_POLLIN, 0});
  if (s.replay) items.push_back({s.replay->handle(), 0, ZMQ_POLLIN, 0});

  for (;;) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // anything else is a bug: let it terminate loudly
      continue;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t n;
      [[maybe_unused]] ssize_t r = ::read(s.wake_fd, &n, sizeof n);
    }
    if (s.replay && (items[1].revents & ZMQ_POLLIN)) serve_replay();

    for (;;) {
      Batch b;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (queue_.empty() || paused_) {
          if (stop_) return;
          break;
        }
        b = std::move(queue_.front());
        queue_.pop_front();
        in_flight_ = 1;
      }
      std::string payload = encode_kv_event_batch(b.ts, b.events, options_.dp_rank);
      const std::string seq = be64(int64_t(b.seq));
      bool ok =
          s.pub.send(topic, zmq::send_flags::sndmore | zmq::send_flags::dontwait).has_value() &&
          s.pub.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait)
              .has_value() &&
          s.pub.send(zmq::buffer(payload), zmq::send_flags::dontwait).has_value();
      s.sent.emplace_back(b.seq, std::move(payload));
      while (s.sent.size() > options_.replay_buffer_batches) s.sent.pop_front();
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ = 0;
      if (ok) {
        ++counters_.published_batches;
        counters_.published_events += b.events.size();
      } else {
        ++counters_.dropped_batches;
        counters_.dropped_events += b.events.size();
      }
      if (queue_.empty()) sent_cv_.notify_all();
    }
  }
}

void KvEventPublisher::serve_replay() {
  Sockets& s = *sockets_;
  for (;;) {
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t m;
      if (!s.replay->recv(m, zmq::recv_flags::dontwait).has_value()) return;
      const bool more = m.more();
      frames.push_back(std::move(m));
      if (!more) break;
    }
    if (frames.size() != 3 || frames[2].size() != 8) continue;  // not a replay request: ignored
    const uint64_t start = from_be64(frames[2].data());
    const std::string identity(static_cast<const char*>(frames[0].data()), frames[0].size());
    auto send_reply = [&](const std::string& seq, const std::string& payload) {
      s.replay->send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.replay->send(zmq::const_buffer(nullptr, 0),
                     zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.replay->send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.replay->send(zmq::buffer(payload), zmq::send_flags::dontwait);
    };
    for (const auto& [seq, payload] : s.sent) {
      if (seq >= start) send_reply(be64(int64_t(seq)), payload);
    }
    send_reply(be64(-1), std::string());
  }
}

}  // namespace omnibus
