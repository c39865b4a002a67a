// SignalWaiter (signal_waiter.h): the signal thread of `omnibus serve`.
#include "cli/signal_waiter.h"

#include <fmt/format.h>
#include <pthread.h>

#include <cstdio>
#include <cstdlib>

namespace omnibus {

SignalWaiter::SignalWaiter() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  thread_ = std::thread([this] { run(); });
  thread_.detach();  // it ends with the process
}

void SignalWaiter::set_loading(bool loading) {
  std::lock_guard<std::mutex> lock(mu_);
  loading_ = loading;
}

int SignalWaiter::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return signal_ != 0; });
  return signal_;
}

void SignalWaiter::set_on_second(std::function<void()> f) {
  std::lock_guard<std::mutex> lock(mu_);
  on_second_ = std::move(f);
}

void SignalWaiter::run() {
  for (;;) {
    int sig = 0;
    if (sigwait(&set_, &sig) != 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (loading_ || (signal_ != 0 && !on_second_)) {
      fmt::print(stderr, "\nomnibus serve: {} — exiting now\n", name);
      std::fflush(stderr);
      std::_Exit(signal_ != 0 ? 1 : 0);
    }
    if (signal_ == 0) {
      signal_ = sig;
      cv_.notify_all();
      continue;
    }
    fmt::print(stderr, "omnibus serve: second {}: aborting every running request\n", name);
    on_second_();
    if (!exit_timer_started_) {
      exit_timer_started_ = true;
      std::thread([] {
        std::this_thread::sleep_for(kAbortWait);  // a deadline, not a wait for progress
        fmt::print(stderr,
                   "omnibus serve: responses still unwritten {} s after the abort; exiting\n",
                   kAbortWait.count());
        std::fflush(stderr);
        std::_Exit(1);
      }).detach();
    }
  }
}

}  // namespace omnibus
