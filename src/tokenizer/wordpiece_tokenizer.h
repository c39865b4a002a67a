// WordPieceTokenizer: BERT's WordPiece from a GGUF vocabulary,
// tokenizer.ggml.model "bert", as llama.cpp's llm_tokenizer_wpm does it, so
// that omnibus and llama-embedding read a sentence as the same ids.
//
// The GGUF stores the vocabulary in "phantom space" form (llama.cpp's
// converter): a word-initial piece "the" is "\u2581the", a continuation
// "##ing" is "ing", control tokens ([CLS], [SEP], ...) keep their text.
//
// encode(text):
//   1. special tokens are cut out first (special_split.h), as for every model;
//   2. each fragment is split into words: decoded leniently (invalid UTF-8 is
//      U+FFFD), NFD-reduced to each codepoint's first one and stripped of
//      marks when tokenizer.ggml.normalizer.strip_accents (default: the
//      lowercase flag), lowercased when tokenizer.ggml.normalizer.lowercase;
//      whitespace ends a word; U+0000, U+FFFD and control characters are
//      dropped; punctuation, ASCII symbols and CJK ideographs are words of
//      their own;
//   3. each word, with "\u2581" prepended, is covered greedily from the left by
//      the longest vocabulary tokens; a word that cannot be covered entirely
//      is the unknown token.
// With add_special, [CLS] (tokenizer.ggml.bos_token_id) is prepended and [SEP]
// (tokenizer.ggml.seperator_token_id) appended whatever add_*_token say, as
// llama.cpp does for this tokenizer type.
//
// Thread-safety: immutable after create(); encode() keeps its state on the
// stack, so concurrent calls are safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace omnibus {

class WordPieceTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> create(VocabIndex vocab);

  // Step 2 of encode: the words of `text` (exposed for tests).
  std::vector<std::string> split_words(std::string_view text) const;

 private:
  WordPieceTokenizer(VocabIndex vocab, bool lowercase, bool strip_accents);
  void encode_fragment(std::string_view text, bool after_special,
                       std::vector<int32_t>* out) const override;

  const bool lowercase_;
  const bool strip_accents_;
  size_t max_token_len_ = 0;  // longest token text, bytes
};

}  // namespace omnibus
