// The JSON Schema -> EBNF converter's class (json_schema.h is the API): one
// Converter walks a schema and builds the rule table. Internal to the
// grammar module; its members are defined by job:
//   json_schema.cc             the rule table, dispatch (visit), $ref, allOf, enum/const
//   json_schema_values.cc      strings (lengths, patterns, formats) and numbers (bounds)
//   json_schema_containers.cc  objects (properties, additionalProperties) and arrays
//
// Thread-safety: a Converter is used by one thread for one conversion.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/json_schema_rules.h"
#include "util/status.h"

namespace omnibus::grammar::json_schema_internal {

using Json = nlohmann::ordered_json;
using internal::CodePointRanges;

constexpr int64_t kMaxBound = 1000000000000000000;  // integer bounds: |x| <= 1e18
constexpr int64_t kMaxCount = 1000;                 // minItems etc. (GBNF x{n,m} limit)
constexpr size_t kMaxJsonNesting = 512;             // of the schema text itself
constexpr size_t kMaxExcludedKeyBytes = 256;        // not_strings() recursion depth

inline const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "examples",   "default",  "$schema",
    "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
inline const std::set<std::string, std::less<>> kKeywords = {"type",
                                                             "properties",
                                                             "required",
                                                             "additionalProperties",
                                                             "items",
                                                             "prefixItems",
                                                             "minItems",
                                                             "maxItems",
                                                             "enum",
                                                             "const",
                                                             "anyOf",
                                                             "oneOf",
                                                             "allOf",
                                                             "$ref",
                                                             "$defs",
                                                             "definitions",
                                                             "minLength",
                                                             "maxLength",
                                                             "pattern",
                                                             "minimum",
                                                             "maximum",
                                                             "exclusiveMinimum",
                                                             "exclusiveMaximum",
                                                             "format",
                                                             "nullable"};

bool is_passive(std::string_view key);  // says nothing about this instance
// A JSON Pointer token for an object key (RFC 6901: ~ and / escaped).
std::string pointer_escape(std::string_view key);
// A rule-name fragment from arbitrary text: [A-Za-z0-9-], at most 64 bytes.
std::string sanitize_name(std::string_view s);
// An EBNF literal for UTF-8 text (JSON text from nlohmann: valid UTF-8).
std::string literal(std::string_view utf8);
// The maximum nesting of [ and { in JSON text (outside strings).
size_t json_nesting(std::string_view text);
// A quantifier for "between lo and hi more" (hi < 0: unbounded); "" for exactly one.
std::string quantifier(int64_t lo, int64_t hi);

class Converter {
 public:
  Converter(const Json& root, const JsonSchemaOptions& options) : root_(root), opt_(options) {
    ref_rules_["#"] = reserve("root");
  }

  Status convert();

  // root ::= <primitive>, for json_object_ebnf.
  void convert_primitive(std::string_view name);

  std::string text() const;

 private:
  // ---- the rule table -------------------------------------------------------

  // A fresh rule name (prefixed) derived from `hint`, its body still empty.
  std::string reserve(std::string_view hint);

  Status set_rule(const std::string& name, std::string body);

  StatusOr<std::string> add_rule(std::string_view hint, std::string body);

  // A reference to primitive `name`, adding it (and what it uses) once.
  std::string primitive(std::string_view name);

  std::string ws() {
    return opt_.any_whitespace ? fmt::format(" {}", primitive("ws")) : std::string();
  }
  std::string comma() { return "\",\"" + ws(); }

  // ---- errors ---------------------------------------------------------------

  static Status unsupported(std::string_view key, const std::string& ptr);
  static Status bad(const std::string& ptr, std::string_view what);

  // ---- schemas ----------------------------------------------------------------

  // A rule for `schema`, named after `hint`; returns its (prefixed) name.
  StatusOr<std::string> rule_for(const Json& schema, const std::string& hint,
                                 const std::string& ptr, int depth);

  // The body (alternatives) matching `schema`'s instances.
  StatusOr<std::string> visit(const Json& schema, const std::string& name, const std::string& ptr,
                              int depth);

  StatusOr<std::string> const_literal(const Json& value, const std::string& ptr);

  // The values' JSON texts as one prefix-factored set (grammar/literal_set.h):
  // thousands of values stay within the matcher's bounds.
  StatusOr<std::string> enum_body(const Json& values, const std::string& name,
                                  const std::string& ptr);

  StatusOr<std::string> visit_typed(const Json& schema, const std::string& type,
                                    const std::string& name, const std::string& ptr, int depth);

  // ---- $ref -----------------------------------------------------------------

  StatusOr<std::string> ref_rule(const Json& ref_json, const std::string& ptr, int depth);

  // ---- allOf ----------------------------------------------------------------

  StatusOr<std::string> all_of(const Json& schema, const std::string& name, const std::string& ptr,
                               int depth);

  // ---- strings ----------------------------------------------------------------

  StatusOr<int64_t> count(const Json& schema, const char* key, const std::string& ptr,
                          int64_t fallback);

  StatusOr<std::string> string_body(const Json& schema, const std::string& name,
                                    const std::string& ptr);

  // ---- numbers ----------------------------------------------------------------

  // Integer bounds: the inclusive [min, max] implied by the four keywords.
  Status integer_bounds(const Json& schema, const std::string& ptr, std::optional<int64_t>* min,
                        std::optional<int64_t>* max);

  StatusOr<std::string> integer_body(const Json& schema, const std::string& ptr);

  StatusOr<std::string> number_body(const Json& schema, const std::string& ptr);

  // ---- objects ----------------------------------------------------------------

  StatusOr<std::string> object_body(const Json& schema, const std::string& name,
                                    const std::string& ptr, int depth);

  // A JSON string that is none of `names` (llama.cpp's _not_strings): a trie
  // over the names' JSON-escaped text; at each node the string may leave the
  // trie with any other character, or end unless the node is a whole name.
  std::string not_strings(const std::vector<std::string>& names);

  // ---- arrays -----------------------------------------------------------------

  StatusOr<std::string> array_body(const Json& schema, const std::string& name,
                                   const std::string& ptr, int depth);

  const Json& root_;
  JsonSchemaOptions opt_;
  std::vector<std::pair<std::string, std::string>> rules_;  // (prefixed name, body), in order
  std::map<std::string, size_t> index_;                     // name -> rules_ index
  std::map<std::string, std::string> ref_rules_;            // $ref -> rule name
  size_t bytes_ = 0;
};

}  // namespace omnibus::grammar::json_schema_internal
