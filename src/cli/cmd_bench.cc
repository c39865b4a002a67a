// `omnibus bench`: offline benchmarks of the engine.
//
// Single-stream mode (what llama-bench measures, for side-by-side ratios):
//   omnibus bench -m MODEL --pp 512 --tg 128 --repetitions 3 --json out.json
//   pp: one prompt of N random tokens from an empty cache, tokens/s;
//   tg: N tokens generated one decode step at a time from an empty cache, tokens/s.
//   Each is one request on the engine, alone, timed by its events (from the
//   request's first step); the prompt runs in --max-num-batched-tokens chunks.
//
// Engine mode (selected by --num-requests): a synthetic serving workload
// through the same Engine::submit + RequestStream path the server uses:
//   omnibus bench -m MODEL --num-requests 64 --concurrency 64 --input-len 128
//                 --output-len 128 --json out.json
//   --input-len / --output-len: N, or A:B for uniform in [A, B]; random prompt
//   tokens (seeded), ignore_eos so output lengths are exact. Arrivals: at most
//   --concurrency in flight (default: all), and/or Poisson at --request-rate
//   req/s. Reports throughput, TTFT / TPOT / ITL / E2E percentiles, peak KV
//   usage and waste, preemptions, mean batch size, prefix-cache hit rate.
//   When every request is in flight from the start (no --request-rate,
//   concurrency >= num-requests, single turn) it also splits the run the way
//   llama-batched-bench does: the prompt phase ends when the last request gets
//   its first token; the generation phase is the rest, and its speed (tokens
//   generated after that moment / its length) is comparable to batched-bench's
//   S_TG. With --max-num-batched-tokens >= the sum of the prompts, all prompts
//   run in the first step and the generation phase is pure decode steps.
//
// Prefix-caching workloads (docs/prefix-caching.md):
//   --shared-prefix-len N: every prompt = the same N random tokens (a system
//     prompt) + its own --input-len tokens;
//   --multi-turn T: --num-requests conversations of T turns; turn t's prompt
//     is the whole history (earlier prompts and generated tokens) + a new
//     --input-len user turn, submitted when turn t - 1 finishes. Reports
//     prompt tokens submitted vs computed, and the computed count expected
//     when every full block computed before is reused.
//   --no-prefix-caching turns the cache off for comparisons.
//
// Disk tier across restarts (docs/disk-tier.md), --restart-warm N with
// --kv-offload-dir DIR: every prompt is a --shared-prefix-len system prompt
// plus its own --input-len user turn, --output-len greedy tokens. Each run is
// a fresh engine (a server restart; the model stays loaded, and its load time
// is left out of both sides) serving one request, timed from submit to its
// first token (TTFT):
//   cold:  N runs without the tier: the whole prompt is computed;
//   seed:  one run with the tier (another user turn): the shared prefix's
//          blocks are written; the engine's end flushes them;
//   warm:  N runs with the tier on DIR, the cold runs' N prompts: the prefix
//          is loaded from disk, the user turn computed.
// Reports TTFT p50 of cold and warm and their ratio, the time to load one
// block (the tier's histogram: sum / count) against computing one (cold
// TTFT p50 / prompt blocks), and whether every warm output equals its cold one.
//
// Structured output (docs/structured-output.md): --json-schema FILE or
// --regex PATTERN constrains every request's output (engine mode); requests
// then end where the format ends (end tokens count, --output-len is the
// bound), so compare output tok/s with an unconstrained run of the same
// workload. Reports the mask time per token (p50 / p99 from the engine's
// histogram: the upper bound of the bucket holding the percentile).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench_embed.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/engine_request.h"
#include "cli/loaded_model.h"
#include "engine/engine.h"
#include "engine/grammar_vocab.h"
#include "grammar/structured_output.h"
#include "kernels/cpu_features.h"
#include "kv/kv_format.h"
#include "util/progress.h"

namespace omnibus {
namespace {

struct BenchOptions {
  ModelFlags model;
  EngineFlags engine;
  int pp = 512;
  int tg = 128;
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
};

// The masker every request shares when the run is constrained (null: free text).
StatusOr<std::shared_ptr<const grammar::TokenMasker>> bench_grammar(const BenchOptions& o,
                                                                    const Tokenizer& tok) {
  if (o.json_schema_path.empty() && o.regex.empty())
    return std::shared_ptr<const grammar::TokenMasker>();
  grammar::StructuredOutput so;
  if (!o.json_schema_path.empty()) {
    std::ifstream in(o.json_schema_path);
    if (!in) return Status::io("cannot read '{}'", o.json_schema_path);
    so.kind = grammar::StructuredOutput::Kind::kJsonSchema;
    so.text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    so.kind = grammar::StructuredOutput::Kind::kRegex;
    so.text = o.regex;
  }
  grammar::GrammarCache cache(grammar_trie(tok), 1);
  return cache.get(so);
}

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

int fail(const Status& s) {
  std::fprintf(stderr, "omnibus bench: %s\n", s.to_string().c_str());
  return 1;
}

// The model and an engine configured by the flags (eog_ids from the tokenizer).
struct BenchSetup {
  LoadedModel m;
  EngineConfig cfg;
  std::unique_ptr<Engine> engine;
};

Status set_up(const BenchOptions& o, BenchSetup& b) {
  OMNIBUS_ASSIGN_OR_RETURN(b.cfg, to_engine_config(o.engine));
  OMNIBUS_ASSIGN_OR_RETURN(b.m, load_model_for_cli(o.model));
  set_model_identity(b.m, b.cfg);
  OMNIBUS_ASSIGN_OR_RETURN(b.engine, Engine::create(*b.m.model, b.cfg));
  return Status::ok();
}

// A greedy request for `prompt` that generates exactly max_tokens tokens.
Request fixed_length_request(std::vector<int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  return r;
}

// Single-stream mode, one request at a time on the engine; the times are
// the engine's (EngineEvent), from the request's first step:
//   pp: a prompt of N random tokens, until its first token is sampled;
//   tg: a one-token prompt and N tokens, until the last one is sampled
//       (N forward passes, the first of them the one-token prompt).
int run_single_stream(const BenchOptions& o) {
  BenchSetup b;
  if (Status s = set_up(o, b); !s.is_ok()) return fail(s);
  const LoadedModel& m = b.m;
  Engine& e = *b.engine;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> any_token(0, m.model->config().n_vocab - 1);
  using Seconds = std::chrono::duration<double>;
  // Runs one request; the seconds from its first step to its first (or last) token.
  auto timed = [&](int n_prompt, int max_tokens, bool until_last) -> StatusOr<double> {
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int32_t& t : prompt) t = any_token(rng);
    OMNIBUS_ASSIGN_OR_RETURN(
        EngineRequest req,
        EngineRequest::submit(e, *m.tokenizer,
                              fixed_length_request(std::move(prompt), max_tokens)));
    OMNIBUS_ASSIGN_OR_RETURN(EngineRequestResult r, req.wait());
    const auto end = until_last ? r.completions[0].end : r.first_token;
    return Seconds(end - r.first_scheduled).count();
  };
  std::vector<double> pp_rates, tg_rates;
  // One untimed warm-up of each kind, then the timed repetitions.
  for (int rep = -1; rep < o.repetitions; ++rep) {
    if (o.pp > 0) {
      StatusOr<double> s = timed(o.pp, 1, false);
      if (!s.is_ok()) return fail(s.status());
      if (rep >= 0) pp_rates.push_back(o.pp / *s);
    }
    if (o.tg > 0) {
      StatusOr<double> s = timed(1, o.tg, true);
      if (!s.is_ok()) return fail(s.status());
      if (rep >= 0) tg_rates.push_back(o.tg / *s);
    }
  }
  nlohmann::json j;
  j["model"] = m.path;
  j["threads"] = m.pool->n_threads();
  j["isa"] = isa_name(cpu_features().chosen);
  j["kv_cache_dtype"] = o.engine.kv_dtype;
  j["repetitions"] = o.repetitions;
  fmt::print("| test | tokens/s (median of {}) | min | max |\n|---|---|---|---|\n", o.repetitions);
  if (!pp_rates.empty()) {
    j["pp"] = o.pp;
    j["pp_tok_s"] = median(pp_rates);
    j["pp_tok_s_all"] = pp_rates;
    fmt::print("| pp{} | {:.1f} | {:.1f} | {:.1f} |\n", o.pp, median(pp_rates),
               *std::min_element(pp_rates.begin(), pp_rates.end()),
               *std::max_element(pp_rates.begin(), pp_rates.end()));
  }
  if (!tg_rates.empty()) {
    j["tg"] = o.tg;
    j["tg_tok_s"] = median(tg_rates);
    j["tg_tok_s_all"] = tg_rates;
    fmt::print("| tg{} | {:.1f} | {:.1f} | {:.1f} |\n", o.tg, median(tg_rates),
               *std::min_element(tg_rates.begin(), tg_rates.end()),
               *std::max_element(tg_rates.begin(), tg_rates.end()));
  }
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << j.dump(2) << "\n";
    if (!out) return fail(Status::io("cannot write '{}'", o.json_path));
  }
  return 0;
}

// "128" or "64:256" -> [lo, hi].
StatusOr<std::pair<int, int>> parse_len_range(const std::string& flag, const std::string& text) {
  int lo = 0, hi = 0;
  char extra = 0;
  const int n = std::sscanf(text.c_str(), "%d:%d%c", &lo, &hi, &extra);
  if (n == 1 && text.find(':') == std::string::npos) hi = lo;
  if (!((n == 1 && text.find(':') == std::string::npos) || n == 2) || lo < 1 || hi < lo) {
    return Status::invalid_argument("{} '{}' must be N or A:B with 1 <= A <= B", flag, text);
  }
  return std::make_pair(lo, hi);
}

// Linear-interpolated percentiles (numpy's default) and the mean, in ms.
nlohmann::json summarize_ms(std::vector<double> v) {
  nlohmann::json j;
  if (v.empty()) {
    for (const char* k : {"p50", "p90", "p99", "mean"}) j[k] = 0.0;
    return j;
  }
  std::sort(v.begin(), v.end());
  auto pct = [&v](double p) {
    const double x = p / 100.0 * double(v.size() - 1);
    const size_t i = size_t(x);
    const double f = x - double(i);
    // std::lerp: monotone in f and exact at equal neighbours, so p50 <= p90 <= p99.
    return i + 1 < v.size() ? std::lerp(v[i], v[i + 1], f) : v[i];
  };
  double sum = 0;
  for (double x : v) sum += x;
  j["p50"] = pct(50) * 1e3;
  j["p90"] = pct(90) * 1e3;
  j["p99"] = pct(99) * 1e3;
  j["mean"] = sum / double(v.size()) * 1e3;
  return j;
}

int run_engine_workload(const BenchOptions& o) {
  using Clock = std::chrono::steady_clock;
  using Seconds = std::chrono::duration<double>;
  StatusOr<std::pair<int, int>> in_len = parse_len_range("--input-len", o.input_len);
  if (!in_len.is_ok()) return fail(in_len.status());
  StatusOr<std::pair<int, int>> out_len = parse_len_range("--output-len", o.output_len);
  if (!out_len.is_ok()) return fail(out_len.status());
  BenchSetup b;
  if (Status s = set_up(o, b); !s.is_ok()) return fail(s);
  const LoadedModel& m = b.m;
  const EngineConfig& cfg = b.cfg;
  Engine& e = *b.engine;

  // The workload, drawn up front from the seed. Single-turn: one request per
  // unit; multi-turn: a unit is a conversation whose turns follow each other.
  const int n_units = o.num_requests;
  const int n_turns = std::max(1, o.multi_turn);
  const int n = n_units * n_turns;  // requests
  const int n_vocab = m.model->config().n_vocab;
  const int32_t block = e.info().block_size;
  StatusOr<std::shared_ptr<const grammar::TokenMasker>> grammar = bench_grammar(o, *m.tokenizer);
  if (!grammar.is_ok()) return fail(grammar.status());
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> any_token(0, n_vocab - 1);
  std::vector<int32_t> shared_prefix(size_t(o.shared_prefix_len));
  for (int32_t& tok : shared_prefix) tok = any_token(rng);
  struct Unit {
    std::vector<std::vector<int32_t>> user;  // [turn]: its own tokens
    std::vector<int> max_tokens;             // [turn]
    std::vector<int32_t> history;            // prompt of the last turn + its output
    int next_turn = 0;
  };
  std::vector<Unit> units(static_cast<size_t>(n_units));
  std::vector<double> arrival(size_t(n_units), 0.0);  // seconds after start
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
  double t = 0;
  for (int i = 0; i < n_units; ++i) {
    Unit& u = units[size_t(i)];
    u.history = shared_prefix;
    for (int turn = 0; turn < n_turns; ++turn) {
      std::vector<int32_t> own(
          size_t(std::uniform_int_distribution<int>(in_len->first, in_len->second)(rng)));
      for (int32_t& tok : own) tok = any_token(rng);
      u.user.push_back(std::move(own));
      u.max_tokens.push_back(
          std::uniform_int_distribution<int>(out_len->first, out_len->second)(rng));
    }
    if (o.request_rate > 0) {
      t += gap(rng);
      arrival[size_t(i)] = t;
    }
  }
  // The next turn's request of a unit (its history grows by the new user turn).
  auto next_request = [&units, &grammar](int unit) {
    Unit& u = units[size_t(unit)];
    const std::vector<int32_t>& own = u.user[size_t(u.next_turn)];
    u.history.insert(u.history.end(), own.begin(), own.end());
    Request r = fixed_length_request(u.history, u.max_tokens[size_t(u.next_turn)]);
    if (*grammar) {  // constrained: the output ends where the format does
      r.grammar = *grammar;
      r.ignore_eos = false;
    }
    ++u.next_turn;
    return r;
  };
  // Warm-up: one short request of unrelated tokens (so it primes no cache
  // entry the workload could hit), so buffers have grown before timing.
  {
    std::vector<int32_t> warm(shared_prefix.size() + units[0].user[0].size());
    for (int32_t& tok : warm) tok = any_token(rng);
    StatusOr<EngineRequest> w = EngineRequest::submit(
        e, *m.tokenizer,
        fixed_length_request(std::move(warm), std::min(4, units[0].max_tokens[0])));
    if (!w.is_ok()) return fail(w.status());
    if (StatusOr<EngineRequestResult> r = w->wait(); !r.is_ok()) return fail(r.status());
  }
  const EngineStats before = e.stats();

  struct InFlight {
    std::shared_ptr<RequestStream> stream;
    int unit = 0;
    int32_t n_prompt = 0;
    int32_t n_cached_prompt_tokens = 0;  // whole blocks reused, if every earlier block is
    Clock::time_point first, last;
    std::vector<int32_t> tokens;
  };
  std::vector<InFlight> active;
  std::deque<int> follow_ups;  // units whose next turn is ready
  std::vector<double> ttft, tpot, itl, e2e;
  std::vector<Clock::time_point> token_times;  // every generated token's event time
  Clock::time_point last_first_token{};        // the latest first token of any request
  int64_t n_output_tokens = 0, n_input_tokens = 0, n_computed_prompt = 0, n_expected_computed = 0;
  // Tokens of a unit computed so far (its last turn's prompt + output - 1):
  // what an ideal cache would hold of its next prompt.
  std::vector<int64_t> unit_computed(size_t(n_units), 0);
  bool prefix_computed = false;
  const int concurrency = o.concurrency > 0 ? o.concurrency : n;
  int next = 0, done = 0;
  ProgressBar bar("bench", uint64_t(n), "requests");
  const auto signal = std::make_shared<StreamSignal>();  // every stream's pushes wake this loop
  const Clock::time_point start = Clock::now();
  Clock::time_point end = start;
  while (done < n) {
    const double now_s = Seconds(Clock::now() - start).count();
    while (int(active.size()) < concurrency &&
           (!follow_ups.empty() || (next < n_units && arrival[size_t(next)] <= now_s))) {
      int unit;
      if (!follow_ups.empty()) {
        unit = follow_ups.front();
        follow_ups.pop_front();
      } else {
        unit = next++;
      }
      Request r = next_request(unit);
      const int64_t p = int64_t(r.prompt.size());
      // Expected: every full block computed before (this unit's history, or
      // the shared prefix once any request computed it) is reused; the last
      // prompt token is always computed.
      int64_t reusable = unit_computed[size_t(unit)];
      if (prefix_computed) reusable = std::max<int64_t>(reusable, int64_t(shared_prefix.size()));
      const int64_t expected_cached = std::min(reusable, p - 1) / block * block;
      n_expected_computed += o.engine.no_prefix_caching ? p : p - expected_cached;
      prefix_computed = true;
      n_input_tokens += p;
      StatusOr<std::shared_ptr<RequestStream>> s = e.submit(std::move(r));
      if (!s.is_ok()) return fail(s.status());
      (*s)->set_signal(signal);
      active.push_back(InFlight{*s, unit, int32_t(p), 0, {}, {}, {}});
    }
    bool progressed = false;
    for (size_t i = 0; i < active.size();) {
      InFlight& f = active[i];
      bool final = false;
      while (std::optional<EngineEvent> ev = f.stream->try_pop()) {
        progressed = true;
        if (ev->token >= 0) {
          if (f.tokens.empty()) {
            f.first = ev->time;
            last_first_token = std::max(last_first_token, ev->time);
            f.n_cached_prompt_tokens = ev->n_cached_tokens;
          } else {
            itl.push_back(Seconds(ev->time - f.last).count());
          }
          f.last = ev->time;
          f.tokens.push_back(ev->token);
          token_times.push_back(ev->time);
        }
        if (ev->finish == FinishReason::kAbort) return fail(Status::internal("request aborted"));
        if (ev->final) {
          final = true;
          break;
        }
      }
      if (!final) {
        ++i;
        continue;
      }
      const int n_tokens = int(f.tokens.size());
      const double first = Seconds(f.first - f.stream->submit_time()).count();
      ttft.push_back(first);
      const double total = Seconds(f.last - f.stream->submit_time()).count();
      e2e.push_back(total);
      if (n_tokens > 1) tpot.push_back((total - first) / double(n_tokens - 1));
      n_output_tokens += n_tokens;
      n_computed_prompt += f.n_prompt - f.n_cached_prompt_tokens;
      end = std::max(end, f.last);
      Unit& u = units[size_t(f.unit)];
      u.history.insert(u.history.end(), f.tokens.begin(), f.tokens.end());
      unit_computed[size_t(f.unit)] = int64_t(u.history.size()) - 1;
      if (u.next_turn < n_turns) follow_ups.push_back(f.unit);
      active[i] = std::move(active.back());
      active.pop_back();
      bar.update(uint64_t(++done));
    }
    if (!progressed) {
      // Sleep until some stream has an event, or the next Poisson arrival.
      double wait_s = 1.0;
      if (next < n_units && int(active.size()) < concurrency) {
        wait_s =
            std::clamp(arrival[size_t(next)] - Seconds(Clock::now() - start).count(), 0.0, 1.0);
      }
      signal->wait(std::chrono::microseconds(int64_t(wait_s * 1e6)));
    }
  }
  bar.finish();
  const EngineStats after = e.stats();
  const double duration = Seconds(end - start).count();
  const uint64_t steps = after.n_steps - before.n_steps;
  const uint64_t queries = after.prefix_cache_queries - before.prefix_cache_queries;
  const double hit_rate =
      queries ? double(after.prefix_cache_hits - before.prefix_cache_hits) / double(queries) : 0.0;

  nlohmann::json j;
  j["model"] = m.path;
  j["threads"] = m.pool->n_threads();
  j["isa"] = isa_name(cpu_features().chosen);
  j["num_requests"] = n;
  j["prefix_caching"] = !o.engine.no_prefix_caching;
  j["scheduling_policy"] = scheduling_policy_name(e.info().scheduling_policy);
  j["shared_prefix_len"] = o.shared_prefix_len;
  j["multi_turn"] = o.multi_turn;
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["concurrency"] = o.concurrency;
  j["request_rate"] = o.request_rate;
  j["max_num_seqs"] = e.info().max_num_seqs;  // q4/kivi2: at most the residual slots serve
  j["max_num_batched_tokens"] = cfg.max_num_batched_tokens;
  j["block_size"] = e.info().block_size;
  j["kv_cache_blocks"] = e.info().n_blocks;
  j["kv_cache_bytes"] = e.info().kv_cache_bytes;
  j["duration_s"] = duration;
  j["total_input_tokens"] = n_input_tokens;
  j["total_output_tokens"] = n_output_tokens;
  j["request_throughput"] = n / duration;
  j["output_throughput"] = double(n_output_tokens) / duration;
  j["total_token_throughput"] = double(n_output_tokens + n_input_tokens) / duration;
  j["ttft_ms"] = summarize_ms(ttft);
  j["tpot_ms"] = summarize_ms(tpot);
  j["itl_ms"] = summarize_ms(itl);
  j["e2e_ms"] = summarize_ms(e2e);
  j["peak_kv_usage"] = double(after.peak_kv_blocks_used) / double(after.kv_blocks_total);
  j["kv_waste"] = after.kv_waste_at_peak;
  j["preemptions"] = after.n_preemptions - before.n_preemptions;
  j["kv_residual_steals"] = after.kv_residual_steals - before.kv_residual_steals;
  j["steps"] = steps;
  j["mean_batch_size"] =
      steps ? double(after.n_seqs_scheduled - before.n_seqs_scheduled) / double(steps) : 0.0;
  j["mean_step_tokens"] =
      steps ? double(after.n_tokens_processed - before.n_tokens_processed) / double(steps) : 0.0;
  j["prefix_cache_hit_rate"] = hit_rate;
  {
    const uint64_t all = after.prefix_cache_hits - before.prefix_cache_hits;
    const uint64_t disk = after.kv_disk_hit_tokens - before.kv_disk_hit_tokens;
    j["prefix_cache_hits_disk_tokens"] = disk;
    j["prefix_cache_hits_pool_tokens"] = all > disk ? all - disk : 0;
  }
  j["prompt_tokens_submitted"] = n_input_tokens;
  j["prompt_tokens_computed"] = n_computed_prompt;
  j["prompt_tokens_computed_expected"] = n_expected_computed;
  if (*grammar) {
    std::array<uint64_t, EngineStats::kMaskBounds.size() + 1> mask_counts{};
    for (size_t i = 0; i < mask_counts.size(); ++i) {
      mask_counts[i] = after.structured_mask_buckets[i] - before.structured_mask_buckets[i];
    }
    const uint64_t n_masks = after.structured_masks - before.structured_masks;
    j["constraint"] = o.json_schema_path.empty() ? "regex" : "json_schema";
    j["mask_count"] = n_masks;
    j["mask_mean_ms"] = n_masks ? (after.structured_mask_seconds - before.structured_mask_seconds) /
                                      double(n_masks) * 1e3
                                : 0.0;
    j["mask_p50_ms_at_most"] = bucket_percentile(EngineStats::kMaskBounds, mask_counts, 0.50) * 1e3;
    j["mask_p99_ms_at_most"] = bucket_percentile(EngineStats::kMaskBounds, mask_counts, 0.99) * 1e3;
    j["structured_rejections"] = after.structured_rejections - before.structured_rejections;
    const grammar::TokenMasker::CacheStats cs = (*grammar)->cache_stats();  // warm-up included
    j["mask_cache_hits"] = cs.hits;
    j["mask_cache_misses"] = cs.misses;
    j["mask_walk_ms_total"] = cs.walk_seconds * 1e3;
  }
  // Prompt / generation phases (see the top of this file): only when all
  // requests started together, otherwise there is no such split.
  const bool all_at_once = o.request_rate <= 0 && concurrency >= n && n_turns == 1;
  if (all_at_once && !ttft.empty()) {
    const Clock::time_point gen_start = last_first_token;
    const int64_t gen_tokens = std::count_if(token_times.begin(), token_times.end(),
                                             [&](Clock::time_point tt) { return tt > gen_start; });
    const double prompt_s = Seconds(gen_start - start).count();
    const double gen_s = Seconds(end - gen_start).count();
    j["prompt_phase_s"] = prompt_s;
    j["prompt_phase_throughput"] = prompt_s > 0 ? double(n_input_tokens) / prompt_s : 0.0;
    j["generation_phase_s"] = gen_s;
    j["generation_phase_tokens"] = gen_tokens;
    j["generation_throughput"] = gen_s > 0 ? double(gen_tokens) / gen_s : 0.0;
  }

  fmt::print("requests            {}\n", n);
  fmt::print("duration            {:.2f} s\n", duration);
  fmt::print("request throughput  {:.2f} req/s\n", double(j["request_throughput"]));
  fmt::print("output throughput   {:.1f} tok/s\n", double(j["output_throughput"]));
  fmt::print("total throughput    {:.1f} tok/s (prompt + output)\n",
             double(j["total_token_throughput"]));
  if (j.contains("generation_throughput")) {
    fmt::print("prompt phase        {:.2f} s, {:.1f} prompt tok/s (until the last first token)\n",
               double(j["prompt_phase_s"]), double(j["prompt_phase_throughput"]));
    fmt::print("generation phase    {:.2f} s, {:.1f} tok/s ({} tokens after it)\n",
               double(j["generation_phase_s"]), double(j["generation_throughput"]),
               int64_t(j["generation_phase_tokens"]));
  }
  fmt::print("{:<8} {:>10} {:>10} {:>10} {:>10}\n", "ms", "p50", "p90", "p99", "mean");
  for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    const nlohmann::json& s = j[k];
    fmt::print("{:<8} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n", std::string(k).substr(0, 4),
               double(s["p50"]), double(s["p90"]), double(s["p99"]), double(s["mean"]));
  }
  fmt::print("peak kv usage       {:.1f}% of {} blocks, waste at peak {:.2f}%\n",
             100 * double(j["peak_kv_usage"]), e.info().n_blocks, 100 * double(j["kv_waste"]));
  fmt::print("preemptions         {}\n", uint64_t(j["preemptions"]));
  if (kv_has_residual(cfg.kv_format)) {
    fmt::print("kv residual steals  {}\n", uint64_t(j["kv_residual_steals"]));
  }
  fmt::print("mean batch size     {:.1f} sequences, {:.1f} tokens per step ({} steps)\n",
             double(j["mean_batch_size"]), double(j["mean_step_tokens"]), steps);
  fmt::print("prefix cache        {}, hit rate {:.1f}% ({} scheduling)\n",
             o.engine.no_prefix_caching ? "off" : "on", 100 * hit_rate,
             std::string(j["scheduling_policy"]));
  if (after.kv_disk.enabled) {
    const uint64_t disk = after.kv_disk_hit_tokens - before.kv_disk_hit_tokens;
    const uint64_t all = after.prefix_cache_hits - before.prefix_cache_hits;
    fmt::print(
        "prefix cache tiers  pool {} tokens, disk {} tokens ({} blocks loaded, {:.1f} MiB)\n",
        all > disk ? all - disk : 0, disk, after.kv_disk_hit_blocks - before.kv_disk_hit_blocks,
        double(after.kv_disk.bytes_read - before.kv_disk.bytes_read) / (1 << 20));
  }
  fmt::print("prompt tokens       {} submitted, {} computed ({:.1f}%), {} expected ({:.1f}%)\n",
             n_input_tokens, n_computed_prompt,
             n_input_tokens ? 100.0 * double(n_computed_prompt) / double(n_input_tokens) : 0.0,
             n_expected_computed,
             n_input_tokens ? 100.0 * double(n_expected_computed) / double(n_input_tokens) : 0.0);
  if (j.contains("constraint")) {
    fmt::print(
        "constrained         {}: mask per token mean {:.3f} ms, p50 <= {:.3f} ms, p99 <= {:.3f} ms "
        "({} masks, {} rejections)\n",
        std::string(j["constraint"]), double(j["mask_mean_ms"]), double(j["mask_p50_ms_at_most"]),
        double(j["mask_p99_ms_at_most"]), uint64_t(j["mask_count"]),
        uint64_t(j["structured_rejections"]));
    fmt::print(
        "mask cache          {} hits, {} misses (trie walks: {:.1f} ms in all, off the critical "
        "path)\n",
        uint64_t(j["mask_cache_hits"]), uint64_t(j["mask_cache_misses"]),
        double(j["mask_walk_ms_total"]));
  }
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << j.dump(2) << "\n";
    if (!out) return fail(Status::io("cannot write '{}'", o.json_path));
  }
  return 0;
}

// --restart-warm: see the header comment.
int run_restart_warm(const BenchOptions& o) {
  if (o.engine.kv_offload_dir.empty()) {
    return fail(Status::invalid_argument("--restart-warm needs --kv-offload-dir"));
  }
  StatusOr<EngineConfig> cfg = to_engine_config(o.engine);
  if (!cfg.is_ok()) return fail(cfg.status());
  StatusOr<LoadedModel> m = load_model_for_cli(o.model);
  if (!m.is_ok()) return fail(m.status());
  set_model_identity(*m, *cfg);
  StatusOr<std::pair<int, int>> in = parse_len_range("--input-len", o.input_len);
  StatusOr<std::pair<int, int>> out_len = parse_len_range("--output-len", o.output_len);
  if (!in.is_ok()) return fail(in.status());
  if (!out_len.is_ok()) return fail(out_len.status());
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> any_token(0, m->model->config().n_vocab - 1);
  std::vector<int32_t> prefix(static_cast<size_t>(o.shared_prefix_len));
  for (int32_t& t : prefix) t = any_token(rng);
  const int n = o.restart_warm;
  std::vector<std::vector<int32_t>> prompts(
      static_cast<size_t>(n + 1));  // the last: the seed run's
  for (std::vector<int32_t>& p : prompts) {
    p = prefix;
    for (int i = 0; i < in->first; ++i) p.push_back(any_token(rng));
  }
  struct One {
    double ttft_s = 0;
    std::string text;
    int32_t n_cached = 0;
    EngineStats stats;
  };
  // One fresh engine serving one request.
  auto run_one = [&](bool tier, const std::vector<int32_t>& prompt) -> StatusOr<One> {
    EngineConfig c = *cfg;
    c.log_startup = false;
    if (!tier) c.kv_offload_dir.clear();
    OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::create(*m->model, c));
    OMNIBUS_ASSIGN_OR_RETURN(
        EngineRequest req,
        EngineRequest::submit(*e, *m->tokenizer, fixed_length_request(prompt, out_len->first)));
    OMNIBUS_ASSIGN_OR_RETURN(EngineRequestResult r, req.wait());
    One one;
    one.ttft_s = std::chrono::duration<double>(r.first_token - r.submitted).count();
    one.text = r.completions[0].text;
    one.n_cached = r.n_cached_tokens;
    e->wait_idle(std::chrono::minutes(10));
    one.stats = e->stats();
    return one;
  };
  std::vector<One> cold, warm;
  for (int i = 0; i < n; ++i) {
    StatusOr<One> r = run_one(false, prompts[size_t(i)]);
    if (!r.is_ok()) return fail(r.status());
    cold.push_back(std::move(*r));
  }
  StatusOr<One> seed = run_one(true, prompts.back());
  if (!seed.is_ok()) return fail(seed.status());
  if (!seed->stats.kv_disk.enabled)
    return fail(Status::invalid_argument("the disk tier is off (see its log line)"));
  for (int i = 0; i < n; ++i) {
    StatusOr<One> r = run_one(true, prompts[size_t(i)]);
    if (!r.is_ok()) return fail(r.status());
    warm.push_back(std::move(*r));
  }
  std::vector<double> cold_ms, warm_ms;
  double load_s = 0;
  uint64_t n_loaded = 0, n_disk_tokens = 0;
  int n_identical = 0;
  for (int i = 0; i < n; ++i) {
    cold_ms.push_back(1e3 * cold[size_t(i)].ttft_s);
    warm_ms.push_back(1e3 * warm[size_t(i)].ttft_s);
    load_s += warm[size_t(i)].stats.kv_disk.load_latency_sum_s;
    n_loaded += warm[size_t(i)].stats.kv_disk.load_latency_count;
    n_disk_tokens += warm[size_t(i)].stats.kv_disk_hit_tokens;
    n_identical += cold[size_t(i)].text == warm[size_t(i)].text ? 1 : 0;
  }
  const int32_t bs = cfg->block_size;
  const double n_prompt_blocks = double(prompts[0].size()) / double(bs);
  const double cold_p50 = median(cold_ms), warm_p50 = median(warm_ms);
  const double compute_block_ms = cold_p50 / n_prompt_blocks;
  const double load_block_ms = n_loaded ? 1e3 * load_s / double(n_loaded) : 0.0;
  nlohmann::json j;
  j["model"] = m->path;
  j["threads"] = m->pool->n_threads();
  j["isa"] = isa_name(cpu_features().chosen);
  j["kv_cache_dtype"] = o.engine.kv_dtype;
  j["block_size"] = bs;
  j["shared_prefix_len"] = o.shared_prefix_len;
  j["input_len"] = in->first;
  j["output_len"] = out_len->first;
  j["runs"] = n;
  j["cold_ttft_ms"] = cold_ms;
  j["warm_ttft_ms"] = warm_ms;
  j["cold_ttft_p50_ms"] = cold_p50;
  j["warm_ttft_p50_ms"] = warm_p50;
  j["ttft_ratio"] = warm_p50 > 0 ? cold_p50 / warm_p50 : 0.0;
  j["disk_hit_tokens_per_run"] = double(n_disk_tokens) / double(n);
  j["load_block_ms"] = load_block_ms;
  j["compute_block_ms"] = compute_block_ms;
  j["load_vs_compute"] = load_block_ms > 0 ? compute_block_ms / load_block_ms : 0.0;
  j["block_bytes"] = seed->stats.kv_disk.entries
                         ? seed->stats.kv_disk.bytes_on_disk / seed->stats.kv_disk.entries
                         : 0;
  j["outputs_identical"] = n_identical;
  fmt::print(
      "restart-warm: {} runs each; prompt {} shared + {} own tokens, {} generated; {} threads, "
      "{}\n",
      n, o.shared_prefix_len, in->first, out_len->first, m->pool->n_threads(),
      std::string(j["isa"]));
  fmt::print(
      "| run | TTFT p50 (ms) | min | max | prompt tokens from disk |\n|---|---|---|---|---|\n");
  fmt::print("| cold, no tier | {:.1f} | {:.1f} | {:.1f} | 0 |\n", cold_p50,
             *std::min_element(cold_ms.begin(), cold_ms.end()),
             *std::max_element(cold_ms.begin(), cold_ms.end()));
  fmt::print("| after restart, tier | {:.1f} | {:.1f} | {:.1f} | {:.0f} |\n", warm_p50,
             *std::min_element(warm_ms.begin(), warm_ms.end()),
             *std::max_element(warm_ms.begin(), warm_ms.end()),
             double(j["disk_hit_tokens_per_run"]));
  fmt::print("TTFT ratio cold / warm: {:.1f}x\n", double(j["ttft_ratio"]));
  fmt::print(
      "per block ({} tokens, {} bytes on disk): load {:.3f} ms, compute {:.3f} ms: {:.1f}x\n", bs,
      uint64_t(j["block_bytes"]), load_block_ms, compute_block_ms, double(j["load_vs_compute"]));
  fmt::print("outputs identical to recomputation: {}/{}\n", n_identical, n);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << j.dump(2) << "\n";
    if (!f) return fail(Status::io("cannot write '{}'", o.json_path));
  }
  return n_identical == n ? 0 : 1;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto [cmd, o] = add_model_command<BenchOptions>(
      app, exit_code, "bench",
      "Offline benchmark: single-stream prompt/generation speed, or with --num-requests a "
      "synthetic serving workload through the engine",
      [](const BenchOptions& b) {
        if (b.model.task == "embed") {
          StatusOr<std::pair<int, int>> len = parse_len_range("--input-len", b.input_len);
          if (!len.is_ok()) return fail(len.status());
          EmbedBenchOptions eo;
          eo.num_requests = b.num_requests > 0 ? b.num_requests : 64;
          eo.concurrency = b.concurrency;
          eo.min_len = len->first;
          eo.max_len = len->second;
          eo.seed = int(b.seed);
          eo.json_path = b.json_path;
          return run_embed_bench(b.model, b.engine, eo);
        }
        if (b.restart_warm > 0) return run_restart_warm(b);
        return b.num_requests > 0 ? run_engine_workload(b) : run_single_stream(b);
      });
  cmd->add_option("--pp", o->pp, "Prompt tokens processed in one go (0 = skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--tg", o->tg, "Tokens generated one at a time (0 = skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-r,--repetitions", o->repetitions, "Timed repetitions (after one warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", o->seed, "Seed of the random prompt tokens")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Also write the results as JSON to this file");
  // Engine workload mode.
  cmd->add_option("--num-requests", o->num_requests,
                  "Engine mode: number of requests (without it: single-stream mode)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--input-len", o->input_len, "Engine mode: prompt tokens, N or A:B")
      ->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "Engine mode: generated tokens, N or A:B")
      ->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency,
                  "Engine mode: most requests in flight (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--request-rate", o->request_rate,
                  "Engine mode: Poisson arrivals, requests/s (0 = all at once)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--shared-prefix-len", o->shared_prefix_len,
                  "Engine mode: every prompt starts with the same N random tokens, then its own "
                  "--input-len tokens")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--multi-turn", o->multi_turn,
                  "Engine mode: --num-requests conversations of this many turns; each turn resends "
                  "the whole history plus a new --input-len user turn (0 = single-turn requests)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  auto* schema =
      cmd->add_option("--json-schema", o->json_schema_path,
                      "Engine mode: constrain every output to this JSON schema (file); outputs end "
                      "where the JSON does")
          ->check(CLI::ExistingFile);
  cmd->add_option("--regex", o->regex,
                  "Engine mode: constrain every output to this regular expression")
      ->excludes(schema);
  cmd->add_option(
         "--restart-warm", o->restart_warm,
         "Disk tier across restarts (needs --kv-offload-dir): N fresh engines without the tier, "
         "then N with it after one that wrote the --shared-prefix-len prefix; TTFT p50 of each, "
         "block load vs compute time, outputs compared")
      ->check(CLI::Range(1, 1000));
  add_engine_flags(*cmd, o->engine);
  add_task_flags(*cmd, o->model);  // --task embed: run_embed_bench (cli/bench_embed.h)
}

}  // namespace omnibus
