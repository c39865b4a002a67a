// Activation buffers reused across forward passes. They grow to the largest
// step seen (a warm engine allocates nothing) and are owned by one model.
//
// Thread-safety: owned by the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "kv/attention.h"
#include "model/model_config.h"
#include "model/step_batch.h"

namespace omnibus {

struct ForwardBuffers {
  std::vector<float> x;                 // [n_tok, n_embd] residual stream
  std::vector<float> xn;                // [n_tok, n_embd] normalised input of a sub-layer
  std::vector<float> q;                 // [n_tok, n_q]
  std::vector<float> k;                 // [n_tok, n_kv]
  std::vector<float> v;                 // [n_tok, n_kv]
  std::vector<float> attn;              // [n_tok, n_q]
  std::vector<float> proj;              // [n_tok, n_embd] output of Wo / Wdown
  std::vector<float> gate;              // [n_tok, n_ff]
  std::vector<float> up;                // [n_tok, n_ff]
  std::vector<float> last;              // [n_rows, n_embd] rows that produce logits
  std::vector<float> logits;            // [n_rows, n_vocab]
  std::vector<int32_t> positions;       // [n_tok]
  std::vector<int32_t> logit_rows;      // [n_rows] token index of each logits row
  std::vector<int32_t> pool_rows;       // [n_pool_rows] last token of each pool sequence
                                        // (every token of a pool_all_rows one)
  std::vector<AttentionSeq> attn_seqs;  // [n_seqs]
  MatmulScratch matmul;

  // Sizes every buffer for `batch` and fills positions / logit_rows / attn_seqs.
  void prepare(const ModelConfig& c, const StepBatch& batch);
};

}  // namespace omnibus
