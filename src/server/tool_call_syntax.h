// The bodies of two tool-call formats that are not JSON, read into
// ParsedToolCall values (name + arguments as compact JSON object text):
//
//   qwen3_coder (Qwen3-Coder's XML, between <tool_call> and </tool_call>):
//     <function=NAME>
//     <parameter=P>
//     VALUE
//     </parameter>
//     ...
//     </function>
//   One newline after the opening tag and one before the closing tag of a
//   value are not part of it. A value becomes a JSON string when its
//   parameter's schema type is "string"; otherwise it is read as JSON when
//   it is JSON (42, true, [1], {"a": 1}), and as a string when it is not.
//
//   pythonic (Llama 3.2 / Llama 4): a Python list of calls
//     [f(a=1, b="x"), pkg.g(flag=True, items=[1, 2], opts={"k": None})]
//   Values are Python literals (strings in ' or " with escapes, numbers,
//   True/False/None, lists, tuples, dicts with string keys) or their JSON
//   spellings (true/false/null). Arguments are keyword arguments only.
//
// Anything else (unbalanced, positional arguments, an unknown literal) is no
// call: the parsers return false and the caller keeps the text as content.
// Nesting deeper than 64 levels is refused (no recursion without bound).
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace omnibus::server {

struct ParsedToolCall;

// Function name -> parameter name -> its JSON Schema "type" ("string",
// "integer", ...; "" when the schema names none). From the request's tools.
using ToolParamTypes = std::map<std::string, std::map<std::string, std::string>>;

// One <function=...>...</function> body (the text between <tool_call> and
// </tool_call>, surrounding whitespace allowed). `types` may be null.
bool parse_xml_function_call(std::string_view text, const ToolParamTypes* types,
                             ParsedToolCall& out);

// The index one past the ']' that closes the list starting at text[0] ('['),
// Python strings respected; npos when the text ends first.
size_t pythonic_list_end(std::string_view text);

// A whole pythonic call list "[...]" (exactly, surrounding whitespace allowed).
bool parse_pythonic_calls(std::string_view text, std::vector<ParsedToolCall>& out);

}  // namespace omnibus::server
