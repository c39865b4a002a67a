#include "server/tool_request.h"

#include <fmt/format.h>

#include "server/json_fields.h"

namespace omnibus::server {
namespace {

ApiError bad(const std::string& where, const std::string& what) {
  return ApiError::invalid(where, fmt::format("'{}' {}", where, what));
}

std::optional<ApiError> parse_tool(const nlohmann::json& t, const std::string& where,
                                   ToolFunction& out) {
  if (!t.is_object()) return bad(where, "must be an object");
  auto type = t.find("type");
  if (type == t.end() || !type->is_string() || *type != "function") {
    return bad(where + ".type", "must be \"function\"");
  }
  auto fn = t.find("function");
  if (fn == t.end() || !fn->is_object()) return bad(where + ".function", "must be an object");
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
    return bad(where + ".function.name", "must be a non-empty string");
  }
  out.name = name->get<std::string>();
  for (char c : out.name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok)
      return bad(where + ".function.name", "may contain only a-z, A-Z, 0-9, '_', '-' and '.'");
  }
  if (auto d = fn->find("description"); d != fn->end() && !d->is_null()) {
    if (!d->is_string()) return bad(where + ".function.description", "must be a string");
    out.description = d->get<std::string>();
  }
  if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
    if (!p->is_object()) return bad(where + ".function.parameters", "must be a JSON Schema object");
    out.parameters = p->dump();
  }
  if (auto s = fn->find("strict"); s != fn->end() && !s->is_null()) {
    if (!s->is_boolean()) return bad(where + ".function.strict", "must be a boolean");
    out.strict = s->get<bool>();
  }
  out.tool_json = nlohmann::json{{"type", "function"}, {"function", *fn}}.dump();
  return std::nullopt;
}

}  // namespace

std::vector<std::string> ToolsSpec::tool_jsons() const {
  std::vector<std::string> out;
  out.reserve(functions.size());
  for (const ToolFunction& f : functions) out.push_back(f.tool_json);
  return out;
}

std::optional<ApiError> parse_tools(const nlohmann::json& body, ToolsSpec& out) {
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array())
      return bad("tools", fmt::format("must be a list, got {}", json_type_name(*tools)));
    for (size_t i = 0; i < tools->size(); ++i) {
      ToolFunction f;
      if (auto e = parse_tool((*tools)[i], fmt::format("tools[{}]", i), f)) return e;
      for (const ToolFunction& g : out.functions) {
        if (g.name == f.name) {
          return bad(fmt::format("tools[{}].function.name", i),
                     fmt::format("repeats the name '{}'", f.name));
        }
      }
      out.functions.push_back(std::move(f));
    }
  }
  out.choice = out.functions.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "none") {
        out.choice = ToolChoice::kNone;
      } else if (s == "auto") {
        out.choice = out.functions.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
      } else if (s == "required") {
        out.choice = ToolChoice::kRequired;
      } else {
        return bad("tool_choice",
                   "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                   "\"function\": {\"name\": ...}}");
      }
    } else if (tc->is_object()) {
      auto type = tc->find("type");
      if (type == tc->end() || !type->is_string() || *type != "function") {
        return bad("tool_choice.type", "must be \"function\"");
      }
      auto fn = tc->find("function");
      const nlohmann::json* name = nullptr;
      if (fn != tc->end() && fn->is_object()) {
        if (auto it = fn->find("name"); it != fn->end()) name = &*it;
      }
      if (name == nullptr || !name->is_string())
        return bad("tool_choice.function.name", "must be a string");
      out.choice = ToolChoice::kNamed;
      out.named = name->get<std::string>();
      bool found = false;
      for (const ToolFunction& f : out.functions) found = found || f.name == out.named;
      if (!found) {
        return bad("tool_choice.function.name",
                   fmt::format("names '{}', which is not in 'tools'", out.named));
      }
    } else {
      return bad("tool_choice",
                 fmt::format("must be a string or an object, got {}", json_type_name(*tc)));
    }
    if (out.choice == ToolChoice::kRequired && out.functions.empty()) {
      return bad("tool_choice", "is \"required\" but 'tools' is empty or missing");
    }
  }
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) return bad("parallel_tool_calls", "must be a boolean");
    out.parallel_tool_calls = p->get<bool>();
  }
  return std::nullopt;
}

std::optional<ApiError> parse_message_tool_fields(const nlohmann::json& msg,
                                                  const std::string& where, ChatMessage& out) {
  if (auto n = msg.find("name"); n != msg.end() && !n->is_null()) {
    if (!n->is_string()) return bad(where + ".name", "must be a string");
    out.name = n->get<std::string>();
  }
  if (auto id = msg.find("tool_call_id"); id != msg.end() && !id->is_null()) {
    if (!id->is_string()) return bad(where + ".tool_call_id", "must be a string");
    out.tool_call_id = id->get<std::string>();
  } else if (out.role == "tool") {
    // As OpenAI: a tool result says which call it answers.
    return bad(where + ".tool_call_id", "is required in a message with role 'tool'");
  }
  auto calls = msg.find("tool_calls");
  if (calls == msg.end() || calls->is_null()) return std::nullopt;
  if (out.role != "assistant")
    return bad(where + ".tool_calls", "is only allowed in assistant messages");
  if (!calls->is_array()) return bad(where + ".tool_calls", "must be a list");
  for (size_t i = 0; i < calls->size(); ++i) {
    const nlohmann::json& c = (*calls)[i];
    const std::string w = fmt::format("{}.tool_calls[{}]", where, i);
    if (!c.is_object()) return bad(w, "must be an object");
    ChatToolCall call;
    if (auto id = c.find("id"); id != c.end() && !id->is_null()) {
      if (!id->is_string()) return bad(w + ".id", "must be a string");
      call.id = id->get<std::string>();
    }
    if (auto type = c.find("type"); type != c.end() && !type->is_null() && *type != "function") {
      return bad(w + ".type", "must be \"function\"");
    }
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) return bad(w + ".function", "must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string())
      return bad(w + ".function.name", "must be a string");
    call.name = name->get<std::string>();
    auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) {
      call.arguments = "{}";
    } else if (args->is_string()) {
      call.arguments = args->get<std::string>();  // JSON text, as OpenAI sends it
      if (!nlohmann::json::accept(call.arguments)) {
        return bad(w + ".function.arguments", "must be JSON text (it does not parse)");
      }
    } else if (args->is_object()) {
      call.arguments = args->dump();
    } else {
      return bad(w + ".function.arguments", "must be a JSON string");
    }
    out.tool_calls.push_back(std::move(call));
  }
  return std::nullopt;
}

std::shared_ptr<const ToolParamTypes> tool_param_types(const ToolsSpec& tools) {
  auto out = std::make_shared<ToolParamTypes>();
  for (const ToolFunction& f : tools.functions) {
    std::map<std::string, std::string>& params = (*out)[f.name];
    const nlohmann::json schema =
        nlohmann::json::parse(f.parameters, nullptr, /*allow_exceptions=*/false);
    if (!schema.is_object() || !schema.contains("properties") || !schema["properties"].is_object())
      continue;
    for (auto it = schema["properties"].begin(); it != schema["properties"].end(); ++it) {
      const nlohmann::json* type =
          it->is_object() && it->contains("type") ? &(*it)["type"] : nullptr;
      params[it.key()] = type != nullptr && type->is_string() ? type->get<std::string>() : "";
    }
  }
  return out;
}

}  // namespace omnibus::server
