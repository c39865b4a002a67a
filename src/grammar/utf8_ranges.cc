#include "grammar/utf8_ranges.h"

#include <algorithm>

#include "util/check.h"

namespace omnibus::grammar {

bool decode_utf8(std::string_view s, size_t* pos, uint32_t* cp) {
  size_t i = *pos;
  if (i >= s.size()) return false;
  const uint8_t b0 = static_cast<uint8_t>(s[i]);
  int n = 0;
  uint32_t v = 0;
  uint32_t min = 0;
  if (b0 < 0x80) {
    *cp = b0;
    *pos = i + 1;
    return true;
  } else if ((b0 & 0xE0) == 0xC0) {
    n = 1, v = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2, v = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3, v = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (s.size() - i - 1 < static_cast<size_t>(n)) return false;
  for (int k = 1; k <= n; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return false;
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *cp = v;
  *pos = i + 1 + n;
  return true;
}

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate) {
  for (CodeRange& r : ranges) r.second = std::min(r.second, kMaxCodePoint);
  std::sort(ranges.begin(), ranges.end());
  std::vector<CodeRange> merged;
  for (const CodeRange& r : ranges) {
    if (r.first > r.second) continue;
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (negate) {
    std::vector<CodeRange> comp;
    uint32_t next = 0;
    for (const CodeRange& r : merged) {
      if (r.first > next) comp.push_back({next, r.first - 1});
      next = r.second + 1;
    }
    if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
    merged.swap(comp);
  }
  std::vector<CodeRange> out;  // minus surrogates
  for (const CodeRange& r : merged) {
    if (r.second < 0xD800 || r.first > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.first < 0xD800) out.push_back({r.first, 0xD7FF});
    if (r.second > 0xDFFF) out.push_back({0xE000, r.second});
  }
  return out;
}

namespace {

void split(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>* out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t b : kLengthEnds) {
    if (lo <= b && b < hi) {
      split(lo, b, out);
      split(b + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out->push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_scalar(lo, &a);
  append_scalar(hi, &b);
  OMNIBUS_CHECK(a.size() == b.size());
  std::vector<ByteRange> seq;
  for (size_t k = 0; k < a.size(); ++k) {
    seq.push_back({static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])});
  }
  out->push_back(std::move(seq));
}

}  // namespace

std::vector<std::vector<ByteRange>> utf8_sequences(const std::vector<CodeRange>& ranges) {
  std::vector<std::vector<ByteRange>> out;
  for (const CodeRange& r : ranges) split(r.first, r.second, &out);
  return out;
}

}  // namespace omnibus::grammar
