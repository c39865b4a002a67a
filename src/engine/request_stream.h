// RequestStream: the per-request output channel between the engine thread
// (producer) and whoever submitted the request (consumer: an HTTP handler, the
// benchmark driver). Events arrive in order; the stream is complete after the
// event with `final` set.
//
// A consumer that watches many streams on one thread (the server's
// StreamPump, the benchmark driver) attaches a StreamSignal: every push()
// notifies it, so the consumer sleeps until some stream has an event instead
// of polling.
//
// Thread-safety: push() from the engine thread, pop()/try_pop() from any
// thread; all methods are safe to call concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/request.h"

namespace omnibus {

// A wake-up flag shared by the streams of one consumer. notify() sets it;
// wait() blocks until it is set, then clears it. A notify() that happens
// while the consumer is busy is not lost: the next wait() returns at once.
// So a consumer that (1) waits, (2) sweeps all its streams, (3) waits again
// never sleeps past an event. Thread-safe.
class StreamSignal {
 public:
  void notify();
  void wait();
  // Returns true when notified, false on timeout.
  bool wait(std::chrono::microseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false;  // guarded by mu_
};

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
  // Every later push() notifies `signal` (kept alive by the stream); events
  // already queued are not signalled, so attach before the first sweep.
  // REQUIRES: called at most once.
  void set_signal(std::shared_ptr<StreamSignal> signal);

  // Engine side.
  void push(EngineEvent event);

 private:
  const uint64_t id_;
  const int32_t n_;
  const Clock::time_point submit_time_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;        // guarded by mu_
  bool done_ = false;                     // guarded by mu_
  std::shared_ptr<StreamSignal> signal_;  // guarded by mu_; set once
};

}  // namespace omnibus
