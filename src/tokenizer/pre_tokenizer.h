// Pre-tokenization for byte-level BPE: splitting text into "words" that BPE
// merges never cross, as the model's pre-tokenizer regex(es) would.
//
// Each supported regex is a hand-written scanner over codepoint classes
// (unicode.h), equivalent to the regex on every input:
//
//   kGpt2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kSmollm first \p{N} (every number codepoint becomes a word of its own), then
//           the GPT-2 regex inside each remaining piece. llama.cpp uses this pair
//           for tokenizer.ggml.pre "smollm", "starcoder", "refact", "command-r",
//           "codeshell", "exaone", "minerva-7b", "mellum2".
//
//   kLlama3 (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
//           \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//           (one line; the contractions are case-insensitive, in ASCII only)
//   kQwen2  the same with \p{N} (every number codepoint a word) for \p{N}{1,3}
//
// A later regex sees only the pieces the earlier one produced: a match never
// extends past a piece boundary, and (?!\S) treats a piece's end like the end
// of the text.
//
// Which kind a tokenizer.ggml.pre name gets, and the two other settings
// llama.cpp's vocabulary loader ties to some names, follow its
// llama-vocab.cpp (load(): the name -> LLAMA_VOCAB_PRE_TYPE_* chain;
// llm_tokenizer_bpe: each type's regexes). llama.cpp runs all four kinds with
// hand-written splitters too (unicode.cpp's unicode_regex_split_custom_*), so
// the regex engine and the splitter agree by construction there.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace omnibus {

enum class PreTokenizerKind { kGpt2, kSmollm, kLlama3, kQwen2 };

// What llama.cpp derives from a BPE vocabulary's tokenizer.ggml.pre.
struct BpePreType {
  PreTokenizerKind kind;  // the regex set
  // A word whose byte-level spelling is a token becomes that token without
  // merging (llama.cpp's ignore_merges; Llama 3's vocabulary has tokens that
  // its merges cannot build).
  bool ignore_merges = false;
  // add_bos when tokenizer.ggml.add_bos_token is absent (BPE's default: false).
  bool add_bos = false;
};

// The settings for a GGUF tokenizer.ggml.pre value; nullopt when omnibus does
// not implement that pre-tokenizer.
std::optional<BpePreType> bpe_pre_type(std::string_view pre_name);

// bpe_pre_type(pre_name)'s kind.
std::optional<PreTokenizerKind> pre_tokenizer_for(std::string_view pre_name);

// Splits the codepoints `cps` into words. Appends each word's length (in
// codepoints, > 0) to *word_lens; the lengths add up to cps.size().
void pre_tokenize(PreTokenizerKind kind, const std::vector<uint32_t>& cps,
                  std::vector<uint32_t>* word_lens);

}  // namespace omnibus
