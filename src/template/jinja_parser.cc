#include "template/jinja_parser.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

namespace omnibus::jinja {
namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions and blocks

// Recursive descent over the token stream. Functions return null (or false)
// after recording the first error in error_; callers return at once.
class Parser {
 public:
  explicit Parser(const LexResult& lexed) : src_(lexed.source), toks_(lexed.tokens) {}

  StatusOr<Body> run() {
    std::string stopped_at;
    Body body;
    if (!parse_body({}, body, stopped_at)) {
      if (error_.is_ok()) return Status::internal("chat template parser failed without an error");
      return error_;
    }
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText: return "template text";
      case TokenKind::kVarBegin: return "'{{'";
      case TokenKind::kVarEnd: return "'}}'";
      case TokenKind::kBlockBegin: return "'{%'";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kString: return "a string";
      case TokenKind::kEof: return "end of template";
      default: return fmt::format("'{}'", t.text);
    }
  }
  bool fail(size_t pos, const std::string& what) {
    if (error_.is_ok()) {
      error_ = Status::invalid_argument("chat template {}: {}", describe_position(src_, pos), what);
    }
    return false;
  }
  bool expect_op(std::string_view op) {
    if (skip_op(op)) return true;
    return fail(cur().pos, fmt::format("expected '{}', found {}", op, describe(cur())));
  }
  bool expect_kind(TokenKind k, std::string_view what) {
    if (cur().kind == k) {
      advance();
      return true;
    }
    return fail(cur().pos, fmt::format("expected {}, found {}", what, describe(cur())));
  }
  bool expect_block_end() { return expect_kind(TokenKind::kBlockEnd, "'%}'"); }
  bool expect_name(std::string& out) {
    if (cur().kind != TokenKind::kName) {
      return fail(cur().pos, fmt::format("expected a name, found {}", describe(cur())));
    }
    out = cur().text;
    advance();
    return true;
  }

  ExprPtr node(ExprKind kind, size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---- statements ----

  // Parses statements until `{% <stop> ...` for a stop word in `stops` (the
  // word is left as the current token) or, when stops is empty, the end.
  bool parse_body(std::initializer_list<std::string_view> stops, Body& body, std::string& stopped_at) {
    if (++depth_ > kMaxDepth) return fail(cur().pos, "blocks nested too deeply");
    struct Guard {
      int& d;
      ~Guard() { --d; }
    } guard{depth_};
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::kEof:
          if (stops.size() == 0) return true;
          return fail(t.pos, fmt::format("unexpected end of template, expected '{{% {} %}}'", *stops.begin()));
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->pos = t.pos;
          s->text = t.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->pos = t.pos;
          advance();
          s->expr = parse_tuple_or_expr();
          if (!s->expr || !expect_kind(TokenKind::kVarEnd, "'}}'")) return false;
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& kw = peek();
          if (kw.kind != TokenKind::kName) {
            return fail(kw.pos, fmt::format("expected a statement name, found {}", describe(kw)));
          }
          for (std::string_view stop : stops) {
            if (kw.text == stop) {
              advance();
              stopped_at = kw.text;
              return true;
            }
          }
          advance();
          StmtPtr s = parse_statement();
          if (!s) return false;
          body.push_back(std::move(s));
          break;
        }
        default:
          return fail(t.pos, fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // Current token: the statement's name (after '{%').
  StmtPtr parse_statement() {
    const Token kw = cur();
    auto s = std::make_unique<Stmt>();
    s->pos = kw.pos;
    advance();
    std::string stop;
    if (kw.text == "if") {
      s->kind = StmtKind::kIf;
      while (true) {
        ExprPtr cond = parse_expression();
        if (!cond || !expect_block_end()) return nullptr;
        Body b;
        if (!parse_body({"elif", "else", "endif"}, b, stop)) return nullptr;
        s->branches.emplace_back(std::move(cond), std::move(b));
        advance();  // the stop word
        if (stop == "elif") continue;
        if (!expect_block_end()) return nullptr;
        if (stop == "else") {
          if (!parse_body({"endif"}, s->else_body, stop)) return nullptr;
          advance();
          if (!expect_block_end()) return nullptr;
        }
        return s;
      }
    }
    if (kw.text == "for") {
      s->kind = StmtKind::kFor;
      if (!parse_targets(s->targets)) return nullptr;
      if (!skip_name("in")) return fail(cur().pos, "expected 'in' in for loop"), nullptr;
      s->expr = parse_or_tuple_no_cond();
      if (!s->expr) return nullptr;
      if (skip_name("if")) {
        s->cond = parse_expression();
        if (!s->cond) return nullptr;
      }
      if (is_name("recursive")) return fail(cur().pos, "recursive for loops are not supported"), nullptr;
      if (!expect_block_end()) return nullptr;
      if (!parse_body({"endfor", "else"}, s->body, stop)) return nullptr;
      advance();
      if (!expect_block_end()) return nullptr;
      if (stop == "else") {
        if (!parse_body({"endfor"}, s->else_body, stop)) return nullptr;
        advance();
        if (!expect_block_end()) return nullptr;
      }
      return s;
    }
    if (kw.text == "set") {
      if (!parse_targets(s->targets)) return nullptr;
      if (s->targets.size() == 1 && skip_op(".")) {
        if (!expect_name(s->attr)) return nullptr;
      }
      if (skip_op("=")) {
        s->kind = StmtKind::kSet;
        s->expr = parse_tuple_or_expr();
        if (!s->expr || !expect_block_end()) return nullptr;
        return s;
      }
      if (s->targets.size() != 1 || !s->attr.empty()) {
        return fail(cur().pos, "expected '=' in set"), nullptr;
      }
      if (is_op("|")) return fail(cur().pos, "filtered set blocks are not supported"), nullptr;
      s->kind = StmtKind::kSetBlock;
      if (!expect_block_end()) return nullptr;
      if (!parse_body({"endset"}, s->body, stop)) return nullptr;
      advance();
      if (!expect_block_end()) return nullptr;
      return s;
    }
    if (kw.text == "macro") {
      s->kind = StmtKind::kMacro;
      if (!expect_name(s->text) || !expect_op("(")) return nullptr;
      while (!is_op(")")) {
        std::string param;
        if (!expect_name(param)) return nullptr;
        ExprPtr def;
        if (skip_op("=")) {
          def = parse_expression();
          if (!def) return nullptr;
        }
        s->params.emplace_back(std::move(param), std::move(def));
        if (!skip_op(",")) break;
      }
      if (!expect_op(")") || !expect_block_end()) return nullptr;
      if (!parse_body({"endmacro"}, s->body, stop)) return nullptr;
      advance();
      if (!expect_block_end()) return nullptr;
      return s;
    }
    if (kw.text == "break" || kw.text == "continue") {
      s->kind = kw.text == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      if (!expect_block_end()) return nullptr;
      return s;
    }
    if (kw.text == "generation") {
      s->kind = StmtKind::kScope;
      if (!expect_block_end()) return nullptr;
      if (!parse_body({"endgeneration"}, s->body, stop)) return nullptr;
      advance();
      if (!expect_block_end()) return nullptr;
      return s;
    }
    return fail(kw.pos, fmt::format("unsupported statement '{}'", kw.text)), nullptr;
  }

  // name or name, name, ... (parentheses allowed around the tuple)
  bool parse_targets(std::vector<std::string>& out) {
    const bool paren = skip_op("(");
    do {
      std::string n;
      if (!expect_name(n)) return false;
      out.push_back(std::move(n));
    } while (skip_op(","));
    return !paren || expect_op(")");
  }

  // ---- expressions ----

  // expr or an implicit tuple `a, b` (as in {{ a, b }} or set x = a, b).
  ExprPtr parse_tuple_or_expr() {
    const size_t pos = cur().pos;
    ExprPtr first = parse_expression();
    if (!first || !is_op(",")) return first;
    ExprPtr list = node(ExprKind::kList, pos);
    list->name = "tuple";
    list->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == TokenKind::kBlockEnd || cur().kind == TokenKind::kVarEnd) break;
      ExprPtr e = parse_expression();
      if (!e) return nullptr;
      list->children.push_back(std::move(e));
    }
    return list;
  }

  // The iterable of a for loop: no conditional expression (its `if` is the
  // loop filter).
  ExprPtr parse_or_tuple_no_cond() {
    const size_t pos = cur().pos;
    ExprPtr first = parse_or();
    if (!first || !is_op(",")) return first;
    ExprPtr list = node(ExprKind::kList, pos);
    list->name = "tuple";
    list->children.push_back(std::move(first));
    while (skip_op(",")) {
      ExprPtr e = parse_or();
      if (!e) return nullptr;
      list->children.push_back(std::move(e));
    }
    return list;
  }

  ExprPtr parse_expression() {
    if (++depth_ > kMaxDepth) return fail(cur().pos, "expression nested too deeply"), nullptr;
    ExprPtr e = parse_condexpr();
    --depth_;
    return e;
  }

  ExprPtr parse_condexpr() {
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

  ExprPtr binary(ExprKind kind, std::string op, size_t pos, ExprPtr l, ExprPtr r) {
    if (!l || !r) return nullptr;
    ExprPtr e = node(kind, pos);
    e->name = std::move(op);
    e->children.push_back(std::move(l));
    e->children.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (e && is_name("or")) {
      const size_t pos = cur().pos;
      advance();
      e = binary(ExprKind::kOr, "or", pos, std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (e && is_name("and")) {
      const size_t pos = cur().pos;
      advance();
      e = binary(ExprKind::kAnd, "and", pos, std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      if (++depth_ > kMaxDepth) return fail(cur().pos, "expression nested too deeply"), nullptr;
      ExprPtr e = node(ExprKind::kNot, cur().pos);
      advance();
      ExprPtr inner = parse_not();
      --depth_;
      if (!inner) return nullptr;
      e->children.push_back(std::move(inner));
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (e && (is_op("+") || is_op("-"))) {
      const Token op = cur();
      advance();
      e = binary(ExprKind::kBinary, op.text, op.pos, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (e && is_op("~")) {
      const Token op = cur();
      advance();
      e = binary(ExprKind::kBinary, op.text, op.pos, std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (e && (is_op("*") || is_op("/") || is_op("//") || is_op("%"))) {
      const Token op = cur();
      advance();
      e = binary(ExprKind::kBinary, op.text, op.pos, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (e && is_op("**")) {
      const Token op = cur();
      advance();
      e = binary(ExprKind::kBinary, op.text, op.pos, std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    if (++depth_ > kMaxDepth) return fail(cur().pos, "expression nested too deeply"), nullptr;
    struct Guard {
      int& d;
      ~Guard() { --d; }
    } guard{depth_};
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

  ExprPtr parse_primary() {
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
            ExprPtr list = node(ExprKind::kList, t.pos);
            list->name = "tuple";
            list->children.push_back(std::move(e));
            while (skip_op(",")) {
              if (is_op(")")) break;
              ExprPtr item = parse_expression();
              if (!item) return nullptr;
              list->children.push_back(std::move(item));
            }
            e = std::move(list);
          }
          if (!expect_op(")")) return nullptr;
          return e;
        }
        if (t.text == "[") {
          advance();
          ExprPtr list = node(ExprKind::kList, t.pos);
          while (!is_op("]")) {
            ExprPtr item = parse_expression();
            if (!item) return nullptr;
            list->children.push_back(std::move(item));
            if (!skip_op(",")) break;
          }
          if (!expect_op("]")) return nullptr;
          return list;
        }
        if (t.text == "{") {
          advance();
          ExprPtr dict = node(ExprKind::kDict, t.pos);
          while (!is_op("}")) {
            ExprPtr k = parse_expression();
            if (!k || !expect_op(":")) return nullptr;
            ExprPtr v = parse_expression();
            if (!v) return nullptr;
            dict->children.push_back(std::move(k));
            dict->children.push_back(std::move(v));
            if (!skip_op(",")) break;
          }
          if (!expect_op("}")) return nullptr;
          return dict;
        }
        break;
      default:
        break;
    }
    return fail(t.pos, fmt::format("unexpected {}", describe(t))), nullptr;
  }

  ExprPtr literal(Value v, size_t pos) {
    ExprPtr e = node(ExprKind::kLiteral, pos);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (e) {
      if (is_op(".")) {
        const size_t pos = cur().pos;
        advance();
        ExprPtr a;
        if (cur().kind == TokenKind::kInt) {  // x.0 is x[0]
          a = node(ExprKind::kGetItem, pos);
          a->children.push_back(std::move(e));
          a->children.push_back(literal(Value(int64_t(std::strtoll(cur().text.c_str(), nullptr, 10))), pos));
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

  ExprPtr parse_subscript(ExprPtr obj) {
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
      if (parts[n_colons]) return fail(cur().pos, fmt::format("unexpected {} in subscript", describe(cur()))), nullptr;
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

  // Current token '('. Parses positional and keyword arguments into a node
  // whose children[0] is `first`.
  ExprPtr parse_call(ExprPtr first, ExprKind kind, std::string name) {
    ExprPtr e = node(kind, first->pos);
    e->name = std::move(name);
    e->children.push_back(std::move(first));
    if (!parse_args(*e)) return nullptr;
    return e;
  }

  bool parse_args(Expr& e) {
    if (!expect_op("(")) return false;
    while (!is_op(")")) {
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
      if (!skip_op(",")) break;
    }
    return expect_op(")");
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
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
                    cur().kind == TokenKind::kInt || cur().kind == TokenKind::kFloat ||
                    is_op("[") || is_op("{")) &&
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

  std::string_view src_;
  const std::vector<Token>& toks_;
  size_t i_ = 0;
  int depth_ = 0;
  Status error_;
};

}  // namespace

StatusOr<Body> parse(const LexResult& lexed) { return Parser(lexed).run(); }

}  // namespace omnibus::jinja
