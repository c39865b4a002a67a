// Regex -> one EBNF item (see regex_parser.h for the design, regex.h for the
// supported syntax).
#include "grammar/regex_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "grammar/ebnf_text.h"

namespace omnibus::grammar::internal {
namespace {

// What one parsed construct became.
struct Piece {
  enum class Kind { kEmpty, kLiteral, kItem, kSeq, kAlt };
  Kind kind = Kind::kEmpty;
  std::u32string literal;   // kLiteral: the code points (not yet quoted)
  std::string text;         // kItem: one EBNF item; kSeq / kAlt: the unparenthesized body
  bool quantified = false;  // kItem ending in a quantifier (needs ( ) before another)
  uint64_t size = 0;        // expanded size (see regex_parser.h)
};

std::string literal_text(const std::u32string& cps, bool json) {
  if (!json) return quote_code_points(cps);
  std::string out = "\"";
  for (char32_t c : cps) {
    const auto cp = static_cast<uint32_t>(c);
    // The JSON text of the character, then quoted for EBNF.
    if (cp == '"') {
      out += "\\\\\\\"";  // EBNF "\\\"" = JSON \"
    } else if (cp == '\\') {
      out += "\\\\\\\\";  // JSON \\ (two backslashes)
    } else if (cp == '\n') {
      out += "\\\\n";
    } else if (cp == '\r') {
      out += "\\\\r";
    } else if (cp == '\t') {
      out += "\\\\t";
    } else if (cp < 0x20) {
      out += fmt::format("\\\\u{:04x}", cp);
    } else {
      append_escaped(&out, cp, false);
    }
  }
  return out + "\"";
}

// The piece as a single EBNF item, ready for a quantifier or a sequence.
std::string as_item(const Piece& p, bool json) {
  switch (p.kind) {
    case Piece::Kind::kEmpty:
      return "\"\"";
    case Piece::Kind::kLiteral:
      return literal_text(p.literal, json);
    case Piece::Kind::kItem:
      return p.text;
    case Piece::Kind::kSeq:
    case Piece::Kind::kAlt:
      return "( " + p.text + " )";
  }
  return "\"\"";
}

// Text of a piece when it stands in a sequence (no parentheses needed).
std::string as_seq_part(const Piece& p, bool json) {
  if (p.kind == Piece::Kind::kSeq) return p.text;
  return as_item(p, json);
}

CodePointRanges digit_ranges() { return {{'0', '9'}}; }
CodePointRanges word_ranges() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
CodePointRanges space_ranges() { return {{'\t', '\r'}, {' ', ' '}}; }

class Parser {
 public:
  Parser(std::u32string cps, std::vector<size_t> offsets, const RegexOptions& options)
      : cps_(std::move(cps)), offsets_(std::move(offsets)), opt_(options) {}

  StatusOr<std::string> run() {
    OMNIBUS_ASSIGN_OR_RETURN(Piece p, parse_alt(0));
    if (pos_ < cps_.size()) return error("unmatched ')'");  // parse_alt stops only at ) or end
    return as_item(p, opt_.json_string_content);
  }

 private:
  bool at_end() const { return pos_ >= cps_.size(); }
  char32_t peek(size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : U'\0';
  }
  bool has(size_t ahead) const { return pos_ + ahead < cps_.size(); }
  size_t offset() const { return offsets_[std::min(pos_, offsets_.size() - 1)]; }

  Status error(std::string_view what) const {
    return Status::invalid_argument("regex: {} at offset {}", what, offset());
  }
  Status check_size(uint64_t size) const {
    if (size > opt_.max_expanded_items) {
      return error(fmt::format("pattern too large (expands to more than {} items)",
                               opt_.max_expanded_items));
    }
    return Status::ok();
  }

  StatusOr<Piece> parse_alt(int depth) {
    std::vector<Piece> alts;
    while (true) {
      OMNIBUS_ASSIGN_OR_RETURN(Piece seq, parse_seq(depth));
      alts.push_back(std::move(seq));
      if (at_end() || peek() != U'|') break;
      ++pos_;
    }
    if (alts.size() == 1) return std::move(alts[0]);
    Piece out;
    out.kind = Piece::Kind::kAlt;
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i) out.text += " | ";
      out.text += as_seq_part(alts[i], opt_.json_string_content);
      out.size += alts[i].size;
    }
    OMNIBUS_RETURN_IF_ERROR(check_size(out.size));
    return out;
  }

  StatusOr<Piece> parse_seq(int depth) {
    std::vector<Piece> parts;
    uint64_t size = 0;
    while (!at_end() && peek() != U'|' && peek() != U')') {
      if (peek() == U'^') {
        if (depth != 0 || !parts.empty()) return error("'^' is supported only at the start");
        ++pos_;
        continue;
      }
      if (peek() == U'$') {
        if (depth != 0 || (has(1) && peek(1) != U'|')) {
          return error("'$' is supported only at the end");
        }
        ++pos_;
        continue;
      }
      OMNIBUS_ASSIGN_OR_RETURN(Piece atom, parse_atom(depth));
      OMNIBUS_ASSIGN_OR_RETURN(Piece piece, parse_quantifier(std::move(atom)));
      size += piece.size;
      OMNIBUS_RETURN_IF_ERROR(check_size(size));
      if (piece.kind == Piece::Kind::kEmpty) continue;
      if (piece.kind == Piece::Kind::kLiteral && !parts.empty() &&
          parts.back().kind == Piece::Kind::kLiteral) {
        parts.back().literal += piece.literal;
        parts.back().size += piece.size;
        continue;
      }
      parts.push_back(std::move(piece));
    }
    if (parts.empty()) return Piece{};
    if (parts.size() == 1) return std::move(parts[0]);
    Piece out;
    out.kind = Piece::Kind::kSeq;
    out.size = size;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i) out.text += " ";
      out.text += as_item(parts[i], opt_.json_string_content);
    }
    return out;
  }

  // {n}, {n,}, {n,m}, {,m} at pos_; nullopt (pos_ unchanged) when the brace
  // is not a quantifier (Python then reads '{' as a literal).
  std::optional<std::pair<int64_t, int64_t>> try_counted() {
    size_t p = pos_ + 1;
    auto read_int = [&](int64_t* v) {
      size_t start = p;
      *v = 0;
      while (p < cps_.size() && cps_[p] >= U'0' && cps_[p] <= U'9') {
        *v = std::min<int64_t>(*v * 10 + (cps_[p] - U'0'), 1 << 30);
        ++p;
      }
      return p > start;
    };
    int64_t n = 0, m = 0;
    const bool has_n = read_int(&n);
    if (p < cps_.size() && cps_[p] == U'}') {
      if (!has_n) return std::nullopt;
      pos_ = p + 1;
      return std::make_pair(n, n);
    }
    if (p >= cps_.size() || cps_[p] != U',') return std::nullopt;
    ++p;
    const bool has_m = read_int(&m);
    if (p >= cps_.size() || cps_[p] != U'}') return std::nullopt;
    if (!has_n && !has_m) return std::nullopt;
    pos_ = p + 1;
    return std::make_pair(has_n ? n : 0, has_m ? m : int64_t{-1});
  }

  bool at_quantifier() {
    if (at_end()) return false;
    const char32_t c = peek();
    if (c == U'*' || c == U'+' || c == U'?') return true;
    if (c != U'{') return false;
    const size_t save = pos_;
    const bool is = try_counted().has_value();
    pos_ = save;
    return is;
  }

  StatusOr<Piece> parse_quantifier(Piece atom) {
    if (!at_quantifier()) return atom;
    int64_t lo = 0, hi = -1;
    const char32_t c = peek();
    if (c == U'{') {
      auto counted = try_counted();
      lo = counted->first, hi = counted->second;
      if (lo > opt_.max_repeat || hi > opt_.max_repeat) {
        return error(fmt::format("repetition count above {}", opt_.max_repeat));
      }
      if (hi >= 0 && hi < lo) return error("repetition {n,m} with m < n");
    } else {
      ++pos_;
      lo = c == U'+' ? 1 : 0;
      hi = c == U'?' ? 1 : -1;
    }
    if (!at_end() && peek() == U'?') {
      ++pos_;  // lazy: the same language
    } else if (!at_end() && peek() == U'+') {
      return error("possessive quantifiers are unsupported");
    }
    if (at_quantifier()) return error("multiple repeat");
    if (atom.kind == Piece::Kind::kEmpty) return atom;
    const int64_t factor = std::max<int64_t>({lo, hi < 0 ? lo + 1 : hi, 1});
    Piece out;
    out.kind = Piece::Kind::kItem;
    out.size = atom.size * static_cast<uint64_t>(factor);
    OMNIBUS_RETURN_IF_ERROR(check_size(out.size));
    if (hi == 0) return Piece{};
    std::string item = as_item(atom, opt_.json_string_content);
    if (atom.quantified) item = "( " + item + " )";
    out.quantified = !(lo == 1 && hi == 1) || atom.quantified;
    if (lo == 0 && hi == -1) {
      out.text = item + "*";
    } else if (lo == 1 && hi == -1) {
      out.text = item + "+";
    } else if (lo == 0 && hi == 1) {
      out.text = item + "?";
    } else if (lo == 1 && hi == 1) {
      out.text = item;
    } else if (hi == -1) {
      out.text = fmt::format("{}{{{},}}", item, lo);
    } else if (lo == hi) {
      out.text = fmt::format("{}{{{}}}", item, lo);
    } else {
      out.text = fmt::format("{}{{{},{}}}", item, lo, hi);
    }
    return out;
  }

  Piece literal_piece(char32_t c) const {
    Piece p;
    p.kind = Piece::Kind::kLiteral;
    p.literal.push_back(c);
    p.size = 1;
    return p;
  }

  StatusOr<Piece> class_piece(CodePointRanges ranges) const {
    normalize_ranges(&ranges);
    if (ranges.size() == 1 && ranges[0].first == ranges[0].second) {
      return literal_piece(static_cast<char32_t>(ranges[0].first));  // JSON-escaped if needed
    }
    if (opt_.json_string_content) {
      ranges = subtract_ranges(ranges, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    }
    if (ranges.empty()) return error("character class matches nothing");
    if (ranges.size() == 1 && ranges[0].first == ranges[0].second) {
      return literal_piece(static_cast<char32_t>(ranges[0].first));
    }
    Piece p;
    p.kind = Piece::Kind::kItem;
    p.text = class_text(ranges);
    p.size = 1;
    return p;
  }

  StatusOr<Piece> parse_atom(int depth) {
    const char32_t c = peek();
    switch (c) {
      case U'(':
        return parse_group(depth);
      case U'[':
        return parse_class();
      case U'.': {
        ++pos_;
        return class_piece(complement_ranges({{'\n', '\n'}}));
      }
      case U'\\': {
        OMNIBUS_ASSIGN_OR_RETURN(CodePointRanges ranges, parse_escape(false));
        return class_piece(std::move(ranges));
      }
      case U'*':
      case U'+':
      case U'?':
        return error("nothing to repeat");
      case U'{':
        if (at_quantifier()) return error("nothing to repeat");
        ++pos_;
        return literal_piece(c);
      default:
        ++pos_;
        return literal_piece(c);
    }
  }

  StatusOr<Piece> parse_group(int depth) {
    if (depth + 1 > opt_.max_nesting) return error("groups nested too deeply");
    const size_t open = pos_;
    ++pos_;  // (
    auto fail = [&](std::string_view what) {
      pos_ = open;
      return error(what);
    };
    if (!at_end() && peek() == U'?') {
      const char32_t k = peek(1);
      if (k == U':') {
        pos_ += 2;
      } else if (k == U'=' || k == U'!' || (k == U'<' && (peek(2) == U'=' || peek(2) == U'!'))) {
        return fail("lookaround is unsupported");
      } else if (k == U'P' && peek(2) == U'=') {
        return fail("backreferences are unsupported");
      } else if ((k == U'P' && peek(2) == U'<') || k == U'<') {
        pos_ += k == U'P' ? 3 : 2;
        while (!at_end() && peek() != U'>') {
          const char32_t n = peek();
          const bool ok = n == U'_' || (n >= U'a' && n <= U'z') || (n >= U'A' && n <= U'Z') ||
                          (n >= U'0' && n <= U'9');
          if (!ok) return error("bad group name");
          ++pos_;
        }
        if (at_end()) return error("unterminated group name");
        ++pos_;  // >
      } else {
        return fail("inline flags and (? extensions are unsupported");
      }
    }
    OMNIBUS_ASSIGN_OR_RETURN(Piece inner, parse_alt(depth + 1));
    if (at_end() || peek() != U')') return error("missing ')'");
    ++pos_;
    return inner;
  }

  StatusOr<uint32_t> parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (at_end()) return error("truncated hex escape");
      const char32_t h = peek();
      uint32_t d = 0;
      if (h >= U'0' && h <= U'9') {
        d = h - U'0';
      } else if (h >= U'a' && h <= U'f') {
        d = h - U'a' + 10;
      } else if (h >= U'A' && h <= U'F') {
        d = h - U'A' + 10;
      } else {
        return error("bad hex escape");
      }
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  // At a backslash: the set the escape stands for (one code point or \d etc.).
  StatusOr<CodePointRanges> parse_escape(bool in_class) {
    ++pos_;  // backslash
    if (at_end()) return error("trailing backslash");
    const char32_t c = peek();
    ++pos_;
    auto one = [](uint32_t cp) { return CodePointRanges{{cp, cp}}; };
    switch (c) {
      case U'n':
        return one('\n');
      case U't':
        return one('\t');
      case U'r':
        return one('\r');
      case U'f':
        return one('\f');
      case U'v':
        return one('\v');
      case U'0':
        if (!at_end() && peek() >= U'0' && peek() <= U'9')
          return error("octal escapes are unsupported");
        return one(0);
      case U'x': {
        OMNIBUS_ASSIGN_OR_RETURN(uint32_t v, parse_hex(2));
        return one(v);
      }
      case U'u': {
        OMNIBUS_ASSIGN_OR_RETURN(uint32_t v, parse_hex(4));
        if (v >= 0xD800 && v <= 0xDFFF) return error("surrogate escapes are unsupported");
        return one(v);
      }
      case U'd':
        return digit_ranges();
      case U'w':
        return word_ranges();
      case U's':
        return space_ranges();
      case U'D':
        return complement_ranges(digit_ranges());
      case U'W':
        return complement_ranges(word_ranges());
      case U'S':
        return complement_ranges(space_ranges());
      case U'b':
        if (in_class) return one('\b');
        pos_ -= 2;
        return error("\\b (word boundary) is unsupported");
      default:
        break;
    }
    const bool alnum =
        (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z') || (c >= U'0' && c <= U'9');
    if (alnum) {
      pos_ -= 2;
      if (c >= U'1' && c <= U'9') return error("backreferences are unsupported");
      return error(fmt::format("unsupported escape \\{}", static_cast<char>(c)));
    }
    return one(static_cast<uint32_t>(c));  // an escaped metacharacter or punctuation
  }

  StatusOr<Piece> parse_class() {
    const size_t start = pos_;
    ++pos_;  // [
    bool negated = false;
    if (!at_end() && peek() == U'^') {
      negated = true;
      ++pos_;
    }
    CodePointRanges ranges;
    bool first = true;
    while (true) {
      if (at_end()) {
        pos_ = start;
        return error("unterminated character class");
      }
      if (peek() == U']' && !first) break;
      first = false;
      if (peek() == U'[' && (peek(1) == U':' || peek(1) == U'=' || peek(1) == U'.')) {
        return error("POSIX classes are unsupported");
      }
      // One member: a code point or a set escape.
      CodePointRanges member;
      if (peek() == U'\\') {
        OMNIBUS_ASSIGN_OR_RETURN(member, parse_escape(true));
      } else {
        member = {{peek(), peek()}};
        ++pos_;
      }
      const bool single = member.size() == 1 && member[0].first == member[0].second;
      if (single && !at_end() && peek() == U'-' && has(1) && peek(1) != U']') {
        ++pos_;  // -
        CodePointRanges upper;
        if (peek() == U'\\') {
          OMNIBUS_ASSIGN_OR_RETURN(upper, parse_escape(true));
        } else {
          upper = {{peek(), peek()}};
          ++pos_;
        }
        if (upper.size() != 1 || upper[0].first != upper[0].second) {
          return error("bad character range");
        }
        if (upper[0].first < member[0].first) return error("character range out of order");
        member[0].second = upper[0].first;
      }
      ranges.insert(ranges.end(), member.begin(), member.end());
    }
    ++pos_;  // ]
    normalize_ranges(&ranges);
    if (negated) ranges = complement_ranges(ranges);
    return class_piece(std::move(ranges));
  }

  std::u32string cps_;
  std::vector<size_t> offsets_;  // byte offset of each code point, plus the end
  RegexOptions opt_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<std::string> regex_item(std::string_view pattern, const RegexOptions& options) {
  size_t bad = 0;
  std::vector<size_t> offsets;
  auto cps = decode_utf8(pattern, &bad, &offsets);
  if (!cps) return Status::invalid_argument("regex: invalid UTF-8 at offset {}", bad);
  Parser parser(std::move(*cps), std::move(offsets), options);
  return parser.run();
}

}  // namespace omnibus::grammar::internal
