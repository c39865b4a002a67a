// Unicode character classes used by the BPE pre-tokenizers.
//
// kLetterNumberRanges is generated (unicode_tables.cc, by gen_unicode_tables.py)
// from the Unicode Character Database: sorted, non-overlapping, inclusive
// ranges of codepoints whose general category is L* (letter) or N* (number).
// Everything else is "other" except the fixed whitespace set in unicode.cc.
//
// Thread-safety: constant data.
#pragma once

#include <cstddef>
#include <cstdint>

namespace omnibus::unicode {

// What a pre-tokenizer regex can tell apart: \p{L}, \p{N}, \s, everything else.
enum class CpClass : uint8_t { kOther = 0, kLetter, kNumber, kWhitespace };

struct CodepointRange {
  uint32_t first;  // inclusive
  uint32_t last;   // inclusive
  CpClass cls;
};

extern const char kUnicodeVersion[];
extern const CodepointRange kLetterNumberRanges[];
extern const size_t kNumLetterNumberRanges;

}  // namespace omnibus::unicode
