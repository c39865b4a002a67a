// Tool-call parsers: find the function calls a model wrote in its output
// text, in one of five formats, and split the text into content and calls.
//
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>  (one or more;
//                text before them is content; an unclosed last call counts at the end)
//   llama3_json  [<|python_tag|>]{"name": "f", "parameters"|"arguments": {...}} [; {...}]*
//                (the output must start with the tag or '{'; else it is all content)
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]  (text before is content)
//   qwen3_coder
//   <tool_call>\n<function=f>\n<parameter=p>\nVALUE\n</parameter>\n</function>\n</tool_call>
//                (as hermes, with Qwen3-Coder's XML body: tool_call_syntax.h)
//   pythonic     [<|python_start|>][f(a=1, b="x"), g()][<|python_end|>]  (Llama 3.2 / 4; the
//                output must start with the list; else it is all content; tool_call_syntax.h)
//
// A call whose JSON does not parse, or lacks a string "name" or has
// arguments that are not an object, is no call: its text stays content.
// Whitespace between and after calls is dropped.
//
// StreamingToolParser is the one implementation: it is fed text deltas, holds
// back text that may be the start of a call marker (or an unfinished call),
// and releases content and whole calls as soon as they are certain.
// parse_tool_calls() feeds it the whole text, so any split of the text into
// deltas yields the same calls and the same content.
//
// Thread-safety: StreamingToolParser: one choice, one thread. The free
// functions are pure.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_call_syntax.h"

namespace omnibus::server {

enum class ToolParserKind { kHermes, kLlama3Json, kMistral, kQwen3Coder, kPythonic };

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // compact JSON text of an object, keys in the model's order
};

struct ToolParseOutput {
  std::string content;                // content released
  std::vector<ParsedToolCall> calls;  // calls completed
};

class StreamingToolParser {
 public:
  // types: the request's parameter types, which qwen3_coder reads values by (may be null).
  explicit StreamingToolParser(ToolParserKind kind,
                               std::shared_ptr<const ToolParamTypes> types = nullptr)
      : kind_(kind), types_(std::move(types)) {}

  // REQUIRES: !finished().
  ToolParseOutput push(std::string_view delta);
  // The end of the output: releases what was held back (an unclosed hermes
  // call is parsed as if closed).
  ToolParseOutput finish();
  bool finished() const { return finished_; }
  int n_calls() const { return n_calls_; }

 private:
  enum class State { kStart, kText, kAfterCall, kInCall };
  void run(bool final, ToolParseOutput& out);
  void run_marked(bool final, ToolParseOutput& out);  // hermes, mistral, qwen3_coder
  void run_llama3(bool final, ToolParseOutput& out);
  void run_pythonic(bool final, ToolParseOutput& out);
  void flush_blank(bool final, ToolParseOutput& out);
  void add_call(ParsedToolCall c, ToolParseOutput& out);

  const ToolParserKind kind_;
  const std::shared_ptr<const ToolParamTypes> types_;
  State state_ = State::kStart;
  std::string buf_;  // text not yet released
  int n_calls_ = 0;
  bool finished_ = false;
};

// The whole output at once.
ToolParseOutput parse_tool_calls(ToolParserKind kind, std::string_view text);

// The parser a chat template was written for: "<function=" -> qwen3_coder,
// "<tool_call>" -> hermes, "<|python_start|>" or "[func_name1(" (the pythonic
// prompt of Llama 3.2 / 4) -> pythonic, "<|python_tag|>" -> llama3_json,
// "[TOOL_CALLS]" -> mistral, else hermes (the server describes tools in
// Hermes style to templates without tools).
ToolParserKind tool_parser_for_template(std::string_view template_source);

// "hermes", "llama3_json", "mistral", "qwen3_coder", "pythonic"; nullopt for anything else.
std::optional<ToolParserKind> tool_parser_from_name(std::string_view name);
const char* tool_parser_name(ToolParserKind kind);

// The end of the JSON object or array starting at text[0] ('{' or '['): the
// index one past its closing bracket, or npos when the text ends first.
// Strings and escapes are respected; other syntax is not checked.
size_t json_value_end(std::string_view text);

}  // namespace omnibus::server
