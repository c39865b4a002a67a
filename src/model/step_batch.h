// StepBatch: everything one engine step asks of the model — the new tokens of
// every scheduled sequence, flattened, plus where each sequence's context
// lives in the paged KV cache. There is no prefill or decode mode: a sequence
// contributes a prompt chunk (n_tokens > 1) or one decode token, and the model
// runs all of them in one forward pass, reading each weight once.
//
//   tokens: [n_tok_total]  sequence 0's tokens, then sequence 1's, ...
//   sequence s, token i sits at position seqs[s].n_past + i
//
// Thread-safety: a value; built by the engine thread for one step.
#pragma once

#include <cstdint>
#include <vector>

namespace omnibus {

struct StepSeq {
  int32_t n_tokens = 0;                  // new tokens this step (>= 1)
  int32_t n_past = 0;                    // tokens already in the KV cache for this sequence
  const int32_t* block_table = nullptr;  // KV blocks covering [0, n_past + n_tokens)
  int32_t n_blocks = 0;
  bool all_logits = false;     // logits for every new token (perplexity, prompt
                               // logprobs), not just the last
  bool pool = false;           // an embedding request: no logits row; the model
                               // pools the last hidden states into Model::pooled()
                               // instead (an encoder: REQUIRES the whole sequence in
                               // this step, n_past == 0)
  bool pool_all_rows = false;  // pooling none: every token's row goes to
                               // pooled() (REQUIRES pool, the whole prompt
                               // in this step, n_past == 0)

  // Its rows of Model::pooled(): none, one, or one per token (pool_all_rows).
  int32_t pooled_rows() const { return !pool ? 0 : pool_all_rows ? n_tokens : 1; }
};

struct StepBatch {
  std::vector<int32_t> tokens;
  std::vector<StepSeq> seqs;
  // Sliding-window KV (kv/kv_layer_groups.h): the tables of layer groups
  // 1 .. n_groups - 1, sequence after sequence ([n_seqs][n_groups - 1]);
  // group 0's is StepSeq::block_table. Empty with one group.
  std::vector<const int32_t*> group_tables;

  void clear() {
    tokens.clear();
    seqs.clear();
    group_tables.clear();
  }
  int64_t n_tokens() const { return int64_t(tokens.size()); }
  // Rows of logits forward() returns: n_tokens for all_logits sequences, 0 for
  // pool sequences, else 1.
  int64_t n_logit_rows() const {
    int64_t n = 0;
    for (const StepSeq& s : seqs) n += s.pool ? 0 : s.all_logits ? s.n_tokens : 1;
    return n;
  }
  // Rows of Model::pooled(): one per pool sequence (n_tokens for pool_all_rows).
  int64_t n_pool_rows() const {
    int64_t n = 0;
    for (const StepSeq& s : seqs) n += s.pooled_rows();
    return n;
  }
};

}  // namespace omnibus
