// The decode-against-the-read-probe report (bench_read_probe.h).
#include "cli/bench_read_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "cli/bench_common.h"
#include "util/check.h"

namespace omnibus {

uint64_t decode_bytes_per_token(const GgufFile& file, const ModelConfig& config) {
  const bool tied = file.find_tensor("output.weight") == nullptr;
  uint64_t bytes = 0;
  for (const GgufTensor& t : file.tensors()) {
    if (t.name == "token_embd.weight" && !tied) continue;
    if (config.is_moe() && std::string_view(t.name).find("_exps") != std::string_view::npos) {
      bytes += uint64_t(t.n_bytes) / uint64_t(config.n_expert) * uint64_t(config.n_expert_used);
      continue;
    }
    bytes += t.n_bytes;
  }
  return bytes;
}

namespace {

std::string range(const std::vector<double>& v, double scale, int digits) {
  return fmt::format("{:.{}f} ({:.{}f}-{:.{}f})", median(v) * scale, digits,
                     *std::min_element(v.begin(), v.end()) * scale, digits,
                     *std::max_element(v.begin(), v.end()) * scale, digits);
}

constexpr double kGiB = double(1 << 30);

}  // namespace

void report_read_probe(int tg, uint64_t bytes_per_token, const std::vector<double>& tg_rates,
                       const std::vector<double>& probe_bytes_s, int n_threads, nlohmann::json& j) {
  OMNIBUS_CHECK(tg_rates.size() == probe_bytes_s.size() && !tg_rates.empty());
  std::vector<double> decode_gib, probe_gib, ratio;
  for (size_t i = 0; i < tg_rates.size(); ++i) {
    decode_gib.push_back(tg_rates[i] * double(bytes_per_token) / kGiB);
    probe_gib.push_back(probe_bytes_s[i] / kGiB);
    ratio.push_back(decode_gib.back() / probe_gib.back());
  }
  fmt::print(
      "\ntg{} weight stream: {:.3f} GiB a token (file bytes: every tensor but an untied "
      "token embedding)\n"
      "  decode       {} GiB/s\n"
      "  read probe   {} GiB/s ({} threads, huge pages, right after each run)\n"
      "  decode/probe {} %\n",
      tg, double(bytes_per_token) / kGiB, range(decode_gib, 1, 1), range(probe_gib, 1, 1),
      n_threads, range(ratio, 100, 0));
  j["decode_bytes_per_token"] = bytes_per_token;
  j["tg_gib_s_all"] = decode_gib;
  j["read_probe_gib_s_all"] = probe_gib;
  j["tg_of_read_probe"] = median(ratio);
  j["tg_of_read_probe_all"] = ratio;
}

void report_weights_probe(uint64_t packed_bytes, const std::vector<double>& tg_rates,
                          const std::vector<double>& pass_s, nlohmann::json& j) {
  OMNIBUS_CHECK(tg_rates.size() == pass_s.size() && !tg_rates.empty() && packed_bytes > 0);
  std::vector<double> decode_gib, probe_gib, ratio;
  for (size_t i = 0; i < tg_rates.size(); ++i) {
    decode_gib.push_back(tg_rates[i] * double(packed_bytes) / kGiB);
    probe_gib.push_back(double(packed_bytes) / pass_s[i] / kGiB);
    ratio.push_back(tg_rates[i] * pass_s[i]);
  }
  fmt::print(
      "  the packed weights' own pages ({:.3f} GiB, all read once a token):\n"
      "  decode               {} GiB/s of packed bytes\n"
      "  weights probe        {} GiB/s (the probe's loops over those pages)\n"
      "  decode/weights probe {} %\n",
      double(packed_bytes) / kGiB, range(decode_gib, 1, 1), range(probe_gib, 1, 1),
      range(ratio, 100, 0));
  j["packed_weight_bytes"] = packed_bytes;
  j["weights_probe_gib_s_all"] = probe_gib;
  j["tg_of_weights_probe"] = median(ratio);
  j["tg_of_weights_probe_all"] = ratio;
}

}  // namespace omnibus
