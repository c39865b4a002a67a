#include "template/chat_template.h"

#include "gguf/gguf_file.h"
#include "template/jinja_json.h"

namespace omnibus {
namespace {

// Plain ChatML (as Qwen-style models and llama.cpp's default use it).
constexpr std::string_view kChatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}"
    "{% endif %}";

// Gemma 3 instruction-tuned models' template (google/gemma-3-*-it
// tokenizer_config.json); tests/golden/chat/templates/gemma3.jinja holds the
// same text and a test keeps the two equal.
constexpr std::string_view kGemma = R"TPL({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
)TPL";

}  // namespace

std::string_view chatml_template_source() { return kChatml; }
std::string_view gemma_template_source() { return kGemma; }

StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  OMNIBUS_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(source));
  return ChatTemplate(std::move(t));
}

namespace {

// message.tool_calls[i] as HF passes it: arguments a mapping when they parse
// as JSON, else the text.
jinja::Value tool_call_value(const ChatToolCall& call) {
  StatusOr<jinja::Value> args = jinja::json_text_to_value(call.arguments);
  jinja::ValueMap fn;
  fn.set("name", jinja::Value(call.name));
  fn.set("arguments", args.is_ok() ? *args : jinja::Value(call.arguments));
  jinja::ValueMap m;
  m.set("id", jinja::Value(call.id));
  m.set("type", jinja::Value("function"));
  m.set("function", jinja::Value(std::move(fn)));
  return jinja::Value(std::move(m));
}

}  // namespace

bool ChatTemplate::mentions_tools() const { return source().find("tools") != std::string::npos; }

StatusOr<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt, const std::string& bos_token,
                                           const std::string& eos_token,
                                           const std::vector<std::string>& tools,
                                           const std::string& extra_variables) const {
  jinja::ValueList list;
  list.reserve(messages.size());
  for (const ChatMessage& msg : messages) {
    jinja::ValueMap m;
    m.set("role", jinja::Value(msg.role));
    m.set("content", jinja::Value(msg.content));
    if (!msg.tool_calls.empty()) {
      jinja::ValueList calls;
      for (const ChatToolCall& c : msg.tool_calls) calls.push_back(tool_call_value(c));
      m.set("tool_calls", jinja::Value(std::move(calls)));
    }
    if (!msg.tool_call_id.empty()) m.set("tool_call_id", jinja::Value(msg.tool_call_id));
    if (!msg.name.empty()) m.set("name", jinja::Value(msg.name));
    if (!msg.reasoning_content.empty())
      m.set("reasoning_content", jinja::Value(msg.reasoning_content));
    list.emplace_back(std::move(m));
  }
  jinja::Value tools_value = jinja::Value::none();
  if (!tools.empty()) {
    jinja::ValueList l;
    for (const std::string& t : tools) {
      OMNIBUS_ASSIGN_OR_RETURN(jinja::Value v, jinja::json_text_to_value(t));
      l.push_back(std::move(v));
    }
    tools_value = jinja::Value(std::move(l));
  }
  // The variables apply_chat_template passes (tools and documents are None
  // when the request has none).
  jinja::ValueMap vars;
  if (!extra_variables.empty()) {
    OMNIBUS_ASSIGN_OR_RETURN(jinja::Value extra, jinja::json_text_to_value(extra_variables));
    if (!extra.is_map())
      return Status::invalid_argument("the extra template variables must be a JSON object");
    for (const auto& [key, value] : extra.as_map().entries) vars.set(key, value);
  }
  vars.set("messages", jinja::Value(std::move(list)));
  vars.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  vars.set("bos_token", jinja::Value(bos_token));
  vars.set("eos_token", jinja::Value(eos_token));
  vars.set("tools", std::move(tools_value));
  vars.set("documents", jinja::Value::none());
  return template_.render(vars);
}

StatusOr<ChatTemplate> chat_template_from_gguf(const GgufFile& f) {
  if (std::optional<std::string_view> text = f.get_string("tokenizer.chat_template")) {
    StatusOr<ChatTemplate> t = ChatTemplate::parse(*text);
    if (!t.is_ok()) {
      return Status::unsupported("{}: tokenizer.chat_template: {}", f.path(), t.status().message());
    }
    return t;
  }
  const std::string_view arch = f.get_string("general.architecture").value_or("");
  if (arch == "gemma" || arch == "gemma2" || arch == "gemma3") return ChatTemplate::parse(kGemma);
  return ChatTemplate::parse(kChatml);
}

}  // namespace omnibus
