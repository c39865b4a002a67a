// Cutting special tokens out of input text before BPE / SentencePiece sees it.
//
// The vocabulary's special tokens are tried one after another, longest text
// first (VocabIndex::special_tokens_by_length); each splits every still-plain
// fragment at all its non-overlapping occurrences, left to right. This is
// llama.cpp's order, so on overlapping candidates we pick what it picks.
// Control and unknown tokens are only matched when parse_special; user-defined
// tokens always are. A matched token with kAttrRstrip drops the ASCII
// whitespace (isspace) after it, as llama.cpp does (Phi-3's special tokens).
//
// Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab_index.h"

namespace omnibus {

struct TextFragment {
  int32_t token;  // a special token's id, or -1 for plain text
  size_t begin;   // plain text: byte range in the input
  size_t length;
};

// The fragments of `text` in order; plain fragments are never empty. Empty
// text gives no fragments.
std::vector<TextFragment> split_special_tokens(const VocabIndex& vocab, std::string_view text,
                                               bool parse_special);

}  // namespace omnibus
