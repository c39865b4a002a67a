// paged_attention_ref: the definition of correct. Gathers each sequence's
// keys and values into contiguous f32 rows, then for every query does
// textbook softmax(q.K^T * scale [softcapped] + mask) V, in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kv/attention.h"
#include "kv/kv_quant.h"
#include "kv/kv_quant_paged.h"
#include "util/check.h"
#include "util/fp16.h"

namespace omnibus {
namespace {

// [n_ctx, n_kv_heads, head_dim] f32 of a sequence's cached rows as a query at
// qpos reads them (kv_read_row: dequantized, kivi2's open group in fp16).
// Positions in no block (a sliding-window group's table where every position
// left the window, < 0) are zeros: no query sees them.
void gather(const PagedKvLayer& kv, bool is_v, const AttentionSeq& s, int32_t n_ctx, int32_t qpos,
            std::vector<float>& g) {
  g.assign(static_cast<size_t>(n_ctx) * kv.n_kv_heads * kv.head_dim, 0.f);
  for (int32_t pos = 0; pos < n_ctx; ++pos) {
    if (s.block_table[pos / kv.block_size] < 0) continue;
    for (int h = 0; h < kv.n_kv_heads; ++h) {
      kv_read_row(kv, s, is_v, pos, h, qpos,
                  &g[(static_cast<size_t>(pos) * kv.n_kv_heads + h) * kv.head_dim]);
    }
  }
}

}  // namespace

void paged_attention_ref(const float* q, const PagedKvLayer& kv, const AttentionSeq* seqs,
                         int n_seqs, const AttentionParams& p, float* out) {
  OMNIBUS_CHECK(p.head_dim == kv.head_dim && p.n_kv_head == kv.n_kv_heads);
  OMNIBUS_CHECK(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0);
  const int hd = p.head_dim;
  const int n_rep = p.n_head / p.n_kv_head;
  std::vector<float> K, V;
  for (int si = 0; si < n_seqs; ++si) {
    const AttentionSeq& s = seqs[si];
    const int32_t n_ctx = s.n_past + s.n_tokens;
    std::vector<double> w(n_ctx);
    for (int32_t t = 0; t < s.n_tokens; ++t) {
      const int32_t pos = s.n_past + t;
      // What a query sees depends on its position only with a KIVI residual.
      if (t == 0 || kv_has_residual(kv.format)) {
        gather(kv, false, s, n_ctx, pos, K);
        gather(kv, true, s, n_ctx, pos, V);
      }
      for (int h = 0; h < p.n_head; ++h) {
        const int kvh = h / n_rep;
        const float* qh = q + (static_cast<int64_t>(s.first_token + t) * p.n_head + h) * hd;
        double max = -INFINITY;
        for (int32_t j = 0; j < n_ctx; ++j) {
          const bool visible = (s.bidirectional || j <= pos) &&
                               (s.sliding_window <= 0 || j > pos - s.sliding_window);
          if (!visible) {
            w[j] = -INFINITY;
            continue;
          }
          double dot = 0.0;
          const float* kr = &K[(static_cast<size_t>(j) * p.n_kv_head + kvh) * hd];
          for (int d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * kr[d];
          double x = dot * p.scale;
          if (p.softcap > 0.f) x = p.softcap * std::tanh(x / p.softcap);
          w[j] = x;
          max = std::max(max, x);
        }
        double sum = 0.0;
        for (int32_t j = 0; j < n_ctx; ++j) {
          w[j] = std::exp(w[j] - max);  // masked: exp(-inf) = 0
          sum += w[j];
        }
        float* o = out + (static_cast<int64_t>(s.first_token + t) * p.n_head + h) * hd;
        for (int d = 0; d < hd; ++d) {
          double acc = 0.0;
          for (int32_t j = 0; j < n_ctx; ++j) {
            if (w[j] != 0.0) acc += w[j] * V[(static_cast<size_t>(j) * p.n_kv_head + kvh) * hd + d];
          }
          o[d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

}  // namespace omnibus
