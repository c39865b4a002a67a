#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gguf/gguf_file.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "util/check.h"

namespace omnibus {

Status load_moe_weights(WeightLoader& w, const ModelConfig& c, int il, ThreadPool* pool,
                        MoeWeights* out) {
  OMNIBUS_CHECK(c.is_moe());
  const std::string p = "blk." + std::to_string(il) + ".";
  MoeWeights& m = *out;
  OMNIBUS_ASSIGN_OR_RETURN(m.router,
                           w.packed_matrix(p + "ffn_gate_inp.weight", c.n_embd, c.n_expert, pool));
  const int64_t n_x = c.n_expert, ff = c.n_ff_exp;
  OMNIBUS_ASSIGN_OR_RETURN(
      m.gate, w.packed_row_slices(p + "ffn_gate_exps.weight", {c.n_embd, ff, n_x}, ff, pool));
  OMNIBUS_ASSIGN_OR_RETURN(
      m.up, w.packed_row_slices(p + "ffn_up_exps.weight", {c.n_embd, ff, n_x}, ff, pool));
  OMNIBUS_ASSIGN_OR_RETURN(
      m.down, w.packed_row_slices(p + "ffn_down_exps.weight", {ff, c.n_embd, n_x}, c.n_embd, pool));
  return Status::ok();
}

void moe_route(const ModelConfig& c, int64_t n_tok, MoeBuffers& b) {
  const int n_x = c.n_expert, k = c.n_expert_used;
  b.expert.resize(size_t(n_tok * k));
  b.weight.resize(size_t(n_tok * k));
  b.order.resize(size_t(n_x));
  for (int64_t t = 0; t < n_tok; ++t) {
    float* p = b.router.data() + t * n_x;
    // softmax as ggml's soft_max: exp(x - max), the sum in double, one scale
    const float mx = *std::max_element(p, p + n_x);
    double sum = 0;
    for (int e = 0; e < n_x; ++e) {
      p[e] = std::exp(p[e] - mx);
      sum += p[e];
    }
    const float inv = float(1.0 / sum);
    for (int e = 0; e < n_x; ++e) p[e] *= inv;
    // top-k, best first; equal probabilities: the lower id first
    for (int e = 0; e < n_x; ++e) b.order[size_t(e)] = e;
    std::partial_sort(b.order.begin(), b.order.begin() + k, b.order.end(),
                      [p](int32_t a, int32_t z) { return p[a] > p[z] || (p[a] == p[z] && a < z); });
    float wsum = 0;
    for (int j = 0; j < k; ++j) wsum += p[b.order[size_t(j)]];
    wsum = std::max(wsum, 6.103515625e-5f);  // llama.cpp's clamp: the smallest normal f16
    for (int j = 0; j < k; ++j) {
      const int32_t e = b.order[size_t(j)];
      b.expert[size_t(t * k + j)] = e;
      b.weight[size_t(t * k + j)] = p[e] / wsum;
    }
  }
}

namespace {

// Rows [r0, r0 + n) of the grouped blocks through expert e:
//   yg = Wdown_e(silu(xg Wgate_e) * (xg Wup_e)).
void run_expert(const MoeWeights& m, const ModelConfig& c, int32_t e, int64_t r0, int64_t n,
                MoeBuffers& b, ThreadPool& pool) {
  const int64_t ff = c.n_ff_exp;
  matmul_gated_ffn(m.gate[size_t(e)], m.up[size_t(e)], m.down[size_t(e)], GatedAct::kSwiglu,
                   b.xg.data() + r0 * c.n_embd, n, b.gate.data() + r0 * ff, b.up.data() + r0 * ff,
                   b.yg.data() + r0 * c.n_embd, pool, b.matmul);
}

}  // namespace

void moe_feed_forward(const MoeWeights& m, const ModelConfig& c, const float* xn, int64_t n_tok,
                      float* out, MoeBuffers& b, ThreadPool& pool, MoeDispatch dispatch) {
  const int n_x = c.n_expert, k = c.n_expert_used;
  const int64_t n_embd = c.n_embd, n_slots = n_tok * k;
  b.router.resize(size_t(n_tok * n_x));
  matmul(m.router, xn, n_tok, b.router.data(), pool, b.matmul);  // [n_tok, n_expert]
  moe_route(c, n_tok, b);

  // Group the (token, slot) pairs by expert: a counting sort, tokens in order
  // within an expert.
  b.offset.assign(size_t(n_x) + 1, 0);
  for (int64_t s = 0; s < n_slots; ++s) ++b.offset[size_t(b.expert[size_t(s)]) + 1];
  for (int e = 0; e < n_x; ++e) b.offset[size_t(e) + 1] += b.offset[size_t(e)];
  b.row.resize(size_t(n_slots));
  b.xg.resize(size_t(n_slots * n_embd));
  b.gate.resize(size_t(n_slots * c.n_ff_exp));
  b.up.resize(size_t(n_slots * c.n_ff_exp));
  b.yg.resize(size_t(n_slots * n_embd));
  {
    std::vector<int32_t>& next = b.order;  // [n_expert] next free row of each expert
    next.assign(b.offset.begin(), b.offset.end() - 1);
    for (int64_t s = 0; s < n_slots; ++s) b.row[size_t(s)] = next[size_t(b.expert[size_t(s)])]++;
  }
  // The copies (k rows of n_embd floats a token: 32 MiB a 512-token step of
  // Qwen3-30B-A3B's shape) and the combination below run on the pool: on one
  // thread they were ~6% of a prompt step's time on 2 cores (Zen 3, round (x)
  // of docs/performance.md), the other cores waiting.
  pool.parallel_for(n_tok, [&](int64_t t, int) {
    const float* src = xn + t * n_embd;
    for (int j = 0; j < k; ++j) {
      std::copy(src, src + n_embd, b.xg.data() + int64_t(b.row[size_t(t * k + j)]) * n_embd);
    }
  });

  for (int32_t e = 0; e < n_x; ++e) {
    const int64_t r0 = b.offset[size_t(e)], n = b.offset[size_t(e) + 1] - r0;
    if (n == 0) continue;
    if (dispatch == MoeDispatch::kGrouped) {
      run_expert(m, c, e, r0, n, b, pool);
    } else {
      for (int64_t r = r0; r < r0 + n; ++r) run_expert(m, c, e, r, 1, b, pool);
    }
  }

  // Combine per token, best expert first (llama.cpp's order of the adds; a
  // token's adds do not depend on which thread runs them).
  pool.parallel_for(n_tok, [&](int64_t t, int) {
    float* o = out + t * n_embd;
    for (int j = 0; j < k; ++j) {
      const float wj = b.weight[size_t(t * k + j)];
      const float* y = b.yg.data() + int64_t(b.row[size_t(t * k + j)]) * n_embd;
      if (j == 0) {
        for (int64_t i = 0; i < n_embd; ++i) o[i] = wj * y[i];
      } else {
        for (int64_t i = 0; i < n_embd; ++i) o[i] += wj * y[i];
      }
    }
  });
}

// Mixture of experts: expert_count experts, expert_used_count of them per
// token, each with expert_feed_forward_length hidden units (llama.cpp's
// default when absent: feed_forward_length / expert_used_count).
Status read_moe_config(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->arch;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, a, "expert_count", &c->n_expert));
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, a, "expert_used_count", &c->n_expert_used));
  if (c->n_expert_used > c->n_expert) {
    return Status::corrupt("{}: expert_used_count {} > expert_count {}", f.path(), c->n_expert_used,
                           c->n_expert);
  }
  c->n_ff_exp = c->n_ff / c->n_expert_used;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, a, "expert_feed_forward_length", &c->n_ff_exp, false));
  if (c->n_ff_exp <= 0) return Status::corrupt("{}: expert feed-forward length is 0", f.path());
  return Status::ok();
}

}  // namespace omnibus
