// ServerMetrics: the counters and latency histograms behind GET /metrics, and
// their Prometheus text exposition (format 0.0.4) together with the engine's
// gauges. Names follow vLLM's with the `omnibus:` prefix, every sample labelled
// with model_name (see docs/server.md for the list):
//
//   gauges      omnibus:num_requests_running, omnibus:num_requests_waiting,
//               omnibus:kv_cache_usage_perc (0..1), omnibus:kv_cache_blocks_used,
//               omnibus:kv_cache_blocks_total
//   counters    omnibus:num_preemptions_total, omnibus:prompt_tokens_total,
//               omnibus:generation_tokens_total, omnibus:engine_steps_total,
//               omnibus:request_success_total{finished_reason},
//               omnibus:kv_events_published_total, omnibus:kv_events_dropped_total,
//               omnibus:structured_rejections_total, omnibus:embedding_requests_total,
//               omnibus:http_read_timeouts_total{phase="header"|"body"}
//               (kv_events_*: only with --kv-events-endpoint; counted in events)
//   histograms  omnibus:time_to_first_token_seconds, omnibus:time_per_output_token_seconds,
//               omnibus:e2e_request_latency_seconds, omnibus:request_queue_time_seconds,
//               omnibus:structured_mask_seconds (engine-side, from EngineStats)
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/http_types.h"

namespace omnibus::server {

// A cumulative histogram with fixed upper bounds (plus +Inf).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double x);
  // "<name>_bucket{<labels>,le=...} n" lines, then _sum and _count.
  void render(const std::string& name, const std::string& labels, std::string& out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;    // ascending
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

// KV-cache events published (docs/kv-events.md), counted in events.
struct KvEventsCounts {
  uint64_t published = 0;  // sent on the PUB socket
  uint64_t dropped = 0;    // in batches dropped because the publisher's queue was full
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void observe_ttft(double seconds);
  void observe_tpot(double seconds);
  void observe_e2e(double seconds);
  void observe_queue_time(double seconds);
  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  // One finished sequence: reason "stop", "length", "grammar_dead_end" or
  // "abort" (anything else counts as "abort").
  void count_finished(const std::string& reason);
  // A connection closed because its request's header or body did not arrive
  // in time (HttpTransport's read timeouts).
  void count_read_timeout(HttpReadPhase phase);

  // The whole exposition, engine gauges first; the KV-event counters when given.
  std::string render(const EngineStats& stats,
                     const std::optional<KvEventsCounts>& kv_events = std::nullopt) const;

  uint64_t generation_tokens() const;

 private:
  void observe(Histogram& h, double seconds);  // h: one of the histograms below
  void add(uint64_t& counter, int64_t n);      // counter: one of the counters below

  const std::string labels_;  // model_name="..."

  mutable std::mutex mu_;
  Histogram ttft_, tpot_, e2e_, queue_;                                    // guarded by mu_
  uint64_t prompt_tokens_ = 0;                                             // guarded by mu_
  uint64_t generation_tokens_ = 0;                                         // guarded by mu_
  uint64_t finished_stop_ = 0, finished_length_ = 0, finished_abort_ = 0;  // guarded by mu_
  uint64_t finished_grammar_dead_end_ = 0;                                 // guarded by mu_
  uint64_t header_timeouts_ = 0, body_timeouts_ = 0;                       // guarded by mu_
};

// A Prometheus label value with \, " and newline escaped.
std::string prometheus_escape(const std::string& value);

}  // namespace omnibus::server
