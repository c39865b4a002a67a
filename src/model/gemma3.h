// The Gemma 3 architecture (text model; Gemma-3-270M/1B/4B/12B/27B):
//
//   x = embed(tokens) * sqrt(n_embd)                      // [n_tok, n_embd]
//   for each layer (sliding-window, or global every 6th by default):
//     h = rms_norm(x) * attn_norm
//     q, k, v = h Wq, h Wk, h Wv                          // [n_tok, heads, head_dim]
//     q = rms_norm_per_head(q) * q_norm;  k = rms_norm_per_head(k) * k_norm
//     rope(q, k)      // NeoX pairs; base rope.freq_base (global) or freq_base_swa (sliding)
//     kv_store(k, v); a = paged_attention(q * query_scale)   // GQA; sliding layers see
//                                                            // only the last `sliding_window` keys
//     x += rms_norm(a Wo) * post_attention_norm
//     h = rms_norm(x) * ffn_norm
//     x += rms_norm((gelu_tanh(h Wgate) * (h Wup)) Wdown) * post_ffw_norm
//   logits = rms_norm(x) * output_norm  Woutput          // tied to embed when absent
//   logits = c * tanh(logits / c)  when final_logit_softcapping c is set
//
// GGUF norm weights already include Gemma's "+1" (the converter adds it), so
// every norm is a plain rms_norm * w. All sizes come from ModelConfig.
//
// Loads through `weights` (model/weights.h says where each tensor then lives).
// Thread-safety: see model/model.h.
#pragma once

#include <memory>

#include "model/model.h"
#include "model/weights.h"

namespace omnibus {

// Gemma 3's metadata beyond the common keys (sliding-window pattern, local
// RoPE base, logit soft-cap, query scale): its row's read_extras.
Status read_gemma3_extras(const GgufFile& f, ModelConfig* c);

StatusOr<std::unique_ptr<Model>> load_gemma3(std::shared_ptr<const GgufFile> file,
                                             const ModelConfig& config, ThreadPool& pool,
                                             WeightLoader& weights);

}  // namespace omnibus
