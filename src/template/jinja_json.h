// JSON -> jinja::Value, the way Python's json.loads hands data to Jinja:
// objects become mappings (key order kept), arrays lists, null none,
// integers int, other numbers float. Used for tool definitions and tool-call
// arguments in chat templates (chat_template.h).
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "template/jinja_value.h"
#include "util/status.h"

namespace omnibus::jinja {

Value json_to_value(const nlohmann::ordered_json& j);

// Parses `text` (keeping key order) and converts it; kInvalidArgument when it
// is not JSON.
StatusOr<Value> json_text_to_value(std::string_view text);

}  // namespace omnibus::jinja
