// Primitive rules and integer digit ranges for json_schema.cc (see
// json_schema_rules.h).
#include "grammar/json_schema_rules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <utility>

namespace omnibus::grammar::internal {
namespace {

struct Primitive {
  const char* name;
  const char* body;  // {p} = rule prefix, {ws} = " ws" reference or nothing
  std::array<const char*, 6> deps;
};

// Bodies in GBNF; `{p}` is replaced by the prefix, `{ws}` by the whitespace item.
constexpr Primitive kPrimitives[] = {
    {"ws", R"(" "?)", {}},
    {"value",
     R"({p}object | {p}array | {p}string | {p}number | {p}boolean | {p}null)",
     {"object", "array", "string", "number", "boolean", "null"}},
    {"object",
     R"("{" ( {p}string ":"{ws} {p}value ( ","{ws} {p}string ":"{ws} {p}value )* )? "}")",
     {"string", "value"}},
    {"array", R"("[" ( {p}value ( ","{ws} {p}value )* )? "]")", {"value"}},
    {"string", R"("\"" {p}char* "\"")", {"char"}},
    {"char", R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))", {}},
    {"number",
     R"("-"? {p}integral-part ( "." {p}decimal-part )? ( [eE] [-+]? [0-9]{1,3} )?)",
     {"integral-part", "decimal-part"}},
    {"integer", R"("-"? {p}integral-part)", {"integral-part"}},
    {"integral-part", R"("0" | [1-9] [0-9]{0,15})", {}},
    {"decimal-part", R"([0-9]{1,16})", {}},
    {"boolean", R"("true" | "false")", {}},
    {"null", R"("null")", {}},
    {"date",
     R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))",
     {}},
    {"time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
     {}},
    {"date-time", R"({p}date "T" {p}time)", {"date", "time"}},
    {"uuid",
     R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})",
     {}},
    {"email",
     R"([a-zA-Z0-9_+-]+ ( "." [a-zA-Z0-9_+-]+ )* "@" [a-zA-Z0-9]+ ( "-" [a-zA-Z0-9]+ )* ( "." [a-zA-Z0-9]+ ( "-" [a-zA-Z0-9]+ )* )+)",
     {}},
};

const Primitive* find_primitive(std::string_view name) {
  for (const Primitive& p : kPrimitives) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  size_t at = 0;
  while ((at = s.find(from, at)) != std::string::npos) {
    s.replace(at, from.size(), to);
    at += to.size();
  }
  return s;
}

// " [0-9]{n}" (nothing for n == 0).
std::string any_digits(size_t n) {
  if (n == 0) return "";
  if (n == 1) return " [0-9]";
  return fmt::format(" [0-9]{{{}}}", n);
}

std::string digit_class(char lo, char hi) {
  if (lo == hi) return fmt::format("\"{}\"", lo);
  return fmt::format("[{}-{}]", lo, hi);
}

// Exactly the digit strings of a's length between a and b (a <= b).
std::string same_length_range(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  if (i == n) return fmt::format("\"{}\"", a);
  std::string prefix = i > 0 ? fmt::format("\"{}\" ", a.substr(0, i)) : std::string();
  const std::string ra = a.substr(i + 1), rb = b.substr(i + 1);
  const bool all0 = ra.find_first_not_of('0') == std::string::npos;
  const bool all9 = rb.find_first_not_of('9') == std::string::npos;
  const char lo = all0 ? a[i] : static_cast<char>(a[i] + 1);
  const char hi = all9 ? b[i] : static_cast<char>(b[i] - 1);
  std::vector<std::string> alts;
  if (!all0)
    alts.push_back(fmt::format("{} {}", digit_class(a[i], a[i]),
                               same_length_range(ra, std::string(ra.size(), '9'))));
  if (lo <= hi) alts.push_back(fmt::format("{}{}", digit_class(lo, hi), any_digits(ra.size())));
  if (!all9)
    alts.push_back(fmt::format("{} {}", digit_class(b[i], b[i]),
                               same_length_range(std::string(rb.size(), '0'), rb)));
  if (alts.size() == 1) return fmt::format("{}{}", prefix, alts[0]);
  return fmt::format("{}( {} )", prefix, fmt::join(alts, " | "));
}

constexpr size_t kMaxUnboundedDigits = 18;

// Alternatives for the integers in [lo, hi] (hi: nullopt = unbounded), lo >= 0.
std::vector<std::string> non_negative_range(uint64_t lo, std::optional<uint64_t> hi) {
  std::vector<std::string> alts;
  const std::string slo = std::to_string(lo);
  if (hi) {
    const std::string shi = std::to_string(*hi);
    if (slo.size() == shi.size()) return {same_length_range(slo, shi)};
    alts.push_back(same_length_range(slo, std::string(slo.size(), '9')));
    const size_t mid_lo = slo.size() + 1, mid_hi = shi.size() - 1;  // full lengths between
    if (mid_lo == mid_hi) {
      alts.push_back(fmt::format("[1-9]{}", any_digits(mid_lo - 1)));
    } else if (mid_lo < mid_hi) {
      alts.push_back(fmt::format("[1-9] [0-9]{{{},{}}}", mid_lo - 1, mid_hi - 1));
    }
    alts.push_back(same_length_range(fmt::format("1{}", std::string(shi.size() - 1, '0')), shi));
    return alts;
  }
  alts.push_back(same_length_range(slo, std::string(slo.size(), '9')));
  if (slo.size() < kMaxUnboundedDigits) {
    alts.push_back(fmt::format("[1-9] [0-9]{{{},{}}}", slo.size(), kMaxUnboundedDigits - 1));
  }
  return alts;
}

std::string join_alts(const std::vector<std::string>& alts) {
  return fmt::format("{}", fmt::join(alts, " | "));
}

}  // namespace

bool is_primitive_rule(std::string_view name) { return find_primitive(name) != nullptr; }

std::string primitive_rule_body(std::string_view name, const std::string& prefix,
                                bool any_whitespace, std::vector<std::string>* deps) {
  const Primitive* p = find_primitive(name);
  if (!p) return "";
  for (const char* d : p->deps) {
    if (d) deps->push_back(d);
  }
  std::string body = replace_all(p->body, "{p}", prefix);
  if (body.find("{ws}") != std::string::npos) {
    if (any_whitespace) deps->push_back("ws");
    body = replace_all(body, "{ws}", any_whitespace ? " " + prefix + "ws" : "");
  }
  return body;
}

std::optional<std::string> format_rule(std::string_view format) {
  for (std::string_view f : {"date", "time", "date-time", "uuid", "email"}) {
    if (format == f) return std::string(f);
  }
  return std::nullopt;
}

StatusOr<std::string> integer_range_body(std::optional<int64_t> min, std::optional<int64_t> max) {
  if (min && max && *min > *max) {
    return Status::invalid_argument("integer range is empty (minimum {} > maximum {})", *min, *max);
  }
  std::vector<std::string> alts;
  if (!max || *max >= 0) {  // the non-negative part
    const uint64_t lo = min ? static_cast<uint64_t>(std::max<int64_t>(*min, 0)) : 0;
    std::optional<uint64_t> hi;
    if (max) hi = static_cast<uint64_t>(*max);
    auto part = non_negative_range(lo, hi);
    alts.insert(alts.end(), part.begin(), part.end());
  }
  if (!min || *min < 0) {  // the negative part, by magnitude
    const uint64_t lo = max && *max < 0 ? static_cast<uint64_t>(-*max) : 1;
    std::optional<uint64_t> hi;
    if (min) hi = static_cast<uint64_t>(-*min);
    auto part = non_negative_range(lo, hi);
    alts.push_back(fmt::format("\"-\" ( {} )", join_alts(part)));
  }
  return join_alts(alts);
}

}  // namespace omnibus::grammar::internal
