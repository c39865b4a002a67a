#include "server/reasoning_request.h"

#include <fmt/format.h>

#include <array>

namespace omnibus::server {

void parse_reasoning_request(JsonFields& f, ReasoningRequest& out) {
  nlohmann::json kwargs = nlohmann::json::object();
  if (const nlohmann::json* k = f.find("chat_template_kwargs")) {
    if (!k->is_object()) {
      f.fail(ApiError::invalid(
          "chat_template_kwargs",
          fmt::format("'chat_template_kwargs' must be an object, got {}", json_type_name(*k))));
      return;
    }
    kwargs = *k;
  }
  std::string effort;
  f.get_string("reasoning_effort", effort);
  if (f.ok() && f.find("reasoning_effort") != nullptr) {
    static constexpr std::array<const char*, 5> kEfforts = {"none", "minimal", "low", "medium",
                                                            "high"};
    bool known = false;
    for (const char* e : kEfforts) known = known || effort == e;
    if (!known) {
      f.fail(ApiError::invalid("reasoning_effort",
                               fmt::format("'reasoning_effort' must be one of none, minimal, "
                                           "low, medium, high; got '{}'",
                                           effort)));
      return;
    }
    if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = effort;
    if (effort == "none" && !kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = false;
  }
  f.get_int("thinking_token_budget", 0, 1 << 20, out.thinking_budget);
  f.get_bool("include_reasoning", out.include_reasoning);
  if (!kwargs.empty()) out.template_kwargs = kwargs.dump();
}

std::optional<ApiError> parse_message_reasoning(const nlohmann::json& message,
                                                const std::string& where, std::string& out) {
  for (const char* key : {"reasoning_content", "reasoning"}) {
    auto it = message.find(key);
    if (it == message.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return ApiError::invalid(where + "." + key, fmt::format("'{}.{}' must be a string, got {}",
                                                              where, key, json_type_name(*it)));
    }
    out = it->get<std::string>();
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace omnibus::server
