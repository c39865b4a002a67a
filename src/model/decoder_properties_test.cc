// Properties every decoder architecture holds, checked on a tiny model of
// each (the checks are in model/reference_testing.h): chunking a prompt, or
// sharing a step with another sequence, changes no bit of its logits (on
// quantized weights, where a reordered sum would show); a missing tensor is
// named in the load error. One row per architecture: a new one adds a row.
// The Llama-family architectures run on their random-weight GGUFs
// (models/random/, tools/golden/make_random_models.py; the tests skip when
// those are not generated): for qwen3moe, sharing a step means other tokens
// routed to the same experts, in the same grouped matmuls.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "model/reference_testing.h"
#include "model/tiny_model_testing.h"
#include "util/testdata.h"

namespace omnibus {
namespace {

struct Arch {
  std::string name;
  // The GGUF of the bitwise-property model (quantized weights), by seed.
  std::function<std::vector<uint8_t>(uint64_t seed)> quantized_gguf;
  // A GGUF with the spec's default (f32) weights.
  std::function<std::vector<uint8_t>()> plain_gguf;
  int n_vocab;
  uint64_t chunk_model_seed, chunk_token_seed;
  std::vector<int> chunks;  // chunk sizes compared against the whole prompt
  uint64_t share_model_seed, share_token_seed;
  std::string missing_tensor;  // renamed in plain_gguf(): its byte missing_at becomes 'q'
  size_t missing_at;
};

void PrintTo(const Arch& a, std::ostream* os) { *os << a.name; }

// models/random/<family>.gguf, or empty when it is not generated.
std::vector<uint8_t> random_family_gguf(const std::string& family) {
  const std::string bytes = testdata::read_file(testdata::model_path("random/" + family + ".gguf"));
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

// A row for a random-weight family file: `missing` is renamed at `at`.
Arch family(const std::string& name, const std::string& missing, size_t at) {
  auto bytes = [name](uint64_t) { return random_family_gguf(name); };
  return {.name = name,
          .quantized_gguf = bytes,
          .plain_gguf = [name] { return random_family_gguf(name); },
          .n_vocab = 0,  // read from the model
          .chunk_model_seed = 0,
          .chunk_token_seed = 21,
          .chunks = {1, 5, 16, 17},
          .share_model_seed = 0,
          .share_token_seed = 22,
          .missing_tensor = missing,
          .missing_at = at};
}

#define SKIP_IF_EMPTY(bytes) \
  if ((bytes).empty()) GTEST_SKIP() << "models/random/ not generated (scripts/fetch_models.sh)"

template <class Spec>
Spec with_types(Spec s, DType weights, DType embd) {
  s.weight_type = weights;
  s.embd_type = embd;
  return s;
}

std::vector<Arch> archs() {
  const TinyLlamaSpec llama = with_types(TinyLlamaSpec{}, DType::Q4_1, DType::Q8_0);
  const TinyGemma3Spec gemma3 = with_types(TinyGemma3Spec{}, DType::Q5_0, DType::Q8_0);
  // K-quant projections (rows of whole super-blocks): on the amx tier a
  // step's feed-forward blocks of 96 tokens and more run as gated quads
  // (kernels/matmul.h, matmul_gated_ffn), the shorter ones unfused, so the
  // chunked and whole prompts below take both paths.
  TinyLlamaSpec kquant_llama = with_types(TinyLlamaSpec{}, DType::Q4_K, DType::Q8_0);
  kquant_llama.n_embd = 256;
  kquant_llama.n_ff = 512;
  return {
      {.name = "llama",
       .quantized_gguf = [llama](uint64_t seed) { return make_tiny_llama_gguf(llama, seed); },
       .plain_gguf = [] { return make_tiny_llama_gguf(TinyLlamaSpec{}, 1); },
       .n_vocab = llama.n_vocab,
       .chunk_model_seed = 5,
       .chunk_token_seed = 6,
       .chunks = {1, 3, 16, 17},
       .share_model_seed = 7,
       .share_token_seed = 8,
       .missing_tensor = "blk.1.ffn_up.weight",  // -> "blk.1.ffn_uq.weight"
       .missing_at = 10},
      {.name = "llama_kquants",
       .quantized_gguf =
           [kquant_llama](uint64_t seed) { return make_tiny_llama_gguf(kquant_llama, seed); },
       .plain_gguf = [] { return make_tiny_llama_gguf(TinyLlamaSpec{}, 1); },
       .n_vocab = kquant_llama.n_vocab,
       .chunk_model_seed = 11,
       .chunk_token_seed = 12,
       .chunks = {1, 3, 16, 17},
       .share_model_seed = 13,
       .share_token_seed = 14,
       .missing_tensor = "blk.1.ffn_up.weight",
       .missing_at = 10},
      {.name = "gemma3",
       .quantized_gguf = [gemma3](uint64_t seed) { return make_tiny_gemma3_gguf(gemma3, seed); },
       .plain_gguf = [] { return make_tiny_gemma3_gguf(TinyGemma3Spec{}, 1); },
       .n_vocab = gemma3.n_vocab,
       .chunk_model_seed = 7,
       .chunk_token_seed = 8,
       .chunks = {1, 3, 8, 16, 17},
       .share_model_seed = 9,
       .share_token_seed = 10,
       .missing_tensor = "blk.2.post_ffw_norm.weight",  // "post_ffw" -> "qost_ffw"
       .missing_at = 6},
      family("llama3", "blk.3.ffn_gate.weight", 10),         // -> ffn_qate
      family("mistral", "blk.2.attn_output.weight", 11),     // -> attn_qutput
      family("qwen2", "blk.0.attn_k.bias", 13),              // a required bias -> attn_k.qias
      family("qwen3", "blk.1.attn_k_norm.weight", 13),       // -> attn_k_qorm
      family("qwen3moe", "blk.3.ffn_down_exps.weight", 10),  // -> ffn_qown_exps
      family("phi3", "blk.1.ffn_down.weight", 10),           // -> ffn_qown
  };
}

class DecoderProperties : public ::testing::TestWithParam<Arch> {};

TEST_P(DecoderProperties, ChunkingDoesNotChangeAnyBit) {
  const Arch& a = GetParam();
  const std::vector<uint8_t> bytes = a.quantized_gguf(a.chunk_model_seed);
  SKIP_IF_EMPTY(bytes);
  reference::Loaded l = reference::load_bytes(bytes);
  const int n_vocab = a.n_vocab > 0 ? a.n_vocab : l.model->config().n_vocab;
  reference::expect_chunking_changes_no_bit(
      *l.model, reference::random_tokens(45, n_vocab, a.chunk_token_seed), a.chunks);
  // a step of more tokens than the feed-forward half and the matmuls run at
  // once (512: they run it in blocks) against the same prompt in chunks
  reference::expect_chunking_changes_no_bit(
      *l.model, reference::random_tokens(1100, n_vocab, a.chunk_token_seed), {300}, 1100);
}

TEST_P(DecoderProperties, SharingAStepDoesNotChangeAnyBit) {
  const Arch& a = GetParam();
  const std::vector<uint8_t> bytes = a.quantized_gguf(a.share_model_seed);
  SKIP_IF_EMPTY(bytes);
  reference::Loaded l = reference::load_bytes(bytes);
  const int n_vocab = a.n_vocab > 0 ? a.n_vocab : l.model->config().n_vocab;
  reference::expect_sharing_a_step_changes_no_bit(*l.model, n_vocab, a.share_token_seed);
}

TEST_P(DecoderProperties, RejectsMissingTensorWithItsName) {
  const Arch& a = GetParam();
  std::vector<uint8_t> bytes = a.plain_gguf();
  SKIP_IF_EMPTY(bytes);
  reference::expect_load_names_missing_tensor(std::move(bytes), a.missing_tensor, a.missing_at,
                                              'q');
}

INSTANTIATE_TEST_SUITE_P(Archs, DecoderProperties, ::testing::ValuesIn(archs()),
                         [](const ::testing::TestParamInfo<Arch>& p) { return p.param.name; });

}  // namespace
}  // namespace omnibus
