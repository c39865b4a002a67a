#include "server/stream_pump.h"

namespace omnibus::server {

StreamPump::StreamPump() {
  thread_ = std::thread([this] { run(); });
}

StreamPump::~StreamPump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  signal_->notify();
  thread_.join();
}

void StreamPump::add(std::shared_ptr<RequestStream> stream, Handler handler) {
  stream->set_signal(signal_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(Entry{std::move(stream), std::move(handler)});
    ++n_entries_;
  }
  signal_->notify();  // the first sweep also picks up events queued before set_signal
}

size_t StreamPump::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_entries_;
}

bool StreamPump::wait_empty(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return empty_cv_.wait_for(lock, timeout, [this] { return n_entries_ == 0; });
}

void StreamPump::run() {
  std::vector<Entry> active;
  std::vector<EngineEvent> events;
  for (;;) {
    // Sleep until an add, a push to any stream or the destructor; a notify
    // during the sweep below makes this return at once.
    signal_->wait();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      for (Entry& e : incoming_) active.push_back(std::move(e));
      incoming_.clear();
    }
    size_t n_done = 0;
    for (size_t i = 0; i < active.size();) {
      events.clear();
      bool final = false;
      while (std::optional<EngineEvent> ev = active[i].stream->try_pop()) {
        final = ev->final;
        events.push_back(std::move(*ev));
        if (final) break;
      }
      if (!events.empty()) active[i].handler(events);
      if (final) {
        active[i] = std::move(active.back());
        active.pop_back();
        ++n_done;
      } else {
        ++i;
      }
    }
    if (n_done > 0) {
      bool empty = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        n_entries_ -= n_done;
        empty = n_entries_ == 0;
      }
      if (empty) empty_cv_.notify_all();
    }
  }
}

}  // namespace omnibus::server
