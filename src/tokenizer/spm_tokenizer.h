// SpmTokenizer: SentencePiece-style tokenization from a GGUF vocabulary,
// tokenizer.ggml.model "llama" (Llama 1/2, Mistral, Gemma ...), as llama.cpp's
// llm_tokenizer_spm does it, so that both read a prompt as the same ids.
//
// encode(text):
//   1. special tokens: the text of control tokens (when parse_special) and of
//      user-defined tokens is cut out first, longest token first
//      (special_split.h);
//   2. each remaining fragment gets a leading space when add_space_prefix and
//      it follows BOS / a special token / the start, then every ' ' becomes
//      the whitespace marker U+2581 ("▁");
//   3. the fragment is split into UTF-8 characters (by lead byte only: invalid
//      bytes are not replaced, a truncated character is kept short) and
//      adjacent symbols are merged greedily: always the pair whose
//      concatenation is a vocabulary token with the highest score (leftmost
//      among equal scores), until no adjacent pair forms a token;
//   4. each final symbol is its token, or, when it is not in the vocabulary,
//      its bytes as byte-fallback tokens "<0xXX>".
// BOS is prepended (add_special && add_bos) and EOS appended (add_eos).
//
// token_to_piece: normal tokens give their text with "▁" turned back into
// ' '; byte tokens give their byte; user-defined tokens their text; control
// and unknown tokens their text only with render_special; unused tokens "".
//
// Thread-safety: immutable after create(); encode() keeps its state on the
// stack, so concurrent calls are safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace omnibus {

class SpmTokenizer final : public Tokenizer {
 public:
  // kCorrupt when a byte has no byte-fallback token ("<0xXX>" or the byte
  // itself) in the vocabulary.
  static StatusOr<std::unique_ptr<Tokenizer>> create(VocabIndex vocab);

  bool add_space_prefix() const { return add_space_prefix_; }

 private:
  SpmTokenizer(VocabIndex vocab, bool add_space_prefix);
  // Steps 2-4 of encode (above) for one fragment.
  void encode_fragment(std::string_view text, bool after_special,
                       std::vector<int32_t>* out) const override;
  // Steps 3-4: merges one escaped fragment; appends its ids.
  void merge_escaped(std::string_view text, std::vector<int32_t>* out) const;

  const bool add_space_prefix_;
  std::array<int32_t, 256> byte_token_{};  // byte -> its fallback token
  std::vector<float> scores_;              // [n_vocab], 0 where the GGUF has none
};

}  // namespace omnibus
