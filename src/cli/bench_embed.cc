#include "cli/bench_embed.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/engine.h"

namespace omnibus {
namespace {

using Clock = std::chrono::steady_clock;

double percentile_ms(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double x = p / 100.0 * double(v.size() - 1);
  const size_t i = size_t(x);
  return (i + 1 < v.size() ? std::lerp(v[i], v[i + 1], x - double(i)) : v[i]) * 1e3;
}

int fail(const Status& s) {
  std::fprintf(stderr, "omnibus bench: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int run_embed_bench(const ModelFlags& model, const EngineFlags& engine_flags,
                    const EmbedBenchOptions& o) {
  StatusOr<EngineConfig> cfg = to_engine_config(engine_flags);
  if (!cfg.is_ok()) return fail(cfg.status());
  StatusOr<LoadedModel> m = load_model_for_cli(model);
  if (!m.is_ok()) return fail(m.status());
  set_model_identity(*m, *cfg);
  cfg->log_startup = false;
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(*m->model, *cfg);
  if (!e.is_ok()) return fail(e.status());
  Engine& engine = **e;
  if (!engine.info().can_pool)
    return fail(Status::invalid_argument("this model cannot embed (--task embed)"));
  const int max_len = std::min(o.max_len, engine.info().max_model_len);
  const int min_len = std::min(o.min_len, max_len);
  std::mt19937 rng(uint32_t(o.seed));
  std::uniform_int_distribution<int32_t> tok(1000, m->model->config().n_vocab - 1);
  std::uniform_int_distribution<int> len(min_len, max_len);
  std::vector<std::vector<int32_t>> prompts(size_t(o.num_requests));
  int64_t n_tokens = 0;
  for (auto& p : prompts) {
    p.resize(size_t(len(rng)));
    for (int32_t& t : p) t = tok(rng);
    n_tokens += int64_t(p.size());
  }
  const size_t cap = o.concurrency > 0 ? size_t(o.concurrency) : prompts.size();
  auto signal = std::make_shared<StreamSignal>();
  std::vector<std::pair<std::shared_ptr<RequestStream>, Clock::time_point>> live;
  std::vector<double> latency;
  size_t next = 0;
  const Clock::time_point t0 = Clock::now();
  while (latency.size() < prompts.size()) {
    while (next < prompts.size() && live.size() < cap) {
      Request r;
      r.prompt = prompts[next++];
      r.embed = true;
      StatusOr<std::shared_ptr<RequestStream>> s = engine.submit(std::move(r));
      if (!s.is_ok()) return fail(s.status());
      (*s)->set_signal(signal);
      live.emplace_back(*s, Clock::now());
    }
    signal->wait(std::chrono::milliseconds(100));
    for (size_t i = 0; i < live.size();) {
      bool done = false;
      while (std::optional<EngineEvent> ev = live[i].first->try_pop()) done = done || ev->final;
      if (!done) {
        ++i;
        continue;
      }
      latency.push_back(std::chrono::duration<double>(Clock::now() - live[i].second).count());
      live.erase(live.begin() + std::ptrdiff_t(i));
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const EngineStats st = engine.stats();
  nlohmann::json j = {{"task", "embed"},
                      {"num_requests", o.num_requests},
                      {"concurrency", o.concurrency},
                      {"input_len", fmt::format("{}:{}", min_len, max_len)},
                      {"prompt_tokens", n_tokens},
                      {"seconds", wall},
                      {"embeddings_per_s", double(o.num_requests) / wall},
                      {"prompt_tokens_per_s", double(n_tokens) / wall},
                      {"latency_ms",
                       {{"p50", percentile_ms(latency, 50)},
                        {"p90", percentile_ms(latency, 90)},
                        {"p99", percentile_ms(latency, 99)}}},
                      {"mean_batch_size", st.mean_batch_size},
                      {"threads", m->pool->n_threads()}};
  fmt::print(
      "embed: {} requests ({} tokens, {}:{} each), concurrency {}: {:.2f} s, {:.1f} embeddings/s, "
      "{:.0f} prompt tok/s, latency p50 {:.1f} ms p99 {:.1f} ms, mean batch {:.1f}\n",
      o.num_requests, n_tokens, min_len, max_len, o.concurrency, wall,
      double(o.num_requests) / wall, double(n_tokens) / wall, percentile_ms(latency, 50),
      percentile_ms(latency, 99), st.mean_batch_size);
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << j.dump(2) << "\n";
    if (!out) return fail(Status::io("cannot write '{}'", o.json_path));
  }
  return 0;
}

}  // namespace omnibus
