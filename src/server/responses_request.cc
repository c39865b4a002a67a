#include "server/responses_request.h"

#include <fmt/format.h>

#include <optional>

#include "server/json_fields.h"

namespace omnibus::server {
namespace {

using json = nlohmann::json;

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError::invalid(param, message);
}

// A string field of an object: nullopt (and *err set) when present but not a
// string, or absent while required.
std::optional<std::string> string_field(const json& obj, const char* key, const std::string& where,
                                        bool required, std::optional<ApiError>* err) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) *err = bad(where + "." + key, fmt::format("'{}.{}' is required", where, key));
    return std::nullopt;
  }
  if (!it->is_string()) {
    *err = bad(where + "." + key,
               fmt::format("'{}.{}' must be a string, got {}", where, key, json_type_name(*it)));
    return std::nullopt;
  }
  return it->get<std::string>();
}

// Message content: a string or a list of text parts -> the text.
std::optional<std::string> content_text(const json& c, const std::string& where,
                                        std::optional<ApiError>* err) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    *err = bad(where, fmt::format("'{}' must be a string or a list of content parts", where));
    return std::nullopt;
  }
  std::string text;
  for (size_t j = 0; j < c.size(); ++j) {
    const std::string w = fmt::format("{}[{}]", where, j);
    if (!c[j].is_object()) {
      *err = bad(w, fmt::format("'{}' must be an object", w));
      return std::nullopt;
    }
    std::optional<std::string> type = string_field(c[j], "type", w, true, err);
    if (!type) return std::nullopt;
    if (*type != "input_text" && *type != "output_text" && *type != "text" &&
        *type != "reasoning_text") {
      *err = bad(
          w + ".type",
          fmt::format("content part type '{}' is not supported (input_text, output_text)", *type));
      return std::nullopt;
    }
    std::optional<std::string> t = string_field(c[j], "text", w, true, err);
    if (!t) return std::nullopt;
    text += *t;
  }
  return text;
}

struct InputState {
  json messages = json::array();
  std::string pending_reasoning;  // a reasoning item's text, for the next assistant message
};

json& assistant_for_call(InputState& s) {
  if (!s.messages.empty()) {
    json& last = s.messages.back();
    if (last["role"] == "assistant") return last;
  }
  s.messages.push_back({{"role", "assistant"}, {"content", ""}});
  if (!s.pending_reasoning.empty())
    s.messages.back()["reasoning_content"] = std::move(s.pending_reasoning);
  s.pending_reasoning.clear();
  return s.messages.back();
}

std::optional<ApiError> add_message_item(const json& item, const std::string& w, InputState& s) {
  std::optional<ApiError> err;
  std::optional<std::string> role = string_field(item, "role", w, true, &err);
  if (!role) return err;
  if (*role == "developer") *role = "system";
  if (*role != "system" && *role != "user" && *role != "assistant") {
    return bad(w + ".role",
               fmt::format("'{}.role' must be user, assistant, system or developer", w));
  }
  auto c = item.find("content");
  if (c == item.end() || c->is_null())
    return bad(w + ".content", fmt::format("'{}.content' is required", w));
  std::optional<std::string> text = content_text(*c, w + ".content", &err);
  if (!text) return err;
  json m = {{"role", *role}, {"content", std::move(*text)}};
  if (*role == "assistant" && !s.pending_reasoning.empty()) {
    m["reasoning_content"] = std::move(s.pending_reasoning);
    s.pending_reasoning.clear();
  }
  s.messages.push_back(std::move(m));
  return std::nullopt;
}

std::optional<ApiError> add_call_item(const json& item, const std::string& w, InputState& s) {
  std::optional<ApiError> err;
  std::optional<std::string> call_id = string_field(item, "call_id", w, true, &err);
  std::optional<std::string> name =
      call_id ? string_field(item, "name", w, true, &err) : std::nullopt;
  std::optional<std::string> args =
      name ? string_field(item, "arguments", w, true, &err) : std::nullopt;
  if (!args) return err;
  json& a = assistant_for_call(s);
  if (!a.contains("tool_calls")) a["tool_calls"] = json::array();
  a["tool_calls"].push_back({{"id", *call_id},
                             {"type", "function"},
                             {"function", {{"name", *name}, {"arguments", *args}}}});
  return std::nullopt;
}

std::optional<ApiError> add_input_item(const json& item, const std::string& w, InputState& s) {
  if (!item.is_object()) return bad(w, fmt::format("'{}' must be an object", w));
  std::optional<ApiError> err;
  std::string type = "message";
  if (std::optional<std::string> t = string_field(item, "type", w, false, &err)) type = *t;
  if (err) return err;
  if (type == "message") return add_message_item(item, w, s);
  if (type == "function_call") return add_call_item(item, w, s);
  if (type == "function_call_output") {
    std::optional<std::string> call_id = string_field(item, "call_id", w, true, &err);
    if (!call_id) return err;
    auto o = item.find("output");
    if (o == item.end() || o->is_null())
      return bad(w + ".output", fmt::format("'{}.output' is required", w));
    std::optional<std::string> out = content_text(*o, w + ".output", &err);
    if (!out) return err;
    s.messages.push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", *out}});
    return std::nullopt;
  }
  if (type == "reasoning") {
    auto c = item.find("content");
    if (c != item.end() && !c->is_null()) {
      std::optional<std::string> text = content_text(*c, w + ".content", &err);
      if (!text) return err;
      s.pending_reasoning += *text;
    }
    return std::nullopt;
  }
  return bad(w + ".type",
             fmt::format("input item type '{}' is not supported (message, function_call, "
                         "function_call_output, reasoning)",
                         type));
}

std::optional<ApiError> convert_input(const json& body, InputState& s) {
  auto in = body.find("input");
  if (in == body.end() || in->is_null()) return bad("input", "'input' is required");
  if (in->is_string()) {
    s.messages.push_back({{"role", "user"}, {"content", in->get<std::string>()}});
    return std::nullopt;
  }
  if (!in->is_array())
    return bad("input", fmt::format("'input' must be a string or a list of items, got {}",
                                    json_type_name(*in)));
  for (size_t i = 0; i < in->size(); ++i) {
    if (std::optional<ApiError> e = add_input_item((*in)[i], fmt::format("input[{}]", i), s))
      return e;
  }
  return std::nullopt;
}

std::optional<ApiError> convert_tools(const json& body, json& chat) {
  auto t = body.find("tools");
  if (t == body.end() || t->is_null()) return std::nullopt;
  if (!t->is_array()) return bad("tools", "'tools' must be a list");
  json tools = json::array();
  for (size_t i = 0; i < t->size(); ++i) {
    const std::string w = fmt::format("tools[{}]", i);
    const json& x = (*t)[i];
    if (!x.is_object()) return bad(w, fmt::format("'{}' must be an object", w));
    std::optional<ApiError> err;
    std::optional<std::string> type = string_field(x, "type", w, true, &err);
    if (!type) return err;
    if (*type != "function") {
      return bad(w + ".type", fmt::format("tool type '{}' is not supported (function)", *type));
    }
    json fn = json::object();
    for (const char* key : {"name", "description", "parameters", "strict"}) {
      if (x.contains(key)) fn[key] = x[key];
    }
    tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  chat["tools"] = std::move(tools);
  return std::nullopt;
}

std::optional<ApiError> convert_tool_choice(const json& body, json& chat) {
  auto c = body.find("tool_choice");
  if (c == body.end() || c->is_null()) return std::nullopt;
  if (c->is_string()) {
    chat["tool_choice"] = *c;  // auto, none, required: the chat parser checks
    return std::nullopt;
  }
  if (!c->is_object()) return bad("tool_choice", "'tool_choice' must be a string or an object");
  std::optional<ApiError> err;
  std::optional<std::string> type = string_field(*c, "type", "tool_choice", true, &err);
  if (!type) return err;
  if (*type != "function") {
    return bad("tool_choice.type",
               fmt::format("tool_choice type '{}' is not supported (function)", *type));
  }
  std::optional<std::string> name = string_field(*c, "name", "tool_choice", true, &err);
  if (!name) return err;
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  return std::nullopt;
}

std::optional<ApiError> convert_text_format(const json& body, json& chat) {
  auto t = body.find("text");
  if (t == body.end() || t->is_null()) return std::nullopt;
  if (!t->is_object()) return bad("text", "'text' must be an object");
  auto f = t->find("format");
  if (f == t->end() || f->is_null()) return std::nullopt;
  if (!f->is_object()) return bad("text.format", "'text.format' must be an object");
  std::optional<ApiError> err;
  std::optional<std::string> type = string_field(*f, "type", "text.format", true, &err);
  if (!type) return err;
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
    return std::nullopt;
  }
  if (*type != "json_schema") {
    return bad("text.format.type",
               fmt::format("'text.format.type' must be text, json_object or json_schema, "
                           "got '{}'",
                           *type));
  }
  json js = json::object();
  for (const char* key : {"name", "schema", "strict", "description"}) {
    if (f->contains(key)) js[key] = (*f)[key];
  }
  if (!js.contains("name")) js["name"] = "response";
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  return std::nullopt;
}

std::optional<ApiError> convert_scalars(const json& body, json& chat, ResponsesCall& call) {
  JsonFields f(body);
  f.get_bool("stream", call.stream);
  f.get_bool("store", call.store);
  int32_t max_out = -1;
  f.get_int("max_output_tokens", 1, 1 << 20, max_out);
  std::string instructions;
  f.get_string("instructions", instructions);
  if (const json* r = f.find("reasoning")) {
    if (!r->is_object()) {
      f.fail(bad("reasoning", "'reasoning' must be an object"));
    } else if (r->contains("effort") && !(*r)["effort"].is_null()) {
      if (!(*r)["effort"].is_string())
        f.fail(bad("reasoning.effort", "'reasoning.effort' must be a string"));
      if (f.ok()) chat["reasoning_effort"] = (*r)["effort"];
    }
  }
  if (const json* m = f.find("metadata"); m != nullptr && !m->is_object()) {
    f.fail(bad("metadata", "'metadata' must be an object"));
  }
  if (!f.ok()) return *f.error();
  if (max_out > 0) chat["max_tokens"] = max_out;
  if (!instructions.empty())
    chat["messages"].push_back({{"role", "system"}, {"content", instructions}});
  if (call.stream) chat["stream_options"] = {{"include_usage", true}};
  return std::nullopt;
}

// Fields the chat endpoint reads under the same name.
constexpr const char* kPassThrough[] = {"model",
                                        "temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "seed",
                                        "stream",
                                        "parallel_tool_calls",
                                        "logit_bias",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "repetition_penalty",
                                        "thinking_token_budget",
                                        "chat_template_kwargs",
                                        "include_reasoning",
                                        "cache_salt",
                                        "stop"};

// The fields the Response object repeats, with their defaults.
json echo_fields(const json& body) {
  json e;
  e["instructions"] = body.value("instructions", json(nullptr));
  e["tools"] = body.contains("tools") && body["tools"].is_array() ? body["tools"] : json::array();
  e["tool_choice"] = body.contains("tool_choice") && !body["tool_choice"].is_null()
                         ? body["tool_choice"]
                         : json("auto");
  e["parallel_tool_calls"] = body.value("parallel_tool_calls", true);
  e["temperature"] = body.value("temperature", json(nullptr));
  e["top_p"] = body.value("top_p", json(nullptr));
  e["max_output_tokens"] = body.value("max_output_tokens", json(nullptr));
  e["metadata"] =
      body.contains("metadata") && body["metadata"].is_object() ? body["metadata"] : json::object();
  e["text"] = body.contains("text") && body["text"].is_object()
                  ? body["text"]
                  : json{{"format", {{"type", "text"}}}};
  e["reasoning"] = body.contains("reasoning") && body["reasoning"].is_object() ? body["reasoning"]
                                                                               : json(nullptr);
  return e;
}

}  // namespace

ApiResult<std::string> previous_response_id_of(const nlohmann::json& body) {
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  auto p = body.find("previous_response_id");
  if (p == body.end() || p->is_null()) return std::string();
  if (!p->is_string() || p->get<std::string>().empty()) {
    return bad("previous_response_id", "'previous_response_id' must be a non-empty string");
  }
  return p->get<std::string>();
}

ApiResult<ResponsesCall> parse_responses_request(const nlohmann::json& body,
                                                 const nlohmann::json& history) {
  ApiResult<std::string> prev = previous_response_id_of(body);
  if (!prev.ok()) return prev.error();
  ResponsesCall call;
  call.previous_response_id = *prev;
  json chat = json::object();
  chat["messages"] = json::array();
  if (std::optional<ApiError> e = convert_scalars(body, chat, call)) return *e;
  InputState s;
  if (history.is_array()) s.messages = history;
  if (std::optional<ApiError> e = convert_input(body, s)) return *e;
  if (std::optional<ApiError> e = convert_tools(body, chat)) return *e;
  if (std::optional<ApiError> e = convert_tool_choice(body, chat)) return *e;
  if (std::optional<ApiError> e = convert_text_format(body, chat)) return *e;
  for (const char* key : kPassThrough) {
    if (body.contains(key)) chat[key] = body[key];
  }
  for (const json& m : s.messages) chat["messages"].push_back(m);
  call.turn_messages = std::move(s.messages);
  call.chat_body = std::move(chat);
  call.echo = echo_fields(body);
  call.echo["previous_response_id"] =
      call.previous_response_id.empty() ? json(nullptr) : json(call.previous_response_id);
  call.echo["store"] = call.store;
  return call;
}

std::string chat_param_to_responses(const std::string& param) {
  auto starts = [&param](const char* p) { return param.rfind(p, 0) == 0; };
  if (param == "max_tokens" || param == "max_completion_tokens") return "max_output_tokens";
  if (starts("messages")) return "input";
  if (param == "reasoning_effort") return "reasoning.effort";
  if (starts("response_format.json_schema.")) return "text.format." + param.substr(28);
  if (starts("response_format")) return "text.format";
  if (starts("tools[")) {
    const size_t fn = param.find(".function");
    if (fn != std::string::npos) return param.substr(0, fn) + param.substr(fn + 9);
  }
  if (starts("tool_choice.function")) return "tool_choice" + param.substr(20);
  return param;
}

}  // namespace omnibus::server
