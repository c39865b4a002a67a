// The structured-output fields of a completions or chat request, read into
// GenerationSpec::structured (docs/structured-output.md). Every spelling
// users' clients send is accepted, on both endpoints:
//
//   OpenAI       response_format: {"type": "text" | "json_object" |
//                "json_schema", "json_schema": {"name", "schema", "strict"}}
//   vLLM         structured_outputs: {"json" | "regex" | "choice" |
//                "grammar" | "json_object"}, and the older top-level
//                guided_json, guided_regex, guided_choice, guided_grammar
//   llama-server json_schema (a schema object), grammar (GBNF text)
//
// At most one may ask for a format (response_format "text" asks for none);
// two are a 400. Options omnibus does not implement (structural_tag,
// guided_whitespace_pattern, ...) are a 400 naming the field, never ignored.
// A schema keeps its key order: GenerationSpec::schema_pointer says where it
// sits in the body, and the API handler re-reads it from the raw body in
// order (ordered_schema_text) before compiling.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "server/json_fields.h"
#include "server/openai_request.h"

namespace omnibus::server {

void parse_structured_output(JsonFields& f, GenerationSpec& spec);

// The JSON text at `pointer` in `raw_body` with its keys in the order they
// were written; "" when it cannot be found (the caller keeps the sorted text).
std::string ordered_schema_text(const std::string& raw_body, const std::string& pointer);
// The same for several pointers, parsing the body once.
std::vector<std::string> ordered_schema_texts(const std::string& raw_body,
                                              const std::vector<std::string>& pointers);
// A chat request's tools (parameters and whole tool texts) re-read from the raw
// body in the order they were written: what the template shows and the tool
// grammar follows (tool_request.h, "Key order"). Every endpoint that renders
// tools calls it, so they render the same prompt.
void use_written_tool_order(ToolsSpec& tools, const std::string& raw_body);

}  // namespace omnibus::server
