// KvEventPublisher: sends KV-event batches over ZeroMQ the way vLLM's
// ZmqEventPublisher does, so that KV-aware routers can follow the prefix cache.
//
//   PUB    `endpoint`         every batch as [topic, seq (8-byte big-endian), payload]
//   ROUTER `replay_endpoint`  a request [identity, "", start_seq (8-byte BE)] is answered
//                             with each buffered batch whose seq >= start_seq as
//                             [identity, "", seq, payload], then the end marker
//                             [identity, "", -1 (8-byte BE, signed), ""]
// payload: encode_kv_event_batch (kv_event_encoding.h). An endpoint with "*",
// "::", ipc:// or inproc:// is bound, any other connected (vLLM's rule).
//
// publish() never blocks: it stamps the batch with the wall clock and a
// sequence number and puts it on a bounded queue; when the queue is full the
// batch is dropped and counted. Its sequence number is then never sent, so
// subscribers see the gap (replay cannot give it back). The sender thread owns
// both sockets; the PUB socket drops, per subscriber, what a slow subscriber
// has not taken once its high-water mark is reached (ZeroMQ's rule: the
// sender never waits either). The last `replay_buffer_batches` sent batches
// are kept for replay.
//
// Thread-safety: publish, counters and flush may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_events.h"
#include "util/status.h"

namespace omnibus {

struct KvEventPublisherOptions {
  std::string endpoint;                  // --kv-events-endpoint, e.g. tcp://*:5557
  std::string replay_endpoint;           // --kv-events-replay-endpoint; "": no replay socket
  std::string topic;                     // --kv-events-topic (vLLM's default: "")
  size_t max_queue_batches = 100000;     // beyond: publish() drops (vLLM's max_queue_size)
  size_t replay_buffer_batches = 10000;  // vLLM's buffer_steps
  int send_hwm = 100000;                 // PUB high-water mark, in messages (vLLM's hwm)
  std::optional<int> dp_rank = 0;        // data_parallel_rank in every batch
};

struct KvEventPublisherCounters {
  uint64_t published_batches = 0;  // sent on the PUB socket
  uint64_t published_events = 0;
  uint64_t dropped_batches = 0;  // the queue was full
  uint64_t dropped_events = 0;
};

class KvEventPublisher {
 public:
  // Opens (binds or connects) the sockets and starts the sender thread.
  // kInvalidArgument naming the endpoint when ZeroMQ refuses it.
  static StatusOr<std::unique_ptr<KvEventPublisher>> create(KvEventPublisherOptions options);
  // Sends what is queued (for up to a second), then closes the sockets.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues one batch (empty batches are ignored). Never blocks on I/O.
  void publish(std::vector<KvEvent> events);

  // The addresses the sockets are bound to (a wildcard port resolved, e.g.
  // tcp://0.0.0.0:40123), or the endpoint connected to; "" without replay.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

  KvEventPublisherCounters counters() const;
  // Blocks until every batch queued so far has been sent, or `timeout` passes
  // (then false).
  bool flush(std::chrono::milliseconds timeout);

  // Test hook: while paused the sender thread takes nothing from the queue.
  void set_paused_for_testing(bool paused);

  struct Sockets;  // kv_event_publisher.cc

 private:
  struct Batch {
    uint64_t seq;
    double ts;
    std::vector<KvEvent> events;
  };
  KvEventPublisher(KvEventPublisherOptions options, std::unique_ptr<Sockets> sockets);
  void run();           // the sender thread
  void serve_replay();  // sender thread: answers the pending replay requests
  void wake();

  // Constant after construction.
  const KvEventPublisherOptions options_;
  std::string endpoint_, replay_endpoint_;
  const std::unique_ptr<Sockets> sockets_;  // used by the sender thread only (after start)

  mutable std::mutex mu_;
  std::condition_variable sent_cv_;    // notified when the queue empties
  std::deque<Batch> queue_;            // guarded by mu_
  uint64_t next_seq_ = 0;              // guarded by mu_
  size_t in_flight_ = 0;               // guarded by mu_: taken from the queue, not yet sent
  bool paused_ = false;                // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  KvEventPublisherCounters counters_;  // guarded by mu_

  std::thread thread_;
};

}  // namespace omnibus
