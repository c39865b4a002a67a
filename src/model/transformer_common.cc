#include "model/transformer_common.h"

#include <algorithm>
#include <string>

#include "kernels/ops.h"
#include "kernels/ops_parallel.h"
#include "model/pooling.h"
#include "util/check.h"

namespace omnibus {

StatusOr<EmbeddingWeights> load_embedding_weights(WeightLoader& w, const ModelConfig& c,
                                                  ThreadPool* pool) {
  EmbeddingWeights e;
  OMNIBUS_ASSIGN_OR_RETURN(e.token_embd, w.matrix("token_embd.weight", c.n_embd, c.n_vocab));
  if (dtype_traits(e.token_embd.type).to_float == nullptr) {
    return Status::unsupported("token_embd.weight dtype {} cannot be dequantized",
                               dtype_name(e.token_embd.type));
  }
  OMNIBUS_ASSIGN_OR_RETURN(e.output_norm, w.vector_f32("output_norm.weight", c.n_embd));
  // Tied embeddings: the output head is token_embd itself.
  const char* output = w.has("output.weight") ? "output.weight" : "token_embd.weight";
  OMNIBUS_ASSIGN_OR_RETURN(e.output, w.packed_matrix(output, c.n_embd, c.n_vocab, pool));
  return e;
}

Status load_block_weights(WeightLoader& w, const ModelConfig& c, int il, ThreadPool* pool,
                          BlockWeights* out) {
  const std::string p = "blk." + std::to_string(il) + ".";
  BlockWeights& l = *out;
  OMNIBUS_ASSIGN_OR_RETURN(l.attn_norm, w.vector_f32(p + "attn_norm.weight", c.n_embd));
  const int64_t n_q = c.n_q(), n_kv = c.n_kv(), n_qkv = n_q + 2 * n_kv;
  if (w.has(p + "attn_qkv.weight")) {
    const std::string name = p + "attn_qkv.weight";
    OMNIBUS_ASSIGN_OR_RETURN(l.wq, w.packed_rows(name, {c.n_embd, n_qkv}, 0, n_q, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.wk, w.packed_rows(name, {c.n_embd, n_qkv}, n_q, n_kv, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.wv, w.packed_rows(name, {c.n_embd, n_qkv}, n_q + n_kv, n_kv, pool));
  } else {
    OMNIBUS_ASSIGN_OR_RETURN(l.wq, w.packed_matrix(p + "attn_q.weight", c.n_embd, n_q, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.wk, w.packed_matrix(p + "attn_k.weight", c.n_embd, n_kv, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.wv, w.packed_matrix(p + "attn_v.weight", c.n_embd, n_kv, pool));
  }
  if (w.has(p + "attn_qkv.bias")) {
    // One copy of the fused bias; Q, K and V point at its three ranges.
    OMNIBUS_ASSIGN_OR_RETURN(const float* qkv, w.vector_f32(p + "attn_qkv.bias", n_qkv));
    l.bq = qkv;
    l.bk = qkv + n_q;
    l.bv = qkv + n_q + n_kv;
  } else {
    const struct {
      const char* name;
      int64_t n;
      const float** out;
    } biases[] = {
        {"attn_q.bias", n_q, &l.bq}, {"attn_k.bias", n_kv, &l.bk}, {"attn_v.bias", n_kv, &l.bv}};
    for (const auto& b : biases) {
      if (!w.has(p + b.name)) continue;
      OMNIBUS_ASSIGN_OR_RETURN(*b.out, w.vector_f32(p + b.name, b.n));
    }
  }
  OMNIBUS_ASSIGN_OR_RETURN(l.wo, w.packed_matrix(p + "attn_output.weight", n_q, c.n_embd, pool));
  OMNIBUS_ASSIGN_OR_RETURN(l.ffn_norm, w.vector_f32(p + "ffn_norm.weight", c.n_embd));
  if (c.is_moe()) return Status::ok();
  const std::vector<int64_t> fused_up{c.n_embd, 2 * int64_t(c.n_ff)};
  if (w.has(p + "ffn_gate.weight") || w.shape(p + "ffn_up.weight") != fused_up) {
    OMNIBUS_ASSIGN_OR_RETURN(l.w_gate,
                             w.packed_matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.w_up, w.packed_matrix(p + "ffn_up.weight", c.n_embd, c.n_ff, pool));
  } else {
    const std::string name = p + "ffn_up.weight";  // fused: gate rows, then up rows
    OMNIBUS_ASSIGN_OR_RETURN(l.w_gate,
                             w.packed_rows(name, {c.n_embd, 2 * c.n_ff}, 0, c.n_ff, pool));
    OMNIBUS_ASSIGN_OR_RETURN(l.w_up,
                             w.packed_rows(name, {c.n_embd, 2 * c.n_ff}, c.n_ff, c.n_ff, pool));
  }
  OMNIBUS_ASSIGN_OR_RETURN(l.w_down,
                           w.packed_matrix(p + "ffn_down.weight", c.n_ff, c.n_embd, pool));
  return Status::ok();
}

namespace {

// y[t, :] += bias for each of n_tok rows of width n (no-op for a null bias).
void add_bias(float* y, const float* bias, int64_t n_tok, int64_t n) {
  if (bias == nullptr) return;
  for (int64_t t = 0; t < n_tok; ++t) add_inplace(y + t * n, bias, n);
}

}  // namespace

void project_qkv(const BlockWeights& l, const float* xn, int64_t n_tok, ForwardBuffers& b,
                 ThreadPool& pool) {
  const PackedWeight* w[3] = {&l.wq, &l.wk, &l.wv};
  float* y[3] = {b.q.data(), b.k.data(), b.v.data()};
  matmul_shared_input(w, xn, n_tok, y, pool, b.matmul);
}

void attention_block(const BlockWeights& l, const ModelConfig& c, const AttentionStep& s,
                     const PagedKvLayer& kv_layer, const float* x, int64_t n_tok, ForwardBuffers& b,
                     ThreadPool& pool) {
  rms_norm(x, l.attn_norm, b.xn.data(), n_tok, c.n_embd, c.norm_eps, pool);
  // q: [n_tok, n_head, head_dim], k, v: [n_tok, n_head_kv, head_dim]
  project_qkv(l, b.xn.data(), n_tok, b, pool);
  add_bias(b.q.data(), l.bq, n_tok, c.n_q());
  add_bias(b.k.data(), l.bk, n_tok, c.n_kv());
  add_bias(b.v.data(), l.bv, n_tok, c.n_kv());
  if (s.q_norm != nullptr) {
    rms_norm(b.q.data(), s.q_norm, b.q.data(), n_tok * c.n_head, c.head_dim, c.norm_eps, pool);
  }
  if (s.k_norm != nullptr) {
    rms_norm(b.k.data(), s.k_norm, b.k.data(), n_tok * c.n_head_kv, c.head_dim, c.norm_eps, pool);
  }
  rope(b.q.data(), b.positions.data(), n_tok, c.n_head, c.head_dim, *s.rope, pool);
  rope(b.k.data(), b.positions.data(), n_tok, c.n_head_kv, c.head_dim, *s.rope, pool);
  kv_store(kv_layer, s.seqs, s.n_seqs, b.k.data(), b.v.data());
  paged_attention(b.q.data(), kv_layer, s.seqs, s.n_seqs, s.params, b.attn.data(),
                  pool);                                              // [n_tok, n_q]
  matmul(l.wo, b.attn.data(), n_tok, b.proj.data(), pool, b.matmul);  // [n_tok, n_embd]
}

void feed_forward_block(const BlockWeights& l, const ModelConfig& c, GatedActivation act,
                        const float* x, int64_t n_tok, ForwardBuffers& b, ThreadPool& pool) {
  // Each token's result depends on its own row only, so a step of many tokens
  // runs in blocks of kFfnBlockTok through the same first rows of xn, gate
  // and up: their 2 x n_ff floats a token (64 KB at n_ff 8192) are written
  // and read back from cache instead of DRAM (with the matmuls' own 512-token
  // calls: 1B prompt in 8192-token steps 420-480 -> 516-558 tok/s, Xeon amx).
  constexpr int64_t kFfnBlockTok = 512;
  const GatedAct gated = act == GatedActivation::kSwiglu ? GatedAct::kSwiglu : GatedAct::kGeglu;
  for (int64_t t0 = 0; t0 < n_tok; t0 += kFfnBlockTok) {
    const int64_t n = std::min(kFfnBlockTok, n_tok - t0);
    rms_norm(x + t0 * c.n_embd, l.ffn_norm, b.xn.data(), n, c.n_embd, c.norm_eps, pool);
    // proj = W_down act(xn W_gate, xn W_up): [n, n_embd]
    matmul_gated_ffn(l.w_gate, l.w_up, l.w_down, gated, b.xn.data(), n, b.gate.data(), b.up.data(),
                     b.proj.data() + t0 * c.n_embd, pool, b.matmul);
  }
}

void check_step(const ModelConfig& c, const StepBatch& batch, const KvStorage& kv) {
  OMNIBUS_CHECK(kv.groups().n_layers() == c.n_layer && kv.geometry().head_dim == c.head_dim &&
                kv.geometry().n_kv_heads == c.n_head_kv);
  for (const StepSeq& s : batch.seqs) {
    OMNIBUS_CHECK(int64_t(s.n_blocks) * kv.geometry().block_size >= s.n_past + s.n_tokens);
  }
  OMNIBUS_CHECK(batch.group_tables.size() ==
                batch.seqs.size() * size_t(kv.groups().n_groups() - 1));
}

void embed_tokens(const EmbeddingWeights& e, const ModelConfig& c, const StepBatch& batch,
                  float* x) {
  const ToFloatFn to_float = dtype_traits(e.token_embd.type).to_float;
  const size_t row_bytes = dtype_row_size(e.token_embd.type, c.n_embd);
  const auto* base = static_cast<const uint8_t*>(e.token_embd.data);
  for (int64_t t = 0; t < batch.n_tokens(); ++t) {
    const int32_t id = batch.tokens[size_t(t)];
    OMNIBUS_CHECK(id >= 0 && id < c.n_vocab);
    to_float(base + size_t(id) * row_bytes, x + t * c.n_embd, c.n_embd);
  }
}

void pool_last_hidden(const EmbeddingWeights& e, const ModelConfig& c, const float* x,
                      const ForwardBuffers& b, std::vector<float>* pooled) {
  const int64_t n_rows = int64_t(b.pool_rows.size());
  pooled->resize(size_t(n_rows * c.n_embd));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* src = x + int64_t(b.pool_rows[size_t(r)]) * c.n_embd;
    std::copy(src, src + c.n_embd, pooled->data() + r * c.n_embd);
  }
  rms_norm(pooled->data(), e.output_norm, pooled->data(), n_rows, c.n_embd, c.norm_eps);
}

void pool_hidden(const EmbeddingWeights& e, const ModelConfig& c, PoolingType p, const float* x,
                 const StepBatch& batch, const ForwardBuffers& b, std::vector<float>* rows,
                 std::vector<float>* pooled) {
  if (p != PoolingType::kMean && p != PoolingType::kCls)
    return pool_last_hidden(e, c, x, b, pooled);
  const int64_t d = c.n_embd;
  pooled->resize(size_t(int64_t(b.pool_rows.size()) * d));
  int64_t first = 0, r = 0;
  for (const StepSeq& s : batch.seqs) {
    if (s.pool) {
      OMNIBUS_CHECK(s.n_past == 0 && !s.pool_all_rows);  // whole: Model::pools_whole_prompts
      const int64_t n = p == PoolingType::kCls ? 1 : s.n_tokens;
      rows->assign(x + first * d, x + (first + n) * d);
      rms_norm(rows->data(), e.output_norm, rows->data(), n, d, c.norm_eps);
      pool_rows(p, rows->data(), n, d, pooled->data() + r * d);
      ++r;
    }
    first += s.n_tokens;
  }
  OMNIBUS_CHECK(r == int64_t(b.pool_rows.size()));
}

std::span<float> output_logits(const EmbeddingWeights& e, const ModelConfig& c, const float* x,
                               ForwardBuffers& b, ThreadPool& pool) {
  const int64_t n_rows = int64_t(b.logit_rows.size());
  if (n_rows == 0) return {};  // a step of pool sequences only
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* src = x + int64_t(b.logit_rows[size_t(r)]) * c.n_embd;
    std::copy(src, src + c.n_embd, b.last.data() + r * c.n_embd);
  }
  rms_norm(b.last.data(), e.output_norm, b.last.data(), n_rows, c.n_embd, c.norm_eps);
  matmul(e.output, b.last.data(), n_rows, b.logits.data(), pool, b.matmul);  // [n_rows, n_vocab]
  return {b.logits.data(), size_t(n_rows) * size_t(c.n_vocab)};
}

}  // namespace omnibus
