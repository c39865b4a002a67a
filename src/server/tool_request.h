// The tool-calling fields of a chat request (OpenAI's `tools`, `tool_choice`,
// `parallel_tool_calls`) and the tool fields of chat messages (assistant
// `tool_calls`, tool `tool_call_id`, `name`), validated into a ToolsSpec and
// ChatMessage fields. Errors are 400s naming the field path, e.g.
// "tools[1].type" or "messages[2].tool_calls[0].function.name".
//
//   tools:        [{"type": "function", "function": {"name", "description"?,
//                   "parameters"? (a JSON Schema object), "strict"?}}]
//   tool_choice:  "none" | "auto" | "required" |
//                 {"type": "function", "function": {"name": <a tool's name>}}
//                 default "auto" with tools, "none" without; "required" and
//                 a named function need tools.
//   parallel_tool_calls: bool, default true.
//
// Key order: the body arrives as nlohmann::json, which sorts object keys, so
// `parameters` and `tool_json` come out of parse_tools with keys sorted; the
// API server then replaces both with the texts re-read from the raw body in
// the order they were written (structured_request.h, ordered_schema_texts),
// which is what the template shows and the tool grammar follows.
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/tool_call_syntax.h"
#include "template/chat_template.h"

namespace omnibus::server {

struct ToolFunction {
  std::string name;
  std::string description;
  std::string parameters;  // JSON Schema text; "" when not given
  bool strict = false;
  std::string tool_json;  // the whole tool, {"type": "function", "function": {...}}, as JSON text
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolsSpec {
  std::vector<ToolFunction> functions;
  ToolChoice choice = ToolChoice::kNone;
  std::string named;  // kNamed: the function's name
  bool parallel_tool_calls = true;

  // The output is scanned for tool calls (tools given and tool_choice != none).
  bool parse_output() const { return !functions.empty() && choice != ToolChoice::kNone; }
  // The tools as JSON texts, for ChatTemplate::render.
  std::vector<std::string> tool_jsons() const;
};

// The parameters' JSON Schema types by function and parameter (what the
// qwen3_coder parser reads values by; tool_call_syntax.h).
std::shared_ptr<const ToolParamTypes> tool_param_types(const ToolsSpec& tools);

// Reads tools, tool_choice and parallel_tool_calls from the request body.
// REQUIRES: body.is_object().
std::optional<ApiError> parse_tools(const nlohmann::json& body, ToolsSpec& out);

// Reads a chat message's tool_calls, tool_call_id and name into `out`;
// `where` is the message's path ("messages[3]"). Arguments given as a JSON
// object (not OpenAI's JSON text) are accepted and dumped; JSON text that
// does not parse is refused, and so is a role "tool" message without a
// tool_call_id (as OpenAI does).
// REQUIRES: msg.is_object().
std::optional<ApiError> parse_message_tool_fields(const nlohmann::json& msg,
                                                  const std::string& where, ChatMessage& out);

}  // namespace omnibus::server
