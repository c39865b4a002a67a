// JSON Schema -> EBNF (grammar.h), the way llama.cpp's
// json-schema-to-grammar and xgrammar do it: the output text matches exactly
// the JSON documents the schema accepts, written in a fixed layout (no
// whitespace except one optional space after ':' and ',', as compact JSON
// from the model is), properties in the schema's order: required ones all
// present, optional ones each optional, in order.
//
// Supported (anything else is kInvalidArgument naming the keyword and its
// JSON pointer, e.g. "unsupported keyword 'not' at /properties/a"):
//   type (string or list), properties, required, additionalProperties
//   (false, true, or a schema; default: true unless `strict`), items,
//   prefixItems, minItems/maxItems, enum, const, anyOf, oneOf (as anyOf),
//   allOf (merged when it reduces to one object schema), $ref to #/$defs/...
//   and #/definitions/... (recursion allowed), minLength/maxLength, pattern
//   (regex.h, anchored), minimum/maximum/exclusiveMinimum/exclusiveMaximum
//   for integers (exact digit-range rules) and numbers (lower bound 0 ... as
//   far as expressible; others: kInvalidArgument), format: date, time,
//   date-time, uuid, email; nullable types; {} and true (any JSON value).
//   Annotations (title, description, examples, default, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly) are ignored.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "util/status.h"

namespace omnibus::grammar {

struct JsonSchemaOptions {
  // Every generated rule name starts with this prefix; the start rule is
  // `<prefix>root`. Lets a caller embed the schema in a larger grammar
  // (tool calls: structured_output.h).
  std::string rule_prefix;
  // OpenAI's strict mode: additionalProperties defaults to false.
  bool strict = false;
  // Allow one optional space after ':' and ',' (false: compact only).
  bool any_whitespace = true;
  size_t max_output_bytes = 4 << 20;  // EBNF size limit (hostile schemas)
  int32_t max_depth = 64;             // nesting of schemas / $ref expansions
};

// schema_text: the schema as JSON text (parsed keeping key order).
StatusOr<std::string> json_schema_to_ebnf(std::string_view schema_text,
                                          const JsonSchemaOptions& options = {});

// Any JSON object ({"type": "json_object"}), with rule names prefixed.
std::string json_object_ebnf(const std::string& rule_prefix = "");

}  // namespace omnibus::grammar
