// BpeTokenizer: byte-level BPE (GPT-2 style), tokenizer.ggml.model "gpt2".
//
// encode(text):
//   1. special tokens: the text of control tokens (when parse_special) and of
//      user-defined tokens is cut out first, longest token first;
//   2. pre-tokenization: each remaining fragment is split into words by the
//      model's pre-tokenizer (pre_tokenizer.h);
//   3. each word's UTF-8 bytes become symbols of the byte-level alphabet
//      (byte_level.h), and adjacent symbols are merged by merge rank, lowest
//      rank first (leftmost pair first among equal ranks) until no listed
//      merge applies; each final symbol is a token. Where the pre-tokenizer
//      says ignore_merges (Llama 3), a word whose spelling is a token is that
//      token without merging.
//
// Merges are indexed by symbol ids, not strings: every token, byte symbol and
// merge result gets an id at construction (results that are not tokens get ids
// past n_vocab and are looked up byte by byte at the end, as llama.cpp does).
// A word is merged with a binary heap: O(n log n) in its length.
//
// Thread-safety: immutable after create(); encode() keeps its state on the
// stack, so concurrent calls are safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace omnibus {

class BpeTokenizer final : public Tokenizer {
 public:
  // kUnsupported for pre-tokenizers omnibus does not implement.
  static StatusOr<std::unique_ptr<Tokenizer>> create(VocabIndex vocab);

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of left+right
  };

  BpeTokenizer(VocabIndex vocab, BpePreType pre);
  // Symbol id of `text`: its token id, else an id past n_vocab (created here).
  int32_t intern(const std::string& text, std::unordered_map<std::string, int32_t>* extra);
  // Steps 2-3 of encode (above): pre-tokenizes and merges text with no
  // special tokens in it (after_special does not matter to BPE).
  void encode_fragment(std::string_view text, bool after_special,
                       std::vector<int32_t>* out) const override;
  // Merges one word given as initial symbols; appends its tokens.
  void merge_word(std::vector<int32_t>* syms, std::vector<int32_t>* out) const;
  void append_symbol(int32_t sym, std::vector<int32_t>* out) const;

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  const BpePreType pre_;
  std::array<int32_t, 256> byte_symbol_{};      // byte -> symbol id of its alphabet codepoint
  std::vector<std::string> extra_symbols_;      // text of symbol n_vocab + i
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left, right) -> merge
};

}  // namespace omnibus
