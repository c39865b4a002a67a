// The fixed pieces of the JSON Schema compiler's output (json_schema.cc):
// primitive rule bodies (JSON value, string, number, ... and the string
// formats) and the exact digit-range items for integer bounds.
//
// Layout: no whitespace anywhere except `ws` (one optional space) after ':'
// and ','. Numbers are bounded to 16 integer and 16 fraction digits and
// 3 exponent digits (llama.cpp does the same), so a model cannot run on in
// digits forever; the grammar is a subset of JSON's, never a superset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace omnibus::grammar::internal {

// Names of the primitive rules (unprefixed): value object array string char
// number integer integral-part decimal-part boolean null ws, and the formats
// date time date-time uuid email.
bool is_primitive_rule(std::string_view name);

// The body of primitive `name`, with every rule reference prefixed and `ws`
// left out when !any_whitespace; *deps gets the primitives it references.
// REQUIRES: is_primitive_rule(name).
std::string primitive_rule_body(std::string_view name, const std::string& prefix,
                                bool any_whitespace, std::vector<std::string>* deps);

// The string content matched by a format (date, time, date-time, uuid,
// email): the name of its primitive rule, or nullopt when unsupported.
std::optional<std::string> format_rule(std::string_view format);

// Alternatives matching exactly the decimal integers in [min, max] (either
// bound optional; without a bound, magnitudes stop at 18 digits), in JSON's
// layout (no leading zeros, no "-0"). REQUIRES: bounds within +-1e18.
// kInvalidArgument when min > max.
StatusOr<std::string> integer_range_body(std::optional<int64_t> min, std::optional<int64_t> max);

}  // namespace omnibus::grammar::internal
