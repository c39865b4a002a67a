#include "template/jinja_json.h"

namespace omnibus::jinja {

Value json_to_value(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(int64_t(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(json_to_value(x));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueMap m;
      for (auto it = j.begin(); it != j.end(); ++it) m.set(it.key(), json_to_value(it.value()));
      return Value(std::move(m));
    }
    default:
      return Value::none();
  }
}

StatusOr<Value> json_text_to_value(std::string_view text) {
  nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::invalid_argument("not valid JSON: {}", text.substr(0, 80));
  return json_to_value(j);
}

}  // namespace omnibus::jinja
