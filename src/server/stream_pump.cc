#include "server/stream_pump.h"

namespace omnibus::server {

StreamPump::StreamPump(std::chrono::microseconds idle_sleep) : idle_sleep_(idle_sleep) {
  thread_ = std::thread([this] { run(); });
}

StreamPump::~StreamPump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StreamPump::add(std::shared_ptr<RequestStream> stream, Handler handler) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(Entry{std::move(stream), std::move(handler)});
    ++n_entries_;
  }
  cv_.notify_one();
}

size_t StreamPump::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_entries_;
}

void StreamPump::run() {
  std::vector<Entry> active;
  std::vector<EngineEvent> events;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active.empty()) cv_.wait(lock, [this] { return stop_ || !incoming_.empty(); });
      if (stop_) return;
      for (Entry& e : incoming_) active.push_back(std::move(e));
      incoming_.clear();
    }
    bool progressed = false;
    size_t n_done = 0;
    for (size_t i = 0; i < active.size();) {
      events.clear();
      bool final = false;
      while (std::optional<EngineEvent> ev = active[i].stream->try_pop()) {
        final = ev->final;
        events.push_back(std::move(*ev));
        if (final) break;
      }
      if (!events.empty()) {
        progressed = true;
        active[i].handler(events);
      }
      if (final) {
        active[i] = std::move(active.back());
        active.pop_back();
        ++n_done;
      } else {
        ++i;
      }
    }
    if (n_done > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      n_entries_ -= n_done;
    }
    if (!progressed && !active.empty()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, idle_sleep_, [this] { return stop_ || !incoming_.empty(); });
    }
  }
}

}  // namespace omnibus::server
