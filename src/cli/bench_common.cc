// The helpers of bench_common.h.
#include "cli/bench_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace omnibus {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

int fail(const Status& s) {
  std::fprintf(stderr, "omnibus bench: %s\n", s.to_string().c_str());
  return 1;
}

int write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return 0;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return fail(Status::io("cannot write '{}'", path));
  return 0;
}

Status set_up(const BenchOptions& o, BenchSetup& b) {
  OMNIBUS_ASSIGN_OR_RETURN(b.cfg, to_engine_config(o.engine));
  OMNIBUS_ASSIGN_OR_RETURN(b.m, load_model_for_cli(o.model));
  set_model_identity(b.m, b.cfg);
  OMNIBUS_RETURN_IF_ERROR(load_draft_model_for_cli(o.engine.draft_model, b.m, b.cfg));
  OMNIBUS_ASSIGN_OR_RETURN(b.engine, Engine::create(*b.m.model, b.cfg));
  return Status::ok();
}

Request fixed_length_request(std::vector<int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  return r;
}

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

}  // namespace omnibus
