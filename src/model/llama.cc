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

class LlamaModel final : public DecoderModel<LlamaLayer> {
 public:
  using DecoderModel::DecoderModel;

  Status load(WeightLoader& w) {
    return load_weights(w, [](int, LlamaLayer&) { return Status::ok(); });
  }

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
};

}  // namespace

StatusOr<std::unique_ptr<Model>> load_llama(std::shared_ptr<const GgufFile> file,
                                            const ModelConfig& config, ThreadPool& pool,
                                            WeightLoader& weights) {
  return load_decoder_model<LlamaModel>(std::move(file), config, pool, weights);
}

}  // namespace omnibus
