// The statement half of the Jinja parser (jinja_parser.h); expressions are
// parsed by ExprParser (jinja_expr_parser.h), which this parser extends.
#include "template/jinja_parser.h"

#include <initializer_list>

#include "template/jinja_expr_parser.h"

namespace omnibus::jinja {
namespace {

class StmtParser : public ExprParser {
 public:
  using ExprParser::ExprParser;

  StatusOr<Body> run() {
    std::string stopped_at;
    Body body;
    if (!parse_body({}, body, stopped_at)) {
      if (error().is_ok()) return Status::internal("chat template parser failed without an error");
      return error();
    }
    return body;
  }

 private:
  // Parses statements until `{% <stop> ...` for a stop word in `stops` (the
  // word is left as the current token) or, when stops is empty, the end.
  bool parse_body(std::initializer_list<std::string_view> stops, Body& body,
                  std::string& stopped_at) {
    DepthGuard depth(*this, "blocks");
    if (!depth.ok()) return false;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::kEof:
          if (stops.size() == 0) return true;
          return fail(t.pos, fmt::format("unexpected end of template, expected '{{% {} %}}'",
                                         *stops.begin()));
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

  // parse_body, then the stop word's tag: `{% <stop> %}`.
  bool parse_block(std::initializer_list<std::string_view> stops, Body& body,
                   std::string& stopped_at) {
    if (!parse_body(stops, body, stopped_at)) return false;
    advance();  // the stop word
    return expect_block_end();
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
        if (stop == "else" && !parse_block({"endif"}, s->else_body, stop)) return nullptr;
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
      if (is_name("recursive")) {
        return fail(cur().pos, "recursive for loops are not supported"), nullptr;
      }
      if (!expect_block_end()) return nullptr;
      if (!parse_block({"endfor", "else"}, s->body, stop)) return nullptr;
      if (stop == "else" && !parse_block({"endfor"}, s->else_body, stop)) return nullptr;
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
      if (!expect_block_end() || !parse_block({"endset"}, s->body, stop)) return nullptr;
      return s;
    }
    if (kw.text == "macro") {
      s->kind = StmtKind::kMacro;
      if (!expect_name(s->text) || !expect_op("(")) return nullptr;
      const bool params_ok = parse_delimited(")", [&] {
        std::string param;
        if (!expect_name(param)) return false;
        ExprPtr def;
        if (skip_op("=")) {
          def = parse_expression();
          if (!def) return false;
        }
        s->params.emplace_back(std::move(param), std::move(def));
        return true;
      });
      if (!params_ok || !expect_block_end()) return nullptr;
      if (!parse_block({"endmacro"}, s->body, stop)) return nullptr;
      return s;
    }
    if (kw.text == "break" || kw.text == "continue") {
      s->kind = kw.text == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      if (!expect_block_end()) return nullptr;
      return s;
    }
    if (kw.text == "generation") {
      s->kind = StmtKind::kScope;
      if (!expect_block_end() || !parse_block({"endgeneration"}, s->body, stop)) return nullptr;
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
};

}  // namespace

StatusOr<Body> parse(const LexResult& lexed) { return StmtParser(lexed).run(); }

}  // namespace omnibus::jinja
