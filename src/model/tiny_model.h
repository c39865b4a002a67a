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

struct TinyLlamaSpec {
  int n_vocab = 64;
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 96;
  int n_ctx = 256;
  float rope_base = 10000.f;
  DType weight_type = DType::F32;   // projections and FFN
  DType embd_type = DType::F32;     // token embedding (also the tied output head)
  bool tied_output = true;
};

// A complete Llama-architecture GGUF (v3) with a toy vocabulary ("<s>", "</s>",
// then single bytes 'a'.. ) and gpt2 tokenizer metadata.
std::vector<uint8_t> make_tiny_llama_gguf(const TinyLlamaSpec& spec, uint64_t seed);

}  // namespace omnibus
