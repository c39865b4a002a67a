#include "model/forward_buffers.h"

#include "util/check.h"

namespace omnibus {
namespace {

void ensure(ActivationVector& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

}  // namespace

void ForwardBuffers::prepare(const ModelConfig& c, const StepBatch& batch) {
  const int64_t n_tok = batch.n_tokens();
  const int64_t n_rows = batch.n_logit_rows();
  ensure(x, n_tok * c.n_embd);
  ensure(xn, n_tok * c.n_embd);
  ensure(q, n_tok * c.n_q());
  ensure(k, n_tok * c.n_kv());
  ensure(v, n_tok * c.n_kv());
  ensure(attn, n_tok * c.n_q());
  ensure(proj, n_tok * c.n_embd);
  ensure(gate, n_tok * c.n_ff);
  ensure(up, n_tok * c.n_ff);
  ensure(last, n_rows * c.n_embd);
  ensure(logits, n_rows * c.n_vocab);

  positions.resize(size_t(n_tok));
  logit_rows.clear();
  pool_rows.clear();
  attn_seqs.clear();
  int32_t first = 0;
  for (const StepSeq& s : batch.seqs) {
    OMNIBUS_CHECK(s.n_tokens >= 1 && s.n_past >= 0);
    OMNIBUS_CHECK(s.n_blocks >= 1 && s.block_table != nullptr);
    for (int32_t i = 0; i < s.n_tokens; ++i) positions[size_t(first + i)] = s.n_past + i;
    if (s.pool && s.pool_all_rows) {
      OMNIBUS_CHECK(s.n_past == 0);
      for (int32_t i = 0; i < s.n_tokens; ++i) pool_rows.push_back(first + i);
    } else if (s.pool) {
      pool_rows.push_back(first + s.n_tokens - 1);
    } else if (s.all_logits) {
      for (int32_t i = 0; i < s.n_tokens; ++i) logit_rows.push_back(first + i);
    } else {
      logit_rows.push_back(first + s.n_tokens - 1);
    }
    attn_seqs.push_back(AttentionSeq{first, s.n_tokens, s.n_past, s.block_table, 0});
    first += s.n_tokens;
  }
  OMNIBUS_CHECK(first == n_tok);
}

}  // namespace omnibus
