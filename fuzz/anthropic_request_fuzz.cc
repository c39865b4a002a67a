// libFuzzer target for the Anthropic Messages API's request parser
// (server/anthropic_request.h): any JSON body is either refused with a 400
// naming the field (the message starts with that path) or converted into a
// chat body that has the chat path's required shape. Any crash, sanitizer
// report or hang is a bug. Build and run with scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/anthropic_request.h"

using omnibus::server::AnthropicEndpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the endpoint; the rest is the body.
  const AnthropicEndpoint endpoint =
      data[0] & 1 ? AnthropicEndpoint::kCountTokens : AnthropicEndpoint::kMessages;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto r = omnibus::server::parse_anthropic_request(j, endpoint);
  if (!r.ok()) {
    const auto& e = r.error();
    if (e.status != 400) __builtin_trap();
    if (!e.param.empty() && e.message.rfind(e.param + ": ", 0) != 0) __builtin_trap();
    return 0;
  }
  const auto& chat = r->chat_body;
  if (!chat.is_object() || !chat.contains("messages") || !chat["messages"].is_array() ||
      chat["messages"].empty())
    __builtin_trap();
  if (endpoint == AnthropicEndpoint::kMessages && !chat.contains("max_tokens")) __builtin_trap();
  for (const auto& m : chat["messages"]) {
    if (!m.is_object() || !m.contains("role")) __builtin_trap();
  }
  (void)chat.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return 0;
}
