// KL divergence of a candidate's token distributions from a base's, token by
// token, with the statistics llama.cpp's `llama-perplexity --kl-divergence`
// prints (tools/perplexity/perplexity.cpp): mean KLD with its uncertainty and
// percentiles, the same-top-token rate, both perplexities and their ratio,
// and the probability of the right token (Δp). The base is a llama-perplexity
// logits file row (eval/logits_file.h), the candidate raw logits.
//
// Thread-safety: KlDivergence is used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace omnibus::eval {

// One position's numbers.
struct KldRow {
  double kld = 0;      // sum_i p_base(i) (log p_base(i) - log p(i))
  float nll = 0;       // -log p(token), candidate
  float nll_base = 0;  // -log p_base(token)
  float p_diff = 0;    // p(token) - p_base(token)
  bool same_top = false;
};

// One position: `logits` [n_vocab] of the candidate, `base_row` the base's
// encoded row at the same position, `token` the next token (the one both
// score). Computed as llama.cpp computes it (the base's log-probs below -16
// are left out of the sum). Pure: rows may be computed on any thread.
KldRow kld_row(std::span<const float> logits, std::span<const uint16_t> base_row, int32_t token);

class KlDivergence {
 public:
  // Adds one position; the statistics depend on the order of the adds only
  // in their last bits (sums), so callers add in position order.
  void add(const KldRow& r);

  int64_t count() const { return count_; }

  struct Summary {
    double ppl = 0, ppl_unc = 0;            // candidate
    double ppl_base = 0, ppl_base_unc = 0;  // base
    double log_ppl_ratio = 0, log_ppl_ratio_unc = 0;
    double ppl_ratio = 0, ppl_ratio_unc = 0;
    double kld_mean = 0, kld_unc = 0;
    double kld_max = 0, kld_999 = 0, kld_99 = 0, kld_95 = 0, kld_90 = 0, kld_median = 0;
    double kld_10 = 0, kld_min = 0;
    double same_top = 0, same_top_unc = 0;  // fractions
    double dp_mean = 0, dp_unc = 0, dp_rms = 0, dp_rms_unc = 0;
  };
  // REQUIRES: count() >= 1 (llama.cpp prints the statistics from 100 on).
  Summary summary() const;

  // The report, in llama.cpp's words and order.
  static std::string format(const Summary& s);

 private:
  double sum_nll_ = 0, sum_nll2_ = 0, sum_nll_base_ = 0, sum_nll_base2_ = 0, sum_nll_nll_base_ = 0;
  double sum_kld_ = 0, sum_kld2_ = 0;
  double sum_p_diff_ = 0, sum_p_diff2_ = 0, sum_p_diff4_ = 0;
  int64_t n_same_top_ = 0, count_ = 0;
  std::vector<float> kld_values_;
};

}  // namespace omnibus::eval
