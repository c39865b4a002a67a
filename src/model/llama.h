// The Llama architecture (Llama 2/3, SmolLM2, Mistral-style GQA models):
//
//   x = embed(tokens)                                   // [n_tok, n_embd]
//   for each layer:
//     h = rms_norm(x) * attn_norm
//     q, k, v = h Wq, h Wk, h Wv; rope(q, k)            // normal (interleaved) RoPE
//     kv_store(k, v); a = paged_attention(q)            // grouped-query attention
//     x += a Wo
//     h = rms_norm(x) * ffn_norm
//     x += (silu(h Wgate) * (h Wup)) Wdown              // SwiGLU
//   logits = rms_norm(x) * output_norm  Woutput         // Woutput may be tied to embed
//
// Loads through `weights` (model/weights.h says where each tensor then lives).
// Thread-safety: see model/model.h.
#pragma once

#include <memory>

#include "model/model.h"
#include "model/weights.h"

namespace omnibus {

StatusOr<std::unique_ptr<Model>> load_llama(std::shared_ptr<const GgufFile> file,
                                            const ModelConfig& config, ThreadPool& pool,
                                            WeightLoader& weights);

}  // namespace omnibus
