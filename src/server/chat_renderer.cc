#include "server/chat_renderer.h"

#include "server/tool_prompt.h"
#include "util/check.h"

namespace omnibus::server {

ChatRenderer template_renderer(ChatTemplate tmpl, std::string bos_token, std::string eos_token) {
  const bool knows_tools = tmpl.mentions_tools();
  return [tmpl = std::move(tmpl), bos = std::move(bos_token), eos = std::move(eos_token),
          knows_tools](const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                       const std::vector<std::string>& tools,
                       const std::string& kwargs) -> StatusOr<std::string> {
    bool uses_tools = !tools.empty();
    for (const ChatMessage& m : messages)
      uses_tools = uses_tools || m.role == "tool" || !m.tool_calls.empty();
    if (uses_tools && !knows_tools) {
      return tmpl.render(hermes_tool_messages(messages, tools), add_generation_prompt, bos, eos, {},
                         kwargs);
    }
    return tmpl.render(messages, add_generation_prompt, bos, eos, tools, kwargs);
  };
}

ChatRenderer chatml_renderer() {
  StatusOr<ChatTemplate> t = ChatTemplate::parse(chatml_template_source());
  OMNIBUS_CHECK(t.is_ok());
  return template_renderer(std::move(t).value(), "", "");
}

}  // namespace omnibus::server
