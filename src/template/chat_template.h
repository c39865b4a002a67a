// ChatTemplate: turns a conversation (system / user / assistant messages)
// into the prompt text a model was trained on, by rendering the model's
// Jinja chat template (GGUF key tokenizer.chat_template) the way Hugging
// Face's apply_chat_template does: variables `messages` (a list of
// {"role", "content"} maps, plus "tool_calls" (each {"id", "type":
// "function", "function": {"name", "arguments": the parsed JSON, a mapping,
// as HF passes dicts}}), "tool_call_id" and "name" where the message has
// them; content is always a string, "" for an assistant message with only
// tool calls, where HF would pass None, which templates such as Qwen 3's
// cannot render), `add_generation_prompt`, `bos_token`, `eos_token`, `tools` (the
// request's tool list as parsed JSON, or none when empty) and `documents`
// (none), and the globals
// raise_exception(msg) and strftime_now(fmt). The output equals Python
// jinja2's byte for byte for the templates in tests/golden/chat/templates/
// (docs/chat-templates.md says how that is checked and which Jinja subset is
// supported).
//
// Thread-safety: immutable after parse(); render() is const and may run on
// many threads at once. Copies are cheap and share the parsed template.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "template/jinja_template.h"
#include "util/status.h"

namespace omnibus {

class GgufFile;

// One call an assistant message made (OpenAI's message.tool_calls[i]).
struct ChatToolCall {
  std::string id;  // "" when the client gave none
  std::string name;
  std::string arguments;  // JSON text (normally an object)
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}

  std::string role;  // "system", "user", "assistant", "tool" (templates decide what they accept)
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant: set as message.tool_calls only when non-empty
  std::string tool_call_id;              // tool: set as message.tool_call_id when non-empty
  std::string name;                      // set as message.name when non-empty
  std::string reasoning_content;  // assistant: its thinking, set as message.reasoning_content
                                  // when non-empty (Qwen 3's template shows it)
};

class ChatTemplate {
 public:
  // Parses the template text; kInvalidArgument / kUnsupported (with line and
  // column) for syntax it does not support.
  static StatusOr<ChatTemplate> parse(std::string_view source);

  // The rendered prompt, or an error: the template's raise_exception (e.g.
  // "Conversation roles must alternate user/assistant/user/assistant/..."),
  // type errors, or exceeded render limits. Never crashes.
  // tools: each the JSON text of one tool ({"type": "function", "function":
  // {...}}), parsed keeping key order; text that does not parse is an error.
  // extra_variables: "" or the JSON text of an object whose keys become
  // template variables too (HF's chat_template_kwargs, e.g. enable_thinking);
  // the standard variables above win over a key of the same name.
  StatusOr<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const std::string& bos_token, const std::string& eos_token,
                               const std::vector<std::string>& tools = {},
                               const std::string& extra_variables = "") const;

  // True when the template reads the `tools` variable (else a caller that has
  // tools must describe them itself, e.g. in a system message).
  bool mentions_tools() const;

  // The template text (normalised line endings).
  const std::string& source() const { return template_.source(); }

 private:
  explicit ChatTemplate(jinja::Template t) : template_(std::move(t)) {}
  jinja::Template template_;
};

// Built-in templates for GGUF files that carry none.
std::string_view chatml_template_source();
std::string_view gemma_template_source();  // Gemma 3 instruction-tuned models

// The template of a GGUF file: tokenizer.chat_template when present (its
// parse error when it does not parse); otherwise a built-in one chosen by
// general.architecture: the Gemma template for gemma, gemma2 and gemma3
// (whose GGUFs often ship without one), else ChatML.
StatusOr<ChatTemplate> chat_template_from_gguf(const GgufFile& f);

}  // namespace omnibus
