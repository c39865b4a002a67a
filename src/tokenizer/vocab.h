// TokenizerVocab: everything a tokenizer is built from, as plain data.
//
// It mirrors the tokenizer.ggml.* GGUF metadata (see from_gguf in
// tokenizer_gguf.cc), so a tokenizer can be built and tested from data made in
// a test as well as from a model file. Optional ids and flags left unset take
// the defaults llama.cpp uses for the tokenizer model type (VocabIndex::build).
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace omnibus {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Per-token attributes (a bit set), derived from the token type plus the
// name-based fixes llama.cpp applies (e.g. "<|im_end|>" is always control).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrRstrip = 1u << 6,  // matched as a special token: whitespace after it is dropped
                          // (llama.cpp's LSTRIP, used only by BERT-style masks, is not
                          // implemented)
};

struct TokenizerVocab {
  std::string model;                 // tokenizer.ggml.model: "gpt2" = byte-level BPE,
                                     // "llama" = SentencePiece, "bert" = WordPiece
  std::string pre;                   // tokenizer.ggml.pre: the pre-tokenizer name
  std::string model_name;            // general.name, lower-cased (llama.cpp keys fixes on it)
  std::vector<std::string> tokens;   // [n_vocab] token text (byte-level alphabet for BPE)
  std::vector<int32_t> token_types;  // [n_vocab] TokenType values, or empty (all normal)
  std::vector<float> scores;         // [n_vocab] SentencePiece scores, or empty
  std::vector<std::string> merges;   // BPE merges "left right"; rank = index

  // Special token ids; unset: the model type's default or found by token text.
  std::optional<int32_t> bos_id, eos_id, eot_id, eom_id, unk_id, pad_id;
  std::optional<int32_t> sep_id;  // tokenizer.ggml.seperator_token_id (BERT's [SEP])
  std::optional<int32_t> fim_pre_id, fim_suf_id, fim_mid_id, fim_pad_id, fim_rep_id, fim_sep_id;
  // tokenizer.ggml.add_bos_token / add_eos_token; unset: the model type's default.
  std::optional<bool> add_bos, add_eos;
  // tokenizer.ggml.add_space_prefix (SentencePiece); unset: true, as llama.cpp.
  std::optional<bool> add_space_prefix;
  // tokenizer.ggml.normalizer.{lowercase,strip_accents} (WordPiece); unset:
  // lowercase false, strip_accents = lowercase, as llama.cpp.
  std::optional<bool> normalizer_lowercase, normalizer_strip_accents;
};

}  // namespace omnibus
