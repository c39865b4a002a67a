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
//   for integers (exact digit-range rules) and numbers (integer-valued
//   minimum/maximum, and exclusiveMinimum 0; others: kInvalidArgument),
//   format: date, time,
//   date-time, uuid, email; nullable types; {} and true (any JSON value).
//   Annotations (title, description, examples, default, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly) are ignored; OpenAPI's
//   "nullable": true is accepted as type-or-null.
//
// The grammar's language is a SUBSET of the schema's (every output is valid,
// not every valid document is producible): the fixed layout above; numbers
// with at most 16 integer / 16 fraction / 3 exponent digits; integers without
// an upper bound stop at 18 digits; prefixItems means all of them, exactly
// (more only with an `items` schema); `pattern` is full-matched (as if
// anchored) and its classes and `.` never produce " \ or control characters;
// additional property keys exclude the declared names by their plain text (a
// \u-escaped spelling of a declared name is not excluded); formats use
// conservative shapes (email: dot-atoms @ dotted labels). Errors rather than
// looser grammars: keywords beside $ref/anyOf/oneOf other than annotations,
// format or pattern combined with lengths, allOf over non-object schemas or
// where an additionalProperties false would be unsound, counts above 1000,
// integer bounds beyond +-1e18, number bounds that are not integers within
// +-1e15 (bounded numbers have no exponent), exclusive number bounds other
// than exclusiveMinimum 0, property names over 256 bytes beside additional
// properties, and `false` as a whole schema.
// A $ref cycle that consumes nothing (a: {$ref b}, b: {$ref a}) compiles but
// parse_ebnf rejects it as left recursion.
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
  // (tool calls: structured_output.h). parse_ebnf starts at `root`, so with a
  // non-empty prefix the caller writes `root ::= ... <prefix>root ...`.
  // Only [a-zA-Z0-9_-] (else kInvalidArgument).
  std::string rule_prefix;
  // OpenAI's strict mode: additionalProperties defaults to false.
  bool strict = false;
  // Allow one optional space after ':' and ',' (false: compact only); the
  // `ws` rule is `" "?`, so a model can never wander into whitespace.
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
