#include "kv_transfer/side_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kv_transfer/messages.h"
#include "util/check.h"

namespace omnibus::kv_transfer {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string errno_text(int err) { return std::strerror(err); }

bool set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Waits until fd is ready for `events`. kUnavailable on timeout, kCancelled
// when cancel_fd (if any) is readable.
Status wait_fd(int fd, short events, Clock::time_point deadline, int cancel_fd) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return Status::unavailable("timed out");
    pollfd fds[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    int n = poll(fds, cancel_fd >= 0 ? 2 : 1, static_cast<int>(left.count()) + 1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::unavailable("poll: {}", errno_text(errno));
    }
    if (cancel_fd >= 0 && (fds[1].revents & POLLIN)) return Status::cancelled("shutting down");
    if (fds[0].revents != 0) return Status::ok();  // ready, or an error the next call reports
  }
}

// Reads exactly n bytes. kUnavailable on EOF, error or timeout.
Status read_exact(int fd, void* buf, size_t n, Clock::time_point deadline, int cancel_fd) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::recv(fd, p, n, 0);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return Status::unavailable("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::unavailable("recv: {}", errno_text(errno));
    OMNIBUS_RETURN_IF_ERROR(wait_fd(fd, POLLIN, deadline, cancel_fd));
  }
  return Status::ok();
}

Status write_all(int fd, const void* buf, size_t n, Clock::time_point deadline, int cancel_fd) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
    if (put >= 0) {
      p += put;
      n -= static_cast<size_t>(put);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::unavailable("send: {}", errno_text(errno));
    OMNIBUS_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, cancel_fd));
  }
  return Status::ok();
}

Status write_frame(int fd, const json& message, Clock::time_point deadline, int cancel_fd) {
  // replace: invalid UTF-8 can never make dump() throw.
  std::string body = message.dump(-1, ' ', false, json::error_handler_t::replace);
  OMNIBUS_CHECK(body.size() <= kMaxFrameBytes);
  std::string frame(4, '\0');
  uint32_t len = htonl(static_cast<uint32_t>(body.size()));
  std::memcpy(frame.data(), &len, 4);
  frame += body;
  return write_all(fd, frame.data(), frame.size(), deadline, cancel_fd);
}

// Reads one frame's body (the length already checked against kMaxFrameBytes).
StatusOr<std::string> read_frame(int fd, Clock::time_point deadline, int cancel_fd, bool* too_big) {
  uint32_t len_be = 0;
  OMNIBUS_RETURN_IF_ERROR(read_exact(fd, &len_be, 4, deadline, cancel_fd));
  uint32_t len = ntohl(len_be);
  if (len == 0 || len > kMaxFrameBytes) {
    if (too_big) *too_big = true;
    return Status::invalid_argument("frame length {} outside [1, {}]", len, kMaxFrameBytes);
  }
  std::string body(len, '\0');
  OMNIBUS_RETURN_IF_ERROR(read_exact(fd, body.data(), len, deadline, cancel_fd));
  return body;
}

json error_reply(const std::string& message) { return json{{"ok", false}, {"error", message}}; }

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

Status resolve(const std::string& host, int port, bool passive, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out->list);
  if (rc != 0) return Status::unavailable("cannot resolve '{}': {}", host, gai_strerror(rc));
  return Status::ok();
}

}  // namespace

StatusOr<std::unique_ptr<SideChannelServer>> SideChannelServer::start(
    const std::string& host, int port, std::chrono::milliseconds io_timeout,
    SideChannelSecurity security, SideChannelHandler handler) {
  OMNIBUS_CHECK(security.auth != nullptr && security.peers != nullptr);
  if (port < 0 || port > 65535)
    return Status::invalid_argument("side channel port {} out of range", port);
  AddrInfo ai;
  OMNIBUS_RETURN_IF_ERROR(resolve(host, port, true, &ai));
  const addrinfo* a = ai.list;
  int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
  if (fd < 0) return Status::unavailable("socket: {}", errno_text(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0 ||
      !set_nonblocking(fd)) {
    int err = errno;
    ::close(fd);
    return Status::unavailable("side channel {}:{}: {}", host, port, errno_text(err));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  OMNIBUS_CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) == 0);
  int bound_port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    int err = errno;
    ::close(fd);
    return Status::unavailable("eventfd: {}", errno_text(err));
  }
  return std::unique_ptr<SideChannelServer>(
      new SideChannelServer(fd, stop_fd, bound_port, io_timeout, security, std::move(handler)));
}

SideChannelServer::SideChannelServer(int listen_fd, int stop_fd, int port,
                                     std::chrono::milliseconds io_timeout,
                                     SideChannelSecurity security, SideChannelHandler handler)
    : listen_fd_(listen_fd),
      stop_fd_(stop_fd),
      port_(port),
      io_timeout_(io_timeout),
      security_(security),
      handler_(std::move(handler)) {
  accept_thread_ = std::thread([this] { accept_loop(); });
}

SideChannelServer::~SideChannelServer() {
  uint64_t one = 1;
  // The eventfd is never read: once written it stays readable for every poller.
  OMNIBUS_CHECK(::write(stop_fd_, &one, sizeof(one)) == sizeof(one));
  accept_thread_.join();
  std::list<std::unique_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections.swap(connections_);
  }
  for (auto& c : connections) c->thread.join();
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void SideChannelServer::reap_finished() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->finished.load(std::memory_order_acquire)) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void SideChannelServer::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      OMNIBUS_CHECK(false && "poll on the side channel's listening socket failed");
    }
    if (fds[1].revents & POLLIN) return;
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the pending connection keeps the socket readable;
        // back off (waking at once for shutdown) instead of spinning.
        pollfd stop{stop_fd_, POLLIN, 0};
        (void)poll(&stop, 1, 100);
      }
      continue;  // EAGAIN, ECONNABORTED...: nothing to serve now
    }
    if (!security_.peers->allows_address(reinterpret_cast<const sockaddr*>(&from))) {
      refused_peer_.fetch_add(1, std::memory_order_relaxed);
      ::close(fd);  // not a listed peer: not a byte is read or written
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    reap_finished();
    if (static_cast<int>(connections_.size()) >= kMaxConnections) {
      ::close(fd);  // overloaded (or attacked): the client sees a closed connection
      continue;
    }
    auto c = std::make_unique<Connection>();
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, fd, raw] {
      serve(fd);
      ::close(fd);
      raw->finished.store(true, std::memory_order_release);
    });
  }
}

void SideChannelServer::serve(int fd) {
  auto deadline = Clock::now() + io_timeout_;
  bool too_big = false;
  auto body = read_frame(fd, deadline, stop_fd_, &too_big);
  if (!body.is_ok()) {
    if (too_big) (void)write_frame(fd, error_reply(body.status().message()), deadline, stop_fd_);
    return;  // EOF, timeout, shutdown: nobody to answer
  }
  json envelope = json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (envelope.is_discarded()) {
    (void)write_frame(fd, error_reply("malformed JSON"), deadline, stop_fd_);
    return;
  }
  StatusOr<json> request = unseal(*security_.auth, envelope, unix_ms());
  if (!request.is_ok()) {
    if (request.status().code() == StatusCode::kPermissionDenied) {
      refused_auth_.fetch_add(1, std::memory_order_relaxed);
      (void)write_frame(fd, error_reply("unauthenticated"), deadline,
                        stop_fd_);  // says nothing more
      return;
    }
    (void)write_frame(fd, seal(*security_.auth, error_reply(request.status().message()), unix_ms()),
                      deadline, stop_fd_);
    return;
  }
  json reply;
  try {
    reply = handler_(*request);
  } catch (const std::exception& e) {  // a json accessor on a wrong type: the client's fault
    reply = error_reply(std::string("bad request: ") + e.what());
  }
  (void)write_frame(fd, seal(*security_.auth, reply, unix_ms()), deadline, stop_fd_);
}

SideChannelRefusals SideChannelServer::refusals() const {
  return {refused_peer_.load(std::memory_order_relaxed),
          refused_auth_.load(std::memory_order_relaxed)};
}

StatusOr<json> side_channel_call(const std::string& host, int port, const json& request,
                                 const TransferAuth& auth, std::chrono::milliseconds timeout,
                                 int cancel_fd) {
  auto deadline = Clock::now() + timeout;
  if (port <= 0 || port > 65535) return Status::unavailable("port {} out of range", port);
  AddrInfo ai;
  OMNIBUS_RETURN_IF_ERROR(resolve(host, port, false, &ai));
  Status last = Status::unavailable("no address for '{}'", host);
  for (const addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = Status::unavailable("socket: {}", errno_text(errno));
      continue;
    }
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = Status::unavailable("connect to {}:{}: {}", host, port, errno_text(errno));
        continue;
      }
      Status ready = wait_fd(fd, POLLOUT, deadline, cancel_fd);
      if (!ready.is_ok()) {
        if (ready.code() == StatusCode::kCancelled) return ready;
        return Status::unavailable("connect to {}:{}: {}", host, port, ready.message());
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = Status::unavailable("connect to {}:{}: {}", host, port, errno_text(err));
        continue;
      }
    }
    auto annotate = [&](const Status& s) {
      if (s.code() == StatusCode::kCancelled) return s;
      return Status::unavailable("side channel {}:{}: {}", host, port, s.message());
    };
    Status sent = write_frame(fd, seal(auth, request, unix_ms()), deadline, cancel_fd);
    if (!sent.is_ok()) return annotate(sent);
    bool too_big = false;
    auto body = read_frame(fd, deadline, cancel_fd, &too_big);
    if (!body.is_ok()) return annotate(body.status());
    json envelope = json::parse(*body, nullptr, false);
    if (envelope.is_discarded() || !envelope.is_object()) {
      return Status::unavailable("side channel {}:{}: the reply is not a JSON object", host, port);
    }
    StatusOr<json> reply = unseal(auth, envelope, unix_ms());
    if (!reply.is_ok() && reply.status().code() == StatusCode::kPermissionDenied) {
      return Status::permission_denied(
          "side channel {}:{}: the reply is not sealed with this deployment's "
          "secret (does the peer run with the same --kv-transfer-secret?)",
          host, port);
    }
    if (!reply.is_ok())
      return Status::unavailable("side channel {}:{}: {}", host, port, reply.status().message());
    return reply;
  }
  return last;
}

}  // namespace omnibus::kv_transfer
