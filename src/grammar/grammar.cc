// ebnf_literal(): quoting for the compilers that emit EBNF (parse_ebnf is in
// ebnf_parser.cc).
#include "grammar/grammar.h"

#include <fmt/format.h>

#include "grammar/utf8_ranges.h"

namespace omnibus::grammar {

std::string ebnf_literal(std::string_view utf8) {
  std::string out = "\"";
  size_t pos = 0;
  while (pos < utf8.size()) {
    uint32_t cp = 0;
    const size_t start = pos;
    if (!decode_utf8(utf8, &pos, &cp)) {
      out += "\\uFFFD";
      pos = start + 1;
      continue;
    }
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (cp < 0x20 || cp == 0x7F) {
          out += fmt::format("\\x{:02X}", cp);
        } else {
          out.append(utf8.substr(start, pos - start));
        }
    }
  }
  out += "\"";
  return out;
}

}  // namespace omnibus::grammar
