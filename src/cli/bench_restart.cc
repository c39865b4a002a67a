// `omnibus bench --restart-warm N --kv-offload-dir DIR`: the disk tier across
// server restarts (docs/disk-tier.md). Every prompt is a --shared-prefix-len
// system prompt plus its own --input-len user turn, --output-len greedy
// tokens. Each run is a fresh engine (a restart; the model stays loaded, its
// load time left out of both sides) serving one request, timed from submit to
// its first token (TTFT):
//   cold:  N runs without the tier: the whole prompt is computed;
//   seed:  one run with the tier (another user turn): the shared prefix's
//          blocks are written; the engine's end flushes them;
//   warm:  N runs with the tier on DIR, the cold runs' N prompts: the prefix
//          is loaded from disk, the user turn computed.
// Reports TTFT p50 of cold and warm and their ratio, the time to load one
// block against computing one, and whether every warm output equals its cold one.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_common.h"
#include "cli/engine_request.h"
#include "kernels/cpu_features.h"

namespace omnibus {

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
  if (int rc = write_json(o.json_path, j); rc != 0) return rc;
  return n_identical == n ? 0 : 1;
}

}  // namespace omnibus
