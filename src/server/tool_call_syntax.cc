#include "server/tool_call_syntax.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "server/tool_parsers.h"

namespace omnibus::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool is_ident_start(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_ident(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Python literals and keyword-argument calls, by recursive descent.
class PyReader {
 public:
  explicit PyReader(std::string_view s) : s_(s) {}

  void ws() {
    while (i_ < s_.size() && is_ws(s_[i_])) ++i_;
  }
  bool at_end() const { return i_ == s_.size(); }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    ws();
    return i_ < s_.size() && s_[i_] == c;
  }

  bool ident(std::string& out) {
    ws();
    if (i_ >= s_.size() || !is_ident_start(s_[i_])) return false;
    const size_t b = i_;
    while (i_ < s_.size() && is_ident(s_[i_])) ++i_;
    out.assign(s_.substr(b, i_ - b));
    return true;
  }

  bool string_lit(std::string& out) {
    ws();
    if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) return false;
    const char q = s_[i_++];
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == q) return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
        case '/':
          out += e;
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i_ + n > s_.size()) return false;
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = s_[i_ + k];
            const int d = h >= '0' && h <= '9'   ? h - '0'
                          : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                 : -1;
            if (d < 0) return false;
            cp = cp * 16 + uint32_t(d);
          }
          if (cp > 0x10FFFF) return false;
          i_ += n;
          append_utf8(cp, out);
          break;
        }
        default:
          out += '\\';
          out += e;  // Python keeps unknown escapes
      }
    }
    return false;
  }

  bool number(Json& out) {
    ws();
    const size_t b = i_;
    if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
    bool digits = false, real = false;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c >= '0' && c <= '9') {
        digits = true;
      } else if (c == '.' || c == 'e' || c == 'E' ||
                 ((c == '-' || c == '+') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E'))) {
        real = true;
      } else {
        break;
      }
      ++i_;
    }
    if (!digits) return false;
    const std::string text(s_.substr(b, i_ - b));
    char* end = nullptr;
    if (!real) {
      errno = 0;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0 && *end == '\0') {
        out = int64_t(v);
        return true;
      }
    }
    const double d = std::strtod(text.c_str(), &end);
    if (*end != '\0') return false;
    out = d;
    return true;
  }

  bool value(Json& out, int depth) {
    if (depth > kMaxDepth) return false;
    ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"' || c == '\'') {
      std::string s;
      if (!string_lit(s)) return false;
      out = std::move(s);
      return true;
    }
    if (c == '[' || c == '(') return sequence(out, c == '[' ? ']' : ')', depth);
    if (c == '{') return dict(out, depth);
    if (is_ident_start(c)) {
      std::string word;
      ident(word);
      if (word == "True" || word == "true") {
        out = true;
      } else if (word == "False" || word == "false") {
        out = false;
      } else if (word == "None" || word == "null") {
        out = nullptr;
      } else {
        return false;
      }
      return true;
    }
    return number(out);
  }

  bool sequence(Json& out, char close, int depth) {
    ++i_;  // the opening bracket
    out = Json::array();
    while (!eat(close)) {
      Json v;
      if (!value(v, depth + 1)) return false;
      out.push_back(std::move(v));
      if (!eat(',') && !peek(close)) return false;
    }
    return true;
  }

  bool dict(Json& out, int depth) {
    ++i_;  // '{'
    out = Json::object();
    while (!eat('}')) {
      std::string key;
      Json v;
      if (!string_lit(key) || !eat(':') || !value(v, depth + 1)) return false;
      out[key] = std::move(v);
      if (!eat(',') && !peek('}')) return false;
    }
    return true;
  }

  // NAME(.NAME)*(k=v, ...)
  bool call(ParsedToolCall& out) {
    std::string part;
    if (!ident(part)) return false;
    out.name = part;
    while (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!ident(part)) return false;
      out.name += "." + part;
    }
    if (!eat('(')) return false;
    Json args = Json::object();
    while (!eat(')')) {
      std::string key;
      Json v;
      if (!ident(key) || !eat('=') || !value(v, 1)) return false;
      if (args.contains(key)) return false;
      args[key] = std::move(v);
      if (!eat(',') && !peek(')')) return false;
    }
    out.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
    return true;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

// text starts with `prefix` (after whitespace): the rest, else npos.
size_t after(std::string_view text, size_t at, std::string_view prefix) {
  while (at < text.size() && is_ws(text[at])) ++at;
  return text.substr(at, prefix.size()) == prefix ? at + prefix.size() : std::string_view::npos;
}

Json xml_value(std::string_view raw, const std::string& type) {
  if (!raw.empty() && raw.front() == '\n') raw.remove_prefix(1);
  if (!raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
  if (type == "string") return std::string(raw);
  Json v = Json::parse(trim(raw), nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return std::string(raw);
  return v;
}

}  // namespace

bool parse_xml_function_call(std::string_view text, const ToolParamTypes* types,
                             ParsedToolCall& out) {
  size_t at = after(text, 0, "<function=");
  if (at == std::string_view::npos) return false;
  const size_t close = text.find('>', at);
  if (close == std::string_view::npos) return false;
  const std::string name(trim(text.substr(at, close - at)));
  if (name.empty() || name.find_first_of("<\n") != std::string::npos) return false;
  at = close + 1;
  const std::map<std::string, std::string>* params = nullptr;
  if (types != nullptr) {
    auto it = types->find(name);
    if (it != types->end()) params = &it->second;
  }
  Json args = Json::object();
  while (true) {
    if (size_t end = after(text, at, "</function>"); end != std::string_view::npos) {
      if (!trim(text.substr(end)).empty()) return false;
      break;
    }
    at = after(text, at, "<parameter=");
    if (at == std::string_view::npos) return false;
    const size_t pclose = text.find('>', at);
    if (pclose == std::string_view::npos) return false;
    const std::string pname(trim(text.substr(at, pclose - at)));
    const size_t vend = text.find("</parameter>", pclose + 1);
    if (pname.empty() || vend == std::string_view::npos || args.contains(pname)) return false;
    std::string type;
    if (params != nullptr) {
      auto it = params->find(pname);
      if (it != params->end()) type = it->second;
    }
    args[pname] = xml_value(text.substr(pclose + 1, vend - pclose - 1), type);
    at = vend + std::string_view("</parameter>").size();
  }
  out.name = name;
  out.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
  return true;
}

size_t pythonic_list_end(std::string_view text) {
  int depth = 0;
  char quote = 0;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '(' || c == '{') {
      ++depth;
    } else if (c == ']' || c == ')' || c == '}') {
      if (--depth <= 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

bool parse_pythonic_calls(std::string_view text, std::vector<ParsedToolCall>& out) {
  PyReader r(text);
  if (!r.eat('[')) return false;
  std::vector<ParsedToolCall> calls;
  while (!r.eat(']')) {
    ParsedToolCall c;
    if (!r.call(c)) return false;
    calls.push_back(std::move(c));
    if (!r.eat(',') && !r.peek(']')) return false;
  }
  r.ws();
  if (!r.at_end() || calls.empty()) return false;
  for (ParsedToolCall& c : calls) out.push_back(std::move(c));
  return true;
}

}  // namespace omnibus::server
