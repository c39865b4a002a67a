#include "server/anthropic_request.h"

#include <fmt/format.h>

#include <optional>
#include <set>

namespace omnibus::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxTokensLimit = 1 << 20;
constexpr size_t kMaxStopSequences = 16;

ApiError bad(const std::string& path, const std::string& what) {
  return ApiError::invalid(path, path + ": " + what);
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "list";
    case Json::value_t::object:
      return "object";
    case Json::value_t::number_float:
      return "number";
    default:
      return "integer";
  }
}

// The field when present and not null, else nullptr.
const Json* field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> need_string(const Json& obj, const char* key, const std::string& where,
                                    std::string& out, bool required = true) {
  const Json* v = field(obj, key);
  const std::string path = where.empty() ? key : where + "." + key;
  if (v == nullptr)
    return required ? std::optional<ApiError>(bad(path, "Field required")) : std::nullopt;
  if (!v->is_string()) return bad(path, fmt::format("must be a string, got {}", type_name(*v)));
  out = v->get<std::string>();
  return std::nullopt;
}

// cache_control: {"type": "ephemeral", "ttl"?} is accepted as a hint; its shape is still checked.
std::optional<ApiError> check_cache_control(const Json& block, const std::string& where) {
  const Json* cc = field(block, "cache_control");
  if (cc == nullptr) return std::nullopt;
  const std::string path = where.empty() ? "cache_control" : where + ".cache_control";
  if (!cc->is_object()) return bad(path, "must be an object");
  std::string type;
  if (auto e = need_string(*cc, "type", path, type)) return e;
  if (type != "ephemeral") return bad(path + ".type", "must be 'ephemeral'");
  return std::nullopt;
}

// Text of a {"type": "text", "text": string} block.
std::optional<ApiError> text_block(const Json& block, const std::string& where, std::string& out) {
  if (auto e = need_string(block, "text", where, out)) return e;
  return check_cache_control(block, where);
}

std::optional<ApiError> block_type(const Json& block, const std::string& where, std::string& type) {
  if (!block.is_object())
    return bad(where, fmt::format("must be an object, got {}", type_name(block)));
  return need_string(block, "type", where, type);
}

ApiError unsupported_block(const std::string& where, const std::string& type) {
  if (type == "image" || type == "document") {
    return bad(where + ".type",
               fmt::format("'{}' blocks are not supported: this server reads text only", type));
  }
  return bad(where + ".type", fmt::format("unknown or unsupported content block type '{}'", type));
}

// system: a string or a list of text blocks.
std::optional<ApiError> parse_system(const Json& body, Json& messages) {
  const Json* s = field(body, "system");
  if (s == nullptr) return std::nullopt;
  std::string text;
  if (s->is_string()) {
    text = s->get<std::string>();
  } else if (s->is_array()) {
    for (size_t i = 0; i < s->size(); ++i) {
      const std::string where = fmt::format("system.{}", i);
      std::string type, t;
      if (auto e = block_type((*s)[i], where, type)) return e;
      if (type != "text") return bad(where + ".type", "system blocks must be of type 'text'");
      if (auto e = text_block((*s)[i], where, t)) return e;
      text += (i == 0 ? "" : "\n") + t;
    }
  } else {
    return bad("system",
               fmt::format("must be a string or a list of text blocks, got {}", type_name(*s)));
  }
  messages.push_back(Json{{"role", "system"}, {"content", text}});
  return std::nullopt;
}

// tool_result content: a string or a list of text blocks, as one text.
std::optional<ApiError> tool_result_text(const Json& block, const std::string& where,
                                         std::string& out) {
  const Json* c = field(block, "content");
  if (c == nullptr) return std::nullopt;
  if (c->is_string()) {
    out = c->get<std::string>();
    return std::nullopt;
  }
  if (!c->is_array()) return bad(where + ".content", "must be a string or a list of text blocks");
  for (size_t i = 0; i < c->size(); ++i) {
    const std::string w = fmt::format("{}.content.{}", where, i);
    std::string type, t;
    if (auto e = block_type((*c)[i], w, type)) return e;
    if (type != "text") return unsupported_block(w, type);
    if (auto e = text_block((*c)[i], w, t)) return e;
    out += (i == 0 ? "" : "\n") + t;
  }
  return std::nullopt;
}

// A user message: tool results become "tool" messages, then the text one user message.
std::optional<ApiError> user_blocks(const Json& content, const std::string& where, Json& messages) {
  Json parts = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string w = fmt::format("{}.content.{}", where, i);
    std::string type;
    if (auto e = block_type(content[i], w, type)) return e;
    if (type == "text") {
      std::string t;
      if (auto e = text_block(content[i], w, t)) return e;
      parts.push_back(Json{{"type", "text"}, {"text", t}});
    } else if (type == "tool_result") {
      std::string id, text;
      if (auto e = need_string(content[i], "tool_use_id", w, id)) return e;
      if (id.empty()) return bad(w + ".tool_use_id", "must not be empty");
      if (auto e = tool_result_text(content[i], w, text)) return e;
      const Json* is_error = field(content[i], "is_error");
      if (is_error != nullptr && !is_error->is_boolean())
        return bad(w + ".is_error", "must be a boolean");
      if (auto e = check_cache_control(content[i], w)) return e;
      messages.push_back(Json{{"role", "tool"}, {"tool_call_id", id}, {"content", text}});
    } else {
      return unsupported_block(w, type);
    }
  }
  if (!parts.empty()) messages.push_back(Json{{"role", "user"}, {"content", std::move(parts)}});
  return std::nullopt;
}

// An assistant message: text parts, tool_use blocks as tool_calls, thinking as reasoning_content.
std::optional<ApiError> assistant_blocks(const Json& content, const std::string& where,
                                         Json& messages) {
  Json msg{{"role", "assistant"}, {"content", nullptr}};
  Json parts = Json::array(), calls = Json::array();
  std::string thinking;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string w = fmt::format("{}.content.{}", where, i);
    std::string type;
    if (auto e = block_type(content[i], w, type)) return e;
    if (type == "text") {
      std::string t;
      if (auto e = text_block(content[i], w, t)) return e;
      parts.push_back(Json{{"type", "text"}, {"text", t}});
    } else if (type == "tool_use") {
      std::string id, name;
      if (auto e = need_string(content[i], "id", w, id)) return e;
      if (auto e = need_string(content[i], "name", w, name)) return e;
      if (id.empty()) return bad(w + ".id", "must not be empty");
      if (name.empty()) return bad(w + ".name", "must not be empty");
      const Json* input = field(content[i], "input");
      if (input == nullptr) return bad(w + ".input", "Field required");
      if (!input->is_object())
        return bad(w + ".input", fmt::format("must be an object, got {}", type_name(*input)));
      if (auto e = check_cache_control(content[i], w)) return e;
      // As JSON text: the chat path keeps the keys in the order the client wrote them.
      calls.push_back(
          Json{{"id", id},
               {"type", "function"},
               {"function",
                {{"name", name},
                 {"arguments", input->dump(-1, ' ', false, Json::error_handler_t::replace)}}}});
    } else if (type == "thinking") {
      std::string t, signature;
      if (auto e = need_string(content[i], "thinking", w, t)) return e;
      if (auto e = need_string(content[i], "signature", w, signature, /*required=*/false)) return e;
      thinking += t;
    } else if (type == "redacted_thinking") {
      std::string data;
      if (auto e = need_string(content[i], "data", w, data)) return e;
    } else {
      return unsupported_block(w, type);
    }
  }
  if (!parts.empty()) msg["content"] = std::move(parts);
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  messages.push_back(std::move(msg));
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const Json& body, Json& messages) {
  const Json* m = field(body, "messages");
  if (m == nullptr) return bad("messages", "Field required");
  if (!m->is_array()) return bad("messages", fmt::format("must be a list, got {}", type_name(*m)));
  if (m->empty()) return bad("messages", "must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const Json& x = (*m)[i];
    const std::string where = fmt::format("messages.{}", i);
    if (!x.is_object()) return bad(where, fmt::format("must be an object, got {}", type_name(x)));
    std::string role;
    if (auto e = need_string(x, "role", where, role)) return e;
    if (role != "user" && role != "assistant")
      return bad(where + ".role", "must be 'user' or 'assistant'");
    const Json* c = field(x, "content");
    if (c == nullptr) return bad(where + ".content", "Field required");
    if (c->is_string()) {
      messages.push_back(Json{{"role", role}, {"content", c->get<std::string>()}});
      continue;
    }
    if (!c->is_array()) {
      return bad(
          where + ".content",
          fmt::format("must be a string or a list of content blocks, got {}", type_name(*c)));
    }
    if (c->empty()) return bad(where + ".content", "must not be empty");
    if (auto e = role == "user" ? user_blocks(*c, where, messages)
                                : assistant_blocks(*c, where, messages))
      return e;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tools(const Json& body, Json& chat, std::set<std::string>& names) {
  const Json* t = field(body, "tools");
  if (t == nullptr) return std::nullopt;
  if (!t->is_array()) return bad("tools", fmt::format("must be a list, got {}", type_name(*t)));
  Json tools = Json::array();
  for (size_t i = 0; i < t->size(); ++i) {
    const Json& x = (*t)[i];
    const std::string where = fmt::format("tools.{}", i);
    if (!x.is_object()) return bad(where, fmt::format("must be an object, got {}", type_name(x)));
    std::string type = "custom", name, description;
    if (auto e = need_string(x, "type", where, type, /*required=*/false)) return e;
    if (type != "custom") {
      return bad(where + ".type",
                 fmt::format("server tool '{}' is not supported: only client tools "
                             "(name, description, input_schema)",
                             type));
    }
    if (auto e = need_string(x, "name", where, name)) return e;
    if (name.empty() || name.size() > 128)
      return bad(where + ".name", "must be 1 to 128 characters");
    if (!names.insert(name).second)
      return bad(where + ".name", fmt::format("duplicate tool name '{}'", name));
    if (auto e = need_string(x, "description", where, description, /*required=*/false)) return e;
    const Json* schema = field(x, "input_schema");
    if (schema == nullptr) return bad(where + ".input_schema", "Field required");
    if (!schema->is_object()) return bad(where + ".input_schema", "must be a JSON Schema object");
    if (auto e = check_cache_control(x, where)) return e;
    Json fn{{"name", name}};
    if (!description.empty()) fn["description"] = description;
    fn["parameters"] = *schema;
    if (const Json* strict =
            field(x, "strict")) {  // strict schema adherence: the grammar's strict mode
      if (!strict->is_boolean()) return bad(where + ".strict", "must be a boolean");
      fn["strict"] = *strict;
    }
    tools.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  if (!tools.empty()) chat["tools"] = std::move(tools);
  return std::nullopt;
}

std::optional<ApiError> parse_tool_choice(const Json& body, const std::set<std::string>& names,
                                          Json& chat) {
  const Json* c = field(body, "tool_choice");
  if (c == nullptr) return std::nullopt;
  if (!c->is_object())
    return bad("tool_choice", fmt::format("must be an object, got {}", type_name(*c)));
  std::string type;
  if (auto e = need_string(*c, "type", "tool_choice", type)) return e;
  if (type == "tool") {
    std::string name;
    if (auto e = need_string(*c, "name", "tool_choice", name)) return e;
    if (!names.count(name))
      return bad("tool_choice.name", fmt::format("no tool named '{}' in 'tools'", name));
    chat["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", name}}}};
  } else if (type == "any" || type == "auto") {
    if (names.empty() && type == "any") return bad("tool_choice", "'any' needs 'tools'");
    if (!names.empty()) chat["tool_choice"] = type == "any" ? "required" : "auto";
  } else if (type == "none") {
    chat["tool_choice"] = "none";
  } else {
    return bad("tool_choice.type", "must be one of 'auto', 'any', 'tool', 'none'");
  }
  if (const Json* p = field(*c, "disable_parallel_tool_use")) {
    if (!p->is_boolean()) return bad("tool_choice.disable_parallel_tool_use", "must be a boolean");
    if (type != "none" && !names.empty()) chat["parallel_tool_calls"] = !p->get<bool>();
  }
  return std::nullopt;
}

// A number field in [lo, hi], copied into the chat body.
std::optional<ApiError> copy_number(const Json& body, const char* key, double lo, double hi,
                                    Json& chat) {
  const Json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return bad(key, fmt::format("must be a number, got {}", type_name(*v)));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) return bad(key, fmt::format("must be in [{}, {}], got {}", lo, hi, x));
  chat[key] = *v;
  return std::nullopt;
}

std::optional<ApiError> get_int(const Json& body, const char* key, int64_t lo, int64_t hi,
                                int64_t& out) {
  const Json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer())
    return bad(key, fmt::format("must be an integer, got {}", type_name(*v)));
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : v->get<int64_t>();
  if (x < lo || x > hi) return bad(key, fmt::format("must be in [{}, {}], got {}", lo, hi, x));
  out = x;
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const Json& body, AnthropicRequest& r) {
  Json& chat = r.chat_body;
  if (auto e = copy_number(body, "temperature", 0.0, 1.0, chat)) return e;
  if (auto e = copy_number(body, "top_p", 0.0, 1.0, chat)) return e;
  if (const Json* p = field(body, "top_p"); p != nullptr && p->get<double>() == 0.0) {
    return bad("top_p", "must be greater than 0");
  }
  int64_t top_k = -1;
  if (auto e = get_int(body, "top_k", 0, kMaxTokensLimit, top_k)) return e;
  if (top_k > 0) chat["top_k"] = top_k;  // 0: no top-k cut
  if (const Json* s = field(body, "stop_sequences")) {
    if (!s->is_array()) return bad("stop_sequences", "must be a list of strings");
    if (s->size() > kMaxStopSequences) {
      return bad("stop_sequences",
                 fmt::format("at most {} stop sequences are allowed", kMaxStopSequences));
    }
    for (size_t i = 0; i < s->size(); ++i) {
      const Json& x = (*s)[i];
      const std::string where = fmt::format("stop_sequences.{}", i);
      if (!x.is_string()) return bad(where, fmt::format("must be a string, got {}", type_name(x)));
      if (x.get<std::string>().empty()) return bad(where, "must not be empty");
      r.stop_sequences.push_back(x.get<std::string>());
    }
    if (!r.stop_sequences.empty()) chat["stop"] = r.stop_sequences;
  }
  return std::nullopt;
}

// thinking -> the chat path's reasoning fields (reasoning_request.h): the
// template's enable_thinking, thinking_token_budget, include_reasoning.
std::optional<ApiError> parse_thinking(const Json& body, int64_t max_tokens, AnthropicRequest& r) {
  const Json* t = field(body, "thinking");
  if (t == nullptr) return std::nullopt;
  if (!t->is_object())
    return bad("thinking", fmt::format("must be an object, got {}", type_name(*t)));
  std::string type, display;
  if (auto e = need_string(*t, "type", "thinking", type)) return e;
  if (type != "enabled" && type != "adaptive" && type != "disabled") {
    return bad("thinking.type", "must be 'enabled', 'adaptive' or 'disabled'");
  }
  Json& chat = r.chat_body;
  chat["chat_template_kwargs"] = Json{{"enable_thinking", type != "disabled"}};
  if (type == "disabled") return std::nullopt;
  if (auto e = need_string(*t, "display", "thinking", display, /*required=*/false)) return e;
  if (!display.empty() && display != "summarized" && display != "omitted") {
    return bad("thinking.display", "must be 'summarized' or 'omitted'");
  }
  if (display == "omitted") chat["include_reasoning"] = false;
  r.thinking_budget = 0;
  if (type == "adaptive") return std::nullopt;  // no budget but the server's --reasoning-budget
  const Json* b = field(*t, "budget_tokens");
  if (b == nullptr) return bad("thinking.budget_tokens", "Field required");
  if (!b->is_number_integer() || b->get<int64_t>() < 1 || b->get<int64_t>() > kMaxTokensLimit) {
    return bad("thinking.budget_tokens", "must be a positive integer");
  }
  if (max_tokens > 0 && b->get<int64_t>() >= max_tokens) {
    return bad("thinking.budget_tokens", "must be less than max_tokens");
  }
  r.thinking_budget = int32_t(b->get<int64_t>());
  chat["thinking_token_budget"] = r.thinking_budget;
  return std::nullopt;
}

// output_config: effort -> reasoning_effort, format (json_schema) -> response_format.
std::optional<ApiError> parse_output_config(const Json& body, Json& chat) {
  const Json* oc = field(body, "output_config");
  if (oc == nullptr) return std::nullopt;
  if (!oc->is_object())
    return bad("output_config", fmt::format("must be an object, got {}", type_name(*oc)));
  std::string effort;
  if (auto e = need_string(*oc, "effort", "output_config", effort, /*required=*/false)) return e;
  if (!effort.empty()) {
    if (effort != "low" && effort != "medium" && effort != "high" && effort != "xhigh" &&
        effort != "max") {
      return bad("output_config.effort", "must be one of 'low', 'medium', 'high', 'xhigh', 'max'");
    }
    chat["reasoning_effort"] = effort == "low" || effort == "medium" ? effort : "high";
  }
  if (const Json* f = field(*oc, "format")) {
    std::string type;
    if (!f->is_object()) return bad("output_config.format", "must be an object");
    if (auto e = need_string(*f, "type", "output_config.format", type)) return e;
    if (type != "json_schema") return bad("output_config.format.type", "must be 'json_schema'");
    const Json* schema = field(*f, "schema");
    if (schema == nullptr) return bad("output_config.format.schema", "Field required");
    if (!schema->is_object())
      return bad("output_config.format.schema", "must be a JSON Schema object");
    chat["response_format"] =
        Json{{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  }
  return std::nullopt;
}

std::optional<ApiError> parse_body(const Json& body, AnthropicEndpoint endpoint,
                                   AnthropicRequest& r) {
  Json& chat = r.chat_body;
  if (auto e = need_string(body, "model", "", r.model)) return e;
  chat["model"] = r.model;
  Json messages = Json::array();
  if (auto e = parse_system(body, messages)) return e;
  if (auto e = parse_messages(body, messages)) return e;
  chat["messages"] = std::move(messages);
  int64_t max_tokens = -1;
  if (auto e = get_int(body, "max_tokens", 1, kMaxTokensLimit, max_tokens)) return e;
  if (endpoint == AnthropicEndpoint::kMessages) {
    if (max_tokens < 0) return bad("max_tokens", "Field required");
    chat["max_tokens"] = max_tokens;
  }
  std::set<std::string> names;
  if (auto e = parse_tools(body, chat, names)) return e;
  if (auto e = parse_tool_choice(body, names, chat)) return e;
  r.has_tools = !names.empty() && !(chat.contains("tool_choice") && chat["tool_choice"] == "none");
  if (auto e = parse_sampling(body, r)) return e;
  if (auto e = parse_thinking(body, max_tokens, r)) return e;
  if (const Json* s = field(body, "stream")) {
    if (!s->is_boolean())
      return bad("stream", fmt::format("must be a boolean, got {}", type_name(*s)));
    r.stream = s->get<bool>() && endpoint == AnthropicEndpoint::kMessages;
  }
  if (r.stream) {
    chat["stream"] = true;
    chat["stream_options"] = Json{{"include_usage", true}};
  }
  if (auto e = parse_output_config(body, chat)) return e;
  if (field(body, "cache_control") !=
      nullptr) {  // automatic caching: a hint, as the block-level ones
    Json holder{{"cache_control", body["cache_control"]}};
    if (auto e = check_cache_control(holder, "")) return e;
  }
  if (const Json* md = field(body, "metadata"); md != nullptr && !md->is_object()) {
    return bad("metadata", "must be an object");
  }
  return std::nullopt;
}

}  // namespace

ApiResult<AnthropicRequest> parse_anthropic_request(const nlohmann::ordered_json& body,
                                                    AnthropicEndpoint endpoint) {
  if (!body.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  AnthropicRequest r;
  r.chat_body = Json::object();
  if (std::optional<ApiError> e = parse_body(body, endpoint, r)) return std::move(*e);
  return r;
}

}  // namespace omnibus::server
