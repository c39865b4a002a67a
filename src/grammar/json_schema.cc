// JSON Schema -> EBNF (json_schema.h). One Converter walks the schema: every
// subschema with a name (root, each property, each $ref target, each anyOf
// branch) becomes one rule, primitives are added once on first use, and each
// $ref target is emitted exactly once (recursion is a rule referring to
// itself). Objects follow llama.cpp's layout: required properties in schema
// order, then each optional property optional, in order, then additional
// properties, through a chain of `-rest` rules (linear in the property count).
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "grammar/ebnf_text.h"
#include "grammar/json_schema_rules.h"
#include "grammar/literal_set.h"
#include "grammar/regex_parser.h"

namespace omnibus::grammar {
namespace {

using Json = nlohmann::ordered_json;
using internal::CodePointRanges;

constexpr int64_t kMaxBound = 1000000000000000000;  // integer bounds: |x| <= 1e18
constexpr int64_t kMaxCount = 1000;                 // minItems etc. (GBNF x{n,m} limit)
constexpr size_t kMaxJsonNesting = 512;              // of the schema text itself
constexpr size_t kMaxExcludedKeyBytes = 256;         // not_strings() recursion depth

const std::set<std::string, std::less<>> kAnnotations = {
    "title",  "description", "examples", "default",  "$schema",
    "$id",    "$comment",    "deprecated", "readOnly", "writeOnly"};
const std::set<std::string, std::less<>> kKeywords = {
    "type",      "properties", "required",  "additionalProperties", "items",
    "prefixItems", "minItems", "maxItems",  "enum",      "const",
    "anyOf",     "oneOf",      "allOf",     "$ref",      "$defs",
    "definitions", "minLength", "maxLength", "pattern",  "minimum",
    "maximum",   "exclusiveMinimum", "exclusiveMaximum", "format", "nullable"};

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

class Converter {
 public:
  Converter(const Json& root, const JsonSchemaOptions& options) : root_(root), opt_(options) {
    ref_rules_["#"] = reserve("root");
  }

  Status convert() {
    OMNIBUS_ASSIGN_OR_RETURN(std::string body, visit(root_, "root", "", 0));
    return set_rule(ref_rules_["#"], std::move(body));
  }

  // root ::= <primitive>, for json_object_ebnf.
  void convert_primitive(std::string_view name) {
    const std::string ref = primitive(name);
    (void)set_rule(opt_.rule_prefix + "root", ref);
  }

  std::string text() const {
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  // ---- the rule table -------------------------------------------------------

  // A fresh rule name (prefixed) derived from `hint`, its body still empty.
  std::string reserve(std::string_view hint) {
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

  Status set_rule(const std::string& name, std::string body) {
    bytes_ += name.size() + body.size() + 6;
    if (bytes_ > opt_.max_output_bytes) {
      return Status::invalid_argument("json schema: grammar exceeds max_output_bytes ({})",
                                      opt_.max_output_bytes);
    }
    rules_[index_.at(name)].second = std::move(body);
    return Status::ok();
  }

  StatusOr<std::string> add_rule(std::string_view hint, std::string body) {
    const std::string name = reserve(hint);
    OMNIBUS_RETURN_IF_ERROR(set_rule(name, std::move(body)));
    return name;
  }

  // A reference to primitive `name`, adding it (and what it uses) once.
  std::string primitive(std::string_view name) {
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

  std::string ws() { return opt_.any_whitespace ? fmt::format(" {}", primitive("ws")) : std::string(); }
  std::string comma() { return "\",\"" + ws(); }

  // ---- errors ---------------------------------------------------------------

  static Status unsupported(std::string_view key, const std::string& ptr) {
    return Status::invalid_argument("unsupported keyword '{}' at {}", key, ptr.empty() ? "/" : ptr);
  }
  static Status bad(const std::string& ptr, std::string_view what) {
    return Status::invalid_argument("json schema at {}: {}", ptr.empty() ? "/" : ptr, what);
  }

  // ---- schemas ----------------------------------------------------------------

  // A rule for `schema`, named after `hint`; returns its (prefixed) name.
  StatusOr<std::string> rule_for(const Json& schema, const std::string& hint,
                                 const std::string& ptr, int depth) {
    OMNIBUS_ASSIGN_OR_RETURN(std::string body, visit(schema, hint, ptr, depth));
    return add_rule(hint, std::move(body));
  }

  // The body (alternatives) matching `schema`'s instances.
  StatusOr<std::string> visit(const Json& schema, const std::string& name, const std::string& ptr,
                              int depth) {
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
        OMNIBUS_ASSIGN_OR_RETURN(std::string ref, rule_for(list[i], fmt::format("{}-{}", name, i),
                                                           fmt::format("{}/{}/{}", ptr, key, i),
                                                           depth + 1));
        out += (i ? " | " : "") + ref;
      }
      return out;
    }
    if (schema.contains("allOf")) return all_of(schema, name, ptr, depth);
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) return visit_typed(schema, t.get<std::string>(), name, ptr, depth);
      if (!t.is_array() || t.empty()) return bad(ptr + "/type", "must be a string or non-empty array");
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

  StatusOr<std::string> const_literal(const Json& value, const std::string& ptr) {
    try {
      return literal(value.dump());
    } catch (const std::exception& e) {
      return bad(ptr, e.what());
    }
  }

  // The values' JSON texts as one prefix-factored set (grammar/literal_set.h):
  // thousands of values stay within the matcher's bounds.
  StatusOr<std::string> enum_body(const Json& values, const std::string& name, const std::string& ptr) {
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

  StatusOr<std::string> visit_typed(const Json& schema, const std::string& type,
                                    const std::string& name, const std::string& ptr, int depth) {
    if (type == "null") return primitive("null");
    if (type == "boolean") return primitive("boolean");
    if (type == "string") return string_body(schema, name, ptr);
    if (type == "integer") return integer_body(schema, ptr);
    if (type == "number") return number_body(schema, ptr);
    if (type == "object") return object_body(schema, name, ptr, depth);
    if (type == "array") return array_body(schema, name, ptr, depth);
    return bad(ptr + "/type", fmt::format("unknown type '{}'", type));
  }

  // ---- $ref -----------------------------------------------------------------

  StatusOr<std::string> ref_rule(const Json& ref_json, const std::string& ptr, int depth) {
    if (!ref_json.is_string()) return bad(ptr, "$ref must be a string");
    const std::string ref = ref_json.get<std::string>();
    if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
    if (ref.rfind("#/", 0) != 0) return bad(ptr, fmt::format("unsupported $ref '{}' (only local #/...)", ref));
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

  // ---- allOf ----------------------------------------------------------------

  StatusOr<std::string> all_of(const Json& schema, const std::string& name, const std::string& ptr,
                               int depth) {
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
            if (std::find(required.begin(), required.end(), r) == required.end()) required.push_back(r);
          }
        } else if (k == "additionalProperties") {
          if (v.is_boolean() && !v.get<bool>()) {
            additional = false;
          } else if (!additional || *additional != false) {
            if (additional && *additional != v) return bad(sptr, "allOf: conflicting additionalProperties");
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
        if (!r.is_string() || r.get<std::string>().rfind("#/", 0) != 0) return bad(sptr, "unsupported $ref");
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
                                           "from another part (unsupported)", pk));
        }
      }
    }
    merged["type"] = "object";
    merged["properties"] = std::move(props);
    merged["required"] = std::move(required);
    if (additional) merged["additionalProperties"] = *additional;
    return visit(merged, name, ptr, depth + 1);
  }

  // ---- strings ----------------------------------------------------------------

  StatusOr<int64_t> count(const Json& schema, const char* key, const std::string& ptr,
                          int64_t fallback) {
    if (!schema.contains(key)) return fallback;
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return bad(ptr + "/" + key, "must be a non-negative integer");
    }
    if (v.get<int64_t>() > kMaxCount) {
      return bad(ptr + "/" + key, fmt::format("above {} is unsupported", kMaxCount));
    }
    return v.get<int64_t>();
  }

  StatusOr<std::string> string_body(const Json& schema, const std::string& name,
                                    const std::string& ptr) {
    const std::string q = "\"\\\"\"";  // the EBNF literal "\""
    const bool lengths = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("format")) {
      if (lengths || schema.contains("pattern")) return unsupported("format' beside 'pattern/minLength/maxLength", ptr);
      const Json& f = schema["format"];
      auto rule = f.is_string() ? internal::format_rule(f.get<std::string>()) : std::nullopt;
      if (!rule) return bad(ptr + "/format", fmt::format("unsupported format {}", f.dump()));
      return q + " " + primitive(*rule) + " " + q;
    }
    if (schema.contains("pattern")) {
      if (lengths) return unsupported("pattern' beside 'minLength/maxLength", ptr);
      const Json& p = schema["pattern"];
      if (!p.is_string()) return bad(ptr + "/pattern", "must be a string");
      internal::RegexOptions ro;
      ro.json_string_content = true;
      auto item = internal::regex_item(p.get<std::string>(), ro);
      if (!item.is_ok()) return bad(ptr + "/pattern", item.status().message());
      (void)name;
      return q + " " + *item + " " + q;
    }
    if (lengths) {
      OMNIBUS_ASSIGN_OR_RETURN(int64_t lo, count(schema, "minLength", ptr, 0));
      OMNIBUS_ASSIGN_OR_RETURN(int64_t hi, count(schema, "maxLength", ptr, -1));
      if (hi >= 0 && hi < lo) return bad(ptr, "maxLength < minLength");
      if (hi == 0) return std::string("\"\\\"\\\"\"");
      return q + " " + primitive("char") + quantifier(lo, hi) + " " + q;
    }
    return primitive("string");
  }

  // ---- numbers ----------------------------------------------------------------

  // Integer bounds: the inclusive [min, max] implied by the four keywords.
  Status integer_bounds(const Json& schema, const std::string& ptr, std::optional<int64_t>* min,
                        std::optional<int64_t>* max) {
    auto get = [&](const char* key, bool lower, bool exclusive) -> Status {
      if (!schema.contains(key)) return Status::ok();
      const Json& v = schema[key];
      if (v.is_boolean()) return Status::ok();  // draft 4 exclusive flags, handled below
      if (!v.is_number()) return bad(ptr + "/" + key, "must be a number");
      const double d = v.get<double>();
      if (d > static_cast<double>(kMaxBound) || d < -static_cast<double>(kMaxBound)) {
        return bad(ptr + "/" + key, "bound beyond +-1e18 is unsupported");
      }
      bool excl = exclusive;
      const char* flag = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      if (!exclusive && schema.contains(flag) && schema[flag].is_boolean() && schema[flag].get<bool>()) {
        excl = true;
      }
      int64_t b = 0;
      if (v.is_number_integer()) {
        b = v.get<int64_t>();
        if (excl) b += lower ? 1 : -1;
      } else {
        const double r = lower ? std::ceil(d) : std::floor(d);
        b = static_cast<int64_t>(r);
        if (excl && r == d) b += lower ? 1 : -1;
      }
      std::optional<int64_t>* slot = lower ? min : max;
      if (!*slot || (lower ? b > **slot : b < **slot)) *slot = b;
      return Status::ok();
    };
    OMNIBUS_RETURN_IF_ERROR(get("minimum", true, false));
    OMNIBUS_RETURN_IF_ERROR(get("exclusiveMinimum", true, true));
    OMNIBUS_RETURN_IF_ERROR(get("maximum", false, false));
    OMNIBUS_RETURN_IF_ERROR(get("exclusiveMaximum", false, true));
    return Status::ok();
  }

  StatusOr<std::string> integer_body(const Json& schema, const std::string& ptr) {
    std::optional<int64_t> min, max;
    OMNIBUS_RETURN_IF_ERROR(integer_bounds(schema, ptr, &min, &max));
    if (!min && !max) return primitive("integer");
    auto body = internal::integer_range_body(min, max);
    if (!body.is_ok()) return bad(ptr, body.status().message());
    return *body;
  }

  StatusOr<std::string> number_body(const Json& schema, const std::string& ptr) {
    const bool has_bound = schema.contains("minimum") || schema.contains("maximum") ||
                           schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum");
    if (!has_bound) return primitive("number");
    auto is_zero = [&](const char* k) {
      return schema.contains(k) && schema[k].is_number() && schema[k].get<double>() == 0.0;
    };
    const bool only_min = !schema.contains("maximum") && !schema.contains("exclusiveMaximum");
    const std::string exp = " ( [eE] [-+]? [0-9]{1,3} )?";
    if (only_min && is_zero("minimum") && !schema.contains("exclusiveMinimum")) {  // x >= 0
      return primitive("integral-part") + " ( \".\" " + primitive("decimal-part") + " )?" + exp;
    }
    const bool draft4_excl = schema.contains("exclusiveMinimum") && schema["exclusiveMinimum"].is_boolean() &&
                             schema["exclusiveMinimum"].get<bool>() && is_zero("minimum");
    if (only_min && (draft4_excl || (is_zero("exclusiveMinimum") && !schema.contains("minimum")))) {
      // x > 0: a non-zero digit somewhere.
      return "( [1-9] [0-9]{0,15} ( \".\" [0-9]{1,16} )? | \"0.\" \"0\"{0,15} [1-9] [0-9]{0,15} )" + exp;
    }
    if (schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum")) {
      return bad(ptr, "exclusive number bounds other than exclusiveMinimum 0 are unsupported");
    }
    std::optional<int64_t> min, max;
    for (const char* key : {"minimum", "maximum"}) {
      if (!schema.contains(key)) continue;
      const Json& v = schema[key];
      if (!v.is_number()) return bad(ptr + "/" + key, "must be a number");
      const double d = v.get<double>();
      if (d != std::floor(d) || std::fabs(d) > 1e15) {
        return bad(ptr + "/" + key, "number bounds must be integers within +-1e15");
      }
      (key[1] == 'i' ? min : max) = static_cast<int64_t>(d);
    }
    if (min && max && *min > *max) return bad(ptr, "minimum > maximum");
    // By sign: magnitudes M.F in [lo, hi] are M in [lo, hi-1] with any
    // fraction, or M = hi with a zero fraction (no exponents).
    std::vector<std::string> alts;
    auto magnitudes = [&](int64_t lo, std::optional<int64_t> hi) -> StatusOr<std::string> {
      const std::string frac = " ( \".\" [0-9]{1,16} )?";
      const std::string zero_frac = " ( \".\" \"0\"{1,16} )?";
      if (hi && *hi == lo) return fmt::format("\"{}\"{}", lo, zero_frac);
      std::optional<int64_t> below;
      if (hi) below = *hi - 1;
      auto body = internal::integer_range_body(lo, below);
      if (!body.is_ok()) return bad(ptr, body.status().message());
      std::string out = fmt::format("( {} ){}", *body, frac);
      if (hi) out = fmt::format("( {} | \"{}\"{} )", out, *hi, zero_frac);
      return out;
    };
    if (!max || *max >= 0) {
      OMNIBUS_ASSIGN_OR_RETURN(std::string m, magnitudes(min ? std::max<int64_t>(*min, 0) : 0, max));
      alts.push_back(m);
    }
    if (!min || *min < 0) {
      std::optional<int64_t> hi;
      if (min) hi = -*min;
      OMNIBUS_ASSIGN_OR_RETURN(std::string m, magnitudes(max ? std::max<int64_t>(-*max, 0) : 0, hi));
      alts.push_back(fmt::format("\"-\" {}", m));
    }
    return fmt::format("{}", fmt::join(alts, " | "));
  }

  // ---- objects ----------------------------------------------------------------

  StatusOr<std::string> object_body(const Json& schema, const std::string& name,
                                    const std::string& ptr, int depth) {
    Json empty = Json::object();
    const Json& props = schema.contains("properties") ? schema["properties"] : empty;
    if (!props.is_object()) return bad(ptr + "/properties", "must be an object");
    std::vector<std::string> required_names;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) return bad(ptr + "/required", "must be an array");
      for (const Json& k : r) {
        if (!k.is_string()) return bad(ptr + "/required", "must hold strings");
        required_names.push_back(k.get<std::string>());
      }
    }
    auto is_required = [&](const std::string& k) {
      return std::find(required_names.begin(), required_names.end(), k) != required_names.end();
    };
    Json additional = !opt_.strict;
    if (schema.contains("additionalProperties")) additional = schema["additionalProperties"];
    if (!additional.is_boolean() && !additional.is_object()) {
      return bad(ptr + "/additionalProperties", "must be a boolean or a schema");
    }
    const bool allow_additional = !(additional.is_boolean() && !additional.get<bool>());

    // One `-kv` rule per property: "\"key\"" ":" ws value.
    auto kv_rule = [&](const std::string& key, const Json& value_schema, const std::string& vptr)
        -> StatusOr<std::string> {
      OMNIBUS_ASSIGN_OR_RETURN(std::string value,
                               rule_for(value_schema, name + "-" + key, vptr, depth + 1));
      OMNIBUS_ASSIGN_OR_RETURN(std::string key_lit, const_literal(Json(key), vptr));
      return add_rule(name + "-" + key + "-kv", key_lit + " \":\"" + ws() + " " + value);
    };
    std::vector<std::string> required_kvs, optional_kvs;
    std::vector<std::string> declared;
    for (const auto& [key, value_schema] : props.items()) {
      declared.push_back(key);
      OMNIBUS_ASSIGN_OR_RETURN(std::string kv, kv_rule(key, value_schema, ptr + "/properties/" + pointer_escape(key)));
      (is_required(key) ? required_kvs : optional_kvs).push_back(kv);
    }
    for (const std::string& key : required_names) {  // required but not in properties
      if (props.contains(key)) continue;
      if (!allow_additional) return bad(ptr + "/required", fmt::format("'{}' is required but not allowed", key));
      declared.push_back(key);
      OMNIBUS_ASSIGN_OR_RETURN(std::string kv, kv_rule(key, additional.is_object() ? additional : Json(true),
                                                       ptr + "/additionalProperties"));
      required_kvs.push_back(kv);
    }
    std::string additional_kv;
    if (allow_additional) {
      std::string value = primitive("value");
      if (additional.is_object()) {
        OMNIBUS_ASSIGN_OR_RETURN(value, rule_for(additional, name + "-additional",
                                                 ptr + "/additionalProperties", depth + 1));
      }
      std::string key = primitive("string");
      for (const std::string& d : declared) {  // the key rule is a trie as deep as the longest name
        if (d.size() > kMaxExcludedKeyBytes) {
          return bad(ptr + "/properties", fmt::format("a property name over {} bytes beside additional "
                                                      "properties is unsupported", kMaxExcludedKeyBytes));
        }
      }
      if (!declared.empty()) {
        OMNIBUS_ASSIGN_OR_RETURN(key, add_rule(name + "-additional-key", not_strings(declared)));
      }
      OMNIBUS_ASSIGN_OR_RETURN(additional_kv, add_rule(name + "-additional-kv",
                                                       key + " \":\"" + ws() + " " + value));
    }

    std::string body = "\"{\"";
    for (size_t i = 0; i < required_kvs.size(); ++i) body += (i ? " " + comma() + " " : " ") + required_kvs[i];
    if (!optional_kvs.empty() || !additional_kv.empty()) {
      // Alternatives: the first optional property present is #i; a `-rest`
      // chain then allows each later one (and additional ones last).
      std::vector<std::string> rest(optional_kvs.size() + 1);  // rest[i]: after optional i-1
      std::string tail;
      if (!additional_kv.empty()) tail = "( " + comma() + " " + additional_kv + " )*";
      rest[optional_kvs.size()] = tail;
      for (size_t i = optional_kvs.size(); i-- > 1;) {  // rest[0] is never used
        std::string r = "( " + comma() + " " + optional_kvs[i] + " )?";
        if (!rest[i + 1].empty()) r += " " + rest[i + 1];
        if (i + 1 < optional_kvs.size() || !tail.empty()) {
          OMNIBUS_ASSIGN_OR_RETURN(rest[i], add_rule(name + "-rest", std::move(r)));
        } else {
          rest[i] = std::move(r);
        }
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < optional_kvs.size(); ++i) {
        alts.push_back(optional_kvs[i] + (rest[i + 1].empty() ? "" : " " + rest[i + 1]));
      }
      if (!additional_kv.empty()) alts.push_back(additional_kv + " " + tail);
      std::string group;
      for (size_t i = 0; i < alts.size(); ++i) group += (i ? " | " : "") + alts[i];
      if (!required_kvs.empty()) {
        body += " ( " + comma() + " ( " + group + " ) )?";
      } else {
        body += " ( " + group + " )?";
      }
    }
    return body + " \"}\"";
  }

  // A JSON string that is none of `names` (llama.cpp's _not_strings): a trie
  // over the names' JSON-escaped text; at each node the string may leave the
  // trie with any other character, or end unless the node is a whole name.
  std::string not_strings(const std::vector<std::string>& names) {
    struct Node {
      std::map<char32_t, size_t> children;
      bool is_end = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      std::string escaped = Json(n).dump();
      escaped = escaped.substr(1, escaped.size() - 2);
      size_t bad_at = 0;
      auto cps = internal::decode_utf8(escaped, &bad_at);
      if (!cps) continue;
      size_t at = 0;
      for (char32_t c : *cps) {
        auto it = trie[at].children.find(c);
        if (it == trie[at].children.end()) {
          trie[at].children[c] = trie.size();
          at = trie.size();
          trie.emplace_back();
        } else {
          at = it->second;
        }
      }
      trie[at].is_end = true;
    }
    const std::string ch = primitive("char");
    const std::string escape = R"("\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))";
    std::function<std::string(size_t)> node_text = [&](size_t at) -> std::string {
      const Node& node = trie[at];
      std::vector<std::string> alts;
      CodePointRanges taken = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      for (const auto& [c, child] : node.children) {
        taken.emplace_back(c, c);
        alts.push_back(internal::quote_code_points(std::u32string(1, c)) + " " + node_text(child));
      }
      internal::normalize_ranges(&taken);
      alts.push_back(internal::class_text(internal::complement_ranges(taken)) + " " + ch + "*");
      if (!node.children.count(U'\\')) alts.push_back(escape + " " + ch + "*");
      std::string out = "( ";
      for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
      return out + " )" + (node.is_end ? "" : "?");
    };
    return "\"\\\"\" " + node_text(0) + " \"\\\"\"";
  }

  // ---- arrays -----------------------------------------------------------------

  StatusOr<std::string> array_body(const Json& schema, const std::string& name,
                                   const std::string& ptr, int depth) {
    OMNIBUS_ASSIGN_OR_RETURN(int64_t lo, count(schema, "minItems", ptr, 0));
    OMNIBUS_ASSIGN_OR_RETURN(int64_t hi, count(schema, "maxItems", ptr, -1));
    if (hi >= 0 && hi < lo) return bad(ptr, "maxItems < minItems");
    const Json* prefix = nullptr;
    std::string prefix_key = "prefixItems";
    if (schema.contains("prefixItems")) {
      prefix = &schema["prefixItems"];
    } else if (schema.contains("items") && schema["items"].is_array()) {  // draft 4 tuples
      prefix = &schema["items"];
      prefix_key = "items";
    }
    std::string item;  // the schema of items after the prefix ("" = none allowed)
    const bool items_schema = schema.contains("items") && !schema["items"].is_array();
    if (items_schema && !(schema["items"].is_boolean() && !schema["items"].get<bool>())) {
      OMNIBUS_ASSIGN_OR_RETURN(item, rule_for(schema["items"], name + "-item", ptr + "/items", depth + 1));
    } else if (!prefix) {
      if (items_schema) {  // items: false, no prefix: only []
        if (lo > 0) return bad(ptr, "minItems > 0 with items false");
        return std::string("\"[\" \"]\"");
      }
      item = primitive("value");
    }
    if (prefix) {
      if (!prefix->is_array()) return bad(ptr + "/" + prefix_key, "must be an array");
      const auto n = static_cast<int64_t>(prefix->size());
      if (hi >= 0 && hi < n) return bad(ptr, "maxItems below the prefixItems count is unsupported");
      std::string body = "\"[\"";
      for (int64_t i = 0; i < n; ++i) {
        OMNIBUS_ASSIGN_OR_RETURN(std::string ref, rule_for((*prefix)[i], fmt::format("{}-{}", name, i),
                                                           fmt::format("{}/{}/{}", ptr, prefix_key, i),
                                                           depth + 1));
        body += (i ? " " + comma() + " " : " ") + ref;
      }
      if (!item.empty()) {
        const int64_t more_lo = std::max<int64_t>(lo - n, 0);
        const int64_t more_hi = hi < 0 ? -1 : hi - n;
        if (more_hi != 0) {
          if (n == 0) return bad(ptr, "empty prefixItems");
          body += " ( " + comma() + " " + item + " )" + quantifier(more_lo, more_hi);
        }
      } else if (lo > n) {
        return bad(ptr, "minItems above the prefixItems count with no items schema");
      }
      return body + " \"]\"";
    }
    if (hi == 0) return std::string("\"[\" \"]\"");
    const std::string more = "( " + comma() + " " + item + " )";
    if (lo == 0) {
      return "\"[\" ( " + item + " " + more + quantifier(0, hi < 0 ? -1 : hi - 1) + " )? \"]\"";
    }
    return "\"[\" " + item + " " + more + quantifier(lo - 1, hi < 0 ? -1 : hi - 1) + " \"]\"";
  }

  const Json& root_;
  JsonSchemaOptions opt_;
  std::vector<std::pair<std::string, std::string>> rules_;  // (prefixed name, body), in order
  std::map<std::string, size_t> index_;                     // name -> rules_ index
  std::map<std::string, std::string> ref_rules_;            // $ref -> rule name
  size_t bytes_ = 0;
};

}  // namespace

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
