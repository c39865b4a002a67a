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
// A later regex sees only the pieces the earlier one produced: a match never
// extends past a piece boundary, and (?!\S) treats a piece's end like the end
// of the text.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace omnibus {

enum class PreTokenizerKind { kGpt2, kSmollm };

// The pre-tokenizer for a GGUF tokenizer.ggml.pre value; nullopt when omnibus
// does not implement that one.
std::optional<PreTokenizerKind> pre_tokenizer_for(std::string_view pre_name);

// Splits the codepoints `cps` into words. Appends each word's length (in
// codepoints, > 0) to *word_lens; the lengths add up to cps.size().
void pre_tokenize(PreTokenizerKind kind, const std::vector<uint32_t>& cps,
                  std::vector<uint32_t>* word_lens);

}  // namespace omnibus
