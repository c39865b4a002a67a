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

class Gemma3Model final : public DecoderModel<Gemma3Layer> {
 public:
  using DecoderModel::DecoderModel;

  Status load(WeightLoader& w) {
    const ModelConfig& c = config_;
    OMNIBUS_RETURN_IF_ERROR(load_weights(w, [&](int il, Gemma3Layer& l) -> Status {
      const std::string p = "blk." + std::to_string(il) + ".";
      OMNIBUS_ASSIGN_OR_RETURN(l.q_norm, w.vector_f32(p + "attn_q_norm.weight", c.head_dim));
      OMNIBUS_ASSIGN_OR_RETURN(l.k_norm, w.vector_f32(p + "attn_k_norm.weight", c.head_dim));
      OMNIBUS_ASSIGN_OR_RETURN(l.post_attn_norm,
                               w.vector_f32(p + "post_attention_norm.weight", c.n_embd));
      OMNIBUS_ASSIGN_OR_RETURN(l.post_ffw_norm, w.vector_f32(p + "post_ffw_norm.weight", c.n_embd));
      l.sliding = c.is_swa_layer(il);
      return Status::ok();
    }));
    rope_global_ = c.rope;
    rope_local_ = c.rope;
    rope_local_.freq_base = c.rope_freq_base_local;
    return Status::ok();
  }

  bool supports_sliding_window_kv() const override { return true; }

  std::span<const float> forward(const StepBatch& batch, KvStorage& kv) override {
    const ModelConfig& c = config_;
    ForwardBuffers& b = buf_;
    b.prepare(c, batch);
    const int64_t n_tok = batch.n_tokens();
    const int n_seqs = int(batch.seqs.size());
    check_step(c, batch, kv);
    // Sliding-window layers see the same sequences through a window: through
    // group 0's tables in the uniform layout, through their own group's in
    // the hybrid one (kv/kv_layer_groups.h).
    attn_seqs_swa_.assign(b.attn_seqs.begin(), b.attn_seqs.end());
    for (AttentionSeq& s : attn_seqs_swa_) s.sliding_window = c.sliding_window;
    const KvLayerGroups& groups = kv.groups();
    const size_t n_slide = size_t(groups.n_groups() - 1);
    group_seqs_.resize(n_slide);
    for (size_t g = 0; g < n_slide; ++g) {
      OMNIBUS_CHECK(groups.window(int(g + 1)) == c.sliding_window);
      group_seqs_[g].assign(attn_seqs_swa_.begin(), attn_seqs_swa_.end());
      for (size_t s = 0; s < size_t(n_seqs); ++s) {
        group_seqs_[g][s].block_table = batch.group_tables[s * n_slide + g];
      }
    }

    embed_tokens(embd_, c, batch, b.x.data());  // x: [n_tok, n_embd]
    scale_inplace(b.x.data(), std::sqrt(float(c.n_embd)), n_tok * c.n_embd);

    const AttentionParams attn_params{c.n_head, c.n_head_kv, c.head_dim, c.query_scale()};
    for (int il = 0; il < c.n_layer; ++il) {
      const Gemma3Layer& l = layers_[size_t(il)];
      const int group = groups.group_of(il);
      OMNIBUS_DCHECK(group == 0 || l.sliding);
      const AttentionStep attn{l.sliding ? &rope_local_ : &rope_global_,
                               group > 0   ? group_seqs_[size_t(group - 1)].data()
                               : l.sliding ? attn_seqs_swa_.data()
                                           : b.attn_seqs.data(),
                               n_seqs,
                               attn_params,
                               l.q_norm,
                               l.k_norm};
      attention_block(l, c, attn, kv.layer(il), b.x.data(), n_tok, b, pool_);
      rms_norm(b.proj.data(), l.post_attn_norm, b.proj.data(), n_tok, c.n_embd, c.norm_eps);
      add_inplace(b.x.data(), b.proj.data(), n_tok * c.n_embd);
      feed_forward_block(l, c, GatedActivation::kGeglu, b.x.data(), n_tok, b, pool_);
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
  RopeParams rope_global_;
  RopeParams rope_local_;
  std::vector<AttentionSeq> attn_seqs_swa_;  // [n_seqs] b.attn_seqs with the window set
  // [n_groups - 1][n_seqs]: attn_seqs_swa_ through each sliding group's tables
  std::vector<std::vector<AttentionSeq>> group_seqs_;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> load_gemma3(std::shared_ptr<const GgufFile> file,
                                             const ModelConfig& config, ThreadPool& pool,
                                             WeightLoader& weights) {
  return load_decoder_model<Gemma3Model>(std::move(file), config, pool, weights);
}

// Gemma 3 (as llama.cpp reads it): sliding-window attention on every layer
// but each 6th when attention.sliding_window is set (the pattern may be
// overridden by attention.sliding_window_pattern, a period or a per-layer
// array), RoPE base rope.freq_base_swa (default 10000) on those layers, an
// optional final logit soft-cap, and queries scaled by 1/sqrt(head_dim)
// (query_pre_attn_scalar = head_dim), except the 62-layer 27B model, which
// uses 1/sqrt(n_embd / n_head).
Status read_gemma3_extras(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->arch;
  OMNIBUS_RETURN_IF_ERROR(
      read_positive(f, a, "attention.sliding_window", &c->sliding_window, false));
  if (c->sliding_window > 0) {
    c->layer_is_swa.assign(size_t(c->n_layer), false);
    const std::string key = a + ".attention.sliding_window_pattern";
    if (const auto per_layer = f.get_int_array(key)) {
      if (per_layer->size() != size_t(c->n_layer)) {
        return Status::corrupt("{}: '{}' has {} entries for {} layers", f.path(), key,
                               per_layer->size(), c->n_layer);
      }
      for (int il = 0; il < c->n_layer; ++il)
        c->layer_is_swa[size_t(il)] = (*per_layer)[size_t(il)] != 0;
    } else {
      int64_t period = 6;
      if (f.find(key)) {
        const auto v = f.get_int(key);
        if (!v || *v < 0) return Status::unsupported("{}: cannot read '{}'", f.path(), key);
        period = *v;
      }
      // period 0: every layer sliding; else layer il is global when il % period == period - 1.
      for (int il = 0; il < c->n_layer; ++il) {
        c->layer_is_swa[size_t(il)] = period == 0 || il % period < period - 1;
      }
    }
  }
  c->rope_freq_base_local = float(f.get_float(a + ".rope.freq_base_swa").value_or(10000.0));
  c->final_logit_softcap = float(f.get_float(a + ".final_logit_softcapping").value_or(0.0));
  if (c->final_logit_softcap < 0) {
    return Status::corrupt("{}: negative final_logit_softcapping", f.path());
  }
  if (f.find(a + ".attn_logit_softcapping")) {
    return Status::unsupported("{}: attention logit soft-capping (Gemma 2) is not supported",
                               f.path());
  }
  c->attn_scale = c->n_layer == 62 ? 1.0f / std::sqrt(float(c->n_embd / c->n_head))
                                   : 1.0f / std::sqrt(float(c->head_dim));
  return Status::ok();
}

}  // namespace omnibus
