#include "engine/step_time_model.h"

#include <algorithm>
#include <cmath>

namespace omnibus {

void StepTimeModel::observe(int32_t n_decode, int32_t n_extra, double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds) || n_decode + n_extra <= 0) return;
  auto ema = [this](double& e, double x) { e = e < 0 ? x : e + alpha_ * (x - e); };
  if (n_extra == 0) {
    ema(t_decode_, seconds);
    since_decode_only_ = 0;
    ++since_extra_;
  } else if (n_decode > 0) {
    ++since_decode_only_;
    // What the extra tokens added to a step of these decodes (at least a
    // tenth of the step: timing noise must not make them look free).
    if (t_decode_ >= 0) ema(mu_, std::max(seconds - t_decode_, 0.1 * seconds) / n_extra);
    since_extra_ = 0;
  }
}

double StepTimeModel::cost_ratio(int32_t n_decodes, double extra_s) const {
  if (n_decodes <= 0 || t_decode_ <= 0) return 0;
  const double mu = mu_ > 0 ? mu_ : 0;
  if (mu <= 0 && !(extra_s > 0)) return 0;
  return double(n_decodes) * (mu + std::max(extra_s, 0.0)) / t_decode_;
}

bool StepTimeModel::estimates(double* t_decode, double* per_extra_token) const {
  if (t_decode_ < 0 || mu_ <= 0) return false;
  *t_decode = t_decode_;
  *per_extra_token = mu_;
  return true;
}

int32_t StepTimeModel::token_budget(double target_s, int32_t n_decodes, int32_t max_tokens) const {
  if (n_decodes <= 0) return max_tokens;
  const int32_t floor_tokens = std::min(max_tokens, n_decodes + kMinPromptTokens);
  double t_d = 0, mu = 0;
  if (!estimates(&t_d, &mu)) return std::min(max_tokens, n_decodes + kProbeTokens);
  const double prompt = (target_s - t_d) / mu;
  if (!(prompt < double(max_tokens - n_decodes))) return max_tokens;
  return std::max(floor_tokens, n_decodes + int32_t(prompt));
}

}  // namespace omnibus
