// The regex compiler behind regex.h: a recursive-descent parser that emits
// one EBNF item per construct as it parses (no separate AST: every construct
// maps to one GBNF item, and counted repetition stays x{n,m}).
//
// Size bound: each construct carries its expanded size (literal code points,
// 1 per class, products through repetition); past max_expanded_items the
// pattern is kInvalidArgument, so nested counted repetition ((a{1000}){1000})
// can never blow up the grammar parser or the matcher.
//
// json_string_content: the item matches the inside of a JSON string whose
// decoded text full-matches the pattern (JSON Schema `pattern`). Literal
// " \ and control characters are written as their JSON escapes (\" \\ \n
// \u0001); classes and . drop them (a subset of the language, never invalid
// JSON). A class left empty by that is kInvalidArgument.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace omnibus::grammar::internal {

struct RegexOptions {
  bool json_string_content = false;
  uint64_t max_expanded_items = 100000;
  int32_t max_nesting = 100;  // ( ) depth
  int32_t max_repeat = 1000;  // n, m in {n,m}
};

// One EBNF item (parenthesized when needed) matching exactly the pattern.
StatusOr<std::string> regex_item(std::string_view pattern, const RegexOptions& options);

}  // namespace omnibus::grammar::internal
