// UTF-8 and codepoint helpers for the tokenizers.
//
// decode_utf8_lenient() reads UTF-8 the way llama.cpp's tokenizer does, so that
// our token ids match its ids on any input: a lead byte with the right number of
// continuation bytes is decoded without checking for overlong forms or
// surrogates; anything else yields U+FFFD and consumes one byte. Codepoints above
// U+10FFFF (possible from F5..F7 lead bytes) also come back as U+FFFD.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode_tables.h"
#include "util/utf8.h"

namespace omnibus::unicode {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// The class of `cp` for pre-tokenization: \s (the White_Space property), \p{L},
// \p{N} or other.
CpClass cp_class(uint32_t cp);

// Decodes one codepoint at s[*pos] and advances *pos (by at least 1).
// REQUIRES: *pos < s.size().
uint32_t decode_utf8_lenient(std::string_view s, size_t* pos);

// All codepoints of `s`, decoded with decode_utf8_lenient().
std::vector<uint32_t> decode_utf8_lenient(std::string_view s);

// Appends the UTF-8 encoding of cp (REQUIRES: cp <= 0x10FFFF): util/utf8.h.
using ::omnibus::append_utf8;

// Length of the well-formed UTF-8 sequence (RFC 3629: no overlongs, no
// surrogates, <= U+10FFFF) starting at s[pos]: 1..4 when complete and valid;
// 0 when s ends before the sequence does but every byte so far is valid (it may
// still be completed); -1 when the bytes at pos can never start a valid sequence.
int utf8_sequence_status(std::string_view s, size_t pos);

// True when `s` is entirely well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

}  // namespace omnibus::unicode
