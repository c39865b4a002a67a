#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace omnibus::server {
namespace {

// vLLM's bucket bounds, in seconds.
std::vector<double> ttft_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> tpot_bounds() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> latency_bounds() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// One sample of a gauge (double) or counter (uint64_t) labelled `l`, with its header.
template <typename T>
void sample(std::string& out, const std::string& l, const char* type, const char* name,
            const char* help, T v) {
  header(out, name, type, help);
  out += fmt::format("{}{{{}}} {}\n", name, l, v);
}

// Speculative decoding, vLLM's spec_decode counters under our prefix: drafts
// verified, draft tokens, of them accepted, and accepted by draft position;
// then the draft model's time, forwards and guesses.
void append_speculation(std::string& out, const std::string& l, const EngineStats& st) {
  const auto counter = [&](const char* name, const char* help, uint64_t v) {
    sample(out, l, "counter", name, help, v);
  };
  counter("omnibus:spec_decode_num_drafts_total",
          "Engine steps in which a sequence verified a draft (speculative decoding).",
          st.spec_drafts);
  counter("omnibus:spec_decode_num_draft_tokens_total", "Draft tokens verified.",
          st.spec_draft_tokens);
  counter("omnibus:spec_decode_num_accepted_tokens_total",
          "Draft tokens accepted (each one a token gained without a step of its own).",
          st.spec_accepted_tokens);
  // The draft model's share (--speculative draft; 0 otherwise).
  sample(out, l, "counter", "omnibus:spec_decode_draft_model_seconds_total",
         "Seconds spent in the draft model's forward passes (--speculative draft).",
         st.spec_draft_model_seconds);
  counter("omnibus:spec_decode_draft_model_forwards_total",
          "Draft model forward passes (each batched across the sequences that draft).",
          st.spec_draft_model_forwards);
  counter("omnibus:spec_decode_draft_model_tokens_total",
          "Tokens the draft model guessed (verified or not: a guess may be cut to fit a step).",
          st.spec_draft_model_guesses);
  const char* name = "omnibus:spec_decode_num_accepted_tokens_per_pos_total";
  header(out, name, "counter", "Draft tokens accepted, by their position in the draft.");
  for (size_t p = 0; p < st.spec_accepted_per_pos.size(); ++p) {
    out += fmt::format("{}{{{},position=\"{}\"}} {}\n", name, l, p, st.spec_accepted_per_pos[p]);
  }
}

}  // namespace

std::string prometheus_escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double x) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin());
  ++counts_[i];
  sum_ += x;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string& out) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cum);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_(fmt::format("model_name=\"{}\"", prometheus_escape(model_name))),
      ttft_(ttft_bounds()),
      tpot_(tpot_bounds()),
      e2e_(latency_bounds()),
      queue_(latency_bounds()) {}

void ServerMetrics::observe(Histogram& h, double s) {
  std::lock_guard<std::mutex> lock(mu_);
  h.observe(s);
}
void ServerMetrics::add(uint64_t& counter, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  counter += uint64_t(n);
}
void ServerMetrics::observe_ttft(double s) { observe(ttft_, s); }
void ServerMetrics::observe_tpot(double s) { observe(tpot_, s); }
void ServerMetrics::observe_e2e(double s) { observe(e2e_, s); }
void ServerMetrics::observe_queue_time(double s) { observe(queue_, s); }
void ServerMetrics::add_prompt_tokens(int64_t n) { add(prompt_tokens_, n); }
void ServerMetrics::add_generation_tokens(int64_t n) { add(generation_tokens_, n); }
uint64_t ServerMetrics::generation_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_tokens_;
}
void ServerMetrics::count_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reason == "stop") {
    ++finished_stop_;
  } else if (reason == "length") {
    ++finished_length_;
  } else if (reason == "grammar_dead_end") {
    ++finished_grammar_dead_end_;
  } else {
    ++finished_abort_;
  }
}

void ServerMetrics::count_read_timeout(HttpReadPhase phase) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(phase == HttpReadPhase::kHeader ? header_timeouts_ : body_timeouts_);
}

std::string ServerMetrics::render(const EngineStats& st,
                                  const std::optional<KvEventsCounts>& kv_events) const {
  std::string out;
  const std::string& l = labels_;
  auto gauge = [&](const char* name, const char* help, double v) {
    sample(out, l, "gauge", name, help, v);
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    sample(out, l, "counter", name, help, v);
  };
  gauge("omnibus:num_requests_running", "Sequences in the engine's running batch.", st.n_running);
  gauge("omnibus:num_requests_waiting", "Sequences waiting to be scheduled.", st.n_waiting);
  gauge("omnibus:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).",
        st.kv_cache_usage());
  gauge("omnibus:kv_cache_blocks_used", "KV-cache blocks in use.", st.kv_blocks_used);
  gauge("omnibus:kv_cache_blocks_total", "KV-cache blocks in the pool.", st.kv_blocks_total);
  gauge("omnibus:kv_cache_blocks_cached",
        "KV-cache blocks holding a prefix-cache entry (held by a request or free).",
        st.kv_blocks_cached);
  counter(
      "omnibus:kv_integrity_checks_total",
      "KV-cache invariant checks passed (one each time the engine goes idle; a violation aborts).",
      st.kv_integrity_checks);
  gauge("omnibus:kv_cache_pool_bytes", "Bytes reserved for the KV-cache pool.",
        double(st.kv_pool_bytes));
  gauge(
      "omnibus:kv_cache_resident_bytes",
      "Bytes of the KV-cache pool resident in memory (pages ever written; follows the working set "
      "and the prefix cache).",
      double(st.kv_resident_bytes));
  counter("omnibus:num_preemptions_total",
          "Sequences preempted (their KV blocks freed, recomputed later).", st.n_preemptions);
  counter("omnibus:kv_residual_steals_total",
          "q4/kivi2: fp16 residual slots stolen or not to be had, summed over layers (0 in normal "
          "operation).",
          st.kv_residual_steals);
  counter("omnibus:engine_steps_total", "Engine steps run.", st.n_steps);
  counter("omnibus:prefix_cache_queries_total",
          "Prompt tokens looked up in the prefix cache at admission.", st.prefix_cache_queries);
  counter("omnibus:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          st.prefix_cache_hits);
  gauge("omnibus:prefix_cache_hit_rate", "prefix_cache_hits_total / prefix_cache_queries_total.",
        st.prefix_cache_hit_rate);
  {
    // The prefix cache by tier: tokens found in the pool at admission that were
    // there already, and those the disk tier loaded (which admission then
    // finds in the pool: prefix_cache_hits_total counts both).
    const DiskTierStats& d = st.kv_disk;
    const char* name = "omnibus:prefix_cache_tier_hits_total";
    header(out, name, "counter", "Prompt tokens found in the prefix cache, by tier (pool, disk).");
    const uint64_t disk = st.kv_disk_hit_tokens;
    out += fmt::format("{}{{{},tier=\"pool\"}} {}\n", name, l,
                       st.prefix_cache_hits > disk ? st.prefix_cache_hits - disk : 0);
    out += fmt::format("{}{{{},tier=\"disk\"}} {}\n", name, l, disk);
    gauge("omnibus:kv_disk_enabled",
          "1 when the prefix cache's disk tier (--kv-offload-dir) works.", d.enabled ? 1.0 : 0.0);
    gauge("omnibus:kv_disk_writes_enabled",
          "1 while the disk tier writes (0 while the file system has no room for a block, and "
          "after a "
          "write error).",
          d.writes_enabled ? 1.0 : 0.0);
    counter("omnibus:kv_disk_hit_blocks_total",
            "KV blocks loaded from the disk tier into the pool.", st.kv_disk_hit_blocks);
    counter("omnibus:kv_disk_loads_total",
            "Requests whose prompt blocks were read from the disk tier.", st.kv_disk_loads);
    counter("omnibus:kv_disk_read_bytes_total", "Payload bytes the disk tier loaded and verified.",
            d.bytes_read);
    counter("omnibus:kv_disk_written_bytes_total",
            "Bytes the disk tier wrote (file headers included).", d.bytes_written);
    counter("omnibus:kv_disk_written_blocks_total", "KV blocks the disk tier wrote.",
            d.blocks_written);
    header(out, "omnibus:kv_disk_stored_blocks_total", "counter",
           "KV blocks queued for the disk tier, by source (a finished request's full blocks, a "
           "block the "
           "pool evicted).");
    out += fmt::format("omnibus:kv_disk_stored_blocks_total{{{},source=\"finished\"}} {}\n", l,
                       st.kv_disk_stored_finished);
    out += fmt::format("omnibus:kv_disk_stored_blocks_total{{{},source=\"evicted\"}} {}\n", l,
                       st.kv_disk_stored_evicted);
    counter("omnibus:kv_disk_write_drops_total",
            "KV blocks not written because the write queue was full.", d.write_drops);
    counter("omnibus:kv_disk_write_errors_total",
            "Disk tier writes that failed (ENOSPC, EIO, ...).", d.write_errors);
    header(out, "omnibus:kv_disk_skipped_files_total", "counter",
           "Disk tier block files found bad and never loaded, by reason.");
    const std::pair<const char*, uint64_t> skipped[] = {{"corrupt", d.skipped_corrupt},
                                                        {"truncated", d.skipped_truncated},
                                                        {"foreign", d.skipped_foreign},
                                                        {"mismatch", d.mismatches}};
    for (const auto& [reason, n] : skipped) {
      out +=
          fmt::format("omnibus:kv_disk_skipped_files_total{{{},reason=\"{}\"}} {}\n", l, reason, n);
    }
    counter("omnibus:kv_disk_evictions_total",
            "Block files the disk tier deleted to stay under --kv-offload-size.", d.evictions);
    gauge("omnibus:kv_disk_bytes", "Bytes of this model's block files in the disk tier.",
          double(d.bytes_on_disk));
    gauge("omnibus:kv_disk_blocks", "Block files of this model in the disk tier.",
          double(d.entries));
    const char* lat = "omnibus:kv_disk_load_seconds";
    header(out, lat, "histogram", "Time to read and verify one KV block from the disk tier.");
    uint64_t cum = 0;
    for (size_t i = 0; i < DiskTierStats::kLatencyBounds.size(); ++i) {
      cum += d.load_latency_buckets[i];
      out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", lat, l, DiskTierStats::kLatencyBounds[i],
                         cum);
    }
    cum += d.load_latency_buckets.back();
    out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", lat, l, cum);
    out += fmt::format("{}_sum{{{}}} {}\n", lat, l, d.load_latency_sum_s);
    out += fmt::format("{}_count{{{}}} {}\n", lat, l, d.load_latency_count);
  }
  {
    // Structured output: the engine's mask-time histogram (EngineStats::kMaskBounds).
    const char* name = "omnibus:structured_mask_seconds";
    header(out, name, "histogram",
           "Time a constrained token spent waiting for and applying its grammar mask (the mask "
           "itself is "
           "computed during the forward pass).");
    uint64_t cum = 0;
    for (size_t i = 0; i < EngineStats::kMaskBounds.size(); ++i) {
      cum += st.structured_mask_buckets[i];
      out +=
          fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, l, EngineStats::kMaskBounds[i], cum);
    }
    cum += st.structured_mask_buckets.back();
    out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, l, cum);
    out += fmt::format("{}_sum{{{}}} {}\n", name, l, st.structured_mask_seconds);
    out += fmt::format("{}_count{{{}}} {}\n", name, l, st.structured_masks);
  }
  counter("omnibus:embedding_requests_total",
          "Embedding requests (one per input of /v1/embeddings) the engine pooled.",
          st.n_embeddings);
  counter("omnibus:structured_rejections_total",
          "Constrained sequences ended because the grammar allowed no token of the vocabulary.",
          st.structured_rejections);
  append_speculation(out, l, st);
  if (kv_events) {
    counter("omnibus:kv_events_published_total",
            "KV-cache events (BlockStored, BlockRemoved, AllBlocksCleared) sent to subscribers; "
            "counted in "
            "events, not batches.",
            kv_events->published);
    counter("omnibus:kv_events_dropped_total",
            "KV-cache events never sent because the publisher's queue was full (whole batches are "
            "dropped, "
            "leaving a gap in the sequence numbers); counted in events, not batches.",
            kv_events->dropped);
  }

  std::lock_guard<std::mutex> lock(mu_);
  counter("omnibus:prompt_tokens_total", "Prompt tokens of the requests served.", prompt_tokens_);
  counter("omnibus:generation_tokens_total", "Tokens generated.", generation_tokens_);
  header(out, "omnibus:request_success_total", "counter", "Finished sequences by finish reason.");
  out += fmt::format("omnibus:request_success_total{{{},finished_reason=\"stop\"}} {}\n", l,
                     finished_stop_);
  out += fmt::format("omnibus:request_success_total{{{},finished_reason=\"length\"}} {}\n", l,
                     finished_length_);
  out += fmt::format("omnibus:request_success_total{{{},finished_reason=\"abort\"}} {}\n", l,
                     finished_abort_);
  out +=
      fmt::format("omnibus:request_success_total{{{},finished_reason=\"grammar_dead_end\"}} {}\n",
                  l, finished_grammar_dead_end_);
  header(out, "omnibus:http_read_timeouts_total", "counter",
         "Connections closed because a request's header or body did not arrive within "
         "--http-header-timeout / --http-body-timeout.");
  out += fmt::format("omnibus:http_read_timeouts_total{{{},phase=\"header\"}} {}\n", l,
                     header_timeouts_);
  out +=
      fmt::format("omnibus:http_read_timeouts_total{{{},phase=\"body\"}} {}\n", l, body_timeouts_);
  header(out, "omnibus:time_to_first_token_seconds", "histogram",
         "Time from arrival to the first token.");
  ttft_.render("omnibus:time_to_first_token_seconds", l, out);
  header(out, "omnibus:time_per_output_token_seconds", "histogram",
         "Mean time between a request's output tokens after the first.");
  tpot_.render("omnibus:time_per_output_token_seconds", l, out);
  header(out, "omnibus:e2e_request_latency_seconds", "histogram",
         "Time from arrival to the last token.");
  e2e_.render("omnibus:e2e_request_latency_seconds", l, out);
  header(out, "omnibus:request_queue_time_seconds", "histogram",
         "Time from arrival until the engine first scheduled the request.");
  queue_.render("omnibus:request_queue_time_seconds", l, out);
  return out;
}

}  // namespace omnibus::server
