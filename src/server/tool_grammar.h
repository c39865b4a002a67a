// The grammar that forces a tool call when tool_choice is "required" or names
// a function: EBNF text (grammar/grammar.h) matching exactly the calls the
// chosen parser (tool_parsers.h) reads, with each function's arguments
// following its `parameters` JSON Schema (grammar::json_schema_to_ebnf, rules
// prefixed "t<i>-"; a function without parameters takes any JSON object).
//
//   hermes       <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>
//                (parallel_tool_calls: one or more, separated by "\n")
//   llama3_json  {"name": "f", "parameters": ARGS}   (parallel: joined by "; ")
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": ARGS}]  (parallel: ", " between)
//   qwen3_coder
//   <tool_call>\n<function=f>\n(<parameter=p>\nVALUE\n</parameter>\n)*</function>\n</tool_call>
//                (parallel: "\n" between); the schema's properties in order, required ones
//                present, optional ones optional; a string VALUE is raw text without '<'
//                (enum, minLength, maxLength kept; pattern and format refused), others JSON
//   pythonic     [f(p=VALUE, ...)]  (parallel: ", " between); required parameters first,
//                then the optional ones, in the schema's order; VALUEs are JSON by the
//                property's schema (which the pythonic parser reads: true/false/null too)
//   A property schema is compiled on its own: a $ref to the parameters' $defs is refused.
//
// The alternatives are every tool ("required") or only the named one. The
// API server compiles the text with grammar::GrammarCache into Request::grammar.
//
// Thread-safety: pure function.
#pragma once

#include <string>

#include "server/tool_parsers.h"
#include "server/tool_request.h"
#include "util/status.h"

namespace omnibus::server {

// kInvalidArgument naming the tool when a parameters schema is not supported.
// REQUIRES: tools.choice is kRequired or kNamed, and tools.functions non-empty.
StatusOr<std::string> tool_call_grammar(const ToolsSpec& tools, ToolParserKind parser);

}  // namespace omnibus::server
