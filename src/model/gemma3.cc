#include "model/gemma3.h"

#include <cmath>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/matmul.h"
#include "kernels/ops_parallel.h"
#include "kernels/thread_pool.h"
#include "kv/attention.h"
#include "model/forward_buffers.h"
#include "model/transformer_common.h"
#include "model/weights.h"
#include "util/check.h"

namespace omnibus {
namespace {

// The common block (transformer_common.h) plus Gemma's extra norms.
struct Gemma3Layer : BlockWeights {
  const float* q_norm;          // [head_dim]
  const float* k_norm;          // [head_dim]
  const float* post_attn_norm;  // [n_embd]
  const float* post_ffw_norm;   // [n_embd]
  bool sliding;                 // sliding-window attention and the local RoPE base
};

class Gemma3Model final : public Model {
 public:
  Gemma3Model(std::shared_ptr<const GgufFile> file, const ModelConfig& config, ThreadPool& pool)
      : Model(config), file_(std::move(file)), pool_(pool) {}

  Status load() {
    const ModelConfig& c = config_;
    WeightLoader w(*file_);
    OMNIBUS_ASSIGN_OR_RETURN(embd_, load_embedding_weights(w, c, &pool_));
    layers_.resize(size_t(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      Gemma3Layer& l = layers_[size_t(il)];
      OMNIBUS_RETURN_IF_ERROR(load_block_weights(w, c, il, &pool_, &l));
      OMNIBUS_ASSIGN_OR_RETURN(l.q_norm, w.vector_f32(p + "attn_q_norm.weight", c.head_dim));
      OMNIBUS_ASSIGN_OR_RETURN(l.k_norm, w.vector_f32(p + "attn_k_norm.weight", c.head_dim));
      OMNIBUS_ASSIGN_OR_RETURN(l.post_attn_norm,
                               w.vector_f32(p + "post_attention_norm.weight", c.n_embd));
      OMNIBUS_ASSIGN_OR_RETURN(l.post_ffw_norm, w.vector_f32(p + "post_ffw_norm.weight", c.n_embd));
      l.sliding = c.is_swa_layer(il);
    }
    rope_global_ = c.rope;
    rope_local_ = c.rope;
    rope_local_.freq_base = c.rope_freq_base_local;
    return Status::ok();
  }

  ThreadPool* thread_pool() override { return &pool_; }

  std::span<const float> forward(const StepBatch& batch, KvStorage& kv) override {
    const ModelConfig& c = config_;
    ForwardBuffers& b = buf_;
    b.prepare(c, batch);
    const int64_t n_tok = batch.n_tokens();
    const int n_seqs = int(batch.seqs.size());
    check_step(c, batch, kv);
    // Sliding-window layers see the same sequences through a window.
    attn_seqs_swa_.assign(b.attn_seqs.begin(), b.attn_seqs.end());
    for (AttentionSeq& s : attn_seqs_swa_) s.sliding_window = c.sliding_window;

    embed_tokens(embd_, c, batch, b.x.data());  // x: [n_tok, n_embd]
    scale_inplace(b.x.data(), std::sqrt(float(c.n_embd)), n_tok * c.n_embd);

    const AttentionParams attn_params{c.n_head, c.n_head_kv, c.head_dim, c.query_scale()};
    for (int il = 0; il < c.n_layer; ++il) {
      const Gemma3Layer& l = layers_[size_t(il)];
      const RopeParams& rope_p = l.sliding ? rope_local_ : rope_global_;
      const AttentionSeq* seqs = l.sliding ? attn_seqs_swa_.data() : b.attn_seqs.data();
      // --- attention ---
      rms_norm(b.x.data(), l.attn_norm, b.xn.data(), n_tok, c.n_embd, c.norm_eps);
      // q: [n_tok, n_head, head_dim], k, v: [n_tok, n_head_kv, head_dim]
      project_qkv(l, b.xn.data(), n_tok, b, pool_);
      rms_norm(b.q.data(), l.q_norm, b.q.data(), n_tok * c.n_head, c.head_dim, c.norm_eps);
      rms_norm(b.k.data(), l.k_norm, b.k.data(), n_tok * c.n_head_kv, c.head_dim, c.norm_eps);
      rope(b.q.data(), b.positions.data(), n_tok, c.n_head, c.head_dim, rope_p);
      rope(b.k.data(), b.positions.data(), n_tok, c.n_head_kv, c.head_dim, rope_p);
      const PagedKvLayer kv_layer = kv.layer(il);
      kv_store(kv_layer, seqs, n_seqs, b.k.data(), b.v.data());
      paged_attention(b.q.data(), kv_layer, seqs, n_seqs, attn_params, b.attn.data(),
                      pool_);                                              // [n_tok, n_q]
      matmul(l.wo, b.attn.data(), n_tok, b.proj.data(), pool_, b.matmul);  // [n_tok, n_embd]
      rms_norm(b.proj.data(), l.post_attn_norm, b.proj.data(), n_tok, c.n_embd, c.norm_eps);
      add_inplace(b.x.data(), b.proj.data(), n_tok * c.n_embd);
      // --- feed-forward (GeGLU) ---
      rms_norm(b.x.data(), l.ffn_norm, b.xn.data(), n_tok, c.n_embd, c.norm_eps);
      project_gate_up(l, b.xn.data(), n_tok, b, pool_);  // gate, up: [n_tok, n_ff]
      geglu(b.gate.data(), b.up.data(), b.gate.data(), n_tok, c.n_ff, pool_);
      matmul(l.w_down, b.gate.data(), n_tok, b.proj.data(), pool_, b.matmul);  // [n_tok, n_embd]
      rms_norm(b.proj.data(), l.post_ffw_norm, b.proj.data(), n_tok, c.n_embd, c.norm_eps);
      add_inplace(b.x.data(), b.proj.data(), n_tok * c.n_embd);
    }

    std::span<float> logits = output_logits(embd_, c, b.x.data(), b, pool_);  // [n_rows, n_vocab]
    if (c.final_logit_softcap > 0) {
      const float cap = c.final_logit_softcap;
      for (float& v : logits) v = cap * std::tanh(v / cap);
    }
    return logits;
  }

 private:
  std::shared_ptr<const GgufFile> file_;  // keeps the weights' mapping alive
  ThreadPool& pool_;
  EmbeddingWeights embd_;
  std::vector<Gemma3Layer> layers_;
  RopeParams rope_global_;
  RopeParams rope_local_;
  ForwardBuffers buf_;
  std::vector<AttentionSeq> attn_seqs_swa_;  // [n_seqs] b.attn_seqs with the window set
};

}  // namespace

StatusOr<std::unique_ptr<Model>> load_gemma3(std::shared_ptr<const GgufFile> file,
                                             const ModelConfig& config, ThreadPool& pool) {
  auto model = std::make_unique<Gemma3Model>(std::move(file), config, pool);
  OMNIBUS_RETURN_IF_ERROR(model->load());
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace omnibus
