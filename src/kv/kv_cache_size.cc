#include "kv/kv_cache_size.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "util/check.h"

namespace omnibus {

StatusOr<int64_t> parse_byte_size(std::string_view text) {
  const std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i);
  std::string unit = s.substr(i);
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1) {
    return Status::invalid_argument("'{}' is not a size (examples: 2GiB, 512MiB, 1000000)", text);
  }
  double scale;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "gb") {
    scale = 1e9;
  } else {
    return Status::invalid_argument(
        "unknown size unit '{}' in '{}' (use B, KiB, MiB, GiB, KB, MB, GB)", unit, text);
  }
  const double bytes = std::stod(number) * scale;
  if (!(bytes >= 1) || bytes > 9e18)
    return Status::invalid_argument("size '{}' is out of range", text);
  return int64_t(std::llround(bytes));
}

int64_t available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  int64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long v = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

int64_t default_kv_cache_bytes() {
  const int64_t avail = available_memory_bytes();
  if (avail <= 0) return int64_t(1) << 30;
  return std::clamp(int64_t(double(avail) * 0.3), int64_t(64) << 20, int64_t(4) << 30);
}

StatusOr<KvCachePlan> plan_kv_cache(const KvGeometry& g, const KvCacheLimits& limits) {
  OMNIBUS_CHECK(limits.max_num_seqs >= 1 && g.block_size >= 1);
  if (g.kv_residual_blocks < -1)
    return Status::invalid_argument("--kv-residual-blocks must be >= 0");
  KvCachePlan plan;
  plan.geometry = g;
  plan.max_num_seqs = limits.max_num_seqs;
  KvGeometry& geometry = plan.geometry;
  const int64_t default_bytes =
      limits.default_bytes > 0 ? limits.default_bytes : default_kv_cache_bytes();
  if (kv_has_residual(g.format)) {
    // Per layer group with sliding-window KV: each group's blocks pin their own.
    const int64_t per_seq = (1 + geometry.residual_blocks()) *
                            (limits.groups != nullptr ? limits.groups->n_groups() : 1);
    // The transfer slots (kivi2's window rows for disaggregated prefill/decode)
    // come off the top; the residual slots share what is left with the blocks.
    const int64_t budget =
        std::max<int64_t>(0, (limits.kv_cache_bytes > 0 ? limits.kv_cache_bytes : default_bytes) -
                                 int64_t(geometry.transfer_bytes()));
    const int64_t seq_bytes = per_seq * int64_t(geometry.residual_slot_bytes());
    int64_t seqs = std::min<int64_t>(limits.max_num_seqs, budget / 2 / seq_bytes);
    if (seqs > kResidualSeqsAlways) {
      seqs =
          std::max<int64_t>(kResidualSeqsAlways, std::min<int64_t>(seqs, budget / 8 / seq_bytes));
    }
    seqs = std::max<int64_t>(seqs, 1);
    geometry.kv_residual_slots = int(seqs * per_seq);
    plan.max_num_seqs = int32_t(seqs);
  }
  const int64_t block_bytes = int64_t(geometry.bytes_per_block());
  const int64_t cache_bytes = limits.kv_cache_bytes;
  int64_t n_blocks;
  if (cache_bytes > 0) {
    n_blocks = cache_bytes / block_bytes;
    while (n_blocks > 1 &&
           n_blocks * block_bytes + int64_t(geometry.fixed_bytes(n_blocks)) > cache_bytes) {
      // Give back just the overflow, in whole blocks (fixed_bytes never grows
      // as n_blocks shrinks, so this lands on the largest pool that fits).
      const int64_t over =
          n_blocks * block_bytes + int64_t(geometry.fixed_bytes(n_blocks)) - cache_bytes;
      n_blocks -= std::max<int64_t>(1, (over + block_bytes - 1) / block_bytes);
    }
    if (n_blocks < 1) {
      return Status::invalid_argument(
          "--kv-cache-memory {} bytes is less than one KV block ({} bytes)", cache_bytes,
          block_bytes);
    }
  } else {
    n_blocks = std::max<int64_t>(1, default_bytes / block_bytes);
    // More than every sequence at full context can never be used.
    const int64_t n_ctx =
        std::max<int64_t>(limits.n_ctx_train > 0 ? limits.n_ctx_train : 4096, limits.max_model_len);
    const int64_t seq_blocks = limits.groups != nullptr
                                   ? limits.groups->blocks_per_seq(n_ctx, g.block_size)
                                   : (n_ctx + g.block_size - 1) / g.block_size;
    n_blocks = std::min(n_blocks, int64_t(plan.max_num_seqs) * seq_blocks);
  }
  n_blocks = std::min<int64_t>(n_blocks, std::numeric_limits<int32_t>::max() / g.block_size);
  plan.n_blocks = n_blocks;
  const int64_t pool_tokens = limits.groups != nullptr
                                  ? limits.groups->max_seq_tokens(n_blocks, g.block_size)
                                  : n_blocks * g.block_size;
  if (limits.max_model_len > 0) {
    if (limits.n_ctx_train > 0 && limits.max_model_len > limits.n_ctx_train &&
        !limits.allow_beyond_n_ctx_train) {
      return Status::invalid_argument("--max-model-len {} exceeds the model's context length {}",
                                      limits.max_model_len, limits.n_ctx_train);
    }
    if (limits.max_model_len > pool_tokens) {
      return Status::invalid_argument(
          "--max-model-len {} does not fit the KV cache ({} tokens); raise --kv-cache-memory",
          limits.max_model_len, pool_tokens);
    }
    plan.max_model_len = limits.max_model_len;
  } else {
    plan.max_model_len = int32_t(
        limits.n_ctx_train > 0 ? std::min<int64_t>(limits.n_ctx_train, pool_tokens) : pool_tokens);
  }
  return plan;
}

}  // namespace omnibus
