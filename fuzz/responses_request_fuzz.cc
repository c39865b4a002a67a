// libFuzzer target for the Responses API request parser
// (server/responses_request.h) and the answer's conversion back
// (server/responses_output.h). Input: a JSON body. A refusal must be a 400
// naming a field; an accepted body must give a chat body whose messages are a
// list of role/content objects; the param mapping and a stream of chunks made
// from the body must not crash. Any crash, sanitizer report or hang is a bug.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/responses_output.h"
#include "server/responses_request.h"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  const json history = json::array({{{"role", "user"}, {"content", "earlier"}}});
  auto call = omnibus::server::parse_responses_request(j, (size & 1) ? history : json(nullptr));
  if (!call.ok()) {
    if (call.error().status != 400) __builtin_trap();
    if (j.is_object() && call.error().param.empty() && call.error().message.empty())
      __builtin_trap();
    (void)omnibus::server::chat_param_to_responses(call.error().param);
    return 0;
  }
  const json& messages = call->chat_body["messages"];
  if (!messages.is_array()) __builtin_trap();
  for (const json& m : messages) {
    if (!m.is_object() || !m["role"].is_string() || !m["content"].is_string()) __builtin_trap();
  }
  // The body's own "chunk" and "completion" fields, if any, through the output side.
  omnibus::server::ResponsesStream s("resp_x", 0, call->echo);
  (void)s.begin();
  if (j.contains("chunks") && j["chunks"].is_array()) {
    for (const json& c : j["chunks"]) {
      if (c.is_object()) (void)s.on_chunk(c);
    }
  }
  (void)s.finish();
  if (s.response()["object"] != "response") __builtin_trap();
  return 0;
}
