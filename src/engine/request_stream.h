// RequestStream: the per-request output channel between the engine thread
// (producer) and whoever submitted the request (consumer: an HTTP handler, the
// benchmark driver). Events arrive in order; the stream is complete after the
// event with `final` set.
//
// Thread-safety: push() from the engine thread, pop()/try_pop() from any
// thread; all methods are safe to call concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

#include "engine/request.h"

namespace omnibus {

class RequestStream {
 public:
  using Clock = std::chrono::steady_clock;

  RequestStream(uint64_t id, int32_t n, Clock::time_point submit_time)
      : id_(id), n_(n), submit_time_(submit_time) {}

  // Constant after construction.
  uint64_t id() const { return id_; }  // pass to Engine::abort
  int32_t n() const { return n_; }
  Clock::time_point submit_time() const { return submit_time_; }

  // The next event, waiting up to `timeout`; nullopt when none came.
  std::optional<EngineEvent> pop(std::chrono::microseconds timeout);
  // The next event if one is queued.
  std::optional<EngineEvent> try_pop();
  // The final event has been pushed (it may still be queued).
  bool done() const;

  // Engine side.
  void push(EngineEvent event);

 private:
  const uint64_t id_;
  const int32_t n_;
  const Clock::time_point submit_time_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;  // guarded by mu_
  bool done_ = false;               // guarded by mu_
};

}  // namespace omnibus
