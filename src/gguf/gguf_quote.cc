#include "gguf/gguf_quote.h"

#include <fmt/format.h>

namespace omnibus {

namespace {

// quote == 0: no quotes.
std::string render(std::string_view s, size_t max_chars, char quote) {
  size_t n = s.size();
  const bool cut = n > max_chars;
  if (cut) {
    n = max_chars;
    // Do not split a multi-byte UTF-8 character: back off over continuation bytes.
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  }
  std::string out;
  out.reserve(n + 2);
  if (quote) out.push_back(quote);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (quote && c == static_cast<unsigned char>(quote)) {
          out.push_back('\\');
          out.push_back(quote);
        } else if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  if (quote) out.push_back(quote);
  if (cut) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

}  // namespace

std::string gguf_quote(std::string_view s, size_t max_chars, char quote) {
  return render(s, max_chars, quote);
}

std::string gguf_escape(std::string_view s, size_t max_chars) { return render(s, max_chars, 0); }

}  // namespace omnibus
