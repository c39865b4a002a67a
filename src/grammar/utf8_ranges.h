// UTF-8 helpers for the EBNF parser: decoding code points from the grammar
// text, encoding them, and turning a set of code-point ranges into byte-range
// sequences (the standard split: one sequence per run of code points whose
// UTF-8 encodings share a length and differ only in trailing bytes).
//
// Only valid UTF-8 is ever produced: surrogates (U+D800..U+DFFF) are removed
// and nothing above U+10FFFF exists.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/check.h"
#include "util/utf8.h"

namespace omnibus::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Decodes one code point at s[*pos]; advances *pos. Returns false (and leaves
// *pos) on invalid UTF-8: bad lead or continuation byte, overlong form,
// surrogate, beyond U+10FFFF, truncated.
bool decode_utf8(std::string_view s, size_t* pos, uint32_t* cp);

// append_utf8 (util/utf8.h) of a Unicode scalar value: aborts on a code
// point above kMaxCodePoint or a surrogate (the parsers reject those first).
inline void append_scalar(uint32_t cp, std::string* out) {
  OMNIBUS_CHECK(cp <= kMaxCodePoint && !(cp >= 0xD800 && cp <= 0xDFFF));
  append_utf8(out, cp);
}

using CodeRange = std::pair<uint32_t, uint32_t>;  // inclusive [first, second]
using ByteRange = std::pair<uint8_t, uint8_t>;    // inclusive

// Sorts and merges; with `negate`, the complement within [0, U+10FFFF].
// Surrogates are always removed.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate);

// REQUIRES: normalized ranges (no surrogates). Each result is one sequence
// of byte ranges (1 to 4 long); together they match exactly the UTF-8
// encodings of the code points in `ranges`, and no two match the same bytes.
std::vector<std::vector<ByteRange>> utf8_sequences(const std::vector<CodeRange>& ranges);

}  // namespace omnibus::grammar
