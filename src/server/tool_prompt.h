// Tools for chat templates that know nothing of them (the bundled ChatML,
// SmolLM2 and Gemma 3 templates): the conversation is rewritten in Hermes
// style (as Qwen 2.5's template writes it) so that any model can be asked to
// call tools and be shown their results:
//   - the tools are described in a system message (merged after the text of
//     an existing first system message): the function JSON list inside
//     <tools></tools> and the instruction to answer with
//     <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>;
//   - an assistant message's tool_calls become that text after its content;
//   - tool results (role "tool") become a user turn of
//     <tool_response>\n...\n</tool_response> blocks (consecutive results share one turn).
// The output of such a model is read with the hermes parser (tool_parsers.h).
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <vector>

#include "template/chat_template.h"

namespace omnibus::server {

// tools: each one tool's JSON text ({"type": "function", "function": {...}}).
std::vector<ChatMessage> hermes_tool_messages(const std::vector<ChatMessage>& messages,
                                              const std::vector<std::string>& tools);

// The system text that describes `tools` (what hermes_tool_messages adds).
std::string hermes_tools_system_text(const std::vector<std::string>& tools);

}  // namespace omnibus::server
