#include "server/chat_renderer.h"

namespace omnibus::server {

ChatRenderer chatml_renderer() {
  return [](const std::vector<ChatMessage>& messages, bool add_generation_prompt) -> StatusOr<std::string> {
    std::string out;
    for (const ChatMessage& m : messages) {
      out += "<|im_start|>";
      out += m.role == "developer" ? "system" : m.role;
      out += "\n";
      out += m.content;
      out += "<|im_end|>\n";
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  };
}

}  // namespace omnibus::server
