// `omnibus bench --num-requests N`: a synthetic serving workload through the
// same Engine::submit + RequestStream path the server uses (cmd_bench.cc's
// header comment lists the flags and what is reported). Drawn up front from
// the seed (draw_workload), driven by one loop that submits as arrivals and
// --concurrency allow and drains every stream's events (WorkloadRun), then
// summarised against the engine's counters (report, print_report).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench_common.h"
#include "cli/bench_long_prompt.h"
#include "cli/engine_request.h"
#include "engine/grammar_vocab.h"
#include "grammar/structured_output.h"
#include "kernels/cpu_features.h"
#include "kv/kv_format.h"
#include "util/progress.h"

namespace omnibus {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;
using Masker = std::shared_ptr<const grammar::TokenMasker>;

// The masker every request shares when the run is constrained (null: free text).
StatusOr<Masker> bench_grammar(const BenchOptions& o, const Tokenizer& tok) {
  if (o.json_schema_path.empty() && o.regex.empty()) return Masker();
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

// Single-turn: one request per unit; multi-turn: a unit is a conversation
// whose turns follow each other.
struct Unit {
  std::vector<std::vector<int32_t>> user;  // [turn]: its own tokens
  std::vector<int> max_tokens;             // [turn]
  std::vector<int32_t> history;            // prompt of the last turn + its output
  int next_turn = 0;
};

struct Workload {
  std::vector<int32_t> shared_prefix;
  std::vector<Unit> units;
  std::vector<double> arrival;  // [unit]: seconds after start (all 0 without --request-rate)
  int n_turns = 1;
  int n_requests() const { return int(units.size()) * n_turns; }
};

Workload draw_workload(const BenchOptions& o, std::pair<int, int> in_len,
                       std::pair<int, int> out_len, std::mt19937_64& rng,
                       std::uniform_int_distribution<int32_t>& any_token) {
  Workload w;
  w.n_turns = std::max(1, o.multi_turn);
  w.shared_prefix.resize(size_t(o.shared_prefix_len));
  for (int32_t& tok : w.shared_prefix) tok = any_token(rng);
  w.units.resize(size_t(o.num_requests));
  w.arrival.assign(size_t(o.num_requests), 0.0);
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
  double t = 0;
  for (size_t i = 0; i < w.units.size(); ++i) {
    Unit& u = w.units[i];
    u.history = w.shared_prefix;
    for (int turn = 0; turn < w.n_turns; ++turn) {
      std::vector<int32_t> own(
          size_t(std::uniform_int_distribution<int>(in_len.first, in_len.second)(rng)));
      for (int32_t& tok : own) tok = any_token(rng);
      u.user.push_back(std::move(own));
      u.max_tokens.push_back(
          std::uniform_int_distribution<int>(out_len.first, out_len.second)(rng));
    }
    if (o.request_rate > 0) {
      t += gap(rng);
      w.arrival[i] = t;
    }
  }
  return w;
}

// What the run measured (seconds; token times are the engine's event times).
struct Samples {
  std::vector<double> ttft, tpot, e2e;
  std::vector<LongPromptArrival::Span> itl;    // each inter-token interval (from, to)
  std::vector<Clock::time_point> token_times;  // every generated token's event time
  Clock::time_point start, end;
  Clock::time_point last_first_token{};  // the latest first token of any request
  int64_t n_output_tokens = 0, n_input_tokens = 0, n_computed_prompt = 0;
  int64_t n_expected_computed = 0;
};

// Drives a Workload through the engine until every request has finished.
class WorkloadRun {
 public:
  WorkloadRun(const BenchOptions& o, Engine& e, Workload& w, Masker grammar,
              LongPromptArrival* long_prompt)
      : o_(o),
        e_(e),
        w_(w),
        grammar_(std::move(grammar)),
        long_(long_prompt),
        concurrency_(o.concurrency > 0 ? o.concurrency : w.n_requests()),
        unit_computed_(w.units.size(), 0) {}

  Status run(Samples& s) {
    const int n = w_.n_requests();
    ProgressBar bar("bench", uint64_t(n), "requests");
    s.start = s.end = Clock::now();
    int done = 0;
    while (done < n || (long_ != nullptr && !long_->done())) {
      OMNIBUS_RETURN_IF_ERROR(admit(s));
      bool progressed = false;
      if (long_ != nullptr && !long_->submitted() && (done == n || long_prompt_due())) {
        OMNIBUS_RETURN_IF_ERROR(long_->submit(e_, signal_));
      }
      if (long_ != nullptr) OMNIBUS_RETURN_IF_ERROR(long_->drain(progressed));
      for (size_t i = 0; i < active_.size();) {
        OMNIBUS_ASSIGN_OR_RETURN(const bool final, drain(active_[i], s, progressed));
        if (!final) {
          ++i;
          continue;
        }
        finish(active_[i], s);
        active_[i] = std::move(active_.back());
        active_.pop_back();
        bar.update(uint64_t(++done));
      }
      if (!progressed) {
        // Sleep until some stream has an event, or the next Poisson arrival.
        double wait_s = 1.0;
        if (next_ < int(w_.units.size()) && int(active_.size()) < concurrency_) {
          wait_s = std::clamp(w_.arrival[size_t(next_)] - Seconds(Clock::now() - s.start).count(),
                              0.0, 1.0);
        }
        signal_->wait(std::chrono::microseconds(int64_t(wait_s * 1e6)));
      }
    }
    bar.finish();
    return Status::ok();
  }

 private:
  struct InFlight {
    std::shared_ptr<RequestStream> stream;
    int unit = 0;
    int32_t n_prompt = 0;
    int32_t n_cached_prompt_tokens = 0;
    Clock::time_point first, last;
    std::vector<int32_t> tokens;
  };

  // --long-prompt arrives once every request is admitted and each running one
  // has LongPromptArrival::kWarmTokens tokens.
  bool long_prompt_due() const {
    if (next_ < int(w_.units.size()) || !follow_ups_.empty() || active_.empty()) return false;
    return std::all_of(active_.begin(), active_.end(), [](const InFlight& f) {
      return int(f.tokens.size()) >= LongPromptArrival::kWarmTokens;
    });
  }

  // The next turn's request of a unit (its history grows by the new user turn).
  Request next_request(int unit) {
    Unit& u = w_.units[size_t(unit)];
    const std::vector<int32_t>& own = u.user[size_t(u.next_turn)];
    u.history.insert(u.history.end(), own.begin(), own.end());
    Request r = fixed_length_request(u.history, u.max_tokens[size_t(u.next_turn)]);
    if (grammar_) {  // constrained: the output ends where the format does
      r.grammar = grammar_;
      r.ignore_eos = false;
    }
    ++u.next_turn;
    return r;
  }

  // Submits follow-up turns and arrived requests while fewer than
  // --concurrency are in flight.
  Status admit(Samples& s) {
    const double now_s = Seconds(Clock::now() - s.start).count();
    const int32_t block = e_.info().block_size;
    while (int(active_.size()) < concurrency_ &&
           (!follow_ups_.empty() ||
            (next_ < int(w_.units.size()) && w_.arrival[size_t(next_)] <= now_s))) {
      int unit;
      if (!follow_ups_.empty()) {
        unit = follow_ups_.front();
        follow_ups_.pop_front();
      } else {
        unit = next_++;
      }
      Request r = next_request(unit);
      const int64_t p = int64_t(r.prompt.size());
      // Expected: every full block computed before (this unit's history, or
      // the shared prefix once any request computed it) is reused; the last
      // prompt token is always computed.
      int64_t reusable = unit_computed_[size_t(unit)];
      if (prefix_computed_) {
        reusable = std::max<int64_t>(reusable, int64_t(w_.shared_prefix.size()));
      }
      const int64_t expected_cached = std::min(reusable, p - 1) / block * block;
      s.n_expected_computed += o_.engine.no_prefix_caching ? p : p - expected_cached;
      prefix_computed_ = true;
      s.n_input_tokens += p;
      OMNIBUS_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, e_.submit(std::move(r)));
      stream->set_signal(signal_);
      active_.push_back(InFlight{std::move(stream), unit, int32_t(p), 0, {}, {}, {}});
    }
    return Status::ok();
  }

  // Takes a stream's pending events; true once its final one was taken.
  StatusOr<bool> drain(InFlight& f, Samples& s, bool& progressed) {
    while (std::optional<EngineEvent> ev = f.stream->try_pop()) {
      progressed = true;
      if (ev->token >= 0) {
        if (f.tokens.empty()) {
          f.first = ev->time;
          s.last_first_token = std::max(s.last_first_token, ev->time);
          f.n_cached_prompt_tokens = ev->n_cached_tokens;
        } else {
          s.itl.emplace_back(f.last, ev->time);
        }
        f.last = ev->time;
        f.tokens.push_back(ev->token);
        s.token_times.push_back(ev->time);
      }
      if (ev->finish == FinishReason::kAbort) return Status::internal("request aborted");
      if (ev->final) return true;
    }
    return false;
  }

  // A finished request: its latencies, and its unit's next turn queued.
  void finish(const InFlight& f, Samples& s) {
    const int n_tokens = int(f.tokens.size());
    const double first = Seconds(f.first - f.stream->submit_time()).count();
    s.ttft.push_back(first);
    const double total = Seconds(f.last - f.stream->submit_time()).count();
    s.e2e.push_back(total);
    if (n_tokens > 1) s.tpot.push_back((total - first) / double(n_tokens - 1));
    s.n_output_tokens += n_tokens;
    s.n_computed_prompt += f.n_prompt - f.n_cached_prompt_tokens;
    s.end = std::max(s.end, f.last);
    Unit& u = w_.units[size_t(f.unit)];
    u.history.insert(u.history.end(), f.tokens.begin(), f.tokens.end());
    // What an ideal cache would hold of its next prompt.
    unit_computed_[size_t(f.unit)] = int64_t(u.history.size()) - 1;
    if (u.next_turn < w_.n_turns) follow_ups_.push_back(f.unit);
  }

  const BenchOptions& o_;
  Engine& e_;
  Workload& w_;
  const Masker grammar_;
  LongPromptArrival* const long_;  // null without --long-prompt
  const int concurrency_;
  const std::shared_ptr<StreamSignal> signal_ = std::make_shared<StreamSignal>();
  std::vector<InFlight> active_;
  std::deque<int> follow_ups_;          // units whose next turn is ready
  std::vector<int64_t> unit_computed_;  // [unit]: tokens computed so far
  bool prefix_computed_ = false;
  int next_ = 0;  // the next unit to arrive
};

// The mask-time figures of a constrained run.
void report_constraint(const BenchOptions& o, const Masker& grammar, const EngineStats& before,
                       const EngineStats& after, nlohmann::json& j) {
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
  const grammar::TokenMasker::CacheStats cs = grammar->cache_stats();  // warm-up included
  j["mask_cache_hits"] = cs.hits;
  j["mask_cache_misses"] = cs.misses;
  j["mask_walk_ms_total"] = cs.walk_seconds * 1e3;
}

// Prompt / generation phases (cmd_bench.cc's header comment): only when all
// requests started together, otherwise there is no such split.
void report_phases(const Samples& s, nlohmann::json& j) {
  const Clock::time_point gen_start = s.last_first_token;
  const int64_t gen_tokens = std::count_if(s.token_times.begin(), s.token_times.end(),
                                           [&](Clock::time_point tt) { return tt > gen_start; });
  const double prompt_s = Seconds(gen_start - s.start).count();
  const double gen_s = Seconds(s.end - gen_start).count();
  j["prompt_phase_s"] = prompt_s;
  j["prompt_phase_throughput"] = prompt_s > 0 ? double(s.n_input_tokens) / prompt_s : 0.0;
  j["generation_phase_s"] = gen_s;
  j["generation_phase_tokens"] = gen_tokens;
  j["generation_throughput"] = gen_s > 0 ? double(gen_tokens) / gen_s : 0.0;
}

nlohmann::json report(const BenchOptions& o, const BenchSetup& b, const Workload& w,
                      const Samples& s, const EngineStats& before, const EngineStats& after) {
  const Engine& e = *b.engine;
  const int n = w.n_requests();
  const double duration = Seconds(s.end - s.start).count();
  const uint64_t steps = after.n_steps - before.n_steps;
  const uint64_t queries = after.prefix_cache_queries - before.prefix_cache_queries;
  nlohmann::json j;
  j["model"] = b.m.path;
  j["threads"] = b.m.pool->n_threads();
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
  j["max_num_batched_tokens"] = b.cfg.max_num_batched_tokens;
  j["block_size"] = e.info().block_size;
  j["kv_cache_blocks"] = e.info().n_blocks;
  j["kv_cache_bytes"] = e.info().kv_cache_bytes;
  j["duration_s"] = duration;
  j["total_input_tokens"] = s.n_input_tokens;
  j["total_output_tokens"] = s.n_output_tokens;
  j["request_throughput"] = n / duration;
  j["output_throughput"] = double(s.n_output_tokens) / duration;
  j["total_token_throughput"] = double(s.n_output_tokens + s.n_input_tokens) / duration;
  j["ttft_ms"] = summarize_ms(s.ttft);
  j["tpot_ms"] = summarize_ms(s.tpot);
  std::vector<double> itl;
  itl.reserve(s.itl.size());
  for (const auto& [from, to] : s.itl) itl.push_back(Seconds(to - from).count());
  j["itl_ms"] = summarize_ms(std::move(itl));
  j["e2e_ms"] = summarize_ms(s.e2e);
  j["peak_kv_usage"] = double(after.peak_kv_blocks_used) / double(after.kv_blocks_total);
  j["kv_waste"] = after.kv_waste_at_peak;
  j["preemptions"] = after.n_preemptions - before.n_preemptions;
  j["kv_residual_steals"] = after.kv_residual_steals - before.kv_residual_steals;
  j["steps"] = steps;
  j["mean_batch_size"] =
      steps ? double(after.n_seqs_scheduled - before.n_seqs_scheduled) / double(steps) : 0.0;
  j["mean_step_tokens"] =
      steps ? double(after.n_tokens_processed - before.n_tokens_processed) / double(steps) : 0.0;
  j["prefix_cache_hit_rate"] =
      queries ? double(after.prefix_cache_hits - before.prefix_cache_hits) / double(queries) : 0.0;
  const uint64_t all = after.prefix_cache_hits - before.prefix_cache_hits;
  const uint64_t disk = after.kv_disk_hit_tokens - before.kv_disk_hit_tokens;
  j["prefix_cache_hits_disk_tokens"] = disk;
  j["prefix_cache_hits_pool_tokens"] = all > disk ? all - disk : 0;
  const uint64_t drafts = after.spec_drafts - before.spec_drafts;
  const uint64_t drafted = after.spec_draft_tokens - before.spec_draft_tokens;
  const uint64_t accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
  j["speculative"] = speculative_kind_name(e.info().speculative);
  j["spec_draft_tokens"] = drafted;
  j["spec_accepted_tokens"] = accepted;
  j["spec_acceptance_rate"] = drafted ? double(accepted) / double(drafted) : 0.0;
  // Tokens a sequence gained per step that verified its draft (1 = no gain).
  j["spec_tokens_per_verify_step"] = drafts ? 1.0 + double(accepted) / double(drafts) : 0.0;
  // Tokens generated per sequence per step, all steps (a sequence's decode rate).
  j["generated_tokens_per_seq_step"] =
      after.n_seqs_scheduled > before.n_seqs_scheduled
          ? double(after.n_tokens_generated - before.n_tokens_generated) /
                double(after.n_seqs_scheduled - before.n_seqs_scheduled)
          : 0.0;
  j["prompt_tokens_submitted"] = s.n_input_tokens;
  j["prompt_tokens_computed"] = s.n_computed_prompt;
  j["prompt_tokens_computed_expected"] = s.n_expected_computed;
  const bool all_at_once =
      o.request_rate <= 0 && (o.concurrency <= 0 || o.concurrency >= n) && w.n_turns == 1;
  if (all_at_once && !s.ttft.empty()) report_phases(s, j);
  return j;
}

void print_report(const BenchOptions& o, const BenchSetup& b, const nlohmann::json& j,
                  const EngineStats& before, const EngineStats& after) {
  const Engine& e = *b.engine;
  fmt::print("requests            {}\n", int(j["num_requests"]));
  fmt::print("duration            {:.2f} s\n", double(j["duration_s"]));
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
  if (kv_has_residual(b.cfg.kv_format)) {
    fmt::print("kv residual steals  {}\n", uint64_t(j["kv_residual_steals"]));
  }
  fmt::print("mean batch size     {:.1f} sequences, {:.1f} tokens per step ({} steps)\n",
             double(j["mean_batch_size"]), double(j["mean_step_tokens"]), uint64_t(j["steps"]));
  if (uint64_t(j["spec_draft_tokens"]) > 0) {
    fmt::print(
        "speculative         {}: {} of {} draft tokens accepted ({:.1f}%), {:.2f} tokens per "
        "verification step\n",
        std::string(j["speculative"]), uint64_t(j["spec_accepted_tokens"]),
        uint64_t(j["spec_draft_tokens"]), 100 * double(j["spec_acceptance_rate"]),
        double(j["spec_tokens_per_verify_step"]));
  }
  fmt::print("prefix cache        {}, hit rate {:.1f}% ({} scheduling)\n",
             o.engine.no_prefix_caching ? "off" : "on", 100 * double(j["prefix_cache_hit_rate"]),
             std::string(j["scheduling_policy"]));
  if (after.kv_disk.enabled) {
    fmt::print(
        "prefix cache tiers  pool {} tokens, disk {} tokens ({} blocks loaded, {:.1f} MiB)\n",
        uint64_t(j["prefix_cache_hits_pool_tokens"]), uint64_t(j["prefix_cache_hits_disk_tokens"]),
        after.kv_disk_hit_blocks - before.kv_disk_hit_blocks,
        double(after.kv_disk.bytes_read - before.kv_disk.bytes_read) / (1 << 20));
  }
  const auto n_input = double(int64_t(j["prompt_tokens_submitted"]));
  const int64_t computed = j["prompt_tokens_computed"],
                expected = j["prompt_tokens_computed_expected"];
  fmt::print("prompt tokens       {} submitted, {} computed ({:.1f}%), {} expected ({:.1f}%)\n",
             int64_t(n_input), computed, n_input > 0 ? 100.0 * double(computed) / n_input : 0.0,
             expected, n_input > 0 ? 100.0 * double(expected) / n_input : 0.0);
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
}

}  // namespace

int run_engine_workload(const BenchOptions& o) {
  StatusOr<std::pair<int, int>> in_len = parse_len_range("--input-len", o.input_len);
  if (!in_len.is_ok()) return fail(in_len.status());
  StatusOr<std::pair<int, int>> out_len = parse_len_range("--output-len", o.output_len);
  if (!out_len.is_ok()) return fail(out_len.status());
  BenchSetup b;
  if (Status s = set_up(o, b); !s.is_ok()) return fail(s);
  Engine& e = *b.engine;
  StatusOr<Masker> grammar = bench_grammar(o, *b.m.tokenizer);
  if (!grammar.is_ok()) return fail(grammar.status());
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> any_token(0, b.m.model->config().n_vocab - 1);
  Workload w = draw_workload(o, *in_len, *out_len, rng, any_token);
  // Warm-up: one short request of unrelated tokens (so it primes no cache
  // entry the workload could hit), so buffers have grown before timing.
  {
    std::vector<int32_t> warm(w.shared_prefix.size() + w.units[0].user[0].size());
    for (int32_t& tok : warm) tok = any_token(rng);
    StatusOr<EngineRequest> req = EngineRequest::submit(
        e, *b.m.tokenizer,
        fixed_length_request(std::move(warm), std::min(4, w.units[0].max_tokens[0])));
    if (!req.is_ok()) return fail(req.status());
    if (StatusOr<EngineRequestResult> r = req->wait(); !r.is_ok()) return fail(r.status());
  }
  std::unique_ptr<LongPromptArrival> long_prompt;
  if (o.long_prompt > 0) {
    std::vector<int32_t> arriving(size_t(o.long_prompt)), alone(size_t(o.long_prompt));
    for (int32_t& tok : arriving) tok = any_token(rng);
    for (int32_t& tok : alone) tok = any_token(rng);
    long_prompt = std::make_unique<LongPromptArrival>(std::move(arriving), std::move(alone));
  }
  const EngineStats before = e.stats();
  Samples samples;
  if (Status s = WorkloadRun(o, e, w, *grammar, long_prompt.get()).run(samples); !s.is_ok()) {
    return fail(s);
  }
  const EngineStats after = e.stats();
  nlohmann::json j = report(o, b, w, samples, before, after);
  if (*grammar) report_constraint(o, *grammar, before, after, j);
  if (long_prompt != nullptr) {
    if (Status s = long_prompt->measure_alone(e, *b.m.tokenizer); !s.is_ok()) return fail(s);
    long_prompt->report(samples.itl, samples.last_first_token, j);
  }
  print_report(o, b, j, before, after);
  LongPromptArrival::print(j);
  return write_json(o.json_path, j);
}

}  // namespace omnibus
