// Status and StatusOr<T>: the error type that crosses module boundaries.
//
// A Status is either OK or an error code plus a human-readable message. Code
// that can fail on bad input (files, requests, flags) returns Status or
// StatusOr<T>; it never throws across a module line and never aborts. Programming
// errors (violated invariants) are OMNIBUS_CHECK failures instead, see check.h.
//
// Thread-safety: values; safe to copy between threads.
#pragma once

#include <fmt/format.h>

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace omnibus {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller's input is malformed or out of range
  kNotFound,           // a file, key or name does not exist
  kCorrupt,            // a file's bytes violate its format
  kUnsupported,        // valid input that omnibus does not handle (yet)
  kResourceExhausted,  // out of memory, cache blocks, queue space
  kIo,                 // the OS refused (open, mmap, read)
  kInternal,           // a bug; should never reach a user
  kUnavailable,        // a peer or service cannot be reached (now): retry may work
  kCancelled,          // the operation was abandoned (its owner shut down)
  kPermissionDenied,   // the caller is not allowed to (no or a wrong credential)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status ok() { return Status(); }
  template <typename... Args>
  static Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status not_found(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status corrupt(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kCorrupt, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status unsupported(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kUnsupported, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kResourceExhausted, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status io(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kIo, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status internal(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
  }

  template <typename... Args>
  static Status unavailable(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kUnavailable, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status permission_denied(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kPermissionDenied, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status cancelled(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kCancelled, fmt::format(f, std::forward<Args>(args)...));
  }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: tensor 'x': data offset 123 beyond end of file (size 100)"
  std::string to_string() const;

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit
    assert(!status_.is_ok() && "StatusOr needs a value or an error");
  }

  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(is_ok());
    return *value_;
  }
  const T& value() const& {
    assert(is_ok());
    return *value_;
  }
  T&& value() && {
    assert(is_ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace omnibus

// Propagate an error: `OMNIBUS_RETURN_IF_ERROR(reader.read_header());`
#define OMNIBUS_RETURN_IF_ERROR(expr)                     \
  do {                                                    \
    ::omnibus::Status omnibus_status_ = (expr);           \
    if (!omnibus_status_.is_ok()) return omnibus_status_; \
  } while (0)

#define OMNIBUS_CONCAT_INNER_(a, b) a##b
#define OMNIBUS_CONCAT_(a, b) OMNIBUS_CONCAT_INNER_(a, b)
// `OMNIBUS_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));`
#define OMNIBUS_ASSIGN_OR_RETURN(lhs, expr)                 \
  auto OMNIBUS_CONCAT_(omnibus_or_, __LINE__) = (expr);     \
  if (!OMNIBUS_CONCAT_(omnibus_or_, __LINE__).is_ok())      \
    return OMNIBUS_CONCAT_(omnibus_or_, __LINE__).status(); \
  lhs = std::move(OMNIBUS_CONCAT_(omnibus_or_, __LINE__)).value()
