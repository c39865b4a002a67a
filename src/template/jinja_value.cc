#include "template/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace omnibus::jinja {

const Value* ValueMap::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* ValueMap::find(std::string_view key) {
  for (auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueMap::set(std::string key, Value v) {
  if (Value* old = find(key)) {
    *old = std::move(v);
    return;
  }
  entries.emplace_back(std::move(key), std::move(v));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < args.size()) return &args[index];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value::Value(ValueList l) {
  for (const Value& v : l) {
    depth_ = std::max(depth_, v.depth_);
    has_namespace_ = has_namespace_ || v.has_namespace_;
  }
  depth_ += 1;
  data_ = std::make_shared<const ValueList>(std::move(l));
}

Value::Value(ValueMap m) {
  for (const auto& [k, v] : m.entries) {
    depth_ = std::max(depth_, v.depth_);
    has_namespace_ = has_namespace_ || v.has_namespace_;
  }
  depth_ += 1;
  data_ = std::make_shared<const ValueMap>(std::move(m));
}

Value Value::make_namespace(ValueMap m) {
  Value v(std::move(m));  // depth of the initial attributes
  Value out;
  out.depth_ = v.depth_;
  out.has_namespace_ = true;
  out.data_ = std::make_shared<ValueMap>(*std::get<std::shared_ptr<const ValueMap>>(v.data_));
  return out;
}

const ValueMap& Value::as_map() const {
  if (is_namespace()) return namespace_map();
  return *std::get<std::shared_ptr<const ValueMap>>(data_);
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().empty();
    case Kind::kMap:
      return !as_map().entries.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest digits that read back as d (what Python's repr does).
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf is "[-]D.DDDe[+-]XX": split into sign, digits and exponent.
  std::string s(buf);
  const bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {  // Python: fixed notation for 1e-4 <= |d| < 1e16
    if (exp < 0) {
      out += "0.";
      out.append(size_t(-exp - 1), '0');
      out += digits;
    } else if (size_t(exp + 1) >= digits.size()) {
      out += digits;
      out.append(size_t(exp + 1) - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, size_t(exp + 1));
      out += '.';
      out.append(digits, size_t(exp + 1));
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return out;
}

std::string python_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  out += quote;
  return out;
}

std::string Value::to_str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kFloat:
      return python_float_repr(as_float());
    case Kind::kString:
      return python_str_repr(as_string());
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      bool first = true;
      for (const Value& v : as_list()) {
        if (!first) out += ", ";
        first = false;
        out += v.repr();
      }
      if (tuple_ && as_list().size() == 1) out += ',';
      out += tuple_ ? ')' : ']';
      return out;
    }
    case Kind::kMap:
    case Kind::kNamespace: {
      std::string out = is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : as_map().entries) {
        if (!first) out += ", ";
        first = false;
        out += python_str_repr(k);
        out += ": ";
        out += v.repr();
      }
      return out + (is_namespace() ? "}>" : "}");
    }
    case Kind::kFunction:
      return fmt::format("<function {}>", as_function().name);
  }
  return "";
}

bool Value::equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_float() == other.as_float();
    return as_int() == other.as_int();
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return as_string() == other.as_string();
    case Kind::kList: {
      const ValueList& a = as_list();
      const ValueList& b = other.as_list();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kMap: {
      const ValueMap& a = as_map();
      const ValueMap& b = other.as_map();
      if (a.entries.size() != b.entries.size()) return false;
      for (const auto& [k, v] : a.entries) {
        const Value* w = b.find(k);
        if (w == nullptr || !v.equals(*w)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &namespace_map() == &other.namespace_map();
    case Kind::kFunction:
      return &as_function() == &other.as_function();
    default:
      return false;
  }
}

const char* Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kMap:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

}  // namespace omnibus::jinja
