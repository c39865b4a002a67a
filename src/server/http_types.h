// The seam between the HTTP transport (http_transport.cc, Boost.Beast) and the
// API (api_server.h): a parsed request in, and a ResponseSink that the API
// completes — at once for plain endpoints, or later and piece by piece for
// generation (from the pump thread).
//
// Thread-safety: HttpRequest is a value. Every ResponseSink method may be
// called from any thread; the transport serializes them onto the connection.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace omnibus::server {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // path plus query, e.g. "/v1/models"
  std::string authorization;  // the Authorization header, "" when absent
  std::string content_type;   // the Content-Type header, "" when absent
  std::vector<std::pair<std::string, std::string>> headers;  // every header; names lower-cased
  std::string body;

  // The first header named `lower_name` (lower case), "" when absent.
  std::string header(const std::string& lower_name) const {
    for (const auto& [n, v] : headers) {
      if (n == lower_name) return v;
    }
    return {};
  }
};

// Extra response headers (name, value), e.g. {"Allow", "GET, HEAD"} on a 405.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Which part of a request a connection was reading when its read timeout
// (TransportConfig) closed it.
enum class HttpReadPhase { kHeader, kBody };

class ResponseSink {
 public:
  virtual ~ResponseSink() = default;

  // Either respond() once, or begin_stream(), write()*, end_stream(). Calls
  // after the client has gone are ignored.
  void respond(int status, std::string content_type, std::string body) {
    respond(status, std::move(content_type), std::move(body), HttpHeaders{});
  }
  virtual void respond(int status, std::string content_type, std::string body,
                       HttpHeaders headers) = 0;
  virtual void begin_stream(std::string content_type) = 0;  // status 200, chunked
  virtual void write(std::string data) = 0;  // "" writes nothing (never an empty chunk)
  virtual void end_stream() = 0;

  // `f` runs (once, on an I/O thread) if the client disconnects before the
  // response is complete. Set it before returning from the route handler.
  virtual void on_disconnect(std::function<void()> f) = 0;
};

}  // namespace omnibus::server
