// Server-sent events framing (sse.h): one `data:` chunk per JSON payload, and the [DONE] marker.
#include "server/sse.h"

namespace omnibus::server {

std::string json_dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& j) {
  std::string out = "data: ";
  out += json_dump(j);
  out += "\n\n";
  return out;
}

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace omnibus::server
