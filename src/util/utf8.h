// UTF-8 encoding of one code point: the one encoder the tokenizer, the chat
// template lexer and the grammar compiler share. What a caller does with
// input that is not a Unicode scalar value is its own policy (the grammar
// compiler rejects it before, the template lexer writes U+FFFD, the
// tokenizer's byte-level alphabet never produces it), so this only encodes.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>

#include "util/check.h"

namespace omnibus {

// Appends the 1-4 byte UTF-8 form of cp. REQUIRES: cp <= 0x10FFFF.
inline void append_utf8(std::string* out, uint32_t cp) {
  OMNIBUS_DCHECK(cp <= 0x10FFFF);
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace omnibus
