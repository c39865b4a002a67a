// The decoders of the Llama family, which share one forward pass
// (llama_family.cc) and differ in what they load: their rows of the
// architecture table (architectures.h: llama, qwen2, qwen3, qwen3moe, phi3)
// give the RoPE mode and the LlamaFamilyOptions below.
//
//   x = embed(tokens)                                   // [n_tok, n_embd]
//   for each layer:
//     h = rms_norm(x) * attn_norm
//     q, k, v = h Wq + bq, h Wk + bk, h Wv + bv         // biases: Qwen 2; fused QKV: Phi-3
//     q, k = rms_norm_per_head(q) * q_norm, ...         // Qwen 3
//     rope(q, k)                                        // Llama: adjacent pairs; the others: NeoX
//                                                       // halves; Llama 3 / Phi-3 frequency
//                                                       factors
//     kv_store(k, v); a = paged_attention(q)            // grouped-query attention
//     x += a Wo
//     h = rms_norm(x) * ffn_norm
//     x += (silu(h Wgate) * (h Wup)) Wdown              // SwiGLU (fused gate-up: Phi-3)
//       or moe(h)                                       // Qwen 3 MoE (model/moe.h)
//   logits = rms_norm(x) * output_norm  Woutput         // Woutput may be tied to embed
//
// Mistral and SmolLM2 files are `llama` in GGUF. Loads through `weights`
// (model/weights.h says where each tensor then lives).
// Thread-safety: see model/model.h.
#pragma once

#include <memory>

#include "model/model.h"
#include "model/weights.h"

namespace omnibus {

// What an architecture of the family requires beyond the common block; the
// optional pieces (biases, fused tensors, RoPE factors) are used when present.
struct LlamaFamilyOptions {
  bool qk_norm = false;         // blk.N.attn_{q,k}_norm.weight (Qwen 3)
  bool require_biases = false;  // blk.N.attn_{q,k,v}.bias (Qwen 2)
};

StatusOr<std::unique_ptr<Model>> load_llama_family(std::shared_ptr<const GgufFile> file,
                                                   const ModelConfig& config, ThreadPool& pool,
                                                   WeightLoader& weights,
                                                   const LlamaFamilyOptions& options);

}  // namespace omnibus
