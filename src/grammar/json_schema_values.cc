// JSON Schema strings (lengths, patterns, formats) and numbers (integer
// bounds, exclusive limits) as EBNF: Converter members (json_schema_converter.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grammar/ebnf_text.h"
#include "grammar/json_schema_converter.h"
#include "grammar/json_schema_rules.h"
#include "grammar/literal_set.h"
#include "grammar/regex_parser.h"

namespace omnibus::grammar::json_schema_internal {

StatusOr<int64_t> Converter::count(const Json& schema, const char* key, const std::string& ptr,
                                   int64_t fallback) {
  if (!schema.contains(key)) return fallback;
  const Json& v = schema[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    return bad(ptr + "/" + key, "must be a non-negative integer");
  }
  if (v.get<int64_t>() > kMaxCount) {
    return bad(ptr + "/" + key, fmt::format("above {} is unsupported", kMaxCount));
  }
  return v.get<int64_t>();
}

StatusOr<std::string> Converter::string_body(const Json& schema, const std::string& name,
                                             const std::string& ptr) {
  const std::string q = "\"\\\"\"";  // the EBNF literal "\""
  const bool lengths = schema.contains("minLength") || schema.contains("maxLength");
  if (schema.contains("format")) {
    if (lengths || schema.contains("pattern"))
      return unsupported("format' beside 'pattern/minLength/maxLength", ptr);
    const Json& f = schema["format"];
    auto rule = f.is_string() ? internal::format_rule(f.get<std::string>()) : std::nullopt;
    if (!rule) return bad(ptr + "/format", fmt::format("unsupported format {}", f.dump()));
    return q + " " + primitive(*rule) + " " + q;
  }
  if (schema.contains("pattern")) {
    if (lengths) return unsupported("pattern' beside 'minLength/maxLength", ptr);
    const Json& p = schema["pattern"];
    if (!p.is_string()) return bad(ptr + "/pattern", "must be a string");
    internal::RegexOptions ro;
    ro.json_string_content = true;
    auto item = internal::regex_item(p.get<std::string>(), ro);
    if (!item.is_ok()) return bad(ptr + "/pattern", item.status().message());
    (void)name;
    return q + " " + *item + " " + q;
  }
  if (lengths) {
    OMNIBUS_ASSIGN_OR_RETURN(int64_t lo, count(schema, "minLength", ptr, 0));
    OMNIBUS_ASSIGN_OR_RETURN(int64_t hi, count(schema, "maxLength", ptr, -1));
    if (hi >= 0 && hi < lo) return bad(ptr, "maxLength < minLength");
    if (hi == 0) return std::string("\"\\\"\\\"\"");
    return q + " " + primitive("char") + quantifier(lo, hi) + " " + q;
  }
  return primitive("string");
}

Status Converter::integer_bounds(const Json& schema, const std::string& ptr,
                                 std::optional<int64_t>* min, std::optional<int64_t>* max) {
  auto get = [&](const char* key, bool lower, bool exclusive) -> Status {
    if (!schema.contains(key)) return Status::ok();
    const Json& v = schema[key];
    if (v.is_boolean()) return Status::ok();  // draft 4 exclusive flags, handled below
    if (!v.is_number()) return bad(ptr + "/" + key, "must be a number");
    const double d = v.get<double>();
    if (d > static_cast<double>(kMaxBound) || d < -static_cast<double>(kMaxBound)) {
      return bad(ptr + "/" + key, "bound beyond +-1e18 is unsupported");
    }
    bool excl = exclusive;
    const char* flag = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    if (!exclusive && schema.contains(flag) && schema[flag].is_boolean() &&
        schema[flag].get<bool>()) {
      excl = true;
    }
    int64_t b = 0;
    if (v.is_number_integer()) {
      b = v.get<int64_t>();
      if (excl) b += lower ? 1 : -1;
    } else {
      const double r = lower ? std::ceil(d) : std::floor(d);
      b = static_cast<int64_t>(r);
      if (excl && r == d) b += lower ? 1 : -1;
    }
    std::optional<int64_t>* slot = lower ? min : max;
    if (!*slot || (lower ? b > **slot : b < **slot)) *slot = b;
    return Status::ok();
  };
  OMNIBUS_RETURN_IF_ERROR(get("minimum", true, false));
  OMNIBUS_RETURN_IF_ERROR(get("exclusiveMinimum", true, true));
  OMNIBUS_RETURN_IF_ERROR(get("maximum", false, false));
  OMNIBUS_RETURN_IF_ERROR(get("exclusiveMaximum", false, true));
  return Status::ok();
}

StatusOr<std::string> Converter::integer_body(const Json& schema, const std::string& ptr) {
  std::optional<int64_t> min, max;
  OMNIBUS_RETURN_IF_ERROR(integer_bounds(schema, ptr, &min, &max));
  if (!min && !max) return primitive("integer");
  auto body = internal::integer_range_body(min, max);
  if (!body.is_ok()) return bad(ptr, body.status().message());
  return *body;
}

StatusOr<std::string> Converter::number_body(const Json& schema, const std::string& ptr) {
  const bool has_bound = schema.contains("minimum") || schema.contains("maximum") ||
                         schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum");
  if (!has_bound) return primitive("number");
  auto is_zero = [&](const char* k) {
    return schema.contains(k) && schema[k].is_number() && schema[k].get<double>() == 0.0;
  };
  const bool only_min = !schema.contains("maximum") && !schema.contains("exclusiveMaximum");
  const std::string exp = " ( [eE] [-+]? [0-9]{1,3} )?";
  if (only_min && is_zero("minimum") && !schema.contains("exclusiveMinimum")) {  // x >= 0
    return primitive("integral-part") + " ( \".\" " + primitive("decimal-part") + " )?" + exp;
  }
  const bool draft4_excl = schema.contains("exclusiveMinimum") &&
                           schema["exclusiveMinimum"].is_boolean() &&
                           schema["exclusiveMinimum"].get<bool>() && is_zero("minimum");
  if (only_min && (draft4_excl || (is_zero("exclusiveMinimum") && !schema.contains("minimum")))) {
    // x > 0: a non-zero digit somewhere.
    return "( [1-9] [0-9]{0,15} ( \".\" [0-9]{1,16} )? | \"0.\" \"0\"{0,15} [1-9] [0-9]{0,15} )" +
           exp;
  }
  if (schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum")) {
    return bad(ptr, "exclusive number bounds other than exclusiveMinimum 0 are unsupported");
  }
  std::optional<int64_t> min, max;
  for (const char* key : {"minimum", "maximum"}) {
    if (!schema.contains(key)) continue;
    const Json& v = schema[key];
    if (!v.is_number()) return bad(ptr + "/" + key, "must be a number");
    const double d = v.get<double>();
    if (d != std::floor(d) || std::fabs(d) > 1e15) {
      return bad(ptr + "/" + key, "number bounds must be integers within +-1e15");
    }
    (key[1] == 'i' ? min : max) = static_cast<int64_t>(d);
  }
  if (min && max && *min > *max) return bad(ptr, "minimum > maximum");
  // By sign: magnitudes M.F in [lo, hi] are M in [lo, hi-1] with any
  // fraction, or M = hi with a zero fraction (no exponents).
  std::vector<std::string> alts;
  auto magnitudes = [&](int64_t lo, std::optional<int64_t> hi) -> StatusOr<std::string> {
    const std::string frac = " ( \".\" [0-9]{1,16} )?";
    const std::string zero_frac = " ( \".\" \"0\"{1,16} )?";
    if (hi && *hi == lo) return fmt::format("\"{}\"{}", lo, zero_frac);
    std::optional<int64_t> below;
    if (hi) below = *hi - 1;
    auto body = internal::integer_range_body(lo, below);
    if (!body.is_ok()) return bad(ptr, body.status().message());
    std::string out = fmt::format("( {} ){}", *body, frac);
    if (hi) out = fmt::format("( {} | \"{}\"{} )", out, *hi, zero_frac);
    return out;
  };
  if (!max || *max >= 0) {
    OMNIBUS_ASSIGN_OR_RETURN(std::string m, magnitudes(min ? std::max<int64_t>(*min, 0) : 0, max));
    alts.push_back(m);
  }
  if (!min || *min < 0) {
    std::optional<int64_t> hi;
    if (min) hi = -*min;
    OMNIBUS_ASSIGN_OR_RETURN(std::string m, magnitudes(max ? std::max<int64_t>(-*max, 0) : 0, hi));
    alts.push_back(fmt::format("\"-\" {}", m));
  }
  return fmt::format("{}", fmt::join(alts, " | "));
}

}  // namespace omnibus::grammar::json_schema_internal
