// Template::parse and the tree-walking interpreter behind Template::render.
#include "template/jinja_template.h"

#include <unordered_map>

#include "template/jinja_ast.h"
#include "template/jinja_builtins.h"
#include "template/jinja_lexer.h"
#include "template/jinja_parser.h"

namespace omnibus::jinja {

struct Template::Parsed {
  std::string source;
  Body body;
};

namespace {

constexpr uint32_t kMaxValueDepth = 256;

Status with_code(StatusCode code, std::string msg) {
  switch (code) {
    case StatusCode::kUnsupported:
      return Status::unsupported("{}", msg);
    case StatusCode::kResourceExhausted:
      return Status::resource_exhausted("{}", msg);
    case StatusCode::kInternal:
      return Status::internal("{}", msg);
    default:
      return Status::invalid_argument("{}", msg);
  }
}

// Walks the tree for one render. Scopes: [0] is the template's top level; a
// for loop pushes one per iteration, a macro call replaces the stack.
class Interpreter {
 public:
  Interpreter(std::string_view source, const ValueMap& vars, const RenderLimits& limits)
      : src_(source), vars_(vars), limits_(limits) {
    scopes_.emplace_back();
  }

  Status run(const Body& body, std::string& out) {
    Flow flow = Flow::kNormal;
    return exec_body(body, out, flow);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::unordered_map<std::string, Value>;

  // Adds "chat template line L, column C: " to errors that lack a position.
  Status at(size_t pos, const Status& s) const {
    if (s.is_ok() || s.message().rfind("chat template ", 0) == 0) return s;
    return with_code(
        s.code(), fmt::format("chat template {}: {}", describe_position(src_, pos), s.message()));
  }
  Status error(size_t pos, std::string msg, StatusCode code = StatusCode::kInvalidArgument) const {
    return at(pos, with_code(code, std::move(msg)));
  }

  Status step(size_t pos) {
    if (++steps_ > limits_.max_steps) {
      return error(pos, fmt::format("render exceeded {} steps", limits_.max_steps),
                   StatusCode::kResourceExhausted);
    }
    return Status::ok();
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    if (const Value* v = vars_.find(name)) return *v;
    return global_function(name);
  }

  // ---- statements ----

  Status exec_body(const Body& body, std::string& out, Flow& flow) {
    for (const StmtPtr& s : body) {
      OMNIBUS_RETURN_IF_ERROR(exec(*s, out, flow));
      if (out.size() > limits_.max_output_bytes) {
        return error(s->pos, fmt::format("output exceeds {} bytes", limits_.max_output_bytes),
                     StatusCode::kResourceExhausted);
      }
      if (flow != Flow::kNormal) return Status::ok();
    }
    return Status::ok();
  }

  Status exec(const Stmt& s, std::string& out, Flow& flow) {
    OMNIBUS_RETURN_IF_ERROR(step(s.pos));
    switch (s.kind) {
      case StmtKind::kText:
        out += s.text;
        return Status::ok();
      case StmtKind::kOutput: {
        OMNIBUS_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
        out += v.to_str();
        return Status::ok();
      }
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches) {
          OMNIBUS_ASSIGN_OR_RETURN(Value c, eval(*cond));
          if (c.truthy()) return exec_body(body, out, flow);
        }
        return exec_body(s.else_body, out, flow);
      case StmtKind::kFor:
        return exec_for(s, out);
      case StmtKind::kSet: {
        OMNIBUS_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
        return assign(s, std::move(v));
      }
      case StmtKind::kSetBlock: {
        std::string captured;
        Flow inner = Flow::kNormal;
        OMNIBUS_RETURN_IF_ERROR(exec_body(s.body, captured, inner));
        if (inner != Flow::kNormal) return error(s.pos, "break/continue inside a set block");
        scopes_.back()[s.targets[0]] = Value(std::move(captured));
        return Status::ok();
      }
      case StmtKind::kMacro: {
        const Stmt* macro = &s;
        scopes_.back()[s.text] = Value::make_function(
            s.text, [this, macro](const CallArgs& args) { return call_macro(*macro, args); });
        return Status::ok();
      }
      case StmtKind::kBreak:
      case StmtKind::kContinue:
        if (loop_depth_ == 0) return error(s.pos, "break or continue outside a for loop");
        flow = s.kind == StmtKind::kBreak ? Flow::kBreak : Flow::kContinue;
        return Status::ok();
      case StmtKind::kScope:
        return exec_body(s.body, out, flow);
    }
    return Status::internal("unknown statement");
  }

  Status bind(const Stmt& s, const Value& item, Scope& scope) const {
    if (s.targets.size() == 1) {
      scope[s.targets[0]] = item;
      return Status::ok();
    }
    if (!item.is_list() || item.as_list().size() != s.targets.size()) {
      return error(s.pos, fmt::format("cannot unpack {} into {} names", item.repr().substr(0, 60),
                                      s.targets.size()));
    }
    for (size_t i = 0; i < s.targets.size(); ++i) scope[s.targets[i]] = item.as_list()[i];
    return Status::ok();
  }

  Status assign(const Stmt& s, Value v) {
    if (!s.attr.empty()) {
      Value ns = lookup(s.targets[0]);
      if (!ns.is_namespace())
        return error(s.pos, "cannot assign attribute on non-namespace object");
      if (v.has_namespace()) {
        return error(s.pos, "storing a namespace inside a namespace is not supported",
                     StatusCode::kUnsupported);
      }
      ns.namespace_map().set(s.attr, std::move(v));
      return Status::ok();
    }
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = std::move(v);
      return Status::ok();
    }
    return bind(s, v, scopes_.back());
  }

  Status exec_for(const Stmt& s, std::string& out) {
    OMNIBUS_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr));
    StatusOr<ValueList> all = iterate(iterable);
    if (!all.is_ok()) return at(s.expr->pos, all.status());
    ValueList items;
    if (s.cond) {
      for (const Value& item : *all) {
        OMNIBUS_RETURN_IF_ERROR(step(s.pos));
        scopes_.emplace_back();
        Status st = bind(s, item, scopes_.back());
        StatusOr<Value> keep = st.is_ok() ? eval(*s.cond) : StatusOr<Value>(st);
        scopes_.pop_back();
        if (!keep.is_ok()) return keep.status();
        if (keep->truthy()) items.push_back(item);
      }
    } else {
      items = std::move(*all);
    }
    const int64_t n = int64_t(items.size());
    ++loop_depth_;
    Status st;
    for (int64_t i = 0; i < n && st.is_ok(); ++i) {
      st = step(s.pos);
      if (!st.is_ok()) break;
      scopes_.emplace_back();
      Scope& scope = scopes_.back();
      st = bind(s, items[size_t(i)], scope);
      if (st.is_ok()) {
        scope["loop"] = loop_object(items, i);
        Flow flow = Flow::kNormal;
        st = exec_body(s.body, out, flow);
        scopes_.pop_back();
        if (flow == Flow::kBreak) break;
      } else {
        scopes_.pop_back();
      }
    }
    --loop_depth_;
    OMNIBUS_RETURN_IF_ERROR(st);
    if (n == 0) {
      Flow flow = Flow::kNormal;
      OMNIBUS_RETURN_IF_ERROR(exec_body(s.else_body, out, flow));
    }
    return Status::ok();
  }

  static Value loop_object(const ValueList& items, int64_t i) {
    const int64_t n = int64_t(items.size());
    ValueMap m;
    m.entries.reserve(12);
    m.set("index", Value(i + 1));
    m.set("index0", Value(i));
    m.set("revindex", Value(n - i));
    m.set("revindex0", Value(n - i - 1));
    m.set("first", Value(i == 0));
    m.set("last", Value(i == n - 1));
    m.set("length", Value(n));
    m.set("depth", Value(int64_t(1)));
    m.set("depth0", Value(int64_t(0)));
    if (i > 0) m.set("previtem", items[size_t(i - 1)]);
    if (i + 1 < n) m.set("nextitem", items[size_t(i + 1)]);
    m.set("cycle", Value::make_function("loop.cycle", [i](const CallArgs& a) -> StatusOr<Value> {
            if (a.args.empty()) return Status::invalid_argument("no items for cycling given");
            return a.args[size_t(i) % a.args.size()];
          }));
    return Value(std::move(m));
  }

  StatusOr<Value> call_macro(const Stmt& macro, const CallArgs& args) {
    if (call_depth_ >= limits_.max_call_depth) {
      return error(macro.pos,
                   fmt::format("macro calls nested deeper than {}", limits_.max_call_depth),
                   StatusCode::kResourceExhausted);
    }
    if (args.args.size() > macro.params.size()) {
      return error(macro.pos, fmt::format("macro '{}' takes {} arguments, {} given", macro.text,
                                          macro.params.size(), args.args.size()));
    }
    for (const auto& [k, _] : args.kwargs) {
      bool known = false;
      for (const auto& p : macro.params) known = known || p.first == k;
      if (!known)
        return error(macro.pos, fmt::format("macro '{}' has no parameter '{}'", macro.text, k));
    }
    std::vector<Scope> saved = std::move(scopes_);
    scopes_.clear();
    scopes_.push_back(saved.front());
    scopes_.emplace_back();
    Status st;
    for (size_t i = 0; i < macro.params.size() && st.is_ok(); ++i) {
      const auto& [name, dflt] = macro.params[i];
      const Value* given = args.get(i, name);
      if (given != nullptr) {
        scopes_.back()[name] = *given;
      } else if (dflt) {
        StatusOr<Value> v = eval(*dflt);
        if (v.is_ok())
          scopes_.back()[name] = *v;
        else
          st = v.status();
      } else {
        scopes_.back()[name] = Value::undefined(fmt::format("'{}' is undefined", name));
      }
    }
    std::string out;
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    ++call_depth_;
    Flow flow = Flow::kNormal;
    if (st.is_ok()) st = exec_body(macro.body, out, flow);
    --call_depth_;
    loop_depth_ = saved_loops;
    scopes_ = std::move(saved);
    OMNIBUS_RETURN_IF_ERROR(st);
    return Value(std::move(out));
  }

  // ---- expressions ----

  StatusOr<Value> eval(const Expr& e) {
    StatusOr<Value> v = eval_inner(e);
    if (!v.is_ok()) return at(e.pos, v.status());
    if (v->depth() > kMaxValueDepth) {
      return error(e.pos, fmt::format("value nested deeper than {}", kMaxValueDepth),
                   StatusCode::kResourceExhausted);
    }
    return v;
  }

  StatusOr<CallArgs> eval_args(const Expr& e) {
    CallArgs a;
    for (size_t i = 1; i < e.children.size(); ++i) {
      OMNIBUS_ASSIGN_OR_RETURN(Value v, eval(*e.children[i]));
      a.args.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kwargs) {
      OMNIBUS_ASSIGN_OR_RETURN(Value v, eval(*x));
      a.kwargs.emplace_back(k, std::move(v));
    }
    return a;
  }

  StatusOr<Value> eval_inner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName: {
        Value v = lookup(e.name);
        if (v.is_undefined() && v.undefined_hint().empty()) {
          return Value::undefined(fmt::format("'{}' is undefined", e.name));
        }
        return v;
      }
      case ExprKind::kList: {
        ValueList l;
        for (const ExprPtr& c : e.children) {
          OMNIBUS_ASSIGN_OR_RETURN(Value v, eval(*c));
          l.push_back(std::move(v));
        }
        return e.name == "tuple" ? Value::make_tuple(std::move(l)) : Value(std::move(l));
      }
      case ExprKind::kDict: {
        ValueMap m;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          OMNIBUS_ASSIGN_OR_RETURN(Value k, eval(*e.children[i]));
          if (!k.is_string()) {
            return error(e.children[i]->pos, "only string keys are supported in dict literals",
                         StatusCode::kUnsupported);
          }
          OMNIBUS_ASSIGN_OR_RETURN(Value v, eval(*e.children[i + 1]));
          m.set(k.as_string(), std::move(v));
        }
        return Value(std::move(m));
      }
      case ExprKind::kGetAttr: {
        OMNIBUS_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0]));
        if (obj.is_undefined()) return undefined_error(obj);
        return get_attr(obj, e.name);
      }
      case ExprKind::kGetItem: {
        OMNIBUS_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0]));
        OMNIBUS_ASSIGN_OR_RETURN(Value key, eval(*e.children[1]));
        if (obj.is_undefined()) return undefined_error(obj);
        return get_item(obj, key);
      }
      case ExprKind::kSlice: {
        OMNIBUS_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0]));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.children[size_t(i) + 1]) {
            OMNIBUS_ASSIGN_OR_RETURN(parts[i], eval(*e.children[size_t(i) + 1]));
          }
        }
        return get_slice(obj, e.children[1] ? &parts[0] : nullptr,
                         e.children[2] ? &parts[1] : nullptr, e.children[3] ? &parts[2] : nullptr);
      }
      case ExprKind::kCall:
        return eval_call(e);
      case ExprKind::kFilter: {
        OMNIBUS_ASSIGN_OR_RETURN(Value in, eval(*e.children[0]));
        OMNIBUS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
        return call_filter(e.name, in, args);
      }
      case ExprKind::kTest: {
        OMNIBUS_ASSIGN_OR_RETURN(Value in, eval(*e.children[0]));
        OMNIBUS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
        OMNIBUS_ASSIGN_OR_RETURN(bool r, call_test(e.name, in, args));
        return Value(r != e.negated);
      }
      case ExprKind::kUnary: {
        OMNIBUS_ASSIGN_OR_RETURN(Value v, eval(*e.children[0]));
        return unary_op(e.name, v);
      }
      case ExprKind::kBinary: {
        OMNIBUS_ASSIGN_OR_RETURN(Value a, eval(*e.children[0]));
        OMNIBUS_ASSIGN_OR_RETURN(Value b, eval(*e.children[1]));
        return binary_op(e.name, a, b);
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        OMNIBUS_ASSIGN_OR_RETURN(Value a, eval(*e.children[0]));
        if (a.truthy() == (e.kind == ExprKind::kOr)) return a;
        return eval(*e.children[1]);
      }
      case ExprKind::kNot: {
        OMNIBUS_ASSIGN_OR_RETURN(Value v, eval(*e.children[0]));
        return Value(!v.truthy());
      }
      case ExprKind::kCompare: {
        OMNIBUS_ASSIGN_OR_RETURN(Value left, eval(*e.children[0]));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          OMNIBUS_ASSIGN_OR_RETURN(Value right, eval(*e.children[i + 1]));
          StatusOr<bool> r = compare_op(e.ops[i], left, right);
          if (!r.is_ok()) return at(e.children[i + 1]->pos, r.status());
          if (!*r) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::kCondExpr: {
        OMNIBUS_ASSIGN_OR_RETURN(Value c, eval(*e.children[1]));
        if (c.truthy()) return eval(*e.children[0]);
        if (e.children[2]) return eval(*e.children[2]);
        return Value::undefined(fmt::format(
            "the inline if-expression on {} evaluated to false and no else section was defined.",
            describe_position(src_, e.pos)));
      }
    }
    return Status::internal("unknown expression");
  }

  StatusOr<Value> eval_call(const Expr& e) {
    const Expr& callee = *e.children[0];
    OMNIBUS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
    Value fn;
    if (callee.kind == ExprKind::kGetAttr) {
      OMNIBUS_ASSIGN_OR_RETURN(Value obj, eval(*callee.children[0]));
      if (obj.is_undefined()) return undefined_error(obj);
      if (std::optional<StatusOr<Value>> r = call_method(obj, callee.name, args))
        return std::move(*r);
      fn = get_attr(obj, callee.name);
      if (fn.is_undefined()) {
        return Status::invalid_argument("'{}' object has no method '{}'", obj.type_name(),
                                        callee.name);
      }
    } else {
      OMNIBUS_ASSIGN_OR_RETURN(fn, eval(callee));
    }
    if (fn.is_function()) return fn.as_function().call(args);
    if (fn.is_undefined()) return undefined_error(fn);
    return Status::invalid_argument("'{}' object is not callable", fn.type_name());
  }

  std::string_view src_;
  const ValueMap& vars_;
  const RenderLimits limits_;
  std::vector<Scope> scopes_;
  int loop_depth_ = 0;
  int call_depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

StatusOr<Template> Template::parse(std::string_view source) {
  OMNIBUS_ASSIGN_OR_RETURN(LexResult lexed, lex(source));
  OMNIBUS_ASSIGN_OR_RETURN(Body body, jinja::parse(lexed));
  auto p = std::make_shared<Parsed>();
  p->source = std::move(lexed.source);
  p->body = std::move(body);
  return Template(std::move(p));
}

StatusOr<std::string> Template::render(const ValueMap& variables,
                                       const RenderLimits& limits) const {
  Interpreter in(parsed_->source, variables, limits);
  std::string out;
  OMNIBUS_RETURN_IF_ERROR(in.run(parsed_->body, out));
  return out;
}

const std::string& Template::source() const { return parsed_->source; }

}  // namespace omnibus::jinja
