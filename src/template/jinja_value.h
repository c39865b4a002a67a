// jinja::Value: the tagged value type of the Jinja-subset interpreter that
// renders chat templates (see jinja_template.h, docs/chat-templates.md).
//
// A Value is undefined, none, bool, int (int64), float (double), string
// (UTF-8 bytes), list, map (string keys, insertion-ordered like a Python dict),
// namespace (a map with reference semantics: `{% set ns.x = 1 %}` is visible
// through every copy) or function (a global like raise_exception, or a macro).
// Lists and maps are immutable once built and shared between copies, so
// copying a Value is cheap. Printing and comparison follow Python/Jinja2:
// `{{ none }}` is "None", `{{ 1.0 }}` is "1.0", `{{ [1, 'a'] }}` is "[1, 'a']".
//
// Thread-safety: values without a namespace inside are immutable and safe to
// share between threads; a namespace belongs to one render.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "util/status.h"

namespace omnibus::jinja {

class Value;
struct CallArgs;

using ValueList = std::vector<Value>;

// Insertion-ordered string-keyed map (a Python dict as chat templates use it).
struct ValueMap {
  std::vector<std::pair<std::string, Value>> entries;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  // Replaces the value of an existing key or appends a new entry.
  void set(std::string key, Value v);
};

// A callable: receives evaluated arguments, returns a value or an error.
struct Function {
  std::string name;
  std::function<StatusOr<Value>(const CallArgs&)> call;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kMap,
    kNamespace,
    kFunction
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {}) {
    Value v;
    v.data_ = Undefined{std::move(hint)};
    return v;
  }
  static Value none() { return Value(None{}); }
  Value(bool b) : data_(b) {}                           // NOLINT: implicit
  Value(int64_t i) : data_(i) {}                        // NOLINT: implicit
  Value(int i) : data_(int64_t(i)) {}                   // NOLINT: implicit
  Value(double d) : data_(d) {}                         // NOLINT: implicit
  Value(std::string s) : data_(std::move(s)) {}         // NOLINT: implicit
  Value(std::string_view s) : data_(std::string(s)) {}  // NOLINT: implicit
  Value(const char* s) : data_(std::string(s)) {}       // NOLINT: implicit
  Value(ValueList l);                                   // NOLINT: implicit
  Value(ValueMap m);                                    // NOLINT: implicit
  static Value make_namespace(ValueMap m);
  // A list that prints as a Python tuple: (1, 2), (1,), ().
  static Value make_tuple(ValueList l) {
    Value v(std::move(l));
    v.tuple_ = true;
    return v;
  }
  static Value make_function(std::string name, std::function<StatusOr<Value>(const CallArgs&)> f) {
    Value v;
    v.data_ = std::make_shared<const Function>(Function{std::move(name), std::move(f)});
    return v;
  }

  Kind kind() const { return Kind(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_map() const { return kind() == Kind::kMap; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_function() const { return kind() == Kind::kFunction; }

  // REQUIRES: the matching kind.
  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return is_bool() ? int64_t(as_bool()) : std::get<int64_t>(data_); }
  double as_float() const { return is_float() ? std::get<double>(data_) : double(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const ValueList& as_list() const { return *std::get<std::shared_ptr<const ValueList>>(data_); }
  // A map or a namespace's attributes.
  const ValueMap& as_map() const;
  ValueMap& namespace_map() const { return *std::get<std::shared_ptr<ValueMap>>(data_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }

  // Python truthiness: undefined, none, false, 0, 0.0, "", [], {} are false.
  bool truthy() const;
  // str(value) as Jinja prints it ({{ value }}).
  std::string to_str() const;
  // repr(value) (strings quoted), used inside printed lists and maps.
  std::string repr() const;
  // Python ==: 1 == 1.0 == true; lists and maps compare deeply; undefined
  // equals only undefined.
  bool equals(const Value& other) const;
  // "string", "int", "list", ... for error messages (Python's type names).
  const char* type_name() const;

  // Nesting depth of lists / maps / namespaces (0 for scalars) and whether a
  // namespace is inside; the interpreter bounds the first (so that printing,
  // comparing and destroying a value never recurses without limit) and uses
  // the second to refuse reference cycles through namespaces.
  uint32_t depth() const { return depth_; }
  bool has_namespace() const { return has_namespace_; }
  bool is_tuple() const { return tuple_; }

 private:
  struct Undefined {
    std::string hint;  // e.g. "'foo' is undefined"
  };
  struct None {};
  explicit Value(None n) : data_(n) {}

  std::variant<Undefined, None, bool, int64_t, double, std::string,
               std::shared_ptr<const ValueList>, std::shared_ptr<const ValueMap>,
               std::shared_ptr<ValueMap>, std::shared_ptr<const Function>>
      data_;
  uint32_t depth_ = 0;
  bool has_namespace_ = false;
  bool tuple_ = false;
};

// Evaluated call arguments: positional then keyword (in call order).
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // Argument `name` at position `index`, given either way; nullptr if absent.
  const Value* get(size_t index, std::string_view name) const;
};

// Python's repr of a float ("1.0", "0.1", "1e+16", "inf").
std::string python_float_repr(double d);
// Python's repr of a str ('it\'s' -> "it's").
std::string python_str_repr(std::string_view s);

}  // namespace omnibus::jinja
