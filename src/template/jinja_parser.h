// Jinja parser: tokens (jinja_lexer.h) -> syntax tree (jinja_ast.h).
//
// Statements: if/elif/else, for (with tuple targets, a loop filter and an
// else block), set (name, tuple, namespace attribute, block form), macro,
// break/continue, generation (transparent). Expressions follow Jinja2's
// grammar and precedence: conditional expressions, or/and/not, chained
// comparisons with in / not in, + -, ~, * / // %, **, unary - +, filters
// (`|`), tests (`is [not]`), calls with keyword arguments, attribute and item
// access, slices, list/tuple/dict literals. Anything else (extends, include,
// call blocks, raw, ...) is a kInvalidArgument error naming the line and
// column; parsing never crashes on any input.
//
// Statements are parsed in jinja_parser.cc, expressions in
// jinja_expr_parser.cc, on the token cursor of jinja_parse_cursor.h.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"
#include "util/status.h"

namespace omnibus::jinja {

// REQUIRES: lexed.tokens ends with kEof.
StatusOr<Body> parse(const LexResult& lexed);

}  // namespace omnibus::jinja
