// The Jinja builtins the chat-template interpreter provides: filters, tests,
// methods of strings / dicts (Python's, as templates call them), global
// functions, and the object model (attribute / item access, iteration,
// JSON). Semantics follow Jinja2 3.1 with Hugging Face's apply_chat_template
// settings (tojson = json.dumps(ensure_ascii=False)). Case mapping (upper,
// lower, title, capitalize) is ASCII-only; whitespace stripping knows
// Python's Unicode whitespace.
//
// Errors are plain-message Status values (the interpreter adds the template
// position). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "template/jinja_value.h"
#include "util/status.h"

namespace omnibus::jinja {

// ---- object model ----

// obj.name: a map / namespace entry, else undefined (no error; as Jinja's
// environment.getattr). REQUIRES: obj is not undefined (that is an error the
// caller reports).
Value get_attr(const Value& obj, std::string_view name);
// obj[key]: map entry, list or string element (negative indices count from
// the end), else undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a list or string (code points); nulls are omitted parts.
StatusOr<Value> get_slice(const Value& obj, const Value* start, const Value* stop,
                          const Value* step);
// The items a for loop visits: list items, map keys, string characters;
// nothing for undefined. Error for other types.
StatusOr<ValueList> iterate(const Value& v);
// Error for using an undefined value where a value is needed.
Status undefined_error(const Value& v);

// ---- operators ----
StatusOr<Value> binary_op(std::string_view op, const Value& a, const Value& b);
StatusOr<Value> unary_op(std::string_view op, const Value& a);
// ==, !=, <, <=, >, >=, in, not in
StatusOr<bool> compare_op(std::string_view op, const Value& a, const Value& b);

// ---- filters, tests, methods, globals ----
StatusOr<Value> call_filter(std::string_view name, const Value& input, const CallArgs& args);
StatusOr<bool> call_test(std::string_view name, const Value& v, const CallArgs& args);
// obj.name(args) for Python methods of str and dict (strip, split, startswith,
// get, items, ...); nullopt when obj has no such method.
std::optional<StatusOr<Value>> call_method(const Value& obj, std::string_view name,
                                           const CallArgs& args);
// range, namespace, dict, strftime_now; undefined for other names.
Value global_function(std::string_view name);

// ---- strings ----
// Byte offsets of each code point's start, plus s.size() at the end (an
// invalid UTF-8 byte counts as one code point).
std::vector<size_t> utf8_starts(std::string_view s);
size_t utf8_length(std::string_view s);
// Python's str.strip / lstrip / rstrip: `chars` null strips Unicode whitespace.
std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars = nullptr);

// json.dumps(v, ensure_ascii=False, indent=indent (<0: None), sort_keys=...),
// separators default as Python's.
StatusOr<std::string> to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep,
                              std::string_view key_sep);

}  // namespace omnibus::jinja
