// `omnibus bench`: offline benchmarks of the engine.
//
// Single-stream mode (what llama-bench measures, for side-by-side ratios):
//   omnibus bench -m MODEL --pp 512 --tg 128 --repetitions 3 --json out.json
//   pp: one prompt of N random tokens from an empty cache, tokens/s;
//   tg: N tokens generated one decode step at a time from an empty cache, tokens/s.
//   Each is one request on the engine, alone, timed by its events (from the
//   request's first step); the prompt runs in --max-num-batched-tokens chunks.
//   --depth D (llama-bench's -d): both run after D tokens of context, a random
//   prefix computed once (untimed) that every test's prompt starts with and
//   the prefix cache serves, so pp times N new tokens attending to D + N and
//   tg N decode steps at depth D.
//   --read-probe: after each timed tg run, a read probe with as many threads
//   (bench_read_probe.h); reports the decode's GiB/s of weights against it,
//   and (dense models) against the same loops over the packed weights' own
//   pages.
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
// Steady pace (issue 35), --long-prompt L in engine mode: one prompt of L
//   random tokens arrives once every request decodes (bench_long_prompt.h);
//   reports the streams' ITL while it waits for its first token against
//   before it came, and its TTFT against the same length on the idle engine.
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
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench_common.h"
#include "cli/bench_embed.h"
#include "cli/bench_read_probe.h"
#include "cli/commands.h"
#include "cli/engine_request.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/read_probe.h"

namespace omnibus {

// Single-stream mode, one request at a time on the engine; the times are
// the engine's (EngineEvent), from the request's first step:
//   pp: a prompt of N random tokens, until its first token is sampled;
//   tg: a one-token prompt and N tokens, until the last one is sampled
//       (N forward passes, the first of them the one-token prompt).
// With --depth D every prompt is the same D-token prefix (cached by an
// untimed first request) plus those tokens; a test whose prefix was not
// served by the cache fails rather than time the prefix too.
int run_single_stream(const BenchOptions& o) {
  BenchSetup b;
  if (Status s = set_up(o, b); !s.is_ok()) return fail(s);
  const LoadedModel& m = b.m;
  Engine& e = *b.engine;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> any_token(0, m.model->config().n_vocab - 1);
  using Seconds = std::chrono::duration<double>;
  if (o.depth > 0 && !e.info().prefix_caching) {
    return fail(Status::invalid_argument(
        "--depth needs the prefix cache (it serves the depth tokens to every test): drop "
        "--no-prefix-caching"));
  }
  std::vector<int32_t> prefix(static_cast<size_t>(o.depth));  // the context every test runs at
  for (int32_t& t : prefix) t = any_token(rng);
  // The block-aligned part of the prefix the cache can serve.
  const int32_t cacheable = o.depth / e.info().block_size * e.info().block_size;
  // Runs one request (the prefix, then n_prompt random tokens); the seconds
  // from its first step to its first (or last) token.
  auto timed = [&](int n_prompt, int max_tokens, bool until_last) -> StatusOr<double> {
    std::vector<int32_t> prompt = prefix;
    for (int i = 0; i < n_prompt; ++i) prompt.push_back(any_token(rng));
    OMNIBUS_ASSIGN_OR_RETURN(
        EngineRequest req,
        EngineRequest::submit(e, *m.tokenizer,
                              fixed_length_request(std::move(prompt), max_tokens)));
    OMNIBUS_ASSIGN_OR_RETURN(EngineRequestResult r, req.wait());
    if (r.n_cached_tokens < cacheable) {
      return Status::resource_exhausted(
          "--depth {}: the prefix cache served {} of the prefix's {} cacheable tokens (the KV "
          "pool is too small to keep them: raise --kv-cache-memory)",
          o.depth, r.n_cached_tokens, cacheable);
    }
    const auto end = until_last ? r.completions[0].end : r.first_token;
    return Seconds(end - r.first_scheduled).count();
  };
  if (o.depth > 0) {  // computes the prefix, untimed, into the cache
    fmt::print(stderr, "bench: computing the {}-token context (--depth)...\n", o.depth);
    std::vector<int32_t> first = prefix;
    first.push_back(any_token(rng));
    StatusOr<EngineRequest> req =
        EngineRequest::submit(e, *m.tokenizer, fixed_length_request(std::move(first), 1));
    if (!req.is_ok()) return fail(req.status());
    if (StatusOr<EngineRequestResult> r = req->wait(); !r.is_ok()) return fail(r.status());
  }
  const std::string at = o.depth > 0 ? fmt::format(" @ d{}", o.depth) : "";
  std::vector<double> pp_rates, tg_rates, probe_rates, weights_pass_s;
  std::optional<ReadProbe> probe;  // allocated and touched before any timing
  // A dense model's decode reads every packed weight once a token (a mixture
  // of experts' only its routed experts: no weights probe there).
  std::vector<std::span<const uint8_t>> packed;
  size_t packed_bytes = 0;
  if (o.read_probe && o.tg > 0) {
    fmt::print(stderr, "bench: touching the read probe's {} MiB...\n",
               ReadProbe::kDefaultBytes >> 20);
    probe.emplace();
    if (!m.model->config().is_moe()) packed = live_packed_weights();
  }
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
      if (rep >= 0 && probe) probe_rates.push_back(probe->measure(m.pool->n_threads()));
      if (rep >= 0 && !packed.empty()) {
        weights_pass_s.push_back(read_spans(packed, m.pool->n_threads(), 2, &packed_bytes));
      }
    }
  }
  nlohmann::json j;
  j["model"] = m.path;
  j["threads"] = m.pool->n_threads();
  j["isa"] = isa_name(cpu_features().chosen);
  j["kv_cache_dtype"] = o.engine.kv_dtype;
  j["repetitions"] = o.repetitions;
  j["depth"] = o.depth;
  fmt::print("| test | tokens/s (median of {}) | min | max |\n|---|---|---|---|\n", o.repetitions);
  if (!pp_rates.empty()) {
    j["pp"] = o.pp;
    j["pp_tok_s"] = median(pp_rates);
    j["pp_tok_s_all"] = pp_rates;
    fmt::print("| pp{}{} | {:.1f} | {:.1f} | {:.1f} |\n", o.pp, at, median(pp_rates),
               *std::min_element(pp_rates.begin(), pp_rates.end()),
               *std::max_element(pp_rates.begin(), pp_rates.end()));
  }
  if (!tg_rates.empty()) {
    j["tg"] = o.tg;
    j["tg_tok_s"] = median(tg_rates);
    j["tg_tok_s_all"] = tg_rates;
    fmt::print("| tg{}{} | {:.1f} | {:.1f} | {:.1f} |\n", o.tg, at, median(tg_rates),
               *std::min_element(tg_rates.begin(), tg_rates.end()),
               *std::max_element(tg_rates.begin(), tg_rates.end()));
  }
  if (probe) {
    report_read_probe(o.tg, decode_bytes_per_token(*m.file, m.model->config()), tg_rates,
                      probe_rates, m.pool->n_threads(), j);
    if (!weights_pass_s.empty()) report_weights_probe(packed_bytes, tg_rates, weights_pass_s, j);
  }
  return write_json(o.json_path, j);
}

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
  cmd->add_option("-d,--depth", o->depth,
                  "Single-stream: tokens of context before each pp / tg test (llama-bench's -d): "
                  "a random prefix computed once, untimed, and served by the prefix cache")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_flag("--read-probe", o->read_probe,
                "Single-stream: after each timed tg run, read a 1 GiB buffer, and (dense models) "
                "the packed weights themselves, with the same number of threads and report the "
                "decode's weight stream (GiB/s) against each");
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
  cmd->add_option("--long-prompt", o->long_prompt,
                  "Engine mode: a prompt of this many random tokens arrives once the streams "
                  "decode; reports their ITL while it waits for its first token against before "
                  "it came, and its TTFT against the same length on the idle engine")
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
