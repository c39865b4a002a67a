// Pieces every decoder-only transformer in model/ shares: loading the weights
// (the token embedding and output head, each pre-norm block), the checks a
// forward pass makes on its step, the embedding row gather, the two halves of
// a block (attention, gated feed-forward) and the final norm and vocabulary
// projection of only the rows that produce logits. Each architecture file
// (llama_family.cc, gemma3.cc) keeps only what is its own: extra weights, how the
// halves join the residual stream, scalings and caps.
//
// Thread-safety: EmbeddingWeights is immutable after loading; the functions
// write only the buffers they are given.
#pragma once

#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kv/attention.h"
#include "kv/kv_storage.h"
#include "model/forward_buffers.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/step_batch.h"
#include "model/weights.h"

namespace omnibus {

class ThreadPool;

struct EmbeddingWeights {
  WeightView token_embd{};             // [n_embd -> n_vocab] rows are token vectors
  PackedWeight output;                 // [n_embd -> n_vocab]; token_embd when tied
  const float* output_norm = nullptr;  // [n_embd]
};

// The weights every pre-norm decoder block has (blk.N.*): attention
// projections (with optional biases), feed-forward (gate/up/down; none in a
// mixture-of-experts layer, whose experts the architecture loads) and the two
// input norms.
struct BlockWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  PackedWeight wq;                   // [n_embd -> n_q]
  PackedWeight wk;                   // [n_embd -> n_kv]
  PackedWeight wv;                   // [n_embd -> n_kv]
  const float* bq = nullptr;         // [n_q] bias of wq, or null (Qwen 2)
  const float* bk = nullptr;         // [n_kv]
  const float* bv = nullptr;         // [n_kv]
  PackedWeight wo;                   // [n_q -> n_embd]
  const float* ffn_norm = nullptr;   // [n_embd]
  PackedWeight w_gate;               // [n_embd -> n_ff]
  PackedWeight w_up;                 // [n_embd -> n_ff]
  PackedWeight w_down;               // [n_ff -> n_embd]
};

// Loads (and packs) layer il's BlockWeights into *out, accepting the tensor
// layouts llama.cpp does for every architecture:
//   Q, K, V  attn_{q,k,v}.weight, or the three row ranges of a fused
//            attn_qkv.weight [n_embd, n_q + 2 n_kv] (Phi-3);
//   biases   attn_{q,k,v}.bias or a fused attn_qkv.bias, when present;
//   FFN      ffn_gate.weight and ffn_up.weight, or a fused ffn_up.weight
//            [n_embd, 2 n_ff] whose first n_ff rows are the gate (Phi-3);
//            none when c.is_moe().
Status load_block_weights(WeightLoader& w, const ModelConfig& c, int il, ThreadPool* pool,
                          BlockWeights* out);

// token_embd.weight (dequantizable; stays mapped, its rows fault in as steps
// gather them), output_norm.weight, and output.weight or, when absent, the
// tied embedding (packed like any matmul weight: weights.h).
StatusOr<EmbeddingWeights> load_embedding_weights(WeightLoader& w, const ModelConfig& c,
                                                  ThreadPool* pool);

// Loads the embedding and output weights into *embd and each layer's
// BlockWeights into (*layers)[il] (resized to n_layer), then calls
// extra(il, (*layers)[il]) -> Status for what the architecture adds.
template <class Layer, class ExtraFn>
Status load_decoder_weights(WeightLoader& w, const ModelConfig& c, ThreadPool* pool,
                            EmbeddingWeights* embd, std::vector<Layer>* layers, ExtraFn extra) {
  static_assert(std::is_base_of_v<BlockWeights, Layer>);
  OMNIBUS_ASSIGN_OR_RETURN(*embd, load_embedding_weights(w, c, pool));
  layers->resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    Layer& l = (*layers)[size_t(il)];
    OMNIBUS_RETURN_IF_ERROR(load_block_weights(w, c, il, pool, &l));
    OMNIBUS_RETURN_IF_ERROR(extra(il, l));
  }
  return Status::ok();
}

// The state every decoder Model holds: the file (whose mapping the mapped
// weights point into), the pool, the embedding and output weights, the
// layers and the activation buffers. An architecture derives from it, adds a
// load(WeightLoader&) and forward().
template <class Layer>
class DecoderModel : public Model {
 public:
  DecoderModel(std::shared_ptr<const GgufFile> file, const ModelConfig& config, ThreadPool& pool)
      : Model(config), file_(std::move(file)), pool_(pool) {}

  ThreadPool* thread_pool() override { return &pool_; }

 protected:
  // load_decoder_weights() into embd_ and layers_.
  template <class ExtraFn>
  Status load_weights(WeightLoader& w, ExtraFn extra) {
    return load_decoder_weights(w, config_, &pool_, &embd_, &layers_, extra);
  }

  std::shared_ptr<const GgufFile> file_;  // keeps the weights' mapping alive
  ThreadPool& pool_;
  EmbeddingWeights embd_;
  std::vector<Layer> layers_;
  ForwardBuffers buf_;
};

// A new M(file, config, pool) after M::load(weights) succeeded.
template <class M>
StatusOr<std::unique_ptr<Model>> load_decoder_model(std::shared_ptr<const GgufFile> file,
                                                    const ModelConfig& config, ThreadPool& pool,
                                                    WeightLoader& weights) {
  auto model = std::make_unique<M>(std::move(file), config, pool);
  OMNIBUS_RETURN_IF_ERROR(model->load(weights));
  return std::unique_ptr<Model>(std::move(model));
}

// How one layer's attention runs: its RoPE, the sequences it sees (a sliding
// window or not), and Gemma's per-head q/k norms (null for none).
struct AttentionStep {
  const RopeParams* rope = nullptr;
  const AttentionSeq* seqs = nullptr;  // [n_seqs]
  int n_seqs = 0;
  AttentionParams params;
  const float* q_norm = nullptr;  // [head_dim]
  const float* k_norm = nullptr;  // [head_dim]
};

// The attention half of a block, without the residual add:
//   xn = rms_norm(x) * attn_norm;  q, k, v = xn Wq + bq, xn Wk + bk, xn Wv + bv
//   q, k = rms_norm_per_head(q) * q_norm, ... (when set);  rope(q, k)
//   kv_store(k, v);  b.proj = paged_attention(q) Wo          b.proj: [n_tok, n_embd]
void attention_block(const BlockWeights& l, const ModelConfig& c, const AttentionStep& s,
                     const PagedKvLayer& kv_layer, const float* x, int64_t n_tok, ForwardBuffers& b,
                     ThreadPool& pool);

// The gated feed-forward half of a block, without the residual add:
//   xn = rms_norm(x) * ffn_norm;  b.proj = act(xn Wgate) * (xn Wup)) Wdown
// with act = silu (SwiGLU) or gelu_tanh (GeGLU).                b.proj: [n_tok, n_embd]
// Runs 512 tokens at a time (kernels/matmul.h's matmul_gated_ffn: b.gate and
// b.up are its scratch); b.xn keeps the last block's rows.
enum class GatedActivation { kSwiglu, kGeglu };
void feed_forward_block(const BlockWeights& l, const ModelConfig& c, GatedActivation act,
                        const float* x, int64_t n_tok, ForwardBuffers& b, ThreadPool& pool);

// b.q, b.k, b.v = xn Wq, xn Wk, xn Wv (one shared-input matmul: xn is
// quantized once)                                   xn: [n_tok, n_embd]
void project_qkv(const BlockWeights& l, const float* xn, int64_t n_tok, ForwardBuffers& b,
                 ThreadPool& pool);

// REQUIRES-style checks of a step against the cache: geometry matches the
// config and every block table covers its sequence's positions.
void check_step(const ModelConfig& c, const StepBatch& batch, const KvStorage& kv);

// x[t, :] = dequantize(token_embd row batch.tokens[t])     x: [n_tok, n_embd]
void embed_tokens(const EmbeddingWeights& e, const ModelConfig& c, const StepBatch& batch,
                  float* x);

// pooled[r, :] = rms_norm(x[pool_rows[r], :]) * output_norm: the last hidden
// state of each pool sequence (last-token pooling), [n_pool_rows, n_embd];
// *pooled is resized to fit.
void pool_last_hidden(const EmbeddingWeights& e, const ModelConfig& c, const float* x,
                      const ForwardBuffers& b, std::vector<float>* pooled);

// The pooled rows of a decoder: pool_last_hidden for kLast, kNone and kRank;
// for kMean / kCls, per pool sequence (whole in this step: n_past 0), the
// mean of its output-normed rows (summed in double) or its first row, as
// llama.cpp pools t_embd. rows: scratch.
void pool_hidden(const EmbeddingWeights& e, const ModelConfig& c, PoolingType p, const float* x,
                 const StepBatch& batch, const ForwardBuffers& b, std::vector<float>* rows,
                 std::vector<float>* pooled);

// logits[r, :] = (rms_norm(x[logit_rows[r], :]) * output_norm) Woutput, for the
// rows b.logit_rows names (b.prepare() ran); uses b.last and b.logits.
// Returns [n_rows, n_vocab] (valid until the buffers are reused).
std::span<float> output_logits(const EmbeddingWeights& e, const ModelConfig& c, const float* x,
                               ForwardBuffers& b, ThreadPool& pool);

}  // namespace omnibus
