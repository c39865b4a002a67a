// The BERT encoder (all-MiniLM, bge, e5 and other sentence-transformers
// models; GGUF architecture `bert`, tensors as llama.cpp's converter names
// them), as llama.cpp's src/models/bert.cpp computes it:
//
//   x = token_embd[id] + token_types[0] + position_embd[pos]   // [n_tok, n_embd]
//   x = layer_norm(x) * token_embd_norm + bias                  // every LayerNorm has a bias
//   for each layer (post-norm):
//     q, k, v = x Wq + bq, x Wk + bk, x Wv + bv                // [n_tok, heads, head_dim]
//     a = softmax(q k^T / sqrt(head_dim)) v                     // each sequence sees all of
//                                                               // itself, both ways
//     x = layer_norm(x + a Wo + bo) * attn_output_norm + bias
//     x = layer_norm(x + gelu(x Wup + bup) Wdown + bdown) * layer_output_norm + bias
//   embedding = pool(x)                                         // model/pooling.h
//   rank pooling (cross-encoders):  score = cls.output (tanh(cls x[CLS] + b)) + b
//
// Token types are all 0 ("sentence A"), as llama.cpp feeds them. Each
// sequence comes whole in one step (StepSeq::pool, n_past 0) and attends to
// itself from the step's f32 K/V (kv/encoder_attention.h): nothing is written
// to or read from the KV cache. forward() returns no logits, only pooled().
// Thread-safety: see model/model.h.
#pragma once

#include <memory>

#include "model/model.h"
#include "model/weights.h"

namespace omnibus {

// BERT's metadata beyond the common keys: its LayerNorm epsilon, and
// bidirectional attention unless the file says bert.attention.causal.
Status read_bert_extras(const GgufFile& f, ModelConfig* c);

StatusOr<std::unique_ptr<Model>> load_bert(std::shared_ptr<const GgufFile> file,
                                           const ModelConfig& config, ThreadPool& pool,
                                           WeightLoader& weights);

}  // namespace omnibus
