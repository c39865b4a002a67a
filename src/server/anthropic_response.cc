#include "server/anthropic_response.h"

#include "server/sse.h"

namespace omnibus::server {

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400:
    case 405:
    case 415:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

std::string anthropic_error_json(const ApiError& e) {
  std::string message = e.message;
  if (!e.param.empty() && message.rfind(e.param, 0) != 0) message = e.param + ": " + message;
  const nlohmann::json j{
      {"type", "error"},
      {"error", {{"type", anthropic_error_type(e.status)}, {"message", message}}}};
  return json_dump(j);
}

std::string anthropic_error_from_chat(int status, const std::string& chat_body) {
  ApiError e;
  e.status = status;
  const nlohmann::json j = nlohmann::json::parse(chat_body, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json* err = nullptr;
  if (j.is_object() && j.contains("error") && j["error"].is_object()) err = &j["error"];
  if (err != nullptr && err->contains("message") && (*err)["message"].is_string()) {
    e.message = (*err)["message"].get<std::string>();
    if (err->contains("param") && (*err)["param"].is_string())
      e.param = (*err)["param"].get<std::string>();
  } else {
    e.message = chat_body.empty() ? "the request failed" : chat_body;
  }
  return anthropic_error_json(e);
}

namespace {

std::string replace_prefix(const std::string& id, const std::string& from, const std::string& to) {
  if (id.rfind(from, 0) == 0) return to + id.substr(from.size());
  return to + id;
}

int64_t int_at(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

}  // namespace

std::string anthropic_message_id(const std::string& chat_id) {
  return replace_prefix(chat_id, "chatcmpl-", "msg_");
}

std::string anthropic_tool_use_id(const std::string& call_id) {
  return replace_prefix(call_id, "call_", "toolu_");
}

nlohmann::json anthropic_usage(const nlohmann::json& chat_usage) {
  if (!chat_usage.is_object()) return {{"input_tokens", 0}, {"output_tokens", 0}};
  const int64_t prompt = int_at(chat_usage, "prompt_tokens");
  int64_t cached = 0;
  if (auto d = chat_usage.find("prompt_tokens_details"); d != chat_usage.end() && d->is_object()) {
    cached = int_at(*d, "cached_tokens");
  }
  return {{"input_tokens", prompt - cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached},
          {"output_tokens", int_at(chat_usage, "completion_tokens")}};
}

nlohmann::json anthropic_stop(const std::string& finish_reason, const nlohmann::json& matched_stop,
                              const AnthropicReplyInfo& info) {
  nlohmann::json stop_sequence = nullptr;
  std::string reason = "end_turn";
  if (finish_reason == "length") {
    reason = "max_tokens";
  } else if (finish_reason == "tool_calls") {
    reason = "tool_use";
  } else if (matched_stop.is_string()) {
    for (const std::string& s : info.stop_sequences) {
      if (s == matched_stop.get<std::string>()) {
        reason = "stop_sequence";
        stop_sequence = s;
      }
    }
  }
  return {{"stop_reason", reason}, {"stop_sequence", stop_sequence}};
}

nlohmann::json anthropic_message(const nlohmann::json& chat, const AnthropicReplyInfo& info) {
  nlohmann::json content = nlohmann::json::array();
  std::string finish = "stop";
  nlohmann::json matched = nullptr;
  if (chat.contains("choices") && chat["choices"].is_array() && !chat["choices"].empty()) {
    const nlohmann::json& choice = chat["choices"][0];
    finish = choice.value("finish_reason", std::string("stop"));
    if (choice.contains("stop_reason")) matched = choice["stop_reason"];
    const nlohmann::json msg = choice.value("message", nlohmann::json::object());
    if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string() &&
        !msg["reasoning_content"].get<std::string>().empty()) {
      content.push_back(
          {{"type", "thinking"}, {"thinking", msg["reasoning_content"]}, {"signature", ""}});
    }
    if (msg.contains("content") && msg["content"].is_string() &&
        !msg["content"].get<std::string>().empty()) {
      content.push_back({{"type", "text"}, {"text", msg["content"]}});
    }
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (const nlohmann::json& call : msg["tool_calls"]) {
        if (!call.is_object()) continue;
        const nlohmann::json fn = call.value("function", nlohmann::json::object());
        nlohmann::json input =
            nlohmann::json::parse(fn.value("arguments", std::string("{}")), nullptr, false);
        if (!input.is_object()) input = nlohmann::json::object();
        content.push_back({{"type", "tool_use"},
                           {"id", anthropic_tool_use_id(call.value("id", std::string()))},
                           {"name", fn.value("name", std::string())},
                           {"input", std::move(input)}});
      }
    }
  }
  nlohmann::json m;
  m["id"] = anthropic_message_id(chat.value("id", std::string()));
  m["type"] = "message";
  m["role"] = "assistant";
  m["model"] = info.model;
  m["content"] = std::move(content);
  const nlohmann::json stop = anthropic_stop(finish, matched, info);
  m["stop_reason"] = stop["stop_reason"];
  m["stop_sequence"] = stop["stop_sequence"];
  m["usage"] = anthropic_usage(chat.contains("usage") ? chat["usage"] : nlohmann::json());
  return m;
}

}  // namespace omnibus::server
