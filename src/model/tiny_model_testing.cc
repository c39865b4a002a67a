#include "model/tiny_model_testing.h"

#include <fmt/format.h>

#include <cstring>
#include <random>
#include <string>

#include "gguf/gguf_writer.h"
#include "kernels/quant_test_util.h"
#include "util/check.h"

namespace omnibus {
namespace {

// n values ~ U(-scale, scale), stored as `type` (quantized with the reference quantizer);
// for the K-quants, which have none here, random blocks of values within a few `scale`
// (kernels/quant_test_util.h's random_rows).
std::vector<uint8_t> random_tensor(std::mt19937_64& rng, DType type, int64_t n, float scale) {
  const DTypeTraits& t = dtype_traits_ref(type);
  if (t.from_float == nullptr) {
    std::mt19937 block_rng(static_cast<uint32_t>(rng()));
    return quant_testing::random_rows(type, 1, n, block_rng, scale / 256);
  }
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = u(rng);
  std::vector<uint8_t> bytes(dtype_row_size(type, n));
  t.from_float(values.data(), bytes.data(), n);
  return bytes;
}

// n floats ~ U(lo, hi) as an f32 tensor (norm weights).
void add_f32_vector(GgufWriter& w, std::mt19937_64& rng, const std::string& name, int64_t n,
                    float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  w.add_tensor(name, DType::F32, {n}, std::move(bytes));
}

// An [n_in, n_out] matrix of random_tensor values.
void add_random_matrix(GgufWriter& w, std::mt19937_64& rng, const std::string& name, DType type,
                       int64_t n_in, int64_t n_out, float scale) {
  w.add_tensor(name, type, {n_in, n_out}, random_tensor(rng, type, n_in * n_out, scale));
}

// The name and the hyperparameters every architecture has, under `arch`.
void set_common_hparams(GgufWriter& w, const std::string& arch, const TinyDecoderShape& s) {
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "tiny-" + arch);
  w.set_u32(arch + ".block_count", uint32_t(s.n_layer));
  w.set_u32(arch + ".context_length", uint32_t(s.n_ctx));
  w.set_u32(arch + ".embedding_length", uint32_t(s.n_embd));
  w.set_u32(arch + ".feed_forward_length", uint32_t(s.n_ff));
  w.set_u32(arch + ".attention.head_count", uint32_t(s.n_head));
  w.set_u32(arch + ".attention.head_count_kv", uint32_t(s.n_head_kv));
}

}  // namespace

std::vector<uint8_t> make_tiny_gemma3_gguf(const TinyGemma3Spec& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GgufWriter w;
  set_common_hparams(w, "gemma3", s);
  w.set_u32("gemma3.attention.key_length", uint32_t(s.head_dim));
  w.set_u32("gemma3.attention.value_length", uint32_t(s.head_dim));
  w.set_f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_f32("gemma3.rope.freq_base", s.rope_base);
  if (s.rope_base_swa > 0) w.set_f32("gemma3.rope.freq_base_swa", s.rope_base_swa);
  if (s.sliding_window > 0)
    w.set_u32("gemma3.attention.sliding_window", uint32_t(s.sliding_window));
  if (s.swa_pattern > 0)
    w.set_u32("gemma3.attention.sliding_window_pattern", uint32_t(s.swa_pattern));
  if (s.final_softcap > 0) w.set_f32("gemma3.final_logit_softcapping", s.final_softcap);
  // SentencePiece-style vocabulary: <pad> <eos> <bos> <unk>, then pieces.
  std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>"};
  for (int i = 4; i < s.n_vocab; ++i) tokens.push_back(fmt::format("\xE2\x96\x81t{}", i));
  std::vector<int32_t> types(size_t(s.n_vocab), 1);
  types[0] = types[1] = types[2] = 3;
  types[3] = 2;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", std::vector<float>(size_t(s.n_vocab), 0.f));
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 2);
  w.set_u32("tokenizer.ggml.eos_token_id", 1);

  const int64_t E = s.n_embd, F = s.n_ff, hd = s.head_dim;
  const int64_t nq = s.n_head * hd, nkv = s.n_head_kv * hd;
  auto mat = [&](const std::string& name, DType type, int64_t n_in, int64_t n_out, float scale) {
    add_random_matrix(w, rng, name, type, n_in, n_out, scale);
  };
  // Embedding rows are scaled by sqrt(n_embd) in the model: keep them small.
  mat("token_embd.weight", s.embd_type, E, s.n_vocab, 0.15f);
  add_f32_vector(w, rng, "output_norm.weight", E, 0.8f, 1.2f);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add_f32_vector(w, rng, p + "attn_norm.weight", E, 0.8f, 1.2f);
    mat(p + "attn_q.weight", s.weight_type, E, nq, 0.3f);
    mat(p + "attn_k.weight", s.weight_type, E, nkv, 0.3f);
    mat(p + "attn_v.weight", s.weight_type, E, nkv, 0.3f);
    add_f32_vector(w, rng, p + "attn_q_norm.weight", hd, 0.8f, 1.2f);
    add_f32_vector(w, rng, p + "attn_k_norm.weight", hd, 0.8f, 1.2f);
    mat(p + "attn_output.weight", s.weight_type, nq, E, 0.2f);
    add_f32_vector(w, rng, p + "post_attention_norm.weight", E, 0.3f, 0.6f);
    add_f32_vector(w, rng, p + "ffn_norm.weight", E, 0.8f, 1.2f);
    mat(p + "ffn_gate.weight", s.weight_type, E, F, 0.3f);
    mat(p + "ffn_up.weight", s.weight_type, E, F, 0.3f);
    mat(p + "ffn_down.weight", s.weight_type, F, E, 0.2f);
    add_f32_vector(w, rng, p + "post_ffw_norm.weight", E, 0.3f, 0.6f);
  }
  return w.to_bytes(3);
}

std::vector<uint8_t> make_tiny_llama_gguf(const TinyLlamaSpec& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GgufWriter w;
  set_common_hparams(w, "llama", s);
  w.set_f32("llama.rope.freq_base", s.rope_base);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32("llama.rope.dimension_count", uint32_t(s.n_embd / s.n_head));
  std::vector<std::string> tokens = {"<s>", "</s>"};
  for (int i = 2; i < s.n_vocab; ++i) tokens.push_back(fmt::format("t{}", i));
  std::vector<int32_t> types(size_t(s.n_vocab), 1);
  types[0] = types[1] = 3;  // control
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {});
  w.set_u32("tokenizer.ggml.bos_token_id", 0);
  w.set_u32("tokenizer.ggml.eos_token_id", 1);

  const int64_t E = s.n_embd, F = s.n_ff, hd = s.n_embd / s.n_head;
  const int64_t nq = s.n_head * hd, nkv = s.n_head_kv * hd;
  auto norm = [&](const std::string& name) { add_f32_vector(w, rng, name, E, 0.8f, 1.2f); };
  auto mat = [&](const std::string& name, DType type, int64_t n_in, int64_t n_out, float scale) {
    add_random_matrix(w, rng, name, type, n_in, n_out, scale);
  };
  mat("token_embd.weight", s.embd_type, E, s.n_vocab, 1.0f);
  norm("output_norm.weight");
  if (!s.tied_output) mat("output.weight", s.weight_type, E, s.n_vocab, 0.2f);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    norm(p + "attn_norm.weight");
    mat(p + "attn_q.weight", s.weight_type, E, nq, 0.3f);
    mat(p + "attn_k.weight", s.weight_type, E, nkv, 0.3f);
    mat(p + "attn_v.weight", s.weight_type, E, nkv, 0.3f);
    mat(p + "attn_output.weight", s.weight_type, nq, E, 0.2f);
    norm(p + "ffn_norm.weight");
    mat(p + "ffn_gate.weight", s.weight_type, E, F, 0.3f);
    mat(p + "ffn_up.weight", s.weight_type, E, F, 0.3f);
    mat(p + "ffn_down.weight", s.weight_type, F, E, 0.2f);
  }
  return w.to_bytes(3);
}

}  // namespace omnibus
