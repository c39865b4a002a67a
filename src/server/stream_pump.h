// StreamPump: moves engine events from many RequestStreams to their HTTP
// handlers on one thread, so that no connection has a thread of its own and
// the engine thread never touches a socket.
//
//   engine thread --push--> RequestStream --(pump thread: try_pop sweep)--> Handler
//                              |  notify                  |-> ResponseSink::write -> asio post ->
//                              socket
//                              '--> StreamSignal --wakes--> pump thread
//
// Every stream added shares the pump's StreamSignal, and add() and the
// destructor notify it too, so the pump thread sleeps until something
// happened and then sweeps all its streams (one mutex per stream); it never
// polls. Handlers run on the pump thread, one at a time, in event order per
// stream; an entry is dropped after its final event has been handled.
//
// Thread-safety: add(), size() and wait_empty() from any thread. Handlers
// must not block.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/request_stream.h"

namespace omnibus::server {

class StreamPump {
 public:
  using Handler = std::function<void(std::vector<EngineEvent>& events)>;

  StreamPump();
  ~StreamPump();  // stops the thread; entries still registered are dropped unhandled
  StreamPump(const StreamPump&) = delete;
  StreamPump& operator=(const StreamPump&) = delete;

  void add(std::shared_ptr<RequestStream> stream, Handler handler);
  size_t size() const;
  // Blocks until every entry has had its final event handled and been
  // dropped (size() == 0); false when `timeout` passes first.
  bool wait_empty(std::chrono::milliseconds timeout) const;

 private:
  struct Entry {
    std::shared_ptr<RequestStream> stream;
    Handler handler;
  };
  void run();

  const std::shared_ptr<StreamSignal> signal_ = std::make_shared<StreamSignal>();
  mutable std::mutex mu_;
  mutable std::condition_variable empty_cv_;  // notified when n_entries_ drops to 0
  std::vector<Entry> incoming_;               // guarded by mu_
  size_t n_entries_ = 0;                      // guarded by mu_: incoming + active
  bool stop_ = false;                         // guarded by mu_
  std::thread thread_;
};

}  // namespace omnibus::server
