// JSON Schema -> EBNF (json_schema.h). One Converter walks the schema: every
// subschema with a name (root, each property, each $ref target, each anyOf
// branch) becomes one rule, primitives are added once on first use, and each
// $ref target is emitted exactly once (recursion is a rule referring to
// itself). Objects follow llama.cpp's layout: required properties in schema
// order, then each optional property optional, in order, then additional
// properties, through a chain of `-rest` rules (linear in the property count).
#include "grammar/json_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "grammar/ebnf_text.h"
#include "grammar/json_schema_converter.h"
#include "grammar/json_schema_rules.h"
#include "grammar/literal_set.h"
#include "grammar/regex_parser.h"

namespace omnibus::grammar::json_schema_internal {

bool is_passive(std::string_view key) {  // says nothing about this instance
  return kAnnotations.count(key) || key == "$defs" || key == "definitions";
}

std::string pointer_escape(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string sanitize_name(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) {
      out += c;
    } else if (out.empty() || out.back() != '-') {
      out += '-';
    }
  }
  if (out.empty() || out == "-") out = "x";
  if (out.size() > 64) out.resize(64);
  return out;
}

// An EBNF literal for UTF-8 text (JSON text from nlohmann: valid UTF-8).
std::string literal(std::string_view utf8) {
  size_t bad = 0;
  auto cps = internal::decode_utf8(utf8, &bad);
  if (!cps) return "\"\"";  // unreachable: nlohmann rejects invalid UTF-8 on parse
  return internal::quote_code_points(*cps);
}

// The maximum nesting of [ and { in JSON text (outside strings).
size_t json_nesting(std::string_view text) {
  size_t depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

// A quantifier for "between lo and hi more" (hi < 0: unbounded); "" for exactly one.
std::string quantifier(int64_t lo, int64_t hi) {
  if (hi < 0) {
    if (lo == 0) return "*";
    if (lo == 1) return "+";
    return fmt::format("{{{},}}", lo);
  }
  if (lo == 0 && hi == 1) return "?";
  if (lo == 1 && hi == 1) return "";
  if (lo == hi) return fmt::format("{{{}}}", lo);
  return fmt::format("{{{},{}}}", lo, hi);
}

Status Converter::convert() {
  OMNIBUS_ASSIGN_OR_RETURN(std::string body, visit(root_, "root", "", 0));
  return set_rule(ref_rules_["#"], std::move(body));
}

void Converter::convert_primitive(std::string_view name) {
  const std::string ref = primitive(name);
  (void)set_rule(opt_.rule_prefix + "root", ref);
}

std::string Converter::text() const {
  std::string out;
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

std::string Converter::reserve(std::string_view hint) {
  const std::string base = sanitize_name(hint);
  std::string name = base;
  for (int k = 1; internal::is_primitive_rule(name) || index_.count(opt_.rule_prefix + name); ++k) {
    name = fmt::format("{}-{}", base, k);
  }
  name = opt_.rule_prefix + name;
  index_[name] = rules_.size();
  rules_.emplace_back(name, "");
  return name;
}

Status Converter::set_rule(const std::string& name, std::string body) {
  bytes_ += name.size() + body.size() + 6;
  if (bytes_ > opt_.max_output_bytes) {
    return Status::invalid_argument("json schema: grammar exceeds max_output_bytes ({})",
                                    opt_.max_output_bytes);
  }
  rules_[index_.at(name)].second = std::move(body);
  return Status::ok();
}

StatusOr<std::string> Converter::add_rule(std::string_view hint, std::string body) {
  const std::string name = reserve(hint);
  OMNIBUS_RETURN_IF_ERROR(set_rule(name, std::move(body)));
  return name;
}

std::string Converter::primitive(std::string_view name) {
  const std::string full = opt_.rule_prefix + std::string(name);
  if (!index_.count(full)) {
    index_[full] = rules_.size();
    rules_.emplace_back(full, "");
    std::vector<std::string> deps;
    std::string body =
        internal::primitive_rule_body(name, opt_.rule_prefix, opt_.any_whitespace, &deps);
    bytes_ += full.size() + body.size() + 6;
    rules_[index_[full]].second = std::move(body);
    for (const std::string& d : deps) primitive(d);
  }
  return full;
}

Status Converter::unsupported(std::string_view key, const std::string& ptr) {
  return Status::invalid_argument("unsupported keyword '{}' at {}", key, ptr.empty() ? "/" : ptr);
}

Status Converter::bad(const std::string& ptr, std::string_view what) {
  return Status::invalid_argument("json schema at {}: {}", ptr.empty() ? "/" : ptr, what);
}

StatusOr<std::string> Converter::rule_for(const Json& schema, const std::string& hint,
                                          const std::string& ptr, int depth) {
  OMNIBUS_ASSIGN_OR_RETURN(std::string body, visit(schema, hint, ptr, depth));
  return add_rule(hint, std::move(body));
}

StatusOr<std::string> Converter::visit(const Json& schema, const std::string& name,
                                       const std::string& ptr, int depth) {
  if (depth > opt_.max_depth) {
    return bad(ptr, fmt::format("schema nested deeper than max_depth ({})", opt_.max_depth));
  }
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return primitive("value");
    return bad(ptr, "schema 'false' matches nothing");
  }
  if (!schema.is_object()) return bad(ptr, "a schema must be an object or a boolean");
  for (const auto& [key, _] : schema.items()) {
    if (!kAnnotations.count(key) && !kKeywords.count(key)) return unsupported(key, ptr);
  }
  if (schema.contains("$ref")) {
    for (const auto& [key, _] : schema.items()) {
      if (key != "$ref" && !is_passive(key)) return unsupported(key + "' beside '$ref", ptr);
    }
    return ref_rule(schema["$ref"], ptr + "/$ref", depth);
  }
  if (schema.contains("nullable")) {
    const Json& n = schema["nullable"];
    if (!n.is_boolean()) return bad(ptr + "/nullable", "must be a boolean");
    if (n.get<bool>()) {
      Json inner = schema;
      inner.erase("nullable");
      OMNIBUS_ASSIGN_OR_RETURN(std::string ref, rule_for(inner, name + "-value", ptr, depth + 1));
      return ref + " | " + primitive("null");
    }
  }
  if (schema.contains("const")) return const_literal(schema["const"], ptr + "/const");
  if (schema.contains("enum")) {
    const Json& e = schema["enum"];
    if (!e.is_array() || e.empty()) return bad(ptr + "/enum", "must be a non-empty array");
    return enum_body(e, name, ptr + "/enum");
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    for (const auto& [k, _] : schema.items()) {
      if (k != key && !is_passive(k)) return unsupported(k + "' beside '" + key, ptr);
    }
    const Json& list = schema[key];
    if (!list.is_array() || list.empty()) return bad(ptr + "/" + key, "must be a non-empty array");
    std::string out;
    for (size_t i = 0; i < list.size(); ++i) {
      OMNIBUS_ASSIGN_OR_RETURN(std::string ref,
                               rule_for(list[i], fmt::format("{}-{}", name, i),
                                        fmt::format("{}/{}/{}", ptr, key, i), depth + 1));
      out += (i ? " | " : "") + ref;
    }
    return out;
  }
  if (schema.contains("allOf")) return all_of(schema, name, ptr, depth);
  if (schema.contains("type")) {
    const Json& t = schema["type"];
    if (t.is_string()) return visit_typed(schema, t.get<std::string>(), name, ptr, depth);
    if (!t.is_array() || t.empty())
      return bad(ptr + "/type", "must be a string or non-empty array");
    if (t.size() == 1 && t[0].is_string()) {
      return visit_typed(schema, t[0].get<std::string>(), name, ptr, depth);
    }
    std::string out;
    for (size_t i = 0; i < t.size(); ++i) {
      if (!t[i].is_string()) return bad(ptr + "/type", "types must be strings");
      const std::string type = t[i].get<std::string>();
      OMNIBUS_ASSIGN_OR_RETURN(std::string body, visit_typed(schema, type, name, ptr, depth));
      OMNIBUS_ASSIGN_OR_RETURN(std::string ref, add_rule(name + "-" + type, std::move(body)));
      out += (i ? " | " : "") + ref;
    }
    return out;
  }
  // No type: infer it from the keywords present.
  auto has_any = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      if (schema.contains(k)) return true;
    }
    return false;
  };
  if (has_any({"properties", "required", "additionalProperties"})) {
    return visit_typed(schema, "object", name, ptr, depth);
  }
  if (has_any({"items", "prefixItems", "minItems", "maxItems"})) {
    return visit_typed(schema, "array", name, ptr, depth);
  }
  if (has_any({"minLength", "maxLength", "pattern", "format"})) {
    return visit_typed(schema, "string", name, ptr, depth);
  }
  if (has_any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
    return visit_typed(schema, "number", name, ptr, depth);
  }
  return primitive("value");
}

StatusOr<std::string> Converter::const_literal(const Json& value, const std::string& ptr) {
  try {
    return literal(value.dump());
  } catch (const std::exception& e) {
    return bad(ptr, e.what());
  }
}

StatusOr<std::string> Converter::enum_body(const Json& values, const std::string& name,
                                           const std::string& ptr) {
  std::vector<std::string> texts;
  texts.reserve(values.size());
  for (const Json& v : values) {
    try {
      texts.push_back(v.dump());
    } catch (const std::exception& e) {
      return bad(ptr, e.what());
    }
  }
  std::vector<std::string> helpers;
  LiteralSetEbnf set = literal_set_ebnf(texts, [&](size_t) {
    helpers.push_back(reserve(name + "-enum"));
    return helpers.back();
  });
  for (size_t i = 0; i < helpers.size(); ++i) {
    OMNIBUS_RETURN_IF_ERROR(set_rule(helpers[i], std::move(set.rules[i])));
  }
  return std::move(set.body);
}

StatusOr<std::string> Converter::visit_typed(const Json& schema, const std::string& type,
                                             const std::string& name, const std::string& ptr,
                                             int depth) {
  if (type == "null") return primitive("null");
  if (type == "boolean") return primitive("boolean");
  if (type == "string") return string_body(schema, name, ptr);
  if (type == "integer") return integer_body(schema, ptr);
  if (type == "number") return number_body(schema, ptr);
  if (type == "object") return object_body(schema, name, ptr, depth);
  if (type == "array") return array_body(schema, name, ptr, depth);
  return bad(ptr + "/type", fmt::format("unknown type '{}'", type));
}

StatusOr<std::string> Converter::ref_rule(const Json& ref_json, const std::string& ptr, int depth) {
  if (!ref_json.is_string()) return bad(ptr, "$ref must be a string");
  const std::string ref = ref_json.get<std::string>();
  if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
  if (ref.rfind("#/", 0) != 0)
    return bad(ptr, fmt::format("unsupported $ref '{}' (only local #/...)", ref));
  const Json* target = nullptr;
  try {
    const Json::json_pointer jp(ref.substr(1));
    if (root_.contains(jp)) target = &root_.at(jp);
  } catch (const std::exception&) {
    return bad(ptr, fmt::format("bad $ref '{}'", ref));
  }
  if (!target) return bad(ptr, fmt::format("$ref '{}' not found", ref));
  const std::string name = reserve(ref.substr(ref.rfind('/') + 1));
  ref_rules_[ref] = name;
  OMNIBUS_ASSIGN_OR_RETURN(std::string body, visit(*target, name.substr(opt_.rule_prefix.size()),
                                                   ref.substr(1), depth + 1));
  OMNIBUS_RETURN_IF_ERROR(set_rule(name, std::move(body)));
  return name;
}

StatusOr<std::string> Converter::all_of(const Json& schema, const std::string& name,
                                        const std::string& ptr, int depth) {
  const Json& list = schema["allOf"];
  const std::string lptr = ptr + "/allOf";
  if (!list.is_array() || list.empty()) return bad(lptr, "must be a non-empty array");
  bool outer_constrains = false;
  for (const auto& [k, _] : schema.items()) {
    if (k != "allOf" && !is_passive(k)) outer_constrains = true;
  }
  if (list.size() == 1 && !outer_constrains) return visit(list[0], name, lptr + "/0", depth + 1);
  // Merge object schemas: properties and required are unions.
  Json merged = Json::object();
  Json props = Json::object();
  Json required = Json::array();
  std::optional<Json> additional;
  // Parts with additionalProperties false allow only their own properties:
  // sound only when they declare every merged property (checked below).
  std::vector<std::pair<const Json*, std::string>> closed_parts;
  auto absorb = [&](const Json& s, const std::string& sptr) -> Status {
    if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
      closed_parts.emplace_back(&s, sptr);
    }
    for (const auto& [k, v] : s.items()) {
      if (is_passive(k) || k == "allOf") continue;
      if (k == "type") {
        if (v != "object") return bad(sptr, "allOf is supported only for object schemas");
      } else if (k == "properties") {
        if (!v.is_object()) return bad(sptr + "/properties", "must be an object");
        for (const auto& [pk, pv] : v.items()) {
          if (props.contains(pk) && props[pk] != pv) {
            return bad(sptr, fmt::format("allOf: property '{}' defined twice differently", pk));
          }
          props[pk] = pv;
        }
      } else if (k == "required") {
        if (!v.is_array()) return bad(sptr + "/required", "must be an array");
        for (const auto& r : v) {
          if (std::find(required.begin(), required.end(), r) == required.end())
            required.push_back(r);
        }
      } else if (k == "additionalProperties") {
        if (v.is_boolean() && !v.get<bool>()) {
          additional = false;
        } else if (!additional || *additional != false) {
          if (additional && *additional != v)
            return bad(sptr, "allOf: conflicting additionalProperties");
          additional = v;
        }
      } else {
        return bad(sptr, fmt::format("allOf is supported only for object schemas (found '{}')", k));
      }
    }
    return Status::ok();
  };
  OMNIBUS_RETURN_IF_ERROR(absorb(schema, ptr));
  for (size_t i = 0; i < list.size(); ++i) {
    const Json* s = &list[i];
    std::string sptr = fmt::format("{}/{}", lptr, i);
    for (int hops = 0; s->is_object() && s->contains("$ref"); ++hops) {  // follow plain $refs
      if (hops > opt_.max_depth) return bad(sptr, "$ref chain too long");
      const Json& r = (*s)["$ref"];
      if (!r.is_string() || r.get<std::string>().rfind("#/", 0) != 0)
        return bad(sptr, "unsupported $ref");
      try {
        const Json::json_pointer jp(r.get<std::string>().substr(1));
        if (!root_.contains(jp)) return bad(sptr, "$ref not found");
        sptr = r.get<std::string>().substr(1);
        s = &root_.at(jp);
      } catch (const std::exception&) {
        return bad(sptr, "bad $ref");
      }
    }
    if (!s->is_object()) return bad(sptr, "allOf is supported only for object schemas");
    for (const auto& [k, _] : s->items()) {
      if (!kAnnotations.count(k) && !kKeywords.count(k)) return unsupported(k, sptr);
    }
    OMNIBUS_RETURN_IF_ERROR(absorb(*s, sptr));
  }
  for (const auto& [part, part_ptr] : closed_parts) {
    for (const auto& [pk, _] : props.items()) {
      if (!part->contains("properties") || !(*part)["properties"].contains(pk)) {
        return bad(part_ptr, fmt::format("allOf: additionalProperties false here excludes '{}' "
                                         "from another part (unsupported)",
                                         pk));
      }
    }
  }
  merged["type"] = "object";
  merged["properties"] = std::move(props);
  merged["required"] = std::move(required);
  if (additional) merged["additionalProperties"] = *additional;
  return visit(merged, name, ptr, depth + 1);
}

}  // namespace omnibus::grammar::json_schema_internal

namespace omnibus::grammar {

using json_schema_internal::Converter;
using json_schema_internal::Json;
using json_schema_internal::json_nesting;
using json_schema_internal::kMaxJsonNesting;

StatusOr<std::string> json_schema_to_ebnf(std::string_view schema_text,
                                          const JsonSchemaOptions& options) {
  OMNIBUS_RETURN_IF_ERROR(internal::check_rule_prefix(options.rule_prefix));
  if (json_nesting(schema_text) > kMaxJsonNesting) {
    return Status::invalid_argument("json schema: nested deeper than {} levels", kMaxJsonNesting);
  }
  Json schema;
  try {
    schema = Json::parse(schema_text);
  } catch (const std::exception& e) {
    return Status::invalid_argument("json schema: {}", e.what());
  }
  try {
    Converter converter(schema, options);
    OMNIBUS_RETURN_IF_ERROR(converter.convert());
    return converter.text();
  } catch (const std::exception& e) {  // nlohmann type errors on malformed schemas
    return Status::invalid_argument("json schema: {}", e.what());
  }
}

std::string json_object_ebnf(const std::string& rule_prefix) {
  JsonSchemaOptions options;
  options.rule_prefix = rule_prefix;
  const Json schema = Json::object();
  Converter converter(schema, options);
  converter.convert_primitive("object");
  return converter.text();
}

}  // namespace omnibus::grammar
