#include "template/jinja_expr_parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace omnibus::jinja {

ExprPtr ExprParser::parse_tuple_or_expr() {
  const size_t pos = cur().pos;
  ExprPtr first = parse_expression();
  if (!first || !is_op(",")) return first;
  return rest_of_tuple(std::move(first), pos, &ExprParser::parse_expression, [this] {
    return cur().kind == TokenKind::kBlockEnd || cur().kind == TokenKind::kVarEnd;
  });
}

ExprPtr ExprParser::parse_or_tuple_no_cond() {
  const size_t pos = cur().pos;
  ExprPtr first = parse_or();
  if (!first || !is_op(",")) return first;
  return rest_of_tuple(std::move(first), pos, &ExprParser::parse_or, [] { return false; });
}

template <typename EndsAfterComma>
ExprPtr ExprParser::rest_of_tuple(ExprPtr first, size_t pos, Operand item,
                                  EndsAfterComma ends_after_comma) {
  ExprPtr list = node(ExprKind::kList, pos);
  list->name = "tuple";
  list->children.push_back(std::move(first));
  while (skip_op(",")) {
    if (ends_after_comma()) break;
    ExprPtr e = (this->*item)();
    if (!e) return nullptr;
    list->children.push_back(std::move(e));
  }
  return list;
}

ExprPtr ExprParser::parse_expression() {
  DepthGuard depth(*this, "expression");
  if (!depth.ok()) return nullptr;
  return parse_condexpr();
}

ExprPtr ExprParser::parse_condexpr() {
  ExprPtr e = parse_or();
  while (e && is_name("if")) {
    ExprPtr c = node(ExprKind::kCondExpr, cur().pos);
    advance();
    ExprPtr cond = parse_or();
    if (!cond) return nullptr;
    ExprPtr other;
    if (skip_name("else")) {
      other = parse_condexpr();
      if (!other) return nullptr;
    }
    c->children.push_back(std::move(e));
    c->children.push_back(std::move(cond));
    c->children.push_back(std::move(other));
    e = std::move(c);
  }
  return e;
}

ExprPtr ExprParser::parse_left_assoc(Operand operand, TokenKind op_kind,
                                     std::initializer_list<std::string_view> ops, ExprKind kind) {
  ExprPtr e = (this->*operand)();
  while (e && cur().kind == op_kind && std::find(ops.begin(), ops.end(), cur().text) != ops.end()) {
    const Token op = cur();
    advance();
    ExprPtr rhs = (this->*operand)();
    if (!rhs) return nullptr;
    ExprPtr b = node(kind, op.pos);
    b->name = op.text;
    b->children.push_back(std::move(e));
    b->children.push_back(std::move(rhs));
    e = std::move(b);
  }
  return e;
}

ExprPtr ExprParser::parse_or() {
  return parse_left_assoc(&ExprParser::parse_and, TokenKind::kName, {"or"}, ExprKind::kOr);
}

ExprPtr ExprParser::parse_and() {
  return parse_left_assoc(&ExprParser::parse_not, TokenKind::kName, {"and"}, ExprKind::kAnd);
}

ExprPtr ExprParser::parse_not() {
  if (!is_name("not")) return parse_compare();
  DepthGuard depth(*this, "expression");
  if (!depth.ok()) return nullptr;
  ExprPtr e = node(ExprKind::kNot, cur().pos);
  advance();
  ExprPtr inner = parse_not();
  if (!inner) return nullptr;
  e->children.push_back(std::move(inner));
  return e;
}

ExprPtr ExprParser::parse_compare() {
  const size_t pos = cur().pos;
  ExprPtr first = parse_math1();
  if (!first) return nullptr;
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().kind == TokenKind::kOp &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
         cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      advance();
    } else if (is_name("in")) {
      op = "in";
      advance();
    } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
      op = "not in";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(ExprKind::kCompare, pos);
      cmp->children.push_back(std::move(first));
    }
    ExprPtr rhs = parse_math1();
    if (!rhs) return nullptr;
    cmp->ops.push_back(std::move(op));
    cmp->children.push_back(std::move(rhs));
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr ExprParser::parse_math1() {
  return parse_left_assoc(&ExprParser::parse_concat, TokenKind::kOp, {"+", "-"}, ExprKind::kBinary);
}

ExprPtr ExprParser::parse_concat() {
  return parse_left_assoc(&ExprParser::parse_math2, TokenKind::kOp, {"~"}, ExprKind::kBinary);
}

ExprPtr ExprParser::parse_math2() {
  return parse_left_assoc(&ExprParser::parse_pow, TokenKind::kOp, {"*", "/", "//", "%"},
                          ExprKind::kBinary);
}

ExprPtr ExprParser::parse_pow() {
  return parse_left_assoc(&ExprParser::parse_unary_filtered, TokenKind::kOp, {"**"},
                          ExprKind::kBinary);
}

ExprPtr ExprParser::parse_unary(bool with_filter) {
  DepthGuard depth(*this, "expression");
  if (!depth.ok()) return nullptr;
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = node(ExprKind::kUnary, cur().pos);
    e->name = cur().text;
    advance();
    ExprPtr inner = parse_unary(false);
    if (!inner) return nullptr;
    e->children.push_back(std::move(inner));
  } else {
    e = parse_primary();
    if (!e) return nullptr;
  }
  e = parse_postfix(std::move(e));
  if (e && with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr ExprParser::parse_primary() {
  const Token t = cur();
  switch (t.kind) {
    case TokenKind::kName: {
      advance();
      if (t.text == "true" || t.text == "True") return literal(Value(true), t.pos);
      if (t.text == "false" || t.text == "False") return literal(Value(false), t.pos);
      if (t.text == "none" || t.text == "None") return literal(Value::none(), t.pos);
      ExprPtr e = node(ExprKind::kName, t.pos);
      e->name = t.text;
      return e;
    }
    case TokenKind::kString: {
      std::string s = t.text;
      advance();
      while (cur().kind == TokenKind::kString) {  // adjacent literals concatenate
        s += cur().text;
        advance();
      }
      return literal(Value(std::move(s)), t.pos);
    }
    case TokenKind::kInt: {
      advance();
      errno = 0;
      const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
      if (errno == ERANGE) return fail(t.pos, "integer literal too large"), nullptr;
      return literal(Value(int64_t(v)), t.pos);
    }
    case TokenKind::kFloat: {
      advance();
      return literal(Value(std::strtod(t.text.c_str(), nullptr)), t.pos);
    }
    case TokenKind::kOp:
      if (t.text == "(") {
        advance();
        if (skip_op(")")) {  // ()
          ExprPtr empty = node(ExprKind::kList, t.pos);
          empty->name = "tuple";
          return empty;
        }
        ExprPtr e = parse_expression();
        if (!e) return nullptr;
        if (is_op(",")) {  // a tuple
          e = rest_of_tuple(std::move(e), t.pos, &ExprParser::parse_expression,
                            [this] { return is_op(")"); });
          if (!e) return nullptr;
        }
        if (!expect_op(")")) return nullptr;
        return e;
      }
      if (t.text == "[") {
        advance();
        ExprPtr list = node(ExprKind::kList, t.pos);
        const bool ok = parse_delimited("]", [&] {
          ExprPtr item = parse_expression();
          if (!item) return false;
          list->children.push_back(std::move(item));
          return true;
        });
        return ok ? std::move(list) : nullptr;
      }
      if (t.text == "{") {
        advance();
        ExprPtr dict = node(ExprKind::kDict, t.pos);
        const bool ok = parse_delimited("}", [&] {
          ExprPtr k = parse_expression();
          if (!k || !expect_op(":")) return false;
          ExprPtr v = parse_expression();
          if (!v) return false;
          dict->children.push_back(std::move(k));
          dict->children.push_back(std::move(v));
          return true;
        });
        return ok ? std::move(dict) : nullptr;
      }
      break;
    default:
      break;
  }
  return fail(t.pos, fmt::format("unexpected {}", describe(t))), nullptr;
}

ExprPtr ExprParser::parse_postfix(ExprPtr e) {
  while (e) {
    if (is_op(".")) {
      const size_t pos = cur().pos;
      advance();
      ExprPtr a;
      if (cur().kind == TokenKind::kInt) {  // x.0 is x[0]
        a = node(ExprKind::kGetItem, pos);
        a->children.push_back(std::move(e));
        a->children.push_back(
            literal(Value(int64_t(std::strtoll(cur().text.c_str(), nullptr, 10))), pos));
        advance();
      } else {
        a = node(ExprKind::kGetAttr, pos);
        if (!expect_name(a->name)) return nullptr;
        a->children.push_back(std::move(e));
      }
      e = std::move(a);
    } else if (is_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e), ExprKind::kCall, "");
    } else {
      break;
    }
  }
  return e;
}

ExprPtr ExprParser::parse_subscript(ExprPtr obj) {
  const size_t pos = cur().pos;
  advance();  // [
  ExprPtr parts[3];
  int n_colons = 0;
  while (true) {
    if (is_op(":")) {
      if (n_colons == 2) return fail(cur().pos, "too many ':' in slice"), nullptr;
      ++n_colons;
      advance();
      continue;
    }
    if (is_op("]")) break;
    if (parts[n_colons]) {
      return fail(cur().pos, fmt::format("unexpected {} in subscript", describe(cur()))), nullptr;
    }
    parts[n_colons] = parse_expression();
    if (!parts[n_colons]) return nullptr;
  }
  advance();  // ]
  if (n_colons == 0) {
    if (!parts[0]) return fail(pos, "empty subscript"), nullptr;
    ExprPtr e = node(ExprKind::kGetItem, pos);
    e->children.push_back(std::move(obj));
    e->children.push_back(std::move(parts[0]));
    return e;
  }
  ExprPtr e = node(ExprKind::kSlice, pos);
  e->children.push_back(std::move(obj));
  for (ExprPtr& p : parts) e->children.push_back(std::move(p));
  return e;
}

ExprPtr ExprParser::parse_call(ExprPtr first, ExprKind kind, std::string name) {
  ExprPtr e = node(kind, first->pos);
  e->name = std::move(name);
  e->children.push_back(std::move(first));
  if (!parse_args(*e)) return nullptr;
  return e;
}

bool ExprParser::parse_args(Expr& e) {
  if (!expect_op("(")) return false;
  return parse_delimited(")", [&] {
    if (is_op("*") || is_op("**")) return fail(cur().pos, "*args and **kwargs are not supported");
    if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == "=") {
      std::string key = cur().text;
      advance();
      advance();
      ExprPtr v = parse_expression();
      if (!v) return false;
      e.kwargs.emplace_back(std::move(key), std::move(v));
    } else {
      if (!e.kwargs.empty()) return fail(cur().pos, "positional argument after keyword argument");
      ExprPtr v = parse_expression();
      if (!v) return false;
      e.children.push_back(std::move(v));
    }
    return true;
  });
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr e) {
  while (e) {
    if (is_op("|")) {
      advance();
      const size_t pos = cur().pos;
      std::string name;
      if (!expect_name(name)) return nullptr;
      while (skip_op(".")) {  // dotted filter names
        std::string part;
        if (!expect_name(part)) return nullptr;
        name += '.';
        name += part;
      }
      if (is_op("(")) {
        e = parse_call(std::move(e), ExprKind::kFilter, name);
        if (e) e->pos = pos;
      } else {
        ExprPtr f = node(ExprKind::kFilter, pos);
        f->name = std::move(name);
        f->children.push_back(std::move(e));
        e = std::move(f);
      }
    } else if (is_name("is")) {
      advance();
      ExprPtr t = node(ExprKind::kTest, cur().pos);
      t->negated = skip_name("not");
      if (!expect_name(t->name)) return nullptr;
      t->children.push_back(std::move(e));
      if (is_op("(")) {
        if (!parse_args(*t)) return nullptr;
      } else if ((cur().kind == TokenKind::kName || cur().kind == TokenKind::kString ||
                  cur().kind == TokenKind::kInt || cur().kind == TokenKind::kFloat || is_op("[") ||
                  is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses
        ExprPtr arg = parse_primary();
        arg = parse_postfix(std::move(arg));
        if (!arg) return nullptr;
        t->children.push_back(std::move(arg));
      }
      e = std::move(t);
    } else if (is_op("(")) {
      e = parse_call(std::move(e), ExprKind::kCall, "");
    } else {
      break;
    }
  }
  return e;
}

}  // namespace omnibus::jinja
