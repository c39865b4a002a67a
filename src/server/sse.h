// Server-sent events framing for streamed responses (OpenAI style): each
// chunk is one `data: <json>` event, the stream ends with `data: [DONE]`.
//   "data: {...}\n\n" ... "data: [DONE]\n\n"
// JSON is serialized with invalid UTF-8 replaced by U+FFFD, so a response can
// never fail to serialize.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace omnibus::server {

std::string json_dump(const nlohmann::json& j);
std::string sse_event(const nlohmann::json& j);
std::string sse_done();

}  // namespace omnibus::server
