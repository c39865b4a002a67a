// Filters and tests of the Jinja interpreter (see jinja_builtins.h).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "template/jinja_builtins.h"
#include "template/jinja_escape.h"

namespace omnibus::jinja {
namespace {

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; }

std::string upper(std::string s) {
  for (char& c : s) c = ascii_upper(c);
  return s;
}
std::string lower(std::string s) {
  for (char& c : s) c = ascii_lower(c);
  return s;
}

Status arity(std::string_view what, const CallArgs& a, size_t max_positional) {
  if (a.args.size() > max_positional) {
    return Status::invalid_argument("{} takes at most {} argument(s), {} given", what,
                                    max_positional, a.args.size());
  }
  return Status::ok();
}

StatusOr<std::string> want_string(std::string_view what, const Value* v) {
  if (v == nullptr) return Status::invalid_argument("{}: missing argument", what);
  if (!v->is_string())
    return Status::invalid_argument("{}: expected a string, got {}", what, v->type_name());
  return v->as_string();
}

// Jinja's do_title: words start after whitespace, '-', '(', '{', '[', '<'.
std::string jinja_title(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const bool sep = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
                     c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    out += sep ? c : word_start ? ascii_upper(c) : ascii_lower(c);
    word_start = sep;
  }
  return out;
}

StatusOr<Value> to_int(const Value& v, const Value* deflt) {
  const Value fallback = deflt ? *deflt : Value(int64_t(0));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) > 9.2e18) return fallback;
    return Value(int64_t(v.as_float()));
  }
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), true, true);
    if (s.empty()) return fallback;
    errno = 0;
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0 && end == s.c_str() + s.size()) return Value(int64_t(i));
    const double d = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value(int64_t(d));
  }
  return fallback;
}

StatusOr<Value> to_float(const Value& v, const Value* deflt) {
  const Value fallback = deflt ? *deflt : Value(0.0);
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(d);
  }
  return fallback;
}

// Jinja's indent filter (lines split on "\n").
std::string indent(std::string_view s, const std::string& pad, bool first, bool blank) {
  std::vector<std::string_view> lines;
  std::string text(s);
  text += '\n';
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') {
      lines.push_back(std::string_view(text).substr(start, i - start));
      start = i + 1;
    }
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) {
        rv += '\n';
        rv += pad;
      }
      rv += lines[i];
    }
  } else {
    rv = std::string(lines[0]);
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += '\n';
      if (!lines[i].empty()) rv += pad;
      rv += lines[i];
    }
  }
  return first ? pad + rv : rv;
}

// select / reject / selectattr / rejectattr.
StatusOr<Value> select(const Value& input, const CallArgs& a, bool by_attr, bool keep) {
  if (!input.truthy()) return Value(ValueList{});  // Jinja: `if value:` before iterating
  OMNIBUS_ASSIGN_OR_RETURN(ValueList items, iterate(input));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    OMNIBUS_ASSIGN_OR_RETURN(attr,
                             want_string("selectattr", a.args.empty() ? nullptr : &a.args[0]));
    next = 1;
  }
  std::string test;
  if (a.args.size() > next) {
    OMNIBUS_ASSIGN_OR_RETURN(test, want_string("select test", &a.args[next]));
  }
  CallArgs test_args;
  for (size_t i = next + 1; i < a.args.size(); ++i) test_args.args.push_back(a.args[i]);
  ValueList out;
  for (const Value& item : items) {
    Value v = item;
    if (by_attr) {
      if (item.is_undefined()) return undefined_error(item);
      v = get_attr(item, attr);
    }
    bool ok = v.truthy();
    if (!test.empty()) {
      OMNIBUS_ASSIGN_OR_RETURN(ok, call_test(test, v, test_args));
    }
    if (ok == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

}  // namespace

StatusOr<Value> call_filter(std::string_view name, const Value& in, const CallArgs& a) {
  if (name == "default" || name == "d") {
    const Value* dflt = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    const bool use = boolean && boolean->truthy() ? !in.truthy() : in.is_undefined();
    if (use) return dflt ? *dflt : Value(std::string());
    return in;
  }
  if (name == "safe" || name == "string") return name == "safe" ? in : Value(in.to_str());
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    const Value* sort = a.get(1, "sort_keys");
    const Value* seps = nullptr;
    for (const auto& [k, v] : a.kwargs) {
      if (k == "separators") seps = &v;
    }
    int width = -1;
    if (ind != nullptr && !ind->is_none()) {
      if (!ind->is_int() || ind->as_int() < 0 || ind->as_int() > 64) {
        return Status::invalid_argument("tojson: indent must be a small non-negative integer");
      }
      width = int(ind->as_int());
    }
    std::string item_sep = width >= 0 ? "," : ", ", key_sep = ": ";
    if (seps != nullptr && !seps->is_none()) {
      if (!seps->is_list() || seps->as_list().size() != 2 || !seps->as_list()[0].is_string() ||
          !seps->as_list()[1].is_string()) {
        return Status::invalid_argument("tojson: separators must be a pair of strings");
      }
      item_sep = seps->as_list()[0].as_string();
      key_sep = seps->as_list()[1].as_string();
    }
    OMNIBUS_ASSIGN_OR_RETURN(std::string json,
                             to_json(in, width, sort && sort->truthy(), item_sep, key_sep));
    return Value(std::move(json));
  }
  if (name == "length" || name == "count") {
    if (in.is_string()) return Value(int64_t(utf8_length(in.as_string())));
    if (in.is_list()) return Value(int64_t(in.as_list().size()));
    if (in.is_map() || in.is_namespace()) return Value(int64_t(in.as_map().entries.size()));
    if (in.is_undefined()) return Value(int64_t(0));
    return Status::invalid_argument("object of type '{}' has no len()", in.type_name());
  }
  if (name == "items") {
    if (in.is_undefined()) return Value(ValueList{});
    if (!in.is_map())
      return Status::invalid_argument("items: expected a mapping, got {}", in.type_name());
    ValueList out;
    for (const auto& [k, v] : in.as_map().entries) out.push_back(Value::make_tuple({Value(k), v}));
    return Value(std::move(out));
  }
  if (name == "list") {
    OMNIBUS_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    return Value(std::move(items));
  }
  if (name == "first" || name == "last") {
    OMNIBUS_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    OMNIBUS_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    const Value* sep = a.get(0, "d");
    const Value* attr = a.get(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0 && sep) out += sep->to_str();
      out += (attr ? get_item(items[i], *attr) : items[i]).to_str();
    }
    return Value(std::move(out));
  }
  if (name == "map") {
    if (!in.truthy()) return Value(ValueList{});  // Jinja: `if value:` before iterating
    OMNIBUS_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    ValueList out;
    const Value* attr = nullptr;
    const Value* dflt = nullptr;
    for (const auto& [k, v] : a.kwargs) {
      if (k == "attribute") attr = &v;
      if (k == "default") dflt = &v;
    }
    if (attr != nullptr) {
      for (const Value& it : items) {
        Value v = get_item(it, *attr);
        out.push_back(v.is_undefined() && dflt ? *dflt : v);
      }
      return Value(std::move(out));
    }
    OMNIBUS_ASSIGN_OR_RETURN(std::string filter,
                             want_string("map", a.args.empty() ? nullptr : &a.args[0]));
    CallArgs rest;
    rest.args.assign(a.args.begin() + 1, a.args.end());
    rest.kwargs = a.kwargs;
    for (const Value& it : items) {
      OMNIBUS_ASSIGN_OR_RETURN(Value v, call_filter(filter, it, rest));
      out.push_back(std::move(v));
    }
    return Value(std::move(out));
  }
  if (name == "select" || name == "reject") return select(in, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr")
    return select(in, a, true, name == "selectattr");
  if (name == "reverse") {
    if (in.is_string()) {
      ValueList chars;
      OMNIBUS_ASSIGN_OR_RETURN(chars, iterate(in));
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
      return Value(std::move(out));
    }
    OMNIBUS_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "int") return to_int(in, a.get(0, "default"));
  if (name == "float") return to_float(in, a.get(0, "default"));
  if (name == "abs") {
    if (in.is_float()) return Value(std::fabs(in.as_float()));
    if (in.is_int() || in.is_bool()) return unary_op(in.as_int() < 0 ? "-" : "+", in);
    return Status::invalid_argument("bad operand type for abs(): '{}'", in.type_name());
  }
  if (name == "indent") {
    const Value* w = a.get(0, "width");
    const Value* first = a.get(1, "first");
    const Value* blank = a.get(2, "blank");
    std::string pad(4, ' ');
    if (w && w->is_string())
      pad = w->as_string();
    else if (w && (w->is_int() || w->is_bool()))
      pad = std::string(size_t(std::clamp<int64_t>(w->as_int(), 0, 1024)), ' ');
    return Value(indent(in.to_str(), pad, first && first->truthy(), blank && blank->truthy()));
  }
  // String filters: Jinja converts the input with str() first.
  const std::string s = in.to_str();
  if (name == "trim") {
    OMNIBUS_RETURN_IF_ERROR(arity("trim", a, 1));
    const Value* chars = a.get(0, "chars");
    if (chars && !chars->is_none()) {
      OMNIBUS_ASSIGN_OR_RETURN(std::string cs, want_string("trim", chars));
      return Value(py_strip(s, true, true, &cs));
    }
    return Value(py_strip(s, true, true));
  }
  if (name == "upper") return Value(upper(s));
  if (name == "lower") return Value(lower(s));
  if (name == "capitalize") {
    std::string out = lower(s);
    if (!out.empty()) out[0] = ascii_upper(out[0]);
    return Value(std::move(out));
  }
  if (name == "title") return Value(jinja_title(s));
  if (name == "replace") {
    OMNIBUS_ASSIGN_OR_RETURN(std::string from, want_string("replace", a.get(0, "old")));
    OMNIBUS_ASSIGN_OR_RETURN(std::string to, want_string("replace", a.get(1, "new")));
    const Value* count = a.get(2, "count");
    return call_method(Value(s), "replace",
                       CallArgs{{Value(from), Value(to), count ? *count : Value(int64_t(-1))}, {}})
        .value();
  }
  if (name == "e" || name == "escape") {
    // markupsafe's escape: the five HTML-special characters.
    static constexpr CharEscape kHtmlEscapes[] = {
        {'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&#34;"}, {'\'', "&#39;"}};
    std::string out;
    for (char c : s) {
      if (const CharEscape* e = find_escape(kHtmlEscapes, c)) {
        out += e->to;
      } else {
        out += c;
      }
    }
    return Value(std::move(out));
  }
  return Status::unsupported("unsupported filter '{}'", name);
}

StatusOr<bool> call_test(std::string_view name, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  const Value* arg = a.get(0, "other");
  auto need_arg = [&]() -> Status {
    if (arg == nullptr) return Status::invalid_argument("test '{}' needs an argument", name);
    return Status::ok();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_map();
  if (name == "iterable") {
    return v.kind() == K::kUndefined || v.is_string() || v.is_list() || v.is_map();
  }
  if (name == "sequence") {
    return v.kind() == K::kUndefined || v.is_string() || v.is_list() || v.is_map();
  }
  if (name == "callable") return v.is_function();
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return Status::invalid_argument("test '{}' needs a string", name);
    return name == "lower" ? lower(v.as_string()) == v.as_string()
                           : upper(v.as_string()) == v.as_string();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!(v.is_int() || v.is_bool()))
      return Status::invalid_argument("test '{}' needs an integer", name);
    if (name == "odd") return v.as_int() % 2 != 0;
    if (name == "even") return v.as_int() % 2 == 0;
    OMNIBUS_RETURN_IF_ERROR(need_arg());
    if (!(arg->is_int() || arg->is_bool()) || arg->as_int() == 0) {
      return Status::invalid_argument("divisibleby needs a non-zero integer");
    }
    return v.as_int() % arg->as_int() == 0;
  }
  if (name == "sameas") {
    OMNIBUS_RETURN_IF_ERROR(need_arg());
    if (v.is_none() || v.is_bool() || arg->is_none() || arg->is_bool()) {
      return v.kind() == arg->kind() && v.equals(*arg);
    }
    return false;
  }
  static constexpr std::pair<std::string_view, std::string_view> kCompare[] = {
      {"eq", "=="}, {"equalto", "=="}, {"==", "=="},      {"ne", "!="},
      {"!=", "!="}, {"lt", "<"},       {"lessthan", "<"}, {"<", "<"},
      {"le", "<="}, {"<=", "<="},      {"gt", ">"},       {"greaterthan", ">"},
      {">", ">"},   {"ge", ">="},      {">=", ">="},      {"in", "in"}};
  for (const auto& [test, op] : kCompare) {
    if (name == test) {
      OMNIBUS_RETURN_IF_ERROR(need_arg());
      return compare_op(op, v, *arg);
    }
  }
  return Status::unsupported("unsupported test '{}'", name);
}

}  // namespace omnibus::jinja
