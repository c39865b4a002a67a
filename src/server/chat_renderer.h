// ChatRenderer: turns a chat conversation into the prompt text the model was
// trained on (its chat template). The server depends only on this function
// type; cmd_serve wires in the model's template renderer. chatml_renderer() is
// a fixed ChatML formatter (SmolLM2's format), used when the model has no
// template the renderer can handle.
//
// Thread-safety: a ChatRenderer must be safe to call from several threads.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "util/status.h"

namespace omnibus::server {

struct ChatMessage {
  std::string role;     // system, developer, user, assistant, tool
  std::string content;  // text parts joined
};

// add_generation_prompt: end with the opening of an assistant turn.
using ChatRenderer =
    std::function<StatusOr<std::string>(const std::vector<ChatMessage>& messages, bool add_generation_prompt)>;

// "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
// "<|im_start|>assistant\n" when add_generation_prompt.
ChatRenderer chatml_renderer();

}  // namespace omnibus::server
