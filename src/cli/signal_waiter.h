// SignalWaiter: how `omnibus serve` takes SIGINT / SIGTERM. Signals are
// blocked in every thread (construct it before any other thread starts);
// its own thread takes them with sigwait. The first is handed to wait();
// the second runs the on-second action (the drain's abort) and gives the
// process kAbortWait to finish, then exits 1. While loading, any signal
// exits at once.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace omnibus {

// How long aborted requests' last chunks and 503s may take to be written
// before the process exits anyway (status 1).
inline constexpr std::chrono::seconds kAbortWait(5);

class SignalWaiter {
 public:
  SignalWaiter();
  void set_loading(bool loading);
  // Waits for the first signal; returns its number.
  int wait();
  // What a second signal does (runs on the signal thread, under the waiter's
  // lock: clearing it waits for a run in progress). Unset: exit 1 at once.
  void set_on_second(std::function<void()> f);

 private:
  void run();

  sigset_t set_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool exit_timer_started_ = false;  // signal thread only
  bool loading_ = true;              // guarded by mu_
  int signal_ = 0;                   // guarded by mu_
  std::function<void()> on_second_;  // guarded by mu_
};

}  // namespace omnibus
