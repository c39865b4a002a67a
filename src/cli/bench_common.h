// What `omnibus bench`'s modes share (cmd_bench.cc wires them): the options,
// the engine they run on, workload helpers and the report's statistics.
//
// Thread-safety: plain functions and values; each mode runs on the calling
// thread (the engine has its own).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/engine_flags.h"
#include "cli/loaded_model.h"
#include "engine/engine.h"
#include "util/status.h"

namespace omnibus {

struct BenchOptions {
  ModelFlags model;
  EngineFlags engine;
  int pp = 512;
  int tg = 128;
  int depth = 0;            // single-stream: tokens already in the context (llama-bench's -d)
  bool read_probe = false;  // single-stream: a read probe after each tg run (bench_read_probe.h)
  int repetitions = 3;
  std::string json_path;
  uint64_t seed = 42;

  // Engine mode.
  int num_requests = 0;  // 0: single-stream mode
  std::string input_len = "128";
  std::string output_len = "128";
  int concurrency = 0;      // 0: no cap
  double request_rate = 0;  // 0: all at once (subject to concurrency)
  int shared_prefix_len = 0;
  int multi_turn = 0;            // 0: single-turn requests
  std::string json_schema_path;  // constrain outputs to this JSON schema
  std::string regex;             // or to this regular expression
  int restart_warm = 0;          // > 0: the disk tier across restarts, this many runs each
  int long_prompt = 0;           // > 0: a prompt of this many tokens arrives mid-run
};

// The modes (cmd_bench.cc's header comment says what each measures).
int run_single_stream(const BenchOptions& o);
int run_engine_workload(const BenchOptions& o);  // bench_workload.cc
int run_restart_warm(const BenchOptions& o);     // bench_restart.cc

// Prints "omnibus bench: <status>" to stderr; the exit code 1.
int fail(const Status& s);
double median(std::vector<double> v);
// "128" or "64:256" -> [lo, hi]; `flag` names the flag in the error.
StatusOr<std::pair<int, int>> parse_len_range(const std::string& flag, const std::string& text);
// Linear-interpolated percentiles (numpy's default) p50/p90/p99 and the mean of
// seconds `v`, in ms.
nlohmann::json summarize_ms(std::vector<double> v);
// Writes `j` to `path` (nothing when empty); the exit code (0, or 1 when the
// file cannot be written).
int write_json(const std::string& path, const nlohmann::json& j);

// The model and an engine configured by the flags (eog_ids from the tokenizer).
struct BenchSetup {
  LoadedModel m;
  EngineConfig cfg;
  std::unique_ptr<Engine> engine;
};
Status set_up(const BenchOptions& o, BenchSetup& b);

// A greedy request for `prompt` that generates exactly max_tokens tokens.
Request fixed_length_request(std::vector<int32_t> prompt, int max_tokens);

// Percentile p (0..1) of a histogram with upper bounds `bounds` (+Inf last):
// the bound of the bucket that holds it (+Inf: the last finite bound x 10).
template <size_t N>
double bucket_percentile(const std::array<double, N>& bounds,
                         const std::array<uint64_t, N + 1>& counts, double p) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) return 0.0;
  const double want = p * double(total);
  uint64_t cum = 0;
  for (size_t i = 0; i < N; ++i) {
    cum += counts[i];
    if (double(cum) >= want) return bounds[i];
  }
  return bounds[N - 1] * 10;
}

}  // namespace omnibus
