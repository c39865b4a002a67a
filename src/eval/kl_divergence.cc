#include "eval/kl_divergence.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "eval/logits_file.h"
#include "util/check.h"

namespace omnibus::eval {
namespace {

std::pair<double, double> mean_and_uncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {0., 0.};
  const double f = sum / double(count);
  double df = sum2 / double(count) - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / double(count - 1)) : 0.;
  return {f, df};
}

double covariance(double suma, double sumb, double sumab, int64_t count) {
  if (count < 10) return 0.0;
  const double n = double(count);
  return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

// llama.cpp's percentile: linear interpolation between sorted values.
double percentile(const std::vector<float>& v, float fraction) {
  if (fraction <= 0) return v.front();
  if (fraction >= 1) return v.back();
  float p = fraction * float(v.size() - 1);
  const size_t ip = size_t(p);
  p -= float(ip);
  return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

}  // namespace

KldRow kld_row(std::span<const float> logits, std::span<const uint16_t> base_row, int32_t token) {
  const int32_t n = int32_t(logits.size());
  OMNIBUS_CHECK(n > 0 && int64_t(base_row.size()) == row_words(n) && token >= 0 && token < n);
  float max_logit = logits[0];
  int32_t imax = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (logits[size_t(i)] > max_logit) {
      max_logit = logits[size_t(i)];
      imax = i;
    }
  }
  double sum_exp = 0.0;
  for (int32_t i = 0; i < n; ++i) sum_exp += std::exp(logits[size_t(i)] - max_logit);
  const float log_sum_exp = float(std::log(sum_exp));

  KldRow r;
  r.nll = max_logit + log_sum_exp - logits[size_t(token)];
  r.nll_base = -row_log_prob(base_row, token);

  const float log_norm = max_logit + log_sum_exp;
  double kld = 0;
  int32_t imax_base = -1;
  float p_log_base_max = 0;
  for (int32_t i = 0; i < n; ++i) {
    const float p_log_base = row_log_prob(base_row, i);
    if (i == 0 || p_log_base > p_log_base_max) {
      p_log_base_max = p_log_base;
      imax_base = i;
    }
    if (p_log_base > -16.f) {
      kld += std::exp(p_log_base) * (p_log_base - logits[size_t(i)] + log_norm);
    }
  }
  r.kld = kld;
  r.same_top = imax == imax_base;
  r.p_diff = std::exp(-r.nll) - std::exp(-r.nll_base);
  return r;
}

void KlDivergence::add(const KldRow& r) {
  sum_nll_ += r.nll;
  sum_nll2_ += double(r.nll) * r.nll;
  sum_nll_base_ += r.nll_base;
  sum_nll_base2_ += double(r.nll_base) * r.nll_base;
  sum_nll_nll_base_ += double(r.nll) * r.nll_base;
  sum_kld_ += r.kld;
  sum_kld2_ += r.kld * r.kld;
  kld_values_.push_back(float(r.kld));
  ++count_;
  n_same_top_ += r.same_top;
  const float p_diff = r.p_diff;
  sum_p_diff_ += p_diff;
  const double p_diff2 = double(p_diff) * p_diff;
  sum_p_diff2_ += p_diff2;
  sum_p_diff4_ += p_diff2 * p_diff2;
}

KlDivergence::Summary KlDivergence::summary() const {
  OMNIBUS_CHECK(count_ >= 1);
  Summary s;
  const auto log_ppl = mean_and_uncertainty(sum_nll_, sum_nll2_, count_);
  s.ppl = std::exp(log_ppl.first);
  s.ppl_unc = s.ppl * log_ppl.second;
  const auto log_ppl_base = mean_and_uncertainty(sum_nll_base_, sum_nll_base2_, count_);
  s.ppl_base = std::exp(log_ppl_base.first);
  s.ppl_base_unc = s.ppl_base * log_ppl_base.second;
  const double cov = covariance(sum_nll_, sum_nll_base_, sum_nll_nll_base_, count_);
  s.log_ppl_ratio = log_ppl.first - log_ppl_base.first;
  s.log_ppl_ratio_unc = std::sqrt(std::max(
      0.0, log_ppl.second * log_ppl.second + log_ppl_base.second * log_ppl_base.second - 2 * cov));
  s.ppl_ratio = std::exp(s.log_ppl_ratio);
  s.ppl_ratio_unc = s.ppl_ratio * s.log_ppl_ratio_unc;
  const auto kld = mean_and_uncertainty(sum_kld_, sum_kld2_, count_);
  s.kld_mean = kld.first;
  s.kld_unc = kld.second;
  std::vector<float> v = kld_values_;
  std::sort(v.begin(), v.end());
  s.kld_max = v.back();
  s.kld_min = v.front();
  s.kld_999 = percentile(v, 0.999f);
  s.kld_99 = percentile(v, 0.990f);
  s.kld_95 = percentile(v, 0.950f);
  s.kld_90 = percentile(v, 0.900f);
  s.kld_10 = percentile(v, 0.100f);
  s.kld_median =
      v.size() % 2 == 0 ? 0.5f * (v[v.size() / 2] + v[v.size() / 2 - 1]) : v[v.size() / 2];
  s.same_top = double(n_same_top_) / double(count_);
  s.same_top_unc = count_ > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / double(count_ - 1)) : 0;
  const auto dp = mean_and_uncertainty(sum_p_diff_, sum_p_diff2_, count_);
  s.dp_mean = dp.first;
  s.dp_unc = dp.second;
  const auto dp_mse = mean_and_uncertainty(sum_p_diff2_, sum_p_diff4_, count_);
  s.dp_rms = std::sqrt(dp_mse.first);
  s.dp_rms_unc = s.dp_rms > 0 ? 0.5 / s.dp_rms * dp_mse.second : 0;
  return s;
}

std::string KlDivergence::format(const Summary& s) {
  std::string o;
  o += "====== Perplexity statistics ======\n";
  o += fmt::format("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", s.ppl, s.ppl_unc);
  o += fmt::format("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", s.ppl_base,
                   s.ppl_base_unc);
  o += fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", s.log_ppl_ratio,
                   s.log_ppl_ratio_unc);
  o += fmt::format("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ppl_ratio,
                   s.ppl_ratio_unc);
  o += "\n====== KL divergence statistics ======\n";
  o += fmt::format("Mean    KLD: {:10.6f} ± {:10.6f}\n", s.kld_mean, s.kld_unc);
  o += fmt::format("Maximum KLD: {:10.6f}\n", s.kld_max);
  o += fmt::format("99.9%   KLD: {:10.6f}\n", s.kld_999);
  o += fmt::format("99.0%   KLD: {:10.6f}\n", s.kld_99);
  o += fmt::format("95.0%   KLD: {:10.6f}\n", s.kld_95);
  o += fmt::format("90.0%   KLD: {:10.6f}\n", s.kld_90);
  o += fmt::format("Median  KLD: {:10.6f}\n", s.kld_median);
  o += fmt::format("10.0%   KLD: {:10.6f}\n", s.kld_10);
  o += fmt::format("Minimum KLD: {:10.6f}\n", s.kld_min);
  o += "\n====== Token probability statistics ======\n";
  o += fmt::format("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100 * s.dp_mean, 100 * s.dp_unc);
  o += fmt::format("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100 * s.dp_rms, 100 * s.dp_rms_unc);
  o += fmt::format("Same top p: {:6.3f} ± {:5.3f} %\n", 100 * s.same_top, 100 * s.same_top_unc);
  return o;
}

}  // namespace omnibus::eval
