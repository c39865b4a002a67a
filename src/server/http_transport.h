// HttpTransport: the HTTP/1.1 server (Boost.Beast on Asio) that feeds
// ApiServer. A few I/O threads run every connection asynchronously; a
// connection waiting for tokens holds no thread. Each connection is a strand:
//
//   read request (body over the limit -> 413, header block over 64 KiB -> 431,
//   other malformed requests -> 400; header or body not in time -> closed)
//     -> handler(HttpRequest, sink)
//     plain:      sink.respond -> write -> next request (keep-alive)
//     streaming:  sink.begin_stream -> write* (chunked, coalesced) -> end_stream
//   while a response is pending, a read watches the socket: EOF or an error
//   means the client left, and the sink's on_disconnect callback runs.
//
// A response is in flight from the moment its request has been read (before
// the handler runs) until its last byte has been written to the socket, or
// its client has gone. wait_responses_written() is the drain's handshake on
// that count. When a response of 1 MiB or more is over, its buffers are
// freed and then the heap is trimmed (util/heap_trim.h), on that I/O thread,
// before the connection reads its next request.
//
// Thread-safety: create/start/stop_accepting/stop from one controlling thread;
// wait_responses_written from any thread; sinks from any thread (their calls
// are posted onto the connection's strand).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/http_types.h"
#include "util/status.h"

namespace omnibus::server {

struct TransportConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (see port())
  int threads = 2;                   // I/O threads
  int64_t max_body_bytes = 8 << 20;  // larger bodies get 413
  // Read timeouts, against clients that hold connections by sending slowly
  // (slowloris): a request's line and headers must have arrived header_timeout
  // after the read began (the connection's opening, or the end of its
  // previous response), its body body_timeout after the headers; else the
  // connection is closed, without an answer, and on_read_timeout(phase) runs
  // (on an I/O thread). An idle keep-alive connection (no byte of a next
  // request) is closed after header_timeout too, but is not a timeout.
  std::chrono::milliseconds header_timeout{30000};
  std::chrono::milliseconds body_timeout{60000};
  std::function<void(HttpReadPhase)> on_read_timeout = nullptr;
};

class HttpTransport {
 public:
  using Handler = std::function<void(HttpRequest, std::shared_ptr<ResponseSink>)>;

  // Binds and listens (kIo when the address is taken or invalid); accepts
  // nothing until start().
  static StatusOr<std::unique_ptr<HttpTransport>> create(TransportConfig config, Handler handler);
  ~HttpTransport();  // stop()

  int port() const;  // the bound port
  void start();
  void stop_accepting();
  // Blocks until no response is in flight (every response begun has been
  // written out, or its client has gone); false when `timeout` passes first.
  // Requests that keep arriving begin new responses: answer them at once
  // (ApiServer::begin_drain) or stop accepting first.
  bool wait_responses_written(std::chrono::milliseconds timeout);
  // Stops the I/O threads and joins them. Sessions still referenced elsewhere
  // (sinks) stay valid objects until released; destroy the transport last.
  void stop();

  struct Impl;

 private:
  explicit HttpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace omnibus::server
