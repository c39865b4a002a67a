#include "model/llama.h"

#include <cmath>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops_parallel.h"
#include "kernels/thread_pool.h"
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

  Status load(WeightLoader& w) {
    return load_decoder_weights(w, config_, &pool_, &embd_, &layers_,
                                [](int, LlamaLayer&) { return Status::ok(); });
  }

  ThreadPool* thread_pool() override { return &pool_; }

  std::span<const float> forward(const StepBatch& batch, KvStorage& kv) override {
    const ModelConfig& c = config_;
    ForwardBuffers& b = buf_;
    b.prepare(c, batch);
    const int64_t n_tok = batch.n_tokens();
    check_step(c, batch, kv);

    embed_tokens(embd_, c, batch, b.x.data());  // x: [n_tok, n_embd]

    const AttentionStep attn{
        &c.rope,
        b.attn_seqs.data(),
        int(batch.seqs.size()),
        {c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))}};
    for (int il = 0; il < c.n_layer; ++il) {
      const LlamaLayer& l = layers_[size_t(il)];
      attention_block(l, c, attn, kv.layer(il), b.x.data(), n_tok, b, pool_);
      add_inplace(b.x.data(), b.proj.data(), n_tok * c.n_embd);
      feed_forward_block(l, c, GatedActivation::kSwiglu, b.x.data(), n_tok, b, pool_);
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
                                            const ModelConfig& config, ThreadPool& pool,
                                            WeightLoader& weights) {
  auto model = std::make_unique<LlamaModel>(std::move(file), config, pool);
  OMNIBUS_RETURN_IF_ERROR(model->load(weights));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace omnibus
