// The parser's position in a token stream (internal to the Jinja parser:
// jinja_expr_parser.h parses expressions, jinja_parser.cc statements).
//
// ParseCursor walks the tokens of one template, records the first syntax
// error (kInvalidArgument naming line and column) and counts nesting so that
// no input can overflow the stack. Parse functions return null (or false)
// after recording the error; callers return at once.
//
// Thread-safety: one parse's state; use from one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"
#include "util/status.h"

namespace omnibus::jinja {

class ParseCursor {
 public:
  static constexpr int kMaxDepth = 200;  // nesting of expressions and blocks

  // REQUIRES: lexed.tokens ends with kEof; lexed outlives this cursor.
  explicit ParseCursor(const LexResult& lexed) : src_(lexed.source), toks_(lexed.tokens) {}

  // The first error recorded (ok when none).
  const Status& error() const { return error_; }

 protected:
  // ---- tokens ----
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(std::string_view n) const {
    return cur().kind == TokenKind::kName && cur().text == n;
  }
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

  // ---- errors (each returns false) ----
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText:
        return "template text";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kString:
        return "a string";
      case TokenKind::kEof:
        return "end of template";
      default:
        return fmt::format("'{}'", t.text);
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

  // Items separated by ',' up to the operator `close` (none, and a trailing
  // ',', are allowed), then `close` itself. parse_item() parses one item and
  // returns false after recording an error.
  template <typename ParseItem>
  bool parse_delimited(std::string_view close, ParseItem parse_item) {
    while (!is_op(close)) {
      if (!parse_item()) return false;
      if (!skip_op(",")) break;
    }
    return expect_op(close);
  }

  // ---- nesting ----
  // One level deeper for as long as it lives; ok() is false (and the error
  // recorded, naming `what`) past kMaxDepth.
  class DepthGuard {
   public:
    DepthGuard(ParseCursor& p, std::string_view what) : p_(p) {
      ok_ = ++p_.depth_ <= kMaxDepth ||
            p_.fail(p_.cur().pos, fmt::format("{} nested too deeply", what));
    }
    ~DepthGuard() { --p_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    bool ok() const { return ok_; }

   private:
    ParseCursor& p_;
    bool ok_;
  };

  // ---- nodes ----
  static ExprPtr node(ExprKind kind, size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  static ExprPtr literal(Value v, size_t pos) {
    ExprPtr e = node(ExprKind::kLiteral, pos);
    e->literal = std::move(v);
    return e;
  }

 private:
  std::string_view src_;
  const std::vector<Token>& toks_;
  size_t i_ = 0;
  int depth_ = 0;
  Status error_;
};

}  // namespace omnibus::jinja
