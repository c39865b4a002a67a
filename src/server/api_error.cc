#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace omnibus::server {

ApiError ApiError::invalid(std::string param, std::string message, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

ApiError ApiError::not_found(std::string message, std::string code) {
  return ApiError{404, std::move(message), "invalid_request_error", "", std::move(code)};
}

ApiError ApiError::unauthorized(std::string message) {
  return ApiError{401, std::move(message), "authentication_error", "", "invalid_api_key"};
}

ApiError ApiError::too_large(std::string message) {
  return ApiError{413, std::move(message), "invalid_request_error", "", "request_too_large"};
}

ApiError ApiError::unavailable(std::string message, std::string type) {
  return ApiError{503, std::move(message), std::move(type), "", ""};
}

ApiError ApiError::internal(std::string message) {
  return ApiError{500, std::move(message), "internal_error", "", ""};
}

std::string ApiError::to_json() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  nlohmann::json j;
  j["error"] = std::move(e);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace omnibus::server
