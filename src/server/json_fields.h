// JsonFields: strict, typed reads of an OpenAI request object's fields.
//
// Each get_* leaves `out` untouched when the key is absent or null, and
// otherwise checks the JSON type (an integer field rejects 1.5, "1" and true;
// a number field accepts integers and floats but not strings or booleans)
// and the range. The first failure is kept as a 400 ApiError naming the field;
// later reads are skipped, so a parser reads every field and checks error()
// once at the end.
//
// Thread-safety: one parser, one thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"

namespace omnibus::server {

class JsonFields {
 public:
  // REQUIRES: obj.is_object().
  explicit JsonFields(const nlohmann::json& obj) : obj_(obj) {}

  // The field, or nullptr when absent or null.
  const nlohmann::json* find(const char* key) const;

  void get_bool(const char* key, bool& out);
  // Integer in [lo, hi].
  void get_int(const char* key, int64_t lo, int64_t hi, int64_t& out);
  void get_int(const char* key, int32_t lo, int32_t hi, int32_t& out);
  // Number in [lo, hi]; lo_open makes the lower bound exclusive.
  void get_number(const char* key, double lo, double hi, float& out, bool lo_open = false);
  void get_string(const char* key, std::string& out);

  // Records an error (if none yet) and returns false, for checks the getters do not cover.
  bool fail(ApiError e);
  bool ok() const { return !error_.has_value(); }
  const std::optional<ApiError>& error() const { return error_; }

 private:
  // The field when present, not null and is_type; else nullptr, recording
  // "'key' must be <type>" when it has another type. nullptr after an error.
  const nlohmann::json* typed(const char* key, bool (*is_type)(const nlohmann::json&),
                              const char* type);

  const nlohmann::json& obj_;
  std::optional<ApiError> error_;
};

// A short name for a JSON value's type in error messages ("string", "integer", ...).
const char* json_type_name(const nlohmann::json& v);

// A request body as a JSON object, or the 400 to answer ("invalid_json", or
// not an object).
ApiResult<nlohmann::json> parse_json_body(const std::string& body);

}  // namespace omnibus::server
