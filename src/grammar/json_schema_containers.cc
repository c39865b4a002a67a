// JSON Schema objects (llama.cpp's layout: required properties in order,
// then each optional one, then additional properties, through `-rest` rules)
// and arrays (items, prefixItems, counts): Converter members
// (json_schema_converter.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grammar/ebnf_text.h"
#include "grammar/json_schema_converter.h"
#include "grammar/json_schema_rules.h"
#include "grammar/literal_set.h"
#include "grammar/regex_parser.h"

namespace omnibus::grammar::json_schema_internal {

StatusOr<std::string> Converter::object_body(const Json& schema, const std::string& name,
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
  auto kv_rule = [&](const std::string& key, const Json& value_schema,
                     const std::string& vptr) -> StatusOr<std::string> {
    OMNIBUS_ASSIGN_OR_RETURN(std::string value,
                             rule_for(value_schema, name + "-" + key, vptr, depth + 1));
    OMNIBUS_ASSIGN_OR_RETURN(std::string key_lit, const_literal(Json(key), vptr));
    return add_rule(name + "-" + key + "-kv", key_lit + " \":\"" + ws() + " " + value);
  };
  std::vector<std::string> required_kvs, optional_kvs;
  std::vector<std::string> declared;
  for (const auto& [key, value_schema] : props.items()) {
    declared.push_back(key);
    OMNIBUS_ASSIGN_OR_RETURN(
        std::string kv, kv_rule(key, value_schema, ptr + "/properties/" + pointer_escape(key)));
    (is_required(key) ? required_kvs : optional_kvs).push_back(kv);
  }
  for (const std::string& key : required_names) {  // required but not in properties
    if (props.contains(key)) continue;
    if (!allow_additional)
      return bad(ptr + "/required", fmt::format("'{}' is required but not allowed", key));
    declared.push_back(key);
    OMNIBUS_ASSIGN_OR_RETURN(std::string kv,
                             kv_rule(key, additional.is_object() ? additional : Json(true),
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
        return bad(ptr + "/properties",
                   fmt::format("a property name over {} bytes beside additional "
                               "properties is unsupported",
                               kMaxExcludedKeyBytes));
      }
    }
    if (!declared.empty()) {
      OMNIBUS_ASSIGN_OR_RETURN(key, add_rule(name + "-additional-key", not_strings(declared)));
    }
    OMNIBUS_ASSIGN_OR_RETURN(
        additional_kv, add_rule(name + "-additional-kv", key + " \":\"" + ws() + " " + value));
  }

  std::string body = "\"{\"";
  for (size_t i = 0; i < required_kvs.size(); ++i)
    body += (i ? " " + comma() + " " : " ") + required_kvs[i];
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

std::string Converter::not_strings(const std::vector<std::string>& names) {
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

StatusOr<std::string> Converter::array_body(const Json& schema, const std::string& name,
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
    OMNIBUS_ASSIGN_OR_RETURN(item,
                             rule_for(schema["items"], name + "-item", ptr + "/items", depth + 1));
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
      OMNIBUS_ASSIGN_OR_RETURN(std::string ref,
                               rule_for((*prefix)[i], fmt::format("{}-{}", name, i),
                                        fmt::format("{}/{}/{}", ptr, prefix_key, i), depth + 1));
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

}  // namespace omnibus::grammar::json_schema_internal
