// Tests only: a tiny byte-level BPE vocabulary (tokenizer.ggml.model "gpt2",
// pre-tokenizer "smollm") in which every byte is a token, for tests of the
// tokenizer and of what reads its output (server/).
//
// Ids: `specials` first (0 .. n-1, each with its tokenizer.ggml.token_type:
// 3 control, 4 user-defined), then the 256 byte symbols (byte b is id n + b),
// then the `extra` normal tokens; `merges` as given ("left right", by rank).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/vocab.h"

namespace omnibus {

inline TokenizerVocab byte_level_test_vocab(
    const std::vector<std::pair<std::string, int32_t>>& specials,
    const std::vector<std::string>& extra = {}, const std::vector<std::string>& merges = {}) {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = "smollm";
  for (const auto& [text, type] : specials) {
    v.tokens.push_back(text);
    v.token_types.push_back(type);
  }
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_level::spell(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(1);
  }
  for (const std::string& t : extra) {
    v.tokens.push_back(t);
    v.token_types.push_back(1);
  }
  v.merges = merges;
  return v;
}

}  // namespace omnibus
