// EBNF quoting and code-point range arithmetic (see ebnf_text.h).
#include "grammar/ebnf_text.h"

#include <fmt/format.h>

#include <algorithm>

namespace omnibus::grammar::internal {

void append_escaped(std::string* out, uint32_t cp, bool in_class) {
  switch (cp) {
    case '"':
      *out += "\\\"";
      return;
    case '\\':
      *out += "\\\\";
      return;
    case '\n':
      *out += "\\n";
      return;
    case '\r':
      *out += "\\r";
      return;
    case '\t':
      *out += "\\t";
      return;
    default:
      break;
  }
  if (in_class && (cp == ']' || cp == '[' || cp == '^' || cp == '-')) {
    out->push_back('\\');
    out->push_back(static_cast<char>(cp));
  } else if (cp >= 0x20 && cp < 0x7F) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x80) {
    *out += fmt::format("\\x{:02X}", cp);
  } else if (cp <= 0xFFFF) {
    *out += fmt::format("\\u{:04X}", cp);
  } else {
    *out += fmt::format("\\U{:08X}", cp);
  }
}

std::string quote_code_points(const std::u32string& cps) {
  std::string out = "\"";
  for (char32_t cp : cps) append_escaped(&out, static_cast<uint32_t>(cp), false);
  out += "\"";
  return out;
}

std::optional<std::u32string> decode_utf8(std::string_view s, size_t* bad_offset,
                                          std::vector<size_t>* byte_offsets) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    int len = 0;
    uint32_t cp = 0;
    if (b0 < 0x80) {
      len = 1, cp = b0;
    } else if ((b0 & 0xE0) == 0xC0) {
      len = 2, cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3, cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4, cp = b0 & 0x07;
    } else {
      *bad_offset = i;
      return std::nullopt;
    }
    if (i + len > s.size()) {
      *bad_offset = i;
      return std::nullopt;
    }
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if ((b & 0xC0) != 0x80) {
        *bad_offset = i;
        return std::nullopt;
      }
      cp = (cp << 6) | (b & 0x3F);
    }
    const bool overlong =
        (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      *bad_offset = i;
      return std::nullopt;
    }
    if (byte_offsets) byte_offsets->push_back(i);
    out.push_back(static_cast<char32_t>(cp));
    i += len;
  }
  if (byte_offsets) byte_offsets->push_back(s.size());
  return out;
}

void normalize_ranges(CodePointRanges* ranges) {
  CodePointRanges split;
  for (auto [lo, hi] : *ranges) {
    if (lo > hi) continue;
    hi = std::min(hi, kMaxCodePoint);
    if (lo < 0xD800 && hi > 0xDFFF) {  // straddles the surrogates
      split.emplace_back(lo, 0xD7FF);
      split.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && hi <= 0xDFFF) {
      continue;
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      split.emplace_back(0xE000, hi);
    } else if (hi >= 0xD800 && hi <= 0xDFFF) {
      split.emplace_back(lo, 0xD7FF);
    } else {
      split.emplace_back(lo, hi);
    }
  }
  std::sort(split.begin(), split.end());
  CodePointRanges merged;
  for (auto r : split) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  *ranges = std::move(merged);
}

CodePointRanges complement_ranges(const CodePointRanges& ranges) {
  CodePointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  normalize_ranges(&out);
  return out;
}

CodePointRanges subtract_ranges(const CodePointRanges& ranges, const CodePointRanges& remove) {
  CodePointRanges out;
  const CodePointRanges keep = complement_ranges(remove);
  // Intersection of two sorted lists.
  size_t i = 0, j = 0;
  while (i < ranges.size() && j < keep.size()) {
    const uint32_t lo = std::max(ranges[i].first, keep[j].first);
    const uint32_t hi = std::min(ranges[i].second, keep[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    if (ranges[i].second < keep[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

namespace {
std::string ranges_body(const CodePointRanges& ranges) {
  std::string out;
  for (auto [lo, hi] : ranges) {
    append_escaped(&out, lo, true);
    if (hi == lo) continue;
    if (hi > lo + 1) out += "-";
    append_escaped(&out, hi, true);
  }
  return out;
}
}  // namespace

std::string class_text(const CodePointRanges& ranges) {
  const std::string positive = ranges_body(ranges);
  const CodePointRanges comp = complement_ranges(ranges);
  if (!comp.empty()) {
    const std::string negative = ranges_body(comp);
    if (negative.size() < positive.size()) return "[^" + negative + "]";
  }
  return "[" + positive + "]";
}

Status check_rule_prefix(const std::string& prefix) {
  for (char c : prefix) {
    const bool ok = c == '-' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9');
    if (!ok) return Status::invalid_argument("rule prefix '{}': only [a-zA-Z0-9_-]", prefix);
  }
  return Status::ok();
}

}  // namespace omnibus::grammar::internal
