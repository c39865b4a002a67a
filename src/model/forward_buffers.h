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
#include "util/huge_page_allocator.h"

namespace omnibus {

// A step's float activations: on huge pages once they reach 2 MiB (a
// prompt's matmul outputs are written a 64-byte column strip at a time, one
// token row apart: on 4 KiB pages nearly every store of a 512-token step was
// a TLB miss).
using ActivationVector = std::vector<float, HugePageAllocator<float>>;

struct ForwardBuffers {
  ActivationVector x;                   // [n_tok, n_embd] residual stream
  ActivationVector xn;                  // [n_tok, n_embd] normalised input of a sub-layer
  ActivationVector q;                   // [n_tok, n_q]
  ActivationVector k;                   // [n_tok, n_kv]
  ActivationVector v;                   // [n_tok, n_kv]
  ActivationVector attn;                // [n_tok, n_q]
  ActivationVector proj;                // [n_tok, n_embd] output of Wo / Wdown
  ActivationVector gate;                // [n_tok, n_ff]
  ActivationVector up;                  // [n_tok, n_ff]
  ActivationVector last;                // [n_rows, n_embd] rows that produce logits
  ActivationVector logits;              // [n_rows, n_vocab]
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
