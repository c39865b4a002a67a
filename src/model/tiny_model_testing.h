// Tiny random-weight models written as real GGUF files, for tests that need a
// model but not a download: the loader, the forward pass, the engine. Weights
// are drawn from a seeded RNG, so a (spec, seed) pair always gives the same
// file.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace omnibus {

// What every tiny decoder has, whatever its architecture.
struct TinyDecoderShape {
  int n_vocab = 64;
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 96;
  int n_ctx = 256;
  DType weight_type = DType::F32;  // projections and FFN
  DType embd_type = DType::F32;    // token embedding (also the tied output head)
};

struct TinyLlamaSpec : TinyDecoderShape {
  float rope_base = 10000.f;
  bool tied_output = true;
};

// A complete Llama-architecture GGUF (v3) with a toy vocabulary ("<s>", "</s>",
// then single bytes 'a'.. ) and gpt2 tokenizer metadata.
std::vector<uint8_t> make_tiny_llama_gguf(const TinyLlamaSpec& spec, uint64_t seed);

struct TinyGemma3Spec : TinyDecoderShape {
  // Three layers: two sliding, then a global one.
  TinyGemma3Spec() { n_layer = 3; }

  int head_dim = 32;           // attention.key_length (n_q = 128 != n_embd)
  int sliding_window = 8;      // small, so test sequences run past it
  int swa_pattern = 3;         // layers 0, 1 sliding, layer 2 global; 0: key absent (6)
  float rope_base = 1e6f;      // global layers
  float rope_base_swa = 1e4f;  // sliding layers (0: key absent)
  float final_softcap = 0.f;   // final_logit_softcapping (0: key absent)
};

// A complete Gemma 3 GGUF (v3): scaled embedding, q/k norms, pre/post norms
// (weights around 1, as converted Gemma norms are), GeGLU, interleaved
// sliding/global layers; tied output; SentencePiece-style toy vocabulary.
std::vector<uint8_t> make_tiny_gemma3_gguf(const TinyGemma3Spec& spec, uint64_t seed);

}  // namespace omnibus
