// Jinja expressions: tokens -> Expr trees (internal to the Jinja parser;
// jinja_parser.h is the entry point, and its statement parser derives from
// this one).
//
// Jinja2's grammar and precedence, loosest first: conditional expressions
// (`a if c else b`), or, and, not, chained comparisons (== != < <= > >= in,
// not in), + -, ~, * / // %, **, unary - +; then postfix attribute / item
// access, slices and calls, filters (`|`) and tests (`is [not]`). Literals:
// strings (adjacent ones concatenate), integers, floats, true/false/none,
// lists, tuples and dicts. Calls take keyword arguments; *args / **kwargs are
// a syntax error.
//
// Thread-safety: one parse's state; use from one thread.
#pragma once

#include <initializer_list>
#include <string_view>

#include "template/jinja_parse_cursor.h"

namespace omnibus::jinja {

class ExprParser : public ParseCursor {
 public:
  using ParseCursor::ParseCursor;

  // Each returns null after recording an error (error()).
  // A full expression (conditional expressions included).
  ExprPtr parse_expression();
  // An expression or an implicit tuple `a, b` (as in {{ a, b }} or
  // set x = a, b); a trailing comma before '}}' / '%}' is allowed.
  ExprPtr parse_tuple_or_expr();
  // The iterable of a for loop: or-expressions, maybe an implicit tuple, no
  // conditional expression (its `if` is the loop filter).
  ExprPtr parse_or_tuple_no_cond();

 private:
  using Operand = ExprPtr (ExprParser::*)();

  ExprPtr parse_condexpr();
  // One level of left-associative binary operators: operand (op operand)*,
  // where op is a token of `op_kind` whose text is in `ops`; each step makes
  // an `kind` node named after the operator.
  ExprPtr parse_left_assoc(Operand operand, TokenKind op_kind,
                           std::initializer_list<std::string_view> ops, ExprKind kind);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();   // + -
  ExprPtr parse_concat();  // ~
  ExprPtr parse_math2();   // * / // %
  ExprPtr parse_pow();     // **
  ExprPtr parse_unary_filtered() { return parse_unary(true); }
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  // The rest of a tuple whose first item is `first`; the current token is
  // ','. Items come from `item`; the tuple ends at the first item not
  // followed by ',', or after a ',' where ends_after_comma() is true (a
  // trailing comma).
  template <typename EndsAfterComma>
  ExprPtr rest_of_tuple(ExprPtr first, size_t pos, Operand item, EndsAfterComma ends_after_comma);
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  // Current token '('. Positional and keyword arguments into a node whose
  // children[0] is `first`.
  ExprPtr parse_call(ExprPtr first, ExprKind kind, std::string name);
  bool parse_args(Expr& e);
  ExprPtr parse_filter_expr(ExprPtr e);
};

}  // namespace omnibus::jinja
