// Python methods of str and dict, and the global functions, for the Jinja
// interpreter (see jinja_builtins.h).
#include <ctime>

#include "template/jinja_builtins.h"

namespace omnibus::jinja {
namespace {

constexpr int64_t kMaxRange = 1 << 20;

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= 0x1c && c <= 0x1f);
}
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

StatusOr<Value> str_method(const std::string& s, std::string_view name, const CallArgs& a) {
  auto str_arg = [&](size_t i, std::string_view kw) -> StatusOr<std::optional<std::string>> {
    const Value* v = a.get(i, kw);
    if (v == nullptr || v->is_none()) return std::optional<std::string>();
    if (!v->is_string()) {
      return Status::invalid_argument("str.{}: expected a string argument, got {}", name,
                                      v->type_name());
    }
    return std::optional<std::string>(v->as_string());
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    OMNIBUS_ASSIGN_OR_RETURN(std::optional<std::string> chars, str_arg(0, "chars"));
    return Value(py_strip(s, name != "rstrip", name != "lstrip", chars ? &*chars : nullptr));
  }
  if (name == "upper" || name == "lower") {
    std::string out = s;
    for (char& c : out) {
      if (name == "upper" && c >= 'a' && c <= 'z') c = char(c - 32);
      if (name == "lower" && c >= 'A' && c <= 'Z') c = char(c + 32);
    }
    return Value(std::move(out));
  }
  if (name == "title" || name == "capitalize") {
    std::string out = s;
    bool prev_cased = false;
    for (size_t i = 0; i < out.size(); ++i) {
      char& c = out[i];
      const bool up = name == "title" ? !prev_cased : i == 0;
      if (is_alpha(c)) c = up ? char(c & ~0x20) : char(c | 0x20);
      prev_cased = is_alpha(c);
    }
    return Value(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.get(0, "prefix");
    if (p == nullptr) return Status::invalid_argument("str.{}: missing argument", name);
    ValueList options = p->is_list() ? p->as_list() : ValueList{*p};
    for (const Value& o : options) {
      if (!o.is_string())
        return Status::invalid_argument("str.{}: expected a string, got {}", name, o.type_name());
      const std::string& x = o.as_string();
      if (x.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, x.size(), x) == 0
                               : s.compare(s.size() - x.size(), x.size(), x) == 0) {
        return Value(true);
      }
    }
    return Value(false);
  }
  if (name == "split") {
    OMNIBUS_ASSIGN_OR_RETURN(std::optional<std::string> sep, str_arg(0, "sep"));
    const Value* m = a.get(1, "maxsplit");
    int64_t maxsplit = m && (m->is_int() || m->is_bool()) ? m->as_int() : -1;
    ValueList out;
    if (!sep) {  // runs of whitespace; no empty strings
      size_t i = 0;
      while (true) {
        while (i < s.size() && is_ascii_space(s[i])) ++i;
        if (i >= s.size()) break;
        if (maxsplit == 0) {
          size_t end = s.size();
          while (end > i && is_ascii_space(s[end - 1])) --end;
          out.emplace_back(s.substr(i, end - i));
          break;
        }
        size_t j = i;
        while (j < s.size() && !is_ascii_space(s[j])) ++j;
        out.emplace_back(s.substr(i, j - i));
        if (maxsplit > 0) --maxsplit;
        i = j;
      }
      return Value(std::move(out));
    }
    if (sep->empty()) return Status::invalid_argument("empty separator");
    size_t start = 0;
    while (maxsplit != 0) {
      const size_t at = s.find(*sep, start);
      if (at == std::string::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
      if (maxsplit > 0) --maxsplit;
    }
    out.emplace_back(s.substr(start));
    return Value(std::move(out));
  }
  if (name == "replace") {
    OMNIBUS_ASSIGN_OR_RETURN(std::optional<std::string> from, str_arg(0, "old"));
    OMNIBUS_ASSIGN_OR_RETURN(std::optional<std::string> to, str_arg(1, "new"));
    if (!from || !to) return Status::invalid_argument("str.replace: needs two string arguments");
    const Value* c = a.get(2, "count");
    int64_t count = c && (c->is_int() || c->is_bool()) ? c->as_int() : -1;
    std::string out;
    if (from->empty()) {  // insert between code points
      std::vector<size_t> starts = utf8_starts(s);
      for (size_t i = 0; i < starts.size(); ++i) {
        if (count != 0) {
          out += *to;
          if (count > 0) --count;
        }
        if (i + 1 < starts.size()) out.append(s, starts[i], starts[i + 1] - starts[i]);
      }
      return Value(std::move(out));
    }
    size_t start = 0;
    while (count != 0) {
      const size_t at = s.find(*from, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += *to;
      start = at + from->size();
      if (count > 0) --count;
    }
    out.append(s, start, std::string::npos);
    return Value(std::move(out));
  }
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    if (items == nullptr) return Status::invalid_argument("str.join: missing argument");
    OMNIBUS_ASSIGN_OR_RETURN(ValueList list, iterate(*items));
    std::string out;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string()) {
        return Status::invalid_argument("sequence item {}: expected str instance, {} found", i,
                                        list[i].type_name());
      }
      if (i > 0) out += s;
      out += list[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "find" || name == "count") {
    OMNIBUS_ASSIGN_OR_RETURN(std::optional<std::string> sub, str_arg(0, "sub"));
    if (!sub) return Status::invalid_argument("str.{}: missing argument", name);
    if (name == "find") {
      const size_t at = s.find(*sub);
      if (at == std::string::npos) return Value(int64_t(-1));
      return Value(int64_t(utf8_length(std::string_view(s).substr(0, at))));
    }
    if (sub->empty()) return Value(int64_t(utf8_length(s) + 1));
    int64_t n = 0;
    for (size_t at = s.find(*sub); at != std::string::npos; at = s.find(*sub, at + sub->size()))
      ++n;
    return Value(n);
  }
  if (name == "format") {  // "{}", "{0}", "{name}" and "{{" / "}}"; no format specs
    std::string out;
    size_t next_auto = 0;
    bool used_auto = false, used_manual = false;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if ((c == '{' || c == '}') && i + 1 < s.size() && s[i + 1] == c) {
        out += c;
        ++i;
        continue;
      }
      if (c == '}') return Status::invalid_argument("Single '}}' encountered in format string");
      if (c != '{') {
        out += c;
        continue;
      }
      const size_t close = s.find('}', i);
      if (close == std::string::npos)
        return Status::invalid_argument("Single '{{' encountered in format string");
      const std::string field = s.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        return Status::unsupported(
            "str.format: format specs and attribute fields are not supported");
      }
      const Value* v = nullptr;
      if (field.empty() ||
          (field.find_first_not_of("0123456789") == std::string::npos && field.size() < 6)) {
        (field.empty() ? used_auto : used_manual) = true;
        if (used_auto && used_manual) {
          return Status::invalid_argument(
              "cannot switch from manual field specification to automatic field numbering");
        }
        const size_t idx = field.empty() ? next_auto++ : size_t(std::stoul(field));
        if (idx < a.args.size()) v = &a.args[idx];
      } else {
        for (const auto& [k, x] : a.kwargs) {
          if (k == field) v = &x;
        }
      }
      if (v == nullptr)
        return Status::invalid_argument("str.format: no argument for field '{{{}}}'", field);
      out += v->to_str();
      i = close;
    }
    return Value(std::move(out));
  }
  return Status::not_found("no such method");
}

StatusOr<Value> range(const CallArgs& a) {
  if (!a.kwargs.empty() || a.args.empty() || a.args.size() > 3) {
    return Status::invalid_argument("range expects 1 to 3 integer arguments");
  }
  for (const Value& v : a.args) {
    if (!v.is_int() && !v.is_bool())
      return Status::invalid_argument("range: '{}' is not an integer", v.type_name());
  }
  const int64_t start = a.args.size() == 1 ? 0 : a.args[0].as_int();
  const int64_t stop = a.args.size() == 1 ? a.args[0].as_int() : a.args[1].as_int();
  const int64_t step = a.args.size() == 3 ? a.args[2].as_int() : 1;
  if (step == 0) return Status::invalid_argument("range() arg 3 must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (int64_t(out.size()) >= kMaxRange)
      return Status::resource_exhausted("range() too long (limit {})", kMaxRange);
    out.emplace_back(i);
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value(std::move(out));
}

StatusOr<Value> make_map(const CallArgs& a, bool as_namespace) {
  ValueMap m;
  for (const Value& v : a.args) {
    if (!v.is_map() && !v.is_namespace()) {
      return Status::invalid_argument("{}: positional argument must be a mapping",
                                      as_namespace ? "namespace" : "dict");
    }
    for (const auto& [k, x] : v.as_map().entries) m.set(k, x);
  }
  for (const auto& [k, v] : a.kwargs) m.set(k, v);
  return as_namespace ? Value::make_namespace(std::move(m)) : Value(std::move(m));
}

}  // namespace

std::optional<StatusOr<Value>> call_method(const Value& obj, std::string_view name,
                                           const CallArgs& a) {
  if (obj.is_string()) {
    StatusOr<Value> r = str_method(obj.as_string(), name, a);
    if (!r.is_ok() && r.status().code() == StatusCode::kNotFound) return std::nullopt;
    return r;
  }
  if (obj.is_map()) {
    const ValueMap& m = obj.as_map();
    if (name == "get") {
      const Value* key = a.get(0, "key");
      if (key == nullptr) return StatusOr<Value>(Status::invalid_argument("dict.get: missing key"));
      const Value* dflt = a.get(1, "default");
      const Value* found = key->is_string() ? m.find(key->as_string()) : nullptr;
      if (found) return StatusOr<Value>(*found);
      return StatusOr<Value>(dflt ? *dflt : Value::none());
    }
    if (name == "items" || name == "keys" || name == "values") {
      ValueList out;
      for (const auto& [k, v] : m.entries) {
        if (name == "items")
          out.push_back(Value::make_tuple({Value(k), v}));
        else if (name == "keys")
          out.emplace_back(k);
        else
          out.push_back(v);
      }
      return StatusOr<Value>(Value(std::move(out)));
    }
  }
  return std::nullopt;
}

Value global_function(std::string_view name) {
  if (name == "range") return Value::make_function("range", range);
  if (name == "namespace") {
    return Value::make_function("namespace", [](const CallArgs& a) { return make_map(a, true); });
  }
  if (name == "dict")
    return Value::make_function("dict", [](const CallArgs& a) { return make_map(a, false); });
  if (name == "raise_exception") {
    return Value::make_function("raise_exception", [](const CallArgs& a) -> StatusOr<Value> {
      const Value* msg = a.get(0, "message");
      return Status::invalid_argument("{}",
                                      msg ? msg->to_str() : std::string("raise_exception called"));
    });
  }
  if (name == "strftime_now") {
    return Value::make_function("strftime_now", [](const CallArgs& a) -> StatusOr<Value> {
      const Value* f = a.get(0, "format");
      if (f == nullptr || !f->is_string())
        return Status::invalid_argument("strftime_now needs a format string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, f->as_string().c_str(), &tm);
      return Value(std::string(buf, n));
    });
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

}  // namespace omnibus::jinja
