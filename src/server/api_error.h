// ApiError: an error the HTTP API reports to a client, in OpenAI's shape:
//   HTTP <status>  {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Handlers return ApiError values (never throw); the transport turns them into
// responses. `type` follows OpenAI's names: invalid_request_error (400, 404,
// 413), authentication_error (401), server_overloaded / service_unavailable
// (503), internal_error (500).
//
// Thread-safety: values.
#pragma once

#include <fmt/format.h>

#include <string>

namespace omnibus::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending request field, "" for none (null in JSON)
  std::string code;   // machine-readable code, "" for none (null in JSON)

  // 400 invalid_request_error naming `param`.
  static ApiError invalid(std::string param, std::string message, std::string code = "");
  static ApiError not_found(std::string message, std::string code = "not_found");
  static ApiError unauthorized(std::string message);
  static ApiError too_large(std::string message);
  static ApiError unavailable(std::string message, std::string type = "service_unavailable");
  static ApiError internal(std::string message);

  // {"error": {...}} serialized.
  std::string to_json() const;
};

// Either a value or an ApiError (the server's small StatusOr).
template <typename T>
class ApiResult {
 public:
  ApiResult(T value) : value_(std::move(value)), ok_(true) {}          // NOLINT: implicit by design
  ApiResult(ApiError error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  const ApiError& error() const { return error_; }
  T& operator*() { return value_; }
  const T& operator*() const { return value_; }
  T* operator->() { return &value_; }
  const T* operator->() const { return &value_; }

 private:
  T value_{};
  ApiError error_;
  bool ok_;
};

}  // namespace omnibus::server
