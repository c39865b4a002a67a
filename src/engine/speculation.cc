// SpeculativeConfig parsing and checks, and the adaptive draft length (speculation.h).
#include "engine/speculation.h"

#include <algorithm>
#include <cmath>

namespace omnibus {

StatusOr<SpeculativeKind> parse_speculative_kind(const std::string& name) {
  if (name == "none") return SpeculativeKind::kNone;
  if (name == "ngram") return SpeculativeKind::kNgram;
  if (name == "draft") return SpeculativeKind::kDraft;
  return Status::invalid_argument(
      "--speculative '{}' is not a speculator: none, ngram (prompt lookup) or draft (a draft "
      "model, --draft-model)",
      name);
}

const char* speculative_kind_name(SpeculativeKind kind) {
  switch (kind) {
    case SpeculativeKind::kNgram:
      return "ngram";
    case SpeculativeKind::kDraft:
      return "draft";
    case SpeculativeKind::kNone:
      break;
  }
  return "none";
}

Status validate(const SpeculativeConfig& c) {
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > kMaxSpeculativeTokens) {
    return Status::invalid_argument("--num-speculative-tokens must be in [1, {}], got {}",
                                    kMaxSpeculativeTokens, c.num_speculative_tokens);
  }
  if (c.ngram_min < 1 || c.ngram_max < c.ngram_min || c.ngram_max > 64) {
    return Status::invalid_argument(
        "--spec-ngram-min/max must satisfy 1 <= min <= max <= 64, got {} and {}", c.ngram_min,
        c.ngram_max);
  }
  if (c.max_step_tokens < 0) {
    return Status::invalid_argument("--spec-max-step-tokens must be >= 0, got {}",
                                    c.max_step_tokens);
  }
  return Status::ok();
}

void DraftStats::observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  constexpr double kWeight = 0.3;
  acceptance += kWeight * (double(accepted) / double(drafted) - acceptance);
}

int32_t draft_length(const SpeculativeConfig& c, const DraftStats& s, double cost_ratio) {
  constexpr double kFloor = 0.1;
  const int32_t k = c.num_speculative_tokens;
  const double threshold = std::max(kFloor, cost_ratio);
  const double a = std::clamp(s.acceptance, 0.0, 1.0);
  if (a < threshold) return cost_ratio > kFloor ? 0 : 1;
  if (a >= 0.999) return k;  // every position pays (log(a) ~ 0 below)
  const double d = std::floor(std::log(threshold) / std::log(a));  // a^d >= threshold
  return int32_t(std::clamp(d, 1.0, double(k)));
}

}  // namespace omnibus
