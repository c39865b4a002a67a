// The Llama family's forward pass (llama_family.h): loading its weights and running one
// StepBatch through every block to the logits rows.
#include "model/llama_family.h"

#include <cmath>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/ops_parallel.h"
#include "kernels/thread_pool.h"
#include "kv/attention.h"
#include "model/forward_buffers.h"
#include "model/moe.h"
#include "model/transformer_common.h"
#include "model/weights.h"
#include "util/check.h"

namespace omnibus {
namespace {

// The common block plus what some members of the family add.
struct LlamaFamilyLayer : BlockWeights {
  const float* q_norm = nullptr;  // [head_dim] Qwen 3
  const float* k_norm = nullptr;  // [head_dim]
  MoeWeights moe;                 // experts, when config().is_moe()
};

class LlamaFamilyModel final : public DecoderModel<LlamaFamilyLayer> {
 public:
  using DecoderModel::DecoderModel;

  Status load(WeightLoader& w, const LlamaFamilyOptions& o) {
    const ModelConfig& c = config_;
    OMNIBUS_RETURN_IF_ERROR(load_weights(w, [&](int il, LlamaFamilyLayer& l) -> Status {
      const std::string p = "blk." + std::to_string(il) + ".";
      if (o.qk_norm) {
        OMNIBUS_ASSIGN_OR_RETURN(l.q_norm, w.vector_f32(p + "attn_q_norm.weight", c.head_dim));
        OMNIBUS_ASSIGN_OR_RETURN(l.k_norm, w.vector_f32(p + "attn_k_norm.weight", c.head_dim));
      }
      if (o.require_biases) {
        const char* missing = l.bq == nullptr   ? "attn_q.bias"
                              : l.bk == nullptr ? "attn_k.bias"
                              : l.bv == nullptr ? "attn_v.bias"
                                                : nullptr;
        if (missing != nullptr) {
          return Status::corrupt("{}: missing tensor '{}{}' ({} has Q/K/V biases)", file_->path(),
                                 p, missing, c.arch);
        }
      }
      return c.is_moe() ? load_moe_weights(w, c, il, &pool_, &l.moe) : Status::ok();
    }));
    // RoPE frequency factors, [n_rot / 2]: Llama 3's rope_freqs.weight, or
    // Phi-3's LongRoPE pair, chosen by the served context (set_max_context).
    const int64_t half = c.rope.n_rot / 2;
    if (w.has("rope_freqs.weight")) {
      OMNIBUS_ASSIGN_OR_RETURN(rope_factors_short_, w.vector_f32("rope_freqs.weight", half));
      rope_factors_long_ = rope_factors_short_;
    } else if (w.has("rope_factors_long.weight") || w.has("rope_factors_short.weight")) {
      OMNIBUS_ASSIGN_OR_RETURN(rope_factors_long_, w.vector_f32("rope_factors_long.weight", half));
      OMNIBUS_ASSIGN_OR_RETURN(rope_factors_short_,
                               w.vector_f32("rope_factors_short.weight", half));
    }
    rope_ = c.rope;
    rope_.attn_factor = c.rope_attn_factor;
    set_max_context(c.n_ctx_train);
    return load_classifier(w);
  }

  // A causal reranker's head (Qwen3-Reranker as llama.cpp's converter writes
  // it: cls.output.weight [n_embd -> n_cls_out], the output head's "yes" and
  // "no" rows, optional cls.output.bias); absent on generators.
  Status load_classifier(WeightLoader& w) {
    const ModelConfig& c = config_;
    if (!w.has("cls.output.weight")) return Status::ok();
    const std::vector<int64_t> shape = w.shape("cls.output.weight");
    const int64_t n_out = shape.size() == 2 ? shape[1] : 1;
    OMNIBUS_ASSIGN_OR_RETURN(cls_out_,
                             w.packed_matrix("cls.output.weight", c.n_embd, n_out, &pool_));
    if (w.has("cls.output.bias")) {
      OMNIBUS_ASSIGN_OR_RETURN(cls_out_b_, w.vector_f32("cls.output.bias", n_out));
    }
    return Status::ok();
  }

  // llama.cpp's rule (llama_model::get_rope_factors): the long factors when
  // the context exceeds rope.scaling.original_context_length (or, without
  // it, the training context), else the short ones.
  void set_max_context(int32_t n_ctx) override {
    const int orig = config_.rope_orig_ctx > 0 ? config_.rope_orig_ctx : config_.n_ctx_train;
    rope_.freq_factors = n_ctx > orig ? rope_factors_long_ : rope_factors_short_;
  }

  // Last-token pooling (Qwen3-Embedding, gte-Qwen2): the output-normed last
  // row; none: every token's output-normed row; mean / cls: their average or
  // the first (none, mean and cls: the engine computes prompts whole, without
  // prefix caching); rank (Qwen3-Reranker): the last row through cls.output,
  // then (Qwen 3, as llama.cpp) a softmax, so the first score is P("yes").
  bool supports_pooling(PoolingType p) const override {
    return p == PoolingType::kLast || p == PoolingType::kNone || p == PoolingType::kMean ||
           p == PoolingType::kCls || (p == PoolingType::kRank && has_classifier());
  }
  int32_t pooled_dim() const override {
    return pooling_ == PoolingType::kRank ? int32_t(cls_out_.view().n_out) : config_.n_embd;
  }

  std::span<const float> forward(const StepBatch& batch, KvStorage& kv) override {
    const ModelConfig& c = config_;
    ForwardBuffers& b = buf_;
    b.prepare(c, batch);
    const int64_t n_tok = batch.n_tokens();
    check_step(c, batch, kv);

    embed_tokens(embd_, c, batch, b.x.data());  // x: [n_tok, n_embd]

    for (int il = 0; il < c.n_layer; ++il) {
      const LlamaFamilyLayer& l = layers_[size_t(il)];
      const AttentionStep attn{&rope_,
                               b.attn_seqs.data(),
                               int(batch.seqs.size()),
                               {c.n_head, c.n_head_kv, c.head_dim, c.query_scale()},
                               l.q_norm,
                               l.k_norm};
      attention_block(l, c, attn, kv.layer(il), b.x.data(), n_tok, b, pool_);
      add_inplace(b.x.data(), b.proj.data(), n_tok, c.n_embd, pool_);
      if (c.is_moe()) {
        rms_norm(b.x.data(), l.ffn_norm, b.xn.data(), n_tok, c.n_embd, c.norm_eps, pool_);
        moe_feed_forward(l.moe, c, b.xn.data(), n_tok, b.proj.data(), moe_, pool_);
      } else {
        feed_forward_block(l, c, GatedActivation::kSwiglu, b.x.data(), n_tok, b, pool_);
      }
      add_inplace(b.x.data(), b.proj.data(), n_tok, c.n_embd, pool_);
    }

    pool_hidden(embd_, c, pooling_, b.x.data(), batch, b, &pool_scratch_, &pooled_);
    if (pooling_ == PoolingType::kRank) classify();
    // Only the rows that produce logits go through the output head.
    return output_logits(embd_, c, b.x.data(), b, pool_);  // [n_rows, n_vocab]
  }

 private:
  bool has_classifier() const { return cls_out_.view().data != nullptr; }

  // pooled_ [n, n_embd] last rows -> [n, n_cls_out] scores.
  void classify() {
    const int64_t d = config_.n_embd;
    const int64_t n = int64_t(pooled_.size()) / d;
    const int64_t n_out = cls_out_.view().n_out;
    if (n == 0) return;
    scores_.resize(size_t(n * n_out));
    matmul(cls_out_, pooled_.data(), n, scores_.data(), pool_, buf_.matmul);
    for (int64_t r = 0; r < n; ++r) {
      float* row = scores_.data() + r * n_out;
      if (cls_out_b_ != nullptr) add_inplace(row, cls_out_b_, n_out);
      if (config_.arch == "qwen3") softmax(row, n_out);
    }
    pooled_.assign(scores_.begin(), scores_.end());
  }

  RopeParams rope_;
  const float* rope_factors_short_ = nullptr;  // [n_rot / 2] or null
  const float* rope_factors_long_ = nullptr;
  MoeBuffers moe_;
  PackedWeight cls_out_;              // a reranker's classifier, or empty
  const float* cls_out_b_ = nullptr;  // [n_cls_out] or null
  std::vector<float> scores_;         // classify(): [n_seqs, n_cls_out]
  std::vector<float> pool_scratch_;   // pool_hidden(): one sequence's normed rows
};

}  // namespace

StatusOr<std::unique_ptr<Model>> load_llama_family(std::shared_ptr<const GgufFile> file,
                                                   const ModelConfig& config, ThreadPool& pool,
                                                   WeightLoader& weights,
                                                   const LlamaFamilyOptions& options) {
  auto model = std::make_unique<LlamaFamilyModel>(std::move(file), config, pool);
  OMNIBUS_RETURN_IF_ERROR(model->load(weights, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace omnibus
