#include "server/json_fields.h"

#include <fmt/format.h>

#include <cmath>

namespace omnibus::server {

const char* json_type_name(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "integer";
    case nlohmann::json::value_t::number_float:
      return "number";
    case nlohmann::json::value_t::string:
      return "string";
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

const nlohmann::json* JsonFields::find(const char* key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::fail(ApiError e) {
  if (!error_) error_ = std::move(e);
  return false;
}

const nlohmann::json* JsonFields::typed(const char* key, bool (*is_type)(const nlohmann::json&),
                                        const char* type) {
  if (error_) return nullptr;
  const nlohmann::json* v = find(key);
  if (!v || is_type(*v)) return v;
  fail(ApiError::invalid(key,
                         fmt::format("'{}' must be {}, got {}", key, type, json_type_name(*v))));
  return nullptr;
}

void JsonFields::get_bool(const char* key, bool& out) {
  if (const nlohmann::json* v = typed(
          key, [](const nlohmann::json& j) { return j.is_boolean(); }, "a boolean")) {
    out = v->get<bool>();
  }
}

void JsonFields::get_int(const char* key, int64_t lo, int64_t hi, int64_t& out) {
  const nlohmann::json* v = typed(
      key, [](const nlohmann::json& j) { return j.is_number_integer(); }, "an integer");
  if (!v) return;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    x = u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u);
  } else {
    x = v->get<int64_t>();
  }
  if (x < lo || x > hi) {
    fail(ApiError::invalid(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x)));
    return;
  }
  out = x;
}

void JsonFields::get_int(const char* key, int32_t lo, int32_t hi, int32_t& out) {
  int64_t x = out;
  get_int(key, int64_t(lo), int64_t(hi), x);
  if (!error_) out = int32_t(x);
}

void JsonFields::get_number(const char* key, double lo, double hi, float& out, bool lo_open) {
  const nlohmann::json* v = typed(
      key, [](const nlohmann::json& j) { return j.is_number(); }, "a number");
  if (!v) return;
  const double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
    fail(ApiError::invalid(key, fmt::format("'{}' must be in {}{}, {}], got {}", key,
                                            lo_open ? "(" : "[", lo, hi, x)));
    return;
  }
  out = float(x);
}

void JsonFields::get_string(const char* key, std::string& out) {
  if (const nlohmann::json* v = typed(
          key, [](const nlohmann::json& j) { return j.is_string(); }, "a string")) {
    out = v->get<std::string>();
  }
}

ApiResult<nlohmann::json> parse_json_body(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return ApiError::invalid("", "the request body is not valid JSON", "invalid_json");
  if (!j.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  return j;
}

}  // namespace omnibus::server
