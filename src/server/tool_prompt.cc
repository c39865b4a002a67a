#include "server/tool_prompt.h"

namespace omnibus::server {

std::string hermes_tools_system_text(const std::vector<std::string>& tools) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const std::string& t : tools) s += "\n" + t;
  s += "\n</tools>\n\nFor each function call, return a json object with function name and "
       "arguments within "
       "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
       "<args-json-object>}\n</tool_call>";
  return s;
}

std::vector<ChatMessage> hermes_tool_messages(const std::vector<ChatMessage>& messages,
                                              const std::vector<std::string>& tools) {
  std::vector<ChatMessage> out;
  out.reserve(messages.size() + 1);
  if (!tools.empty()) {
    const std::string text = hermes_tools_system_text(tools);
    if (!messages.empty() && messages[0].role == "system") {
      out.emplace_back("system", messages[0].content + "\n\n" + text);
    } else {
      out.emplace_back("system", text);
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (i == 0 && !tools.empty() && m.role == "system") continue;  // merged above
    if (m.role == "tool") {
      const std::string block = "<tool_response>\n" + m.content + "\n</tool_response>";
      if (i > 0 && messages[i - 1].role == "tool" && !out.empty()) {
        out.back().content += "\n" + block;
      } else {
        out.emplace_back("user", block);
      }
      continue;
    }
    ChatMessage c(m.role, m.content);
    c.name = m.name;
    for (const ChatToolCall& call : m.tool_calls) {
      if (!c.content.empty()) c.content += "\n";
      c.content += "<tool_call>\n{\"name\": \"" + call.name +
                   "\", \"arguments\": " + call.arguments + "}\n</tool_call>";
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace omnibus::server
