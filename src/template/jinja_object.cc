// The object model and operators of the Jinja interpreter (see jinja_builtins.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "template/jinja_builtins.h"
#include "template/jinja_escape.h"

namespace omnibus::jinja {
namespace {

constexpr size_t kMaxBuiltSize = size_t(64) << 20;  // bytes/items a single operation may build

// The code point at s[i..]; sets len to its byte length (1 for an invalid byte).
uint32_t decode_at(std::string_view s, size_t i, size_t& len) {
  const auto b = uint8_t(s[i]);
  int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + size_t(n) > s.size()) {
    len = 1;
    return 0xFFFD;
  }
  uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto c = uint8_t(s[i + size_t(k)]);
    if ((c >> 6) != 2) {
      len = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  len = size_t(n);
  return cp;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Python's slice index normalisation (PySlice_AdjustIndices); returns the
// selected indices.
StatusOr<std::vector<int64_t>> slice_indices(int64_t n, const Value* start, const Value* stop,
                                             const Value* step) {
  auto as_index = [](const Value* v, std::optional<int64_t>& out) -> Status {
    if (v == nullptr || v->is_none()) return Status::ok();
    if (!v->is_int() && !v->is_bool()) {
      return Status::invalid_argument("slice indices must be integers or None, not {}",
                                      v->type_name());
    }
    out = v->as_int();
    return Status::ok();
  };
  std::optional<int64_t> a, b, c;
  OMNIBUS_RETURN_IF_ERROR(as_index(start, a));
  OMNIBUS_RETURN_IF_ERROR(as_index(stop, b));
  OMNIBUS_RETURN_IF_ERROR(as_index(step, c));
  const int64_t st = c.value_or(1);
  if (st == 0) return Status::invalid_argument("slice step cannot be zero");
  auto adjust = [n, st](std::optional<int64_t> v, bool is_start) -> int64_t {
    if (!v) return st > 0 ? (is_start ? 0 : n) : (is_start ? n - 1 : -1);
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t lo = adjust(a, true), hi = adjust(b, false);
  std::vector<int64_t> idx;
  if (st > 0) {
    for (int64_t i = lo; i < hi; i += st) idx.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += st) idx.push_back(i);
  }
  return idx;
}

Status overflow_error() {
  return Status::unsupported("integer overflow (omnibus templates use 64-bit integers)");
}

StatusOr<Value> type_error(std::string_view op, const Value& a, const Value& b) {
  return Status::invalid_argument("unsupported operand type(s) for {}: '{}' and '{}'", op,
                                  a.type_name(), b.type_name());
}

StatusOr<Value> repeat(const Value& seq, int64_t times) {
  if (times <= 0) return seq.is_string() ? Value(std::string()) : Value(ValueList{});
  if (seq.is_string()) {
    if (seq.as_string().size() * uint64_t(times) > kMaxBuiltSize) {
      return Status::resource_exhausted("string repetition too large");
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  if (seq.as_list().size() * uint64_t(times) > kMaxBuiltSize) {
    return Status::resource_exhausted("list repetition too large");
  }
  ValueList out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value(std::move(out));
}

// Python's ordering of two values; error for types that do not order.
StatusOr<int> order(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const ValueList& x = a.as_list();
    const ValueList& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].equals(y[i])) continue;
      return order(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return Status::invalid_argument("'<' not supported between instances of '{}' and '{}'",
                                  a.type_name(), b.type_name());
}

// json.dumps's short escapes; other control characters are written as \uXXXX.
constexpr CharEscape kJsonEscapes[] = {{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"},
                                       {'\t', "\\t"}, {'\b', "\\b"},  {'\f', "\\f"}};

void json_string(std::string_view s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    if (const CharEscape* e = find_escape(kJsonEscapes, char(c))) {
      out += e->to;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += char(c);
    }
  }
  out += '"';
}

void json_newline(int indent, int level, std::string& out) {
  if (indent < 0) return;
  out += '\n';
  out.append(size_t(indent) * size_t(level), ' ');
}

// A JSON array or object of n items as json.dumps lays it out: "[]" / "{}"
// when empty, else the items between `open` and `close` separated by
// item_sep, one per line when indenting. write_item(i) writes item i.
template <typename WriteItem>
Status json_container(char open, char close, size_t n, int indent, std::string_view item_sep,
                      int level, std::string& out, WriteItem write_item) {
  out += open;
  if (n > 0) {
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) out += item_sep;
      json_newline(indent, level + 1, out);
      OMNIBUS_RETURN_IF_ERROR(write_item(i));
    }
    json_newline(indent, level, out);
  }
  out += close;
  return Status::ok();
}

Status json_value(const Value& v, int indent, bool sort_keys, std::string_view item_sep,
                  std::string_view key_sep, int level, std::string& out) {
  if (level > 100) return Status::invalid_argument("tojson: value nested too deeply");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return Status::ok();
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return Status::ok();
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return Status::ok();
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      out += std::isnan(d)   ? "NaN"
             : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                             : python_float_repr(d);
      return Status::ok();
    }
    case Value::Kind::kString:
      json_string(v.as_string(), out);
      return Status::ok();
    case Value::Kind::kList: {
      const ValueList& l = v.as_list();
      return json_container('[', ']', l.size(), indent, item_sep, level, out, [&](size_t i) {
        return json_value(l[i], indent, sort_keys, item_sep, key_sep, level + 1, out);
      });
    }
    case Value::Kind::kMap: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.as_map().entries) entries.push_back(&e);
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      return json_container('{', '}', entries.size(), indent, item_sep, level, out, [&](size_t i) {
        json_string(entries[i]->first, out);
        out += key_sep;
        return json_value(entries[i]->second, indent, sort_keys, item_sep, key_sep, level + 1, out);
      });
    }
    default:
      return Status::invalid_argument("Object of type {} is not JSON serializable", v.type_name());
  }
}

}  // namespace

std::vector<size_t> utf8_starts(std::string_view s) {
  std::vector<size_t> starts;
  starts.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    starts.push_back(i);
    size_t len = 1;
    decode_at(s, i, len);
    i += len;
  }
  starts.push_back(s.size());
  return starts;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len = 1;
    decode_at(s, i, len);
    i += len;
  }
  return n;
}

std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars) {
  std::vector<size_t> starts = utf8_starts(s);
  auto strippable = [&](size_t k) {
    std::string_view ch = s.substr(starts[k], starts[k + 1] - starts[k]);
    if (chars == nullptr) {
      size_t len = 1;
      return is_py_space(decode_at(ch, 0, len));
    }
    // chars is a set of code points
    std::vector<size_t> cs = utf8_starts(*chars);
    for (size_t j = 0; j + 1 < cs.size(); ++j) {
      if (std::string_view(*chars).substr(cs[j], cs[j + 1] - cs[j]) == ch) return true;
    }
    return false;
  };
  size_t lo = 0, hi = starts.size() - 1;  // code point range [lo, hi)
  if (left) {
    while (lo < hi && strippable(lo)) ++lo;
  }
  if (right) {
    while (hi > lo && strippable(hi - 1)) --hi;
  }
  return std::string(s.substr(starts[lo], starts[hi] - starts[lo]));
}

Status undefined_error(const Value& v) {
  if (v.is_undefined() && !v.undefined_hint().empty())
    return Status::invalid_argument("{}", v.undefined_hint());
  return Status::invalid_argument("value is undefined");
}

Value get_attr(const Value& obj, std::string_view name) {
  if (obj.is_map() || obj.is_namespace()) {
    if (const Value* v = obj.as_map().find(name)) return *v;
    return Value::undefined(fmt::format("'{}' has no attribute '{}'",
                                        obj.is_map() ? "dict object" : "Namespace", name));
  }
  return Value::undefined(fmt::format("'{}' object has no attribute '{}'", obj.type_name(), name));
}

Value get_item(const Value& obj, const Value& key) {
  if ((obj.is_map() || obj.is_namespace()) && key.is_string())
    return get_attr(obj, key.as_string());
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const ValueList& l = obj.as_list();
      if (i < 0) i += int64_t(l.size());
      if (i >= 0 && i < int64_t(l.size())) return l[size_t(i)];
    } else {
      const std::string& s = obj.as_string();
      std::vector<size_t> starts = utf8_starts(s);
      const int64_t n = int64_t(starts.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n)
        return Value(s.substr(starts[size_t(i)], starts[size_t(i) + 1] - starts[size_t(i)]));
    }
    return Value::undefined(
        fmt::format("{} object has no element {}", obj.type_name(), key.as_int()));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(fmt::format("{} object has no element {}", obj.type_name(), key.repr()));
}

StatusOr<Value> get_slice(const Value& obj, const Value* start, const Value* stop,
                          const Value* step) {
  if (obj.is_list()) {
    const ValueList& l = obj.as_list();
    OMNIBUS_ASSIGN_OR_RETURN(std::vector<int64_t> idx,
                             slice_indices(int64_t(l.size()), start, stop, step));
    ValueList out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(l[size_t(i)]);
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::vector<size_t> starts = utf8_starts(s);
    OMNIBUS_ASSIGN_OR_RETURN(std::vector<int64_t> idx,
                             slice_indices(int64_t(starts.size()) - 1, start, stop, step));
    std::string out;
    for (int64_t i : idx)
      out.append(s, starts[size_t(i)], starts[size_t(i) + 1] - starts[size_t(i)]);
    return Value(std::move(out));
  }
  if (obj.is_undefined()) return undefined_error(obj);
  return Value::undefined(fmt::format("'{}' object is not subscriptable", obj.type_name()));
}

StatusOr<ValueList> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kMap: {
      ValueList keys;
      for (const auto& [k, _] : v.as_map().entries) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      const std::string& s = v.as_string();
      std::vector<size_t> starts = utf8_starts(s);
      ValueList chars;
      for (size_t i = 0; i + 1 < starts.size(); ++i)
        chars.emplace_back(s.substr(starts[i], starts[i + 1] - starts[i]));
      return chars;
    }
    default:
      return Status::invalid_argument("'{}' object is not iterable", v.type_name());
  }
}

StatusOr<Value> binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = a.to_str() + b.to_str();
    return Value(std::move(s));
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  int64_t r = 0;
  if (op == "+") {
    if (ints)
      return __builtin_add_overflow(a.as_int(), b.as_int(), &r) ? StatusOr<Value>(overflow_error())
                                                                : Value(r);
    if (nums) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      ValueList l = a.as_list();
      l.insert(l.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(l));
    }
    return type_error(op, a, b);
  }
  if (op == "-") {
    if (ints)
      return __builtin_sub_overflow(a.as_int(), b.as_int(), &r) ? StatusOr<Value>(overflow_error())
                                                                : Value(r);
    if (nums) return Value(a.as_float() - b.as_float());
    return type_error(op, a, b);
  }
  if (op == "*") {
    if (ints)
      return __builtin_mul_overflow(a.as_int(), b.as_int(), &r) ? StatusOr<Value>(overflow_error())
                                                                : Value(r);
    if (nums) return Value(a.as_float() * b.as_float());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    return type_error(op, a, b);
  }
  if (!nums) return type_error(op, a, b);
  if (op == "/") {
    if (b.as_float() == 0) return Status::invalid_argument("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) return Status::invalid_argument("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return overflow_error();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    const double x = a.as_float(), y = b.as_float();
    if (y == 0) return Status::invalid_argument("float division or modulo by zero");
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) return overflow_error();
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow_error();
      }
      return Value(acc);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  return Status::internal("unknown operator '{}'", op);
}

StatusOr<Value> unary_op(std::string_view op, const Value& a) {
  if (a.is_undefined()) return undefined_error(a);
  if (!a.is_number())
    return Status::invalid_argument("bad operand type for unary {}: '{}'", op, a.type_name());
  if (op == "+") return a.is_float() ? Value(a.as_float()) : Value(a.as_int());
  if (a.is_float()) return Value(-a.as_float());
  if (a.as_int() == std::numeric_limits<int64_t>::min()) return overflow_error();
  return Value(-a.as_int());
}

StatusOr<bool> compare_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return a.equals(b);
  if (op == "!=") return !a.equals(b);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return Status::invalid_argument("'in <string>' requires string as left operand, not {}",
                                        a.type_name());
      }
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& x : b.as_list()) found = found || a.equals(x);
    } else if (b.is_map() || b.is_namespace()) {
      found = a.is_string() && b.as_map().find(a.as_string()) != nullptr;
    } else if (!b.is_undefined()) {
      return Status::invalid_argument("argument of type '{}' is not iterable", b.type_name());
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  OMNIBUS_ASSIGN_OR_RETURN(const int c, order(a, b));
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  if (op == ">=") return c >= 0;
  return Status::internal("unknown comparison '{}'", op);
}

StatusOr<std::string> to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep,
                              std::string_view key_sep) {
  std::string out;
  OMNIBUS_RETURN_IF_ERROR(json_value(v, indent, sort_keys, item_sep, key_sep, 0, out));
  return out;
}

}  // namespace omnibus::jinja
