#include "model/llama.h"

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

using LlamaLayer = BlockWeights;  // Llama needs nothing beyond the common block

class LlamaModel final : public Model {
 public:
  LlamaModel(std::shared_ptr<const GgufFile> file, const ModelConfig& config, ThreadPool& pool)
      : Model(config), file_(std::move(file)), pool_(pool) {}

  Status load() {
    const ModelConfig& c = config_;
    WeightLoader w(*file_);
    OMNIBUS_ASSIGN_OR_RETURN(embd_, load_embedding_weights(w, c, &pool_));
    layers_.resize(size_t(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
      OMNIBUS_RETURN_IF_ERROR(load_block_weights(w, c, il, &pool_, &layers_[size_t(il)]));
    }
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

    embed_tokens(embd_, c, batch, b.x.data());  // x: [n_tok, n_embd]

    const AttentionParams attn_params{c.n_head, c.n_head_kv, c.head_dim,
                                      1.0f / std::sqrt(float(c.head_dim))};
    for (int il = 0; il < c.n_layer; ++il) {
      const LlamaLayer& l = layers_[size_t(il)];
      // --- attention ---
      rms_norm(b.x.data(), l.attn_norm, b.xn.data(), n_tok, c.n_embd, c.norm_eps);
      project_qkv(l, b.xn.data(), n_tok, b, pool_);  // q: [n_tok, n_q], k, v: [n_tok, n_kv]
      rope(b.q.data(), b.positions.data(), n_tok, c.n_head, c.head_dim, c.rope);
      rope(b.k.data(), b.positions.data(), n_tok, c.n_head_kv, c.head_dim, c.rope);
      const PagedKvLayer kv_layer = kv.layer(il);
      kv_store(kv_layer, b.attn_seqs.data(), n_seqs, b.k.data(), b.v.data());
      paged_attention(b.q.data(), kv_layer, b.attn_seqs.data(), n_seqs, attn_params, b.attn.data(),
                      pool_);                                              // [n_tok, n_q]
      matmul(l.wo, b.attn.data(), n_tok, b.proj.data(), pool_, b.matmul);  // [n_tok, n_embd]
      add_inplace(b.x.data(), b.proj.data(), n_tok * c.n_embd);
      // --- feed-forward (SwiGLU) ---
      rms_norm(b.x.data(), l.ffn_norm, b.xn.data(), n_tok, c.n_embd, c.norm_eps);
      project_gate_up(l, b.xn.data(), n_tok, b, pool_);  // gate, up: [n_tok, n_ff]
      swiglu(b.gate.data(), b.up.data(), b.gate.data(), n_tok, c.n_ff, pool_);
      matmul(l.w_down, b.gate.data(), n_tok, b.proj.data(), pool_, b.matmul);  // [n_tok, n_embd]
      add_inplace(b.x.data(), b.proj.data(), n_tok * c.n_embd);
    }

    // Only the rows that produce logits go through the output head.
    return output_logits(embd_, c, b.x.data(), b, pool_);  // [n_rows, n_vocab]
  }

 private:
  std::shared_ptr<const GgufFile> file_;  // keeps the weights' mapping alive
  ThreadPool& pool_;
  EmbeddingWeights embd_;
  std::vector<LlamaLayer> layers_;
  ForwardBuffers buf_;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> load_llama(std::shared_ptr<const GgufFile> file,
                                            const ModelConfig& config, ThreadPool& pool) {
  auto model = std::make_unique<LlamaModel>(std::move(file), config, pool);
  OMNIBUS_RETURN_IF_ERROR(model->load());
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace omnibus
