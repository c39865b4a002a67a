#include "server/chat_renderer.h"

#include "util/check.h"

namespace omnibus::server {

ChatRenderer template_renderer(ChatTemplate tmpl, std::string bos_token, std::string eos_token) {
  return [tmpl = std::move(tmpl), bos = std::move(bos_token), eos = std::move(eos_token)](
             const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    return tmpl.render(messages, add_generation_prompt, bos, eos);
  };
}

ChatRenderer chatml_renderer() {
  StatusOr<ChatTemplate> t = ChatTemplate::parse(chatml_template_source());
  OMNIBUS_CHECK(t.is_ok());
  return template_renderer(std::move(t).value(), "", "");
}

}  // namespace omnibus::server
