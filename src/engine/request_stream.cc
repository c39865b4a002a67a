#include "engine/request_stream.h"

#include "util/check.h"

namespace omnibus {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kGrammarDeadEnd:
      return "grammar_dead_end";
  }
  return "";
}

std::optional<EngineEvent> RequestStream::pop(std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return std::nullopt;
  EngineEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<EngineEvent> RequestStream::try_pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.empty()) return std::nullopt;
  EngineEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void StreamSignal::notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = true;
  }
  cv_.notify_one();
}

void StreamSignal::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_; });
  pending_ = false;
}

bool StreamSignal::wait(std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool notified = cv_.wait_for(lock, timeout, [this] { return pending_; });
  pending_ = false;
  return notified;
}

void RequestStream::set_signal(std::shared_ptr<StreamSignal> signal) {
  std::lock_guard<std::mutex> lock(mu_);
  OMNIBUS_CHECK(signal_ == nullptr);
  signal_ = std::move(signal);
}

void RequestStream::push(EngineEvent event) {
  StreamSignal* signal;  // alive as long as this stream
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = done_ || event.final;
    events_.push_back(std::move(event));
    signal = signal_.get();
  }
  cv_.notify_all();
  if (signal != nullptr) signal->notify();
}

}  // namespace omnibus
