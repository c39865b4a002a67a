#include "model/bert.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "kv/attention.h"
#include "kv/encoder_attention.h"
#include "model/pooling.h"
#include "util/check.h"

namespace omnibus {
namespace {

struct LayerNormWeights {
  const float* w = nullptr;  // [n_embd]
  const float* b = nullptr;  // [n_embd]
};

struct BertLayer {
  PackedWeight wq, wk, wv, wo;  // [n_embd -> n_embd]
  const float* bq = nullptr;    // [n_embd] each, or null
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* bo = nullptr;
  LayerNormWeights attn_out_norm;
  PackedWeight w_up;              // [n_embd -> n_ff]
  PackedWeight w_down;            // [n_ff -> n_embd]
  const float* b_up = nullptr;    // [n_ff]
  const float* b_down = nullptr;  // [n_embd]
  LayerNormWeights layer_out_norm;
};

// y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * w + b, moments in double as
// ggml_norm. y may alias x.
void layer_norm(const float* x, const LayerNormWeights& ln, float* y, int64_t n_rows, int64_t n,
                float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const float mean = float(sum / double(n));
    double var = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float d = xr[i] - mean;
      var += double(d) * double(d);
    }
    const float scale = 1.0f / std::sqrt(float(var / double(n)) + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * scale * ln.w[i] + ln.b[i];
  }
}

void add_bias(float* y, const float* b, int64_t n_rows, int64_t n) {
  if (b == nullptr) return;
  for (int64_t r = 0; r < n_rows; ++r) add_inplace(y + r * n, b, n);
}

class BertModel final : public Model {
 public:
  BertModel(std::shared_ptr<const GgufFile> file, const ModelConfig& config, ThreadPool& pool)
      : Model(config), file_(std::move(file)), pool_(pool) {
    pooling_ = PoolingType::kMean;
  }

  ThreadPool* thread_pool() override { return &pool_; }
  bool supports_pooling(PoolingType p) const override {
    if (p == PoolingType::kRank) return cls_out_.view().data != nullptr;
    return p == PoolingType::kMean || p == PoolingType::kCls || p == PoolingType::kLast ||
           p == PoolingType::kNone;
  }
  int32_t pooled_dim() const override {
    return pooling_ == PoolingType::kRank ? int32_t(cls_out_.view().n_out) : config_.n_embd;
  }

  Status load(WeightLoader& w) {
    const ModelConfig& c = config_;
    if (c.n_head_kv != c.n_head) return Status::unsupported("bert: grouped-query attention");
    OMNIBUS_ASSIGN_OR_RETURN(token_embd_, w.matrix("token_embd.weight", c.n_embd, c.n_vocab));
    OMNIBUS_ASSIGN_OR_RETURN(pos_embd_, w.matrix("position_embd.weight", c.n_embd, c.n_ctx_train));
    for (const WeightView* v : {&token_embd_, &pos_embd_}) {
      if (dtype_traits(v->type).to_float == nullptr) {
        return Status::unsupported("bert: embedding dtype {} cannot be dequantized",
                                   dtype_name(v->type));
      }
    }
    type_row0_.assign(size_t(c.n_embd), 0.0f);
    if (w.has("token_types.weight")) {
      const std::vector<int64_t> shape = w.shape("token_types.weight");
      const int64_t n_types = shape.size() == 2 ? shape[1] : 0;
      OMNIBUS_ASSIGN_OR_RETURN(WeightView types, w.matrix("token_types.weight", c.n_embd,
                                                          std::max<int64_t>(n_types, 1)));
      if (dtype_traits(types.type).to_float == nullptr) {
        return Status::unsupported("bert: token_types dtype {}", dtype_name(types.type));
      }
      dtype_traits(types.type).to_float(types.data, type_row0_.data(), c.n_embd);
    }
    OMNIBUS_ASSIGN_OR_RETURN(embd_norm_, load_norm(w, "token_embd_norm"));
    layers_.resize(size_t(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
      OMNIBUS_RETURN_IF_ERROR(load_layer(w, il, layers_[size_t(il)]));
    }
    return load_classifier(w);
  }

  // A cross-encoder's head (llama.cpp's names): cls [n_embd -> n_embd] + tanh
  // (optional), then cls.output [n_embd -> n_cls_out].
  Status load_classifier(WeightLoader& w) {
    const ModelConfig& c = config_;
    if (w.has("cls.weight")) {
      OMNIBUS_ASSIGN_OR_RETURN(cls_, w.packed_matrix("cls.weight", c.n_embd, c.n_embd, &pool_));
      OMNIBUS_RETURN_IF_ERROR(load_bias(w, "cls.bias", c.n_embd, &cls_b_));
    }
    if (!w.has("cls.output.weight")) return Status::ok();
    const std::vector<int64_t> shape = w.shape("cls.output.weight");
    const int64_t n_out = shape.size() == 2 ? shape[1] : 1;
    OMNIBUS_ASSIGN_OR_RETURN(cls_out_,
                             w.packed_matrix("cls.output.weight", c.n_embd, n_out, &pool_));
    return load_bias(w, "cls.output.bias", n_out, &cls_out_b_);
  }

  std::span<const float> forward(const StepBatch& batch,
                                 KvStorage& /*kv: an encoder keeps none*/) override {
    const ModelConfig& c = config_;
    const int64_t n_tok = batch.n_tokens();
    const int64_t d = c.n_embd;
    for (const StepSeq& s : batch.seqs) {
      OMNIBUS_CHECK(s.pool && s.n_past == 0 && s.n_tokens >= 1 && s.n_tokens <= c.n_ctx_train);
    }
    ensure(x_, n_tok * d);
    ensure(q_, n_tok * d);
    ensure(k_, n_tok * d);
    ensure(v_, n_tok * d);
    ensure(attn_, n_tok * d);
    ensure(proj_, n_tok * d);
    ensure(up_, n_tok * c.n_ff);
    embed(batch);
    prepare_attention(batch);
    for (int il = 0; il < c.n_layer; ++il) {
      const BertLayer& l = layers_[size_t(il)];
      attention(l, batch);
      add_inplace(x_.data(), proj_.data(), n_tok * d);
      layer_norm(x_.data(), l.attn_out_norm, x_.data(), n_tok, d, c.norm_eps);
      matmul(l.w_up, x_.data(), n_tok, up_.data(), pool_, scratch_);  // [n_tok, n_ff]
      add_bias(up_.data(), l.b_up, n_tok, c.n_ff);
      gelu(up_.data(), up_.data(), n_tok * c.n_ff);
      matmul(l.w_down, up_.data(), n_tok, proj_.data(), pool_, scratch_);  // [n_tok, n_embd]
      add_bias(proj_.data(), l.b_down, n_tok, d);
      add_inplace(x_.data(), proj_.data(), n_tok * d);
      layer_norm(x_.data(), l.layer_out_norm, x_.data(), n_tok, d, c.norm_eps);
    }
    const bool rank = pooling_ == PoolingType::kRank;
    pooled_.resize(size_t(batch.n_pool_rows() * d));
    int64_t first = 0, row = 0;
    for (const StepSeq& s : batch.seqs) {
      const int64_t n = s.n_tokens;
      float* out = pooled_.data() + row * d;
      if (s.pool_all_rows) {  // pooling none: every token's row
        std::copy(x_.data() + first * d, x_.data() + (first + n) * d, out);
        row += n;
      } else {
        pool_rows(rank ? PoolingType::kCls : pooling_, x_.data() + first * d, n, d, out);
        ++row;
      }
      first += n;
    }
    if (rank) classify(int64_t(batch.seqs.size()));
    return {};
  }

  // pooled_ [n, n_embd] CLS rows -> [n, n_cls_out] scores, as llama.cpp's rank
  // pooling: tanh(cls x + b), then cls.output.
  void classify(int64_t n) {
    const int64_t d = config_.n_embd;
    const int64_t n_out = cls_out_.view().n_out;
    const float* in = pooled_.data();
    if (cls_.view().data != nullptr) {
      ensure(head_, n * d);
      matmul(cls_, pooled_.data(), n, head_.data(), pool_, scratch_);
      add_bias(head_.data(), cls_b_, n, d);
      for (int64_t i = 0; i < n * d; ++i) head_[size_t(i)] = std::tanh(head_[size_t(i)]);
      in = head_.data();
    }
    ensure(scores_, n * n_out);
    matmul(cls_out_, in, n, scores_.data(), pool_, scratch_);
    add_bias(scores_.data(), cls_out_b_, n, n_out);
    pooled_.assign(scores_.begin(), scores_.begin() + n * n_out);
  }

 private:
  static void ensure(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
  }

  StatusOr<LayerNormWeights> load_norm(WeightLoader& w, const std::string& name) {
    LayerNormWeights ln;
    OMNIBUS_ASSIGN_OR_RETURN(ln.w, w.vector_f32(name + ".weight", config_.n_embd));
    OMNIBUS_ASSIGN_OR_RETURN(ln.b, w.vector_f32(name + ".bias", config_.n_embd));
    return ln;
  }

  // An optional bias of n floats (null when the GGUF has none).
  static Status load_bias(WeightLoader& w, const std::string& name, int64_t n, const float** out) {
    if (!w.has(name)) return Status::ok();
    OMNIBUS_ASSIGN_OR_RETURN(*out, w.vector_f32(name, n));
    return Status::ok();
  }

  Status load_layer(WeightLoader& w, int il, BertLayer& l) {
    const ModelConfig& c = config_;
    const std::string p = "blk." + std::to_string(il) + ".";
    ThreadPool* pool = &pool_;
    OMNIBUS_ASSIGN_OR_RETURN(l.wq, w.packed_matrix(p + "attn_q.weight", c.n_embd, c.n_embd, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.wk, w.packed_matrix(p + "attn_k.weight", c.n_embd, c.n_embd, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.wv, w.packed_matrix(p + "attn_v.weight", c.n_embd, c.n_embd, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.wo,
                             w.packed_matrix(p + "attn_output.weight", c.n_embd, c.n_embd, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.w_up, w.packed_matrix(p + "ffn_up.weight", c.n_embd, c.n_ff, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.w_down,
                             w.packed_matrix(p + "ffn_down.weight", c.n_ff, c.n_embd, pool));
    OMNIBUS_RETURN_IF_ERROR(load_bias(w, p + "attn_q.bias", c.n_embd, &l.bq));
    OMNIBUS_RETURN_IF_ERROR(load_bias(w, p + "attn_k.bias", c.n_embd, &l.bk));
    OMNIBUS_RETURN_IF_ERROR(load_bias(w, p + "attn_v.bias", c.n_embd, &l.bv));
    OMNIBUS_RETURN_IF_ERROR(load_bias(w, p + "attn_output.bias", c.n_embd, &l.bo));
    OMNIBUS_RETURN_IF_ERROR(load_bias(w, p + "ffn_up.bias", c.n_ff, &l.b_up));
    OMNIBUS_RETURN_IF_ERROR(load_bias(w, p + "ffn_down.bias", c.n_embd, &l.b_down));
    OMNIBUS_ASSIGN_OR_RETURN(l.attn_out_norm, load_norm(w, p + "attn_output_norm"));
    OMNIBUS_ASSIGN_OR_RETURN(l.layer_out_norm, load_norm(w, p + "layer_output_norm"));
    return Status::ok();
  }

  // x = layer_norm(token + type 0 + position embeddings).
  void embed(const StepBatch& batch) {
    const ModelConfig& c = config_;
    const int64_t d = c.n_embd;
    const ToFloatFn tok_f = dtype_traits(token_embd_.type).to_float;
    const ToFloatFn pos_f = dtype_traits(pos_embd_.type).to_float;
    const size_t tok_row = dtype_row_size(token_embd_.type, d);
    const size_t pos_row = dtype_row_size(pos_embd_.type, d);
    const auto* tok_base = static_cast<const uint8_t*>(token_embd_.data);
    const auto* pos_base = static_cast<const uint8_t*>(pos_embd_.data);
    ensure(row_, d);
    int64_t t = 0;
    for (const StepSeq& s : batch.seqs) {
      for (int32_t i = 0; i < s.n_tokens; ++i, ++t) {
        const int32_t id = batch.tokens[size_t(t)];
        OMNIBUS_CHECK(id >= 0 && id < c.n_vocab);
        float* xt = x_.data() + t * d;
        tok_f(tok_base + size_t(id) * tok_row, xt, d);
        add_inplace(xt, type_row0_.data(), d);
        pos_f(pos_base + size_t(i) * pos_row, row_.data(), d);
        add_inplace(xt, row_.data(), d);
      }
    }
    layer_norm(x_.data(), embd_norm_, x_.data(), t, d, c.norm_eps);
  }

  // The step's sequences for attention: each sees all of itself, both ways.
  void prepare_attention(const StepBatch& batch) {
    seqs_.clear();
    int32_t first = 0;
    for (const StepSeq& s : batch.seqs) {
      seqs_.push_back(EncoderSeq{first, s.n_tokens});
      first += s.n_tokens;
    }
  }

  // proj_ = (bidirectional attention of each sequence over itself) Wo + bo.
  void attention(const BertLayer& l, const StepBatch& batch) {
    const ModelConfig& c = config_;
    const int64_t n_tok = batch.n_tokens();
    const int64_t d = c.n_embd;
    const PackedWeight* w[] = {&l.wq, &l.wk, &l.wv};
    float* y[] = {q_.data(), k_.data(), v_.data()};
    matmul_shared_input(w, x_.data(), n_tok, y, pool_, scratch_);
    add_bias(q_.data(), l.bq, n_tok, d);
    add_bias(k_.data(), l.bk, n_tok, d);
    add_bias(v_.data(), l.bv, n_tok, d);
    const AttentionParams p{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
    encoder_attention(q_.data(), k_.data(), v_.data(), seqs_.data(), int(seqs_.size()), p,
                      attn_.data(), pool_);
    matmul(l.wo, attn_.data(), n_tok, proj_.data(), pool_, scratch_);  // [n_tok, n_embd]
    add_bias(proj_.data(), l.bo, n_tok, d);
  }

  std::shared_ptr<const GgufFile> file_;  // keeps the weights' mapping alive
  ThreadPool& pool_;
  WeightView token_embd_{};       // [n_embd -> n_vocab] rows are token vectors
  WeightView pos_embd_{};         // [n_embd -> n_ctx_train]
  std::vector<float> type_row0_;  // [n_embd] token type 0's vector (zeros without one)
  LayerNormWeights embd_norm_;
  std::vector<BertLayer> layers_;
  // Activations, grown to the largest step and reused.
  std::vector<float> x_, q_, k_, v_, attn_, proj_, up_, row_;
  PackedWeight cls_, cls_out_;        // the classification head (rerankers), or empty
  const float* cls_b_ = nullptr;      // [n_embd]
  const float* cls_out_b_ = nullptr;  // [n_cls_out]
  std::vector<float> head_, scores_;  // classify(): [n_seqs, n_embd], [n_seqs, n_cls_out]
  std::vector<EncoderSeq> seqs_;      // [n_seqs] (prepare_attention)
  MatmulScratch scratch_;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> load_bert(std::shared_ptr<const GgufFile> file,
                                           const ModelConfig& config, ThreadPool& pool,
                                           WeightLoader& weights) {
  auto model = std::make_unique<BertModel>(std::move(file), config, pool);
  OMNIBUS_RETURN_IF_ERROR(model->load(weights));
  return std::unique_ptr<Model>(std::move(model));
}

Status read_bert_extras(const GgufFile& f, ModelConfig* c) {
  const auto eps = f.get_float("bert.attention.layer_norm_epsilon");
  if (!eps) return Status::corrupt("{}: missing 'bert.attention.layer_norm_epsilon'", f.path());
  c->norm_eps = float(*eps);
  c->causal = f.get_bool("bert.attention.causal").value_or(false);
  return Status::ok();
}

}  // namespace omnibus
