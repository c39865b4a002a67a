#include "server/structured_request.h"

#include <fmt/format.h>

namespace omnibus::server {
namespace {

using grammar::StructuredOutput;
using Kind = StructuredOutput::Kind;

// One structured-output ask found in the body.
struct Ask {
  std::string field;    // for errors: "response_format.json_schema.schema"
  std::string pointer;  // schema objects: where they are, else ""
  StructuredOutput so;
};

class Reader {
 public:
  Reader(JsonFields& f, GenerationSpec& spec) : f_(f), spec_(spec) {}

  void found(Ask ask) {
    if (!first_.empty()) {
      f_.fail(ApiError::invalid(ask.field,
                                fmt::format("'{}' and '{}' both ask for a structured output; give "
                                            "only one",
                                            first_, ask.field)));
      return;
    }
    first_ = ask.field;
    spec_.structured = std::move(ask.so);
    spec_.structured_field = std::move(ask.field);
    spec_.schema_pointer = std::move(ask.pointer);
  }

  // A schema given as an object or a boolean, or (vLLM's guided_json) as JSON text.
  void schema(const nlohmann::json& v, const std::string& field, const std::string& pointer,
              bool strict, bool text_allowed) {
    Ask a{field, "", {}};
    a.so.kind = Kind::kJsonSchema;
    a.so.strict = strict;
    if (v.is_object() || v.is_boolean()) {
      a.so.text = v.dump();
      a.pointer = pointer;
    } else if (text_allowed && v.is_string()) {
      a.so.text = v.get<std::string>();
      const nlohmann::json parsed =
          nlohmann::json::parse(a.so.text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean())) {
        f_.fail(ApiError::invalid(field,
                                  fmt::format("'{}' is not a JSON schema (a JSON object)", field)));
        return;
      }
    } else {
      f_.fail(ApiError::invalid(field, fmt::format("'{}' must be a JSON schema object, got {}",
                                                   field, json_type_name(v))));
      return;
    }
    found(std::move(a));
  }

  void text(const nlohmann::json& v, Kind kind, const std::string& field) {
    if (!v.is_string() || v.get<std::string>().empty()) {
      f_.fail(ApiError::invalid(field, fmt::format("'{}' must be a non-empty string", field)));
      return;
    }
    Ask a{field, "", {}};
    a.so.kind = kind;
    a.so.text = v.get<std::string>();
    found(std::move(a));
  }

  void choice(const nlohmann::json& v, const std::string& field) {
    if (!v.is_array() || v.empty()) {
      f_.fail(
          ApiError::invalid(field, fmt::format("'{}' must be a non-empty list of strings", field)));
      return;
    }
    Ask a{field, "", {}};
    a.so.kind = Kind::kChoice;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) {
        f_.fail(ApiError::invalid(
            fmt::format("{}[{}]", field, i),
            fmt::format("'{}[{}]' must be a string, got {}", field, i, json_type_name(v[i]))));
        return;
      }
      a.so.choices.push_back(v[i].get<std::string>());
    }
    found(std::move(a));
  }

  void json_object(const std::string& field) {
    Ask a{field, "", {}};
    a.so.kind = Kind::kJsonObject;
    found(std::move(a));
  }

 private:
  JsonFields& f_;
  GenerationSpec& spec_;
  std::string first_;
};

void read_response_format(JsonFields& f, Reader& r) {
  const nlohmann::json* rf = f.find("response_format");
  if (rf == nullptr) return;
  if (!rf->is_object()) {
    f.fail(ApiError::invalid(
        "response_format",
        fmt::format("'response_format' must be an object, got {}", json_type_name(*rf))));
    return;
  }
  const auto type = rf->find("type");
  if (type == rf->end() || !type->is_string()) {
    f.fail(ApiError::invalid("response_format.type",
                             "'response_format.type' must be \"text\", \"json_object\" or "
                             "\"json_schema\""));
    return;
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return;
  if (t == "json_object") return r.json_object("response_format");
  if (t != "json_schema") {
    f.fail(ApiError::invalid("response_format.type",
                             fmt::format("response_format type '{}' is not supported "
                                         "(text, json_object, json_schema are)",
                                         t)));
    return;
  }
  const auto js = rf->find("json_schema");
  if (js == rf->end() || !js->is_object()) {
    f.fail(ApiError::invalid("response_format.json_schema",
                             "'response_format.json_schema' must be an object with "
                             "a 'schema'"));
    return;
  }
  bool strict = false;
  if (const auto s = js->find("strict"); s != js->end() && !s->is_null()) {
    if (!s->is_boolean()) {
      f.fail(ApiError::invalid("response_format.json_schema.strict", "'strict' must be a boolean"));
      return;
    }
    strict = s->get<bool>();
  }
  const auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    f.fail(ApiError::invalid("response_format.json_schema.schema",
                             "'response_format.json_schema.schema' is "
                             "required"));
    return;
  }
  r.schema(*schema, "response_format.json_schema.schema", "/response_format/json_schema/schema",
           strict, false);
}

void read_structured_outputs(JsonFields& f, Reader& r) {
  const nlohmann::json* so = f.find("structured_outputs");
  if (so == nullptr) return;
  if (!so->is_object()) {
    f.fail(ApiError::invalid("structured_outputs", "'structured_outputs' must be an object"));
    return;
  }
  for (const auto& [key, v] : so->items()) {
    const std::string field = "structured_outputs." + key;
    if (v.is_null()) continue;
    if (key == "json") {
      r.schema(v, field, "/structured_outputs/json", false, true);
    } else if (key == "regex") {
      r.text(v, Kind::kRegex, field);
    } else if (key == "choice") {
      r.choice(v, field);
    } else if (key == "grammar") {
      r.text(v, Kind::kGrammar, field);
    } else if (key == "json_object") {
      if (!v.is_boolean()) {
        f.fail(ApiError::invalid(field, "'structured_outputs.json_object' must be a boolean"));
      } else if (v.get<bool>()) {
        r.json_object(field);
      }
    } else if (key == "disable_fallback" || key == "disable_any_whitespace" ||
               key == "disable_additional_properties") {
      // Backend hints of vLLM's; omnibus has one backend and no fallback.
      if (key != "disable_fallback" && v == true) {
        f.fail(ApiError::invalid(field, fmt::format("'{}' is not supported", field)));
      }
    } else {
      f.fail(ApiError::invalid(
          field, fmt::format("'{}' is not supported (json, regex, choice, grammar and "
                             "json_object are)",
                             field)));
    }
    if (!f.ok()) return;
  }
}

}  // namespace

void parse_structured_output(JsonFields& f, GenerationSpec& spec) {
  Reader r(f, spec);
  read_response_format(f, r);
  read_structured_outputs(f, r);
  if (const nlohmann::json* v = f.find("guided_json"))
    r.schema(*v, "guided_json", "/guided_json", false, true);
  if (const nlohmann::json* v = f.find("guided_regex")) r.text(*v, Kind::kRegex, "guided_regex");
  if (const nlohmann::json* v = f.find("guided_choice")) r.choice(*v, "guided_choice");
  if (const nlohmann::json* v = f.find("guided_grammar"))
    r.text(*v, Kind::kGrammar, "guided_grammar");
  if (const nlohmann::json* v = f.find("json_schema"))
    r.schema(*v, "json_schema", "/json_schema", false, false);
  if (const nlohmann::json* v = f.find("grammar")) r.text(*v, Kind::kGrammar, "grammar");
  for (const char* unsupported : {"guided_whitespace_pattern", "structural_tag"}) {
    if (f.find(unsupported) != nullptr) {
      f.fail(ApiError::invalid(unsupported, fmt::format("'{}' is not supported", unsupported)));
    }
  }
}

std::string ordered_schema_text(const std::string& raw_body, const std::string& pointer) {
  if (pointer.empty()) return "";
  return ordered_schema_texts(raw_body, {pointer})[0];
}

std::vector<std::string> ordered_schema_texts(const std::string& raw_body,
                                              const std::vector<std::string>& pointers) {
  std::vector<std::string> out(pointers.size());
  const nlohmann::ordered_json body =
      nlohmann::ordered_json::parse(raw_body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return out;
  for (size_t i = 0; i < pointers.size(); ++i) {
    const nlohmann::ordered_json::json_pointer p(pointers[i]);  // REQUIRES: a valid pointer (ours)
    if (body.contains(p)) out[i] = body.at(p).dump();
  }
  return out;
}

void use_written_tool_order(ToolsSpec& tools, const std::string& raw_body) {
  if (tools.functions.empty()) return;
  std::vector<std::string> pointers;
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    pointers.push_back(fmt::format("/tools/{}/function/parameters", i));
    pointers.push_back(fmt::format("/tools/{}", i));
  }
  std::vector<std::string> ordered = ordered_schema_texts(raw_body, pointers);
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    ToolFunction& f = tools.functions[i];
    if (!ordered[2 * i].empty()) f.parameters = std::move(ordered[2 * i]);
    if (!ordered[2 * i + 1].empty()) f.tool_json = std::move(ordered[2 * i + 1]);
  }
}

}  // namespace omnibus::server
