// VocabIndex: a TokenizerVocab resolved into what encoding and decoding need:
// per-token attributes, text -> id lookup, the special ids with defaults
// applied, the end-of-generation set and the special-token matching order.
//
// Resolution follows llama.cpp's vocabulary loader so that our ids, EOG set and
// special-token handling match its own: defaults per model type ("gpt2": BOS =
// EOS = 11 when in range, add_bos = add_eos = false except add_bos = true for
// the pre-tokenizers that set it (bpe_pre_type(), Llama 3); "llama": BOS 1, EOS 2,
// UNK 0, add_bos = true; "bert": [CLS] 101 first and the separator [SEP] 102 last,
// always, UNK 100), ids out of range ignored, EOT/EOM/FIM tokens
// found by their text when not given, every token whose text is a known
// end-of-turn marker (<|im_end|>, <|endoftext|>, <end_of_turn>, ...) made a
// control token and an EOG token.
//
// Thread-safety: immutable after build(); safe for concurrent readers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"
#include "util/status.h"

namespace omnibus {

class VocabIndex {
 public:
  // Fails (kCorrupt) on an empty or inconsistent vocabulary: no tokens,
  // token_types/scores of the wrong length, duplicate token text.
  static StatusOr<VocabIndex> build(TokenizerVocab vocab);

  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  bool in_range(int32_t id) const { return id >= 0 && id < n_vocab(); }
  // REQUIRES: in_range(id).
  const std::string& text(int32_t id) const { return vocab_.tokens[static_cast<size_t>(id)]; }
  uint32_t attr(int32_t id) const { return attrs_[static_cast<size_t>(id)]; }
  std::optional<int32_t> find(std::string_view text) const;

  const TokenizerVocab& vocab() const { return vocab_; }

  int32_t bos_id() const { return bos_id_; }  // -1: none
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }
  int32_t eom_id() const { return eom_id_; }
  int32_t unk_id() const { return unk_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }

  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }  // sorted
  bool is_eog(int32_t id) const;

  // Control, user-defined and unknown tokens, longest text first (ties: lower
  // id first): the order in which their text is split out of input text.
  const std::vector<int32_t>& special_tokens_by_length() const { return special_by_length_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  TokenizerVocab vocab_;
  std::vector<uint32_t> attrs_;  // [n_vocab] TokenAttr bits
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  int32_t bos_id_ = -1, eos_id_ = -1, eot_id_ = -1, eom_id_ = -1, unk_id_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::vector<int32_t> eog_ids_;
  std::vector<int32_t> special_by_length_;
};

}  // namespace omnibus
