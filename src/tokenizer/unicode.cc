#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace omnibus::unicode {
namespace {

// The White_Space property (Unicode PropList.txt); no codepoint in it is a
// letter or a number.
bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  if (cp <= 0xA0) return cp == 0x85 || cp == 0xA0;
  if (cp < 0x1680) return false;
  return cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

CpClass lookup_class(uint32_t cp) {
  if (is_white_space(cp)) return CpClass::kWhitespace;
  const CodepointRange* begin = kLetterNumberRanges;
  const CodepointRange* end = kLetterNumberRanges + kNumLetterNumberRanges;
  // First range whose last >= cp.
  const CodepointRange* it = std::lower_bound(
      begin, end, cp, [](const CodepointRange& r, uint32_t c) { return r.last < c; });
  if (it != end && it->first <= cp) return it->cls;
  return CpClass::kOther;
}

const std::array<CpClass, 128>& ascii_classes() {
  static const std::array<CpClass, 128> table = [] {
    std::array<CpClass, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) t[c] = lookup_class(c);
    return t;
  }();
  return table;
}

}  // namespace

CpClass cp_class(uint32_t cp) {
  if (cp < 128) return ascii_classes()[cp];
  return lookup_class(cp);
}

uint32_t decode_utf8_lenient(std::string_view s, size_t* pos) {
  const size_t i = *pos;
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t lead = b(i);
  const auto cont = [&](size_t k) { return k < s.size() && (b(k) & 0xC0) == 0x80; };
  if (lead < 0x80) {
    *pos = i + 1;
    return lead;
  }
  if ((lead & 0xE0) == 0xC0 && lead >= 0xC0) {
    if (cont(i + 1)) {
      *pos = i + 2;
      return (uint32_t(lead & 0x1F) << 6) | (b(i + 1) & 0x3F);
    }
  } else if ((lead & 0xF0) == 0xE0) {
    if (cont(i + 1) && cont(i + 2)) {
      *pos = i + 3;
      return (uint32_t(lead & 0x0F) << 12) | (uint32_t(b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
    }
  } else if ((lead & 0xF8) == 0xF0) {
    if (cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      *pos = i + 4;
      const uint32_t cp = (uint32_t(lead & 0x07) << 18) | (uint32_t(b(i + 1) & 0x3F) << 12) |
                          (uint32_t(b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
      return cp <= 0x10FFFF ? cp : kReplacementChar;
    }
  }
  // A stray continuation byte, a truncated sequence or an F8..FF byte.
  *pos = i + 1;
  return kReplacementChar;
}

std::vector<uint32_t> decode_utf8_lenient(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) cps.push_back(decode_utf8_lenient(s, &pos));
  return cps;
}

int utf8_sequence_status(std::string_view s, size_t pos) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t lead = b(pos);
  if (lead < 0x80) return 1;
  int len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) lo = 0xA0;  // no overlongs
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) lo = 0x90;  // no overlongs
    if (lead == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return -1;  // continuation byte, C0/C1 or F5..FF
  }
  for (int k = 1; k < len; ++k) {
    if (pos + k >= s.size()) return 0;
    const uint8_t c = b(pos + k);
    const uint8_t min = k == 1 ? lo : 0x80;
    const uint8_t max = k == 1 ? hi : 0xBF;
    if (c < min || c > max) return -1;
  }
  return len;
}

bool is_valid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const int n = utf8_sequence_status(s, pos);
    if (n <= 0) return false;
    pos += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace omnibus::unicode
