// ChatRenderer: turns a chat conversation into the prompt text the model was
// trained on. The API depends only on this function type; cmd_serve builds
// one from the model's Jinja chat template (template/chat_template.h) with
// template_renderer(). chatml_renderer() renders the built-in ChatML
// template, for tests and as the fallback when a model's template does not parse.
//
// Thread-safety: a ChatRenderer is safe to call from several threads.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "template/chat_template.h"
#include "util/status.h"

namespace omnibus::server {

using ChatMessage = omnibus::ChatMessage;

// add_generation_prompt: end with the opening of an assistant turn. tools:
// the request's tools, each {"type": "function", "function": {...}} as JSON
// text (empty: none). template_kwargs: "" or a JSON object's text whose keys
// become template variables (chat_template_kwargs: enable_thinking, ...).
using ChatRenderer = std::function<StatusOr<std::string>(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt,
    const std::vector<std::string>& tools, const std::string& template_kwargs)>;

// Renders with `tmpl`; bos/eos are the tokenizer's BOS/EOS token text. A
// template that does not mention `tools` gets the conversation rewritten in
// Hermes style when the request has tools, tool calls or tool results
// (tool_prompt.h).
ChatRenderer template_renderer(ChatTemplate tmpl, std::string bos_token, std::string eos_token);

// The built-in ChatML template ("<|im_start|>{role}\n{content}<|im_end|>\n").
ChatRenderer chatml_renderer();

}  // namespace omnibus::server
