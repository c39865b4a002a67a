// `omnibus bench`: offline benchmarks of the engine.
//
// Single-stream mode (what llama-bench measures, for side-by-side ratios):
//   omnibus bench -m MODEL --pp 512 --tg 128 --repetitions 3 --json out.json
//   pp: one prompt of N random tokens from an empty cache, tokens/s;
//   tg: N tokens generated one decode step at a time from an empty cache, tokens/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "model/sequence_runner.h"

namespace omnibus {
namespace {

struct BenchOptions {
  std::string model = "smollm2-135m";
  int threads = 0;
  int pp = 512;
  int tg = 128;
  int repetitions = 3;
  std::string kv_dtype = "f16";
  std::string json_path;
  uint64_t seed = 42;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

int run_single_stream(const BenchOptions& o) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "omnibus bench: %s\n", s.to_string().c_str());
    return 1;
  };
  StatusOr<DType> kv_dtype = parse_kv_dtype(o.kv_dtype);
  if (!kv_dtype.is_ok()) return fail(kv_dtype.status());
  StatusOr<LoadedModel> m = load_model_for_cli(o.model, o.threads);
  if (!m.is_ok()) return fail(m.status());
  const int n_vocab = m->model->config().n_vocab;
  StatusOr<std::unique_ptr<SequenceRunner>> runner =
      SequenceRunner::create(*m->model, std::max(o.pp, o.tg) + 1, *kv_dtype);
  if (!runner.is_ok()) return fail(runner.status());

  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> any_token(0, n_vocab - 1);
  using Clock = std::chrono::steady_clock;
  std::vector<double> pp_rates, tg_rates;
  // One untimed warm-up of each kind, then the timed repetitions.
  for (int rep = -1; rep < o.repetitions; ++rep) {
    if (o.pp > 0) {
      std::vector<int32_t> prompt(size_t(o.pp));
      for (int32_t& t : prompt) t = any_token(rng);
      (*runner)->reset();
      const auto t0 = Clock::now();
      if (auto l = (*runner)->eval(prompt); !l.is_ok()) return fail(l.status());
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep >= 0) pp_rates.push_back(o.pp / s);
    }
    if (o.tg > 0) {
      (*runner)->reset();
      int32_t token = any_token(rng);
      const auto t0 = Clock::now();
      for (int i = 0; i < o.tg; ++i) {
        auto l = (*runner)->eval(std::span<const int32_t>(&token, 1));
        if (!l.is_ok()) return fail(l.status());
        token = int32_t(std::max_element(l->begin(), l->end()) - l->begin());
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep >= 0) tg_rates.push_back(o.tg / s);
    }
  }
  nlohmann::json j;
  j["model"] = m->path;
  j["threads"] = m->pool->n_threads();
  j["kv_cache_dtype"] = o.kv_dtype;
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

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Offline benchmark (single-stream prompt and generation speed)");
  cmd->add_option("-m,--model", o->model, "GGUF path or bundled model name")->capture_default_str();
  cmd->add_option("--pp", o->pp, "Prompt tokens processed in one go (0 = skip)")->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--tg", o->tg, "Tokens generated one at a time (0 = skip)")->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-r,--repetitions", o->repetitions, "Timed repetitions (after one warm-up)")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("-t,--threads", o->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", o->kv_dtype, "KV cache element type: f16, f32")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the random prompt tokens")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Also write the results as JSON to this file");
  cmd->callback([o, &exit_code] { exit_code = run_single_stream(*o); });
}

}  // namespace omnibus
