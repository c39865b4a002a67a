// The HTTP transport (http_transport.h): Boost.Beast sessions on a small pool of I/O threads,
// requests parsed with read timeouts and handed to the API, responses and SSE streams written back.
#include "server/http_transport.h"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "server/api_error.h"
#include "util/check.h"
#include "util/heap_trim.h"

namespace omnibus::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr size_t kMaxBufferedWhileResponding = 1 << 20;
constexpr uint32_t kMaxHeaderBytes = 64 * 1024;  // the request line and headers; beyond: 431
// After a response this large is over, its buffers are freed and the heap's
// free pages go back to the OS (util/heap_trim.h): a spike's memory does not
// stay resident.
constexpr uint64_t kTrimAfterResponseBytes = 1 << 20;

// The number of responses in flight over all connections, with a condition
// variable notified when it drops to zero. Thread-safe.
class InFlightResponses {
 public:
  void begin() {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_;
  }
  void end() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      OMNIBUS_CHECK(n_ > 0);
      if (--n_ > 0) return;
    }
    cv_.notify_all();
  }
  bool wait_none(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return n_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t n_ = 0;  // guarded by mu_
};

class Session;

// The ResponseSink of one response on one connection. Calls are posted to the
// connection's strand; a sink whose response is over is ignored.
class SessionSink : public ResponseSink {
 public:
  SessionSink(std::shared_ptr<Session> s, uint64_t serial)
      : session_(std::move(s)), serial_(serial) {}
  using ResponseSink::respond;
  void respond(int status, std::string content_type, std::string body,
               HttpHeaders headers) override;
  void begin_stream(std::string content_type) override;
  void write(std::string data) override;
  void end_stream() override;
  void on_disconnect(std::function<void()> f) override;

 private:
  std::shared_ptr<Session> session_;
  const uint64_t serial_;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const TransportConfig& config, const HttpTransport::Handler& handler,
          InFlightResponses& in_flight)
      : stream_(std::move(socket)), config_(config), handler_(handler), in_flight_(in_flight) {}
  ~Session() {
    if (in_response_) in_flight_.end();  // the I/O threads stopped mid-response
  }

  void run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  template <typename F>
  void run_on_strand(F&& f) {
    net::dispatch(stream_.get_executor(), std::forward<F>(f));
  }

  // Sink operations, on the strand.
  void respond(uint64_t serial, int status, std::string content_type, std::string body,
               HttpHeaders headers = {}) {
    if (!current(serial) || started_) return;
    started_ = true;
    auto res = std::make_shared<http::response<http::string_body>>(http::status(status), 11);
    res->set(http::field::server, "omnibus");
    res->set(http::field::content_type, content_type);
    for (auto& [name, value] : headers) res->set(name, value);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    response_bytes_ += res->body().size();
    writing_ = true;
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) mutable {
                        self->writing_ = false;
                        res.reset();  // the body's memory, before a trim
                        if (ec) return self->client_gone();
                        self->finish_response();
                      });
  }

  void begin_stream(uint64_t serial, std::string content_type) {
    if (!current(serial) || started_) return;
    started_ = true;
    streaming_ = true;
    head_ = std::make_shared<http::response<http::empty_body>>(http::status::ok, 11);
    head_->set(http::field::server, "omnibus");
    head_->set(http::field::content_type, content_type);
    head_->set(http::field::cache_control, "no-cache");
    head_->keep_alive(keep_alive_);
    head_->chunked(true);
    head_sr_.emplace(*head_);
    writing_ = true;
    http::async_write_header(stream_, *head_sr_,
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               self->writing_ = false;
                               if (ec) return self->client_gone();
                               self->head_written_ = true;
                               self->pump_writes();
                             });
  }

  void write(uint64_t serial, std::string data) {
    // An empty chunk on the wire is the chunked body's terminator ("0\r\n\r\n"):
    // the client would take the response as over and read the rest as the next one.
    if (data.empty() || !current(serial) || !streaming_ || stream_ended_) return;
    response_bytes_ += data.size();
    queue_.push_back(std::move(data));
    pump_writes();
  }

  void end_stream(uint64_t serial) {
    if (!current(serial) || !streaming_ || stream_ended_) return;
    stream_ended_ = true;
    pump_writes();
  }

  void set_on_disconnect(uint64_t serial, std::function<void()> f) {
    if (!current(serial)) return;
    on_disconnect_ = std::move(f);
  }

  // After a last response: stop sending, then read and discard what the client
  // still sends (e.g. the rest of an oversized body) until it closes or 5 s
  // pass, so that it sees the response rather than a connection reset.
  void graceful_close() {
    if (closed_ || lingering_) return;
    lingering_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(5));
    if (!monitoring_) linger_read();
  }

  void linger_read() {
    monitoring_ = true;
    stream_.async_read_some(net::buffer(discard_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->monitoring_ = false;
                              if (ec) return self->close();
                              self->linger_read();
                            });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  bool current(uint64_t serial) const { return !closed_ && in_response_ && serial == serial_; }

  // The request in two reads, each under its own deadline (TransportConfig):
  // the line and headers, then the body.
  void do_read() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(uint64_t(config_.max_body_bytes));
    parser_->header_limit(kMaxHeaderBytes);
    stream_.expires_after(config_.header_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec == beast::error::timeout) {
      // Bytes of a request arrived (parsed, or buffered awaiting the header's
      // end): a slow client. None: an idle keep-alive connection.
      const bool partial = parser_->got_some() || buffer_.size() > 0;
      return timed_out(partial ? std::optional(HttpReadPhase::kHeader) : std::nullopt);
    }
    if (ec || parser_->is_done()) return on_read(ec);
    stream_.expires_after(config_.body_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code e, size_t) {
                       if (e == beast::error::timeout) return self->timed_out(HttpReadPhase::kBody);
                       self->on_read(e);
                     });
  }

  void timed_out(std::optional<HttpReadPhase> phase) {
    if (phase && config_.on_read_timeout) config_.on_read_timeout(*phase);
    close();
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      return close();
    }
    if (ec) {
      // Malformed or oversized requests get an answer, then the connection closes.
      ApiError e =
          ec == http::error::body_limit
              ? ApiError::too_large(
                    fmt::format("the request body exceeds {} bytes", config_.max_body_bytes))
          : ec == http::error::header_limit
              ? ApiError{431,
                         fmt::format("the request's header block exceeds {} bytes",
                                     kMaxHeaderBytes),
                         "invalid_request_error", "", "request_header_fields_too_large"}
              : ApiError::invalid("", fmt::format("malformed HTTP request: {}", ec.message()));
      if (ec.category() != make_error_code(http::error::body_limit).category()) return close();
      keep_alive_ = false;
      begin_response();
      return respond(serial_, e.status, "application/json", e.to_json());
    }
    http::request<http::string_body> req = parser_->release();
    keep_alive_ = req.keep_alive();
    HttpRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.authorization = std::string(req[http::field::authorization]);
    r.content_type = std::string(req[http::field::content_type]);
    for (const auto& field : req) {
      std::string name(field.name_string());
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      r.headers.emplace_back(std::move(name), std::string(field.value()));
    }
    r.body = std::move(req.body());
    begin_response();
    auto sink = std::make_shared<SessionSink>(shared_from_this(), serial_);
    stream_.expires_never();
    handler_(std::move(r), std::move(sink));
    // Still answering (a generation): watch for the client leaving.
    if (in_response_ && (!started_ || streaming_) && !monitoring_) monitor();
  }

  void begin_response() {
    ++serial_;
    if (!in_response_) in_flight_.begin();
    in_response_ = true;
    started_ = streaming_ = head_written_ = stream_ended_ = false;
    response_bytes_ = 0;
    queue_.clear();
    on_disconnect_ = nullptr;
  }

  void monitor() {
    if (closed_ || buffer_.size() > kMaxBufferedWhileResponding) return;
    monitoring_ = true;
    stream_.async_read_some(
        buffer_.prepare(4096),
        [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_monitor(ec, n); });
  }

  void on_monitor(beast::error_code ec, size_t n) {
    monitoring_ = false;
    if (lingering_) {
      if (ec) return close();
      return linger_read();
    }
    if (resume_read_) {  // cancelled by finish_response (or completed just before)
      resume_read_ = false;
      if (ec && ec != net::error::operation_aborted) return close();
      if (!ec) buffer_.commit(n);
      return do_read();
    }
    if (ec) {
      if (in_response_) return client_gone();
      return close();
    }
    buffer_.commit(n);  // the next request, sent before this response's end was processed
    if (in_response_) return monitor();
    do_read();
  }

  void pump_writes() {
    if (writing_ || !head_written_ || closed_) return;
    if (!queue_.empty()) {
      out_.clear();
      for (std::string& s : queue_) out_ += s;
      OMNIBUS_CHECK(!out_.empty());  // write() queues no empty string
      queue_.clear();
      writing_ = true;
      net::async_write(stream_, http::make_chunk(net::buffer(out_)),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->writing_ = false;
                         if (ec) return self->client_gone();
                         self->pump_writes();
                       });
      return;
    }
    if (stream_ended_) {
      writing_ = true;
      net::async_write(stream_, http::make_chunk_last(),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->writing_ = false;
                         if (ec) return self->client_gone();
                         self->finish_response();
                       });
    }
  }

  // The response is over (written out, or its client gone).
  void end_response() {
    if (!in_response_) return;
    in_response_ = false;
    if (response_bytes_ >= kTrimAfterResponseBytes) {
      std::string().swap(out_);
      std::deque<std::string>().swap(queue_);
      trim_heap();
    }
    response_bytes_ = 0;
    in_flight_.end();
  }

  void finish_response() {
    end_response();
    on_disconnect_ = nullptr;
    head_sr_.reset();
    head_.reset();
    if (!keep_alive_) return graceful_close();
    if (!monitoring_) return do_read();
    // Stop the watching read; its completion starts the next request's read.
    resume_read_ = true;
    beast::error_code ec;
    stream_.socket().cancel(ec);
  }

  void client_gone() {
    if (in_response_) {
      end_response();
      if (auto f = std::move(on_disconnect_)) f();
      on_disconnect_ = nullptr;
    }
    close();
  }

  beast::tcp_stream stream_;
  const TransportConfig& config_;
  const HttpTransport::Handler& handler_;
  InFlightResponses& in_flight_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  bool closed_ = false;
  bool lingering_ = false;
  std::array<char, 65536> discard_;

  // The response in progress.
  uint64_t serial_ = 0;
  bool in_response_ = false;
  bool started_ = false;
  bool streaming_ = false;
  bool head_written_ = false;
  bool stream_ended_ = false;
  bool writing_ = false;
  bool monitoring_ = false;
  bool resume_read_ = false;
  std::shared_ptr<http::response<http::empty_body>> head_;
  std::optional<http::response_serializer<http::empty_body>> head_sr_;
  std::deque<std::string> queue_;
  std::string out_;              // the chunk being written
  uint64_t response_bytes_ = 0;  // the body bytes of the response in progress
  std::function<void()> on_disconnect_;
};

// Sink calls run on the connection's strand: inline when already there (the
// route handler), else posted (the pump thread).
void SessionSink::respond(int status, std::string content_type, std::string body,
                          HttpHeaders headers) {
  session_->run_on_strand([s = session_, serial = serial_, status, ct = std::move(content_type),
                           b = std::move(body), h = std::move(headers)]() mutable {
    s->respond(serial, status, std::move(ct), std::move(b), std::move(h));
  });
}

void SessionSink::begin_stream(std::string content_type) {
  session_->run_on_strand([s = session_, serial = serial_, ct = std::move(content_type)]() mutable {
    s->begin_stream(serial, std::move(ct));
  });
}

void SessionSink::write(std::string data) {
  session_->run_on_strand([s = session_, serial = serial_, d = std::move(data)]() mutable {
    s->write(serial, std::move(d));
  });
}

void SessionSink::end_stream() {
  session_->run_on_strand([s = session_, serial = serial_] { s->end_stream(serial); });
}

void SessionSink::on_disconnect(std::function<void()> f) {
  session_->run_on_strand([s = session_, serial = serial_, f = std::move(f)]() mutable {
    s->set_on_disconnect(serial, std::move(f));
  });
}

}  // namespace

struct HttpTransport::Impl {
  Impl(TransportConfig c, Handler h)
      : config(std::move(c)), handler(std::move(h)), acceptor(net::make_strand(ioc)) {}

  void do_accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) std::make_shared<Session>(std::move(socket), config, handler, in_flight)->run();
      do_accept();
    });
  }

  const TransportConfig config;
  const Handler handler;
  InFlightResponses in_flight;  // before ioc: sessions destroyed with it still count down
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  int port = 0;
};

StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::create(TransportConfig config,
                                                               Handler handler) {
  auto impl = std::make_unique<Impl>(std::move(config), std::move(handler));
  beast::error_code ec;
  const net::ip::address addr = net::ip::make_address(impl->config.host, ec);
  if (ec)
    return Status::invalid_argument("--host '{}' is not an IP address: {}", impl->config.host,
                                    ec.message());
  const tcp::endpoint ep(addr, static_cast<unsigned short>(impl->config.port));
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::io("cannot listen on {}:{}: {}", impl->config.host, impl->config.port,
                      ec.message());
  }
  impl->port = impl->acceptor.local_endpoint().port();
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(impl)));
}

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpTransport::~HttpTransport() { stop(); }

int HttpTransport::port() const { return impl_->port; }

void HttpTransport::start() {
  impl_->work.emplace(net::make_work_guard(impl_->ioc));
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get()] { impl->do_accept(); });
  const int n = std::max(1, impl_->config.threads);
  for (int i = 0; i < n; ++i)
    impl_->threads.emplace_back([impl = impl_.get()] { impl->ioc.run(); });
}

void HttpTransport::stop_accepting() {
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
  });
}

bool HttpTransport::wait_responses_written(std::chrono::milliseconds timeout) {
  return impl_->in_flight.wait_none(timeout);
}

void HttpTransport::stop() {
  if (impl_->threads.empty()) return;
  impl_->work.reset();
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace omnibus::server
