// Pieces every decoder-only transformer in model/ shares: the token embedding
// and output head (tensor lookup, the embedding row gather, the final norm and
// vocabulary projection of only the rows that produce logits) and the checks a
// forward pass makes on its step. Each architecture file (llama.cc,
// gemma3.cc) keeps its own layer loop and uses these for the rest, so the
// common parts are written once.
//
// Thread-safety: EmbeddingWeights is immutable after loading; the functions
// write only the buffers they are given.
#pragma once

#include <span>

#include "kernels/matmul.h"
#include "kv/kv_storage.h"
#include "model/forward_buffers.h"
#include "model/model_config.h"
#include "model/step_batch.h"
#include "model/weights.h"

namespace omnibus {

class ThreadPool;

struct EmbeddingWeights {
  WeightView token_embd{};           // [n_embd -> n_vocab] rows are token vectors
  PackedWeight output;               // [n_embd -> n_vocab]; token_embd when tied
  const float* output_norm = nullptr;  // [n_embd]
};

// The weights every pre-norm decoder block has (blk.N.*): attention
// projections, feed-forward (gate/up/down) and the two input norms.
struct BlockWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  PackedWeight wq;                   // [n_embd -> n_q]
  PackedWeight wk;                   // [n_embd -> n_kv]
  PackedWeight wv;                   // [n_embd -> n_kv]
  PackedWeight wo;                   // [n_q -> n_embd]
  const float* ffn_norm = nullptr;   // [n_embd]
  PackedWeight w_gate;               // [n_embd -> n_ff]
  PackedWeight w_up;                 // [n_embd -> n_ff]
  PackedWeight w_down;               // [n_ff -> n_embd]
};

// Loads (and packs) layer il's BlockWeights into *out.
Status load_block_weights(const WeightLoader& w, const ModelConfig& c, int il, ThreadPool* pool,
                          BlockWeights* out);

// b.q, b.k, b.v = xn Wq, xn Wk, xn Wv (one shared-input matmul: xn is
// quantized once)                                   xn: [n_tok, n_embd]
void project_qkv(const BlockWeights& l, const float* xn, int64_t n_tok, ForwardBuffers& b,
                 ThreadPool& pool);

// b.gate, b.up = xn Wgate, xn Wup (one shared-input matmul)
void project_gate_up(const BlockWeights& l, const float* xn, int64_t n_tok, ForwardBuffers& b,
                     ThreadPool& pool);

// token_embd.weight (dequantizable), output_norm.weight, and output.weight
// or, when absent, the tied embedding.
StatusOr<EmbeddingWeights> load_embedding_weights(const WeightLoader& w, const ModelConfig& c,
                                                  ThreadPool* pool);

// REQUIRES-style checks of a step against the cache: geometry matches the
// config and every block table covers its sequence's positions.
void check_step(const ModelConfig& c, const StepBatch& batch, const KvStorage& kv);

// x[t, :] = dequantize(token_embd row batch.tokens[t])     x: [n_tok, n_embd]
void embed_tokens(const EmbeddingWeights& e, const ModelConfig& c, const StepBatch& batch,
                  float* x);

// logits[r, :] = (rms_norm(x[logit_rows[r], :]) * output_norm) Woutput, for the
// rows b.logit_rows names (b.prepare() ran); uses b.last and b.logits.
// Returns [n_rows, n_vocab] (valid until the buffers are reused).
std::span<float> output_logits(const EmbeddingWeights& e, const ModelConfig& c, const float* x,
                               ForwardBuffers& b, ThreadPool& pool);

}  // namespace omnibus
