#include "template/jinja_lexer.h"

#include <cstdint>

#include "template/jinja_escape.h"
#include "util/utf8.h"

namespace omnibus::jinja {
namespace {

// Python's str.isspace() for ASCII (non-ASCII spaces are rare in templates).
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= 0x1c && c <= 0x1f);
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A \u, \U or octal escape's code point: U+FFFD where it is not a Unicode
// scalar value (a lone surrogate, or beyond U+10FFFF), as Python decodes it.
void append_escaped(std::string& out, uint32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = 0xFFFD;
  append_utf8(&out, cp);
}

// Python's single-character escapes: backslash + `from` stands for `to`
// (backslash-newline for nothing).
constexpr CharEscape kPythonEscapes[] = {{'\n', ""},  {'\\', "\\"}, {'\'', "'"}, {'"', "\""},
                                         {'a', "\a"}, {'b', "\b"},  {'f', "\f"}, {'n', "\n"},
                                         {'r', "\r"}, {'t', "\t"},  {'v', "\v"}};

// Decodes the body of a string literal the way Jinja does (Python's
// "unicode-escape" codec): \n \t \r \\ \' \" \a \b \f \v, octal \ooo, \xhh,
// \uhhhh, \Uhhhhhhhh, backslash-newline; other escapes stay as written.
void decode_escapes(std::string_view body, std::string& out) {
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    if (const CharEscape* simple = find_escape(kPythonEscapes, e)) {
      out += simple->to;
      continue;
    }
    switch (e) {
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        bool ok = i + n < body.size();
        for (size_t k = 1; ok && k <= n; ++k) {
          const int h = hex_value(body[i + k]);
          if (h < 0)
            ok = false;
          else
            cp = cp * 16 + uint32_t(h);
        }
        if (!ok) {  // Python rejects these; keep them as written
          out += '\\';
          out += e;
          break;
        }
        append_escaped(out, cp);
        i += n;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = uint32_t(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + uint32_t(body[++i] - '0');
          }
          append_escaped(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
}

class Lexer {
 public:
  explicit Lexer(std::string source) { result_.source = std::move(source); }

  StatusOr<LexResult> run() {
    const std::string& s = result_.source;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s.size()) {
      const size_t tag = find_tag(pos);
      std::string_view text(s.data() + pos, (tag == std::string::npos ? s.size() : tag) - pos);
      if (tag == std::string::npos) {
        push(TokenKind::kText, std::string(text), pos);
        break;
      }
      const char type = s[tag + 1];  // '{', '%' or '#'
      const char sign =
          tag + 2 < s.size() && (s[tag + 2] == '-' || s[tag + 2] == '+') ? s[tag + 2] : 0;
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
      } else if (sign != '+' && type != '{') {  // lstrip_blocks
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t i = l_pos; i < text.size(); ++i) {
            if (!is_space(text[i])) blank = false;
          }
          if (blank) text = text.substr(0, l_pos);
        }
      }
      if (!text.empty()) push(TokenKind::kText, std::string(text), pos);
      const size_t body = tag + 2 + (sign ? 1 : 0);
      StatusOr<size_t> end = type == '#' ? comment(tag, body) : tag_body(type, tag, body);
      if (!end.is_ok()) return end.status();
      pos = *end;
      line_starting = pos > 0 && s[pos - 1] == '\n';
    }
    push(TokenKind::kEof, "", s.size());
    return std::move(result_);
  }

 private:
  size_t find_tag(size_t from) const {
    const std::string& s = result_.source;
    for (size_t i = s.find('{', from); i != std::string::npos; i = s.find('{', i + 1)) {
      if (i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void push(TokenKind kind, std::string text, size_t pos) {
    result_.tokens.push_back(Token{kind, std::move(text), pos});
  }

  Status error(size_t pos, std::string_view what) const {
    return Status::invalid_argument("chat template {}: {}", describe_position(result_.source, pos),
                                    what);
  }

  // After a closing delimiter: `-` eats all whitespace, trim_blocks one "\n".
  size_t after_close(size_t pos, char sign, bool trim_newline) const {
    const std::string& s = result_.source;
    if (sign == '-') {
      while (pos < s.size() && is_space(s[pos])) ++pos;
    } else if (sign != '+' && trim_newline && pos < s.size() && s[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  StatusOr<size_t> comment(size_t tag, size_t body) {
    const std::string& s = result_.source;
    const size_t close = s.find("#}", body);
    if (close == std::string::npos) return error(tag, "unterminated comment '{#'");
    const char sign =
        close > body && (s[close - 1] == '-' || s[close - 1] == '+') ? s[close - 1] : 0;
    return after_close(close + 2, sign, /*trim_newline=*/true);
  }

  // Tokens of a {{ }} or {% %} tag; returns the position after it.
  StatusOr<size_t> tag_body(char type, size_t tag, size_t pos) {
    const std::string& s = result_.source;
    const char close_char = type == '{' ? '}' : '%';
    push(type == '{' ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", tag);
    int depth = 0;  // open ( [ { inside the tag: a "}}" there closes a dict
    while (true) {
      while (pos < s.size() && is_space(s[pos])) ++pos;
      if (pos >= s.size()) {
        return error(tag, type == '{' ? "unterminated '{{'" : "unterminated '{%'");
      }
      if (depth == 0) {
        size_t p = pos;
        char sign = 0;
        if ((s[p] == '-' || s[p] == '+') && p + 1 < s.size() && s[p + 1] == close_char)
          sign = s[p++];
        if (s[p] == close_char && p + 1 < s.size() && s[p + 1] == '}') {
          push(type == '{' ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", pos);
          return after_close(p + 2, sign, /*trim_newline=*/type == '%');
        }
      }
      const char c = s[pos];
      const size_t start = pos;
      if (is_name_start(c) || (uint8_t(c) >= 0x80)) {
        // Jinja allows Unicode identifiers; accept any non-ASCII byte in names.
        while (pos < s.size() && (is_name_char(s[pos]) || uint8_t(s[pos]) >= 0x80)) ++pos;
        push(TokenKind::kName, s.substr(start, pos - start), start);
      } else if (is_digit(c)) {
        OMNIBUS_RETURN_IF_ERROR(number(pos));
      } else if (c == '\'' || c == '"') {
        std::string value;
        size_t i = pos + 1;
        while (i < s.size() && s[i] != c) i += s[i] == '\\' ? 2 : 1;
        if (i >= s.size()) return error(start, "unterminated string literal");
        decode_escapes(std::string_view(s).substr(pos + 1, i - pos - 1), value);
        push(TokenKind::kString, std::move(value), start);
        pos = i + 1;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (std::string_view t : kTwo) {
          if (s.compare(pos, 2, t) == 0) op = std::string(t);
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~()[]{},.:|=<>").find(c) == std::string_view::npos) {
            return error(pos, fmt::format("unexpected character '{}'", c));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        push(TokenKind::kOp, op, pos);
        pos += op.size();
      }
    }
  }

  // Integer (decimal, 0x, 0o, 0b, with '_' separators) or float literal.
  Status number(size_t& pos) {
    const std::string& s = result_.source;
    const size_t start = pos;
    auto digits = [&](auto pred) {
      std::string d;
      while (pos < s.size() &&
             (pred(s[pos]) || (s[pos] == '_' && pos + 1 < s.size() && pred(s[pos + 1])))) {
        if (s[pos] != '_') d += s[pos];
        ++pos;
      }
      return d;
    };
    if (s[pos] == '0' && pos + 1 < s.size() &&
        std::string_view("xXoObB").find(s[pos + 1]) != std::string_view::npos) {
      const char base = char(s[pos + 1] | 0x20);
      pos += 2;
      std::string d = digits([base](char c) {
        return base == 'x'   ? hex_value(c) >= 0
               : base == 'o' ? (c >= '0' && c <= '7')
                             : (c == '0' || c == '1');
      });
      if (d.empty()) return error(start, "malformed number");
      const int radix = base == 'x' ? 16 : base == 'o' ? 8 : 2;
      uint64_t v = 0;
      for (char c : d) {
        const uint64_t next = v * uint64_t(radix) + uint64_t(hex_value(c));
        if (next / uint64_t(radix) != v || next > uint64_t(INT64_MAX))
          return error(start, "integer literal too large");
        v = next;
      }
      push(TokenKind::kInt, std::to_string(v), start);
      return Status::ok();
    }
    std::string text = digits(is_digit);
    bool is_float = false;
    if (pos + 1 < s.size() && s[pos] == '.' && is_digit(s[pos + 1])) {
      ++pos;
      text += '.';
      text += digits(is_digit);
      is_float = true;
    }
    if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
      size_t p = pos + 1;
      if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
      if (p < s.size() && is_digit(s[p])) {
        text += 'e';
        text += std::string_view(s).substr(pos + 1, p - pos - 1);
        pos = p;
        text += digits(is_digit);
        is_float = true;
      }
    }
    push(is_float ? TokenKind::kFloat : TokenKind::kInt, std::move(text), start);
    return Status::ok();
  }

  LexResult result_;
};

// Jinja's newline handling: "\r\n" and "\r" become "\n"; one trailing newline
// is dropped.
std::string normalise(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out += in[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::string describe_position(std::string_view source, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return fmt::format("line {}, column {}", line, col);
}

StatusOr<LexResult> lex(std::string_view source) { return Lexer(normalise(source)).run(); }

}  // namespace omnibus::jinja
