// The syntax tree of a parsed Jinja template (produced by jinja_parser.h,
// walked by the interpreter in jinja_template.cc). Every node records the
// byte offset of its source in the normalised template text, for error
// messages.
//
// Thread-safety: immutable after parsing; shared by concurrent renders.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace omnibus::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;
using Kwargs = std::vector<std::pair<std::string, ExprPtr>>;

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // children: items ([a, b]; name "tuple" for (a, b))
  kDict,      // children: key0, value0, key1, value1, ...
  kGetAttr,   // children[0].name
  kGetItem,   // children[0][children[1]]
  kSlice,     // children[0][children[1]:children[2]:children[3]] (each of 1..3 may be null)
  kCall,      // children[0](children[1..], kwargs)
  kFilter,    // children[0] | name(children[1..], kwargs)
  kTest,      // children[0] is [not] name(children[1..])
  kUnary,     // name (op: "-" or "+") children[0]
  kBinary,    // children[0] name (op: + - * / // % ** ~) children[1]
  kAnd,       // children[0] and children[1]
  kOr,        // children[0] or children[1]
  kNot,       // not children[0]
  kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ... (chained)
  kCondExpr,  // children[0] if children[1] else children[2] (else may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  size_t pos = 0;
  std::string name;
  Value literal;
  std::vector<ExprPtr> children;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  Kwargs kwargs;
  bool negated = false;  // kTest: `is not`
};

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches (cond, body)...; else_body
  kFor,       // for targets in expr [if cond]: body; else_body
  kSet,       // {% set targets = expr %} or {% set name.attr = expr %}
  kSetBlock,  // {% set targets[0] %}body{% endset %}
  kMacro,     // {% macro name(params) %}body{% endmacro %}
  kBreak,
  kContinue,
  kScope,  // a block that only wraps its body ({% generation %})
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  size_t pos = 0;
  std::string text;                  // kText: the text; kMacro: its name
  std::vector<std::string> targets;  // kFor / kSet / kSetBlock: names assigned
  std::string attr;                  // kSet: non-empty for `set targets[0].attr = ...`
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value)
  ExprPtr cond;                      // kFor: the loop filter (may be null)
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name, default (may be null)
};

}  // namespace omnibus::jinja
