#include "server/tool_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace omnibus::server {
namespace {

using grammar::ebnf_literal;
using OJson = nlohmann::ordered_json;

// One parameter: its name, whether required, and the EBNF of its value.
struct ParamRule {
  std::string name;
  bool required = false;
  std::string value;  // an EBNF expression
};

// The value grammar of one property. XML values of type string are raw text
// (no '<', lengths kept); everything else is JSON by the property's schema.
StatusOr<std::string> param_value(const OJson& schema, bool xml, const std::string& prefix,
                                  bool strict, std::string& rules) {
  if (xml && schema.is_object() && schema.value("type", OJson()) == "string") {
    if (schema.contains("pattern") || schema.contains("format")) {
      return Status::invalid_argument(
          "qwen3_coder forced calls take string parameters with enum, minLength "
          "and maxLength only");
    }
    if (auto e = schema.find("enum"); e != schema.end() && e->is_array() && !e->empty()) {
      std::string alt;
      for (const OJson& v : *e) {
        if (!v.is_string())
          return Status::invalid_argument("a string parameter's enum must list strings");
        alt += (alt.empty() ? "" : " | ") + ebnf_literal(v.get<std::string>());
      }
      return "( " + alt + " )";
    }
    const int64_t lo = schema.value("minLength", int64_t(0));
    const int64_t hi = schema.value("maxLength", int64_t(-1));
    if (lo < 0 || lo > 1000 || hi > 1000 || (hi >= 0 && hi < lo)) {
      return Status::invalid_argument("string lengths beyond [0, 1000]");
    }
    return hi < 0 ? fmt::format("[^<]{{{},}}", lo) : fmt::format("[^<]{{{},{}}}", lo, hi);
  }
  grammar::JsonSchemaOptions opt;
  opt.rule_prefix = prefix;
  opt.strict = strict;
  StatusOr<std::string> g = grammar::json_schema_to_ebnf(schema.dump(), opt);
  if (!g.is_ok()) return g.status();
  rules += *g + "\n";
  return prefix + "root";
}

StatusOr<std::vector<ParamRule>> param_rules(const ToolFunction& f, bool xml,
                                             const std::string& prefix, std::string& rules) {
  std::vector<ParamRule> out;
  if (f.parameters.empty()) return out;
  const OJson schema = OJson::parse(f.parameters, nullptr, /*allow_exceptions=*/false);
  if (!schema.is_object())
    return Status::invalid_argument("parameters must be a JSON Schema object");
  std::vector<std::string> required;
  if (auto r = schema.find("required"); r != schema.end() && r->is_array()) {
    for (const OJson& x : *r) {
      if (x.is_string()) required.push_back(x.get<std::string>());
    }
  }
  auto props = schema.find("properties");
  if (props == schema.end() || !props->is_object()) return out;
  size_t j = 0;
  for (auto it = props->begin(); it != props->end(); ++it, ++j) {
    StatusOr<std::string> v =
        param_value(*it, xml, fmt::format("{}p{}-", prefix, j), f.strict, rules);
    if (!v.is_ok()) return Status::invalid_argument("'{}': {}", it.key(), v.status().message());
    const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
    out.push_back(ParamRule{it.key(), req, *v});
  }
  return out;
}

// Qwen3-Coder: <function=NAME>\n then each <parameter=P>\nVALUE\n</parameter>\n, then </function>.
std::string xml_call(const ToolFunction& f, const std::vector<ParamRule>& params) {
  std::string body = ebnf_literal("<function=" + f.name + ">\n");
  for (const ParamRule& p : params) {
    const std::string item = fmt::format("{} {} {}", ebnf_literal("<parameter=" + p.name + ">\n"),
                                         p.value, ebnf_literal("\n</parameter>\n"));
    body += p.required ? " " + item : " ( " + item + " )?";
  }
  return body + " " + ebnf_literal("</function>");
}

// Pythonic: NAME(p=VALUE, ...), required parameters first in order, then the optional ones in
// order.
std::string python_call(const ToolFunction& f, const std::vector<ParamRule>& params) {
  std::vector<std::string> req, opt;
  for (const ParamRule& p : params) {
    (p.required ? req : opt).push_back(ebnf_literal(p.name + "=") + " " + p.value);
  }
  const std::string sep = ebnf_literal(", ");
  std::string args;
  for (size_t i = 0; i < req.size(); ++i) args += (i == 0 ? "" : " " + sep + " ") + req[i];
  auto optional_tail = [&](size_t from) {
    std::string t;
    for (size_t j = from; j < opt.size(); ++j) t += " ( " + sep + " " + opt[j] + " )?";
    return t;
  };
  if (!req.empty()) {
    args += optional_tail(0);
  } else if (!opt.empty()) {
    std::string alt;  // the first optional one present, then any later ones
    for (size_t j = 0; j < opt.size(); ++j)
      alt += (j == 0 ? "" : " | ") + opt[j] + optional_tail(j + 1);
    args = "( " + alt + " )?";
  }
  return fmt::format("{} {} {}", ebnf_literal(f.name + "("), args, ebnf_literal(")"));
}

// qwen3_coder and pythonic: calls whose arguments are not one JSON object.
StatusOr<std::string> keyword_call_grammar(const ToolsSpec& tools, ToolParserKind parser) {
  const bool xml = parser == ToolParserKind::kQwen3Coder;
  std::string rules;
  std::vector<std::string> alternatives;
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    const ToolFunction& f = tools.functions[i];
    if (tools.choice == ToolChoice::kNamed && f.name != tools.named) continue;
    StatusOr<std::vector<ParamRule>> params = param_rules(f, xml, fmt::format("t{}-", i), rules);
    if (!params.is_ok()) {
      return Status::invalid_argument("tools[{}].function.parameters: {}", i,
                                      params.status().message());
    }
    alternatives.push_back(xml ? xml_call(f, *params) : python_call(f, *params));
  }
  if (alternatives.empty())
    return Status::invalid_argument("tool_choice names no function in 'tools'");
  std::string call = "tool-kw ::= " + alternatives[0];
  for (size_t i = 1; i < alternatives.size(); ++i) call += " | " + alternatives[i];
  const bool many = tools.parallel_tool_calls;
  std::string top;
  if (xml) {
    top = fmt::format("tool-call ::= {} tool-kw {}\n", ebnf_literal("<tool_call>\n"),
                      ebnf_literal("\n</tool_call>"));
    top += many ? fmt::format("root ::= tool-call ( {} tool-call )*\n", ebnf_literal("\n"))
                : "root ::= tool-call\n";
  } else {
    top = many ? fmt::format("root ::= {} tool-kw ( {} tool-kw )* {}\n", ebnf_literal("["),
                             ebnf_literal(", "), ebnf_literal("]"))
               : fmt::format("root ::= {} tool-kw {}\n", ebnf_literal("["), ebnf_literal("]"));
  }
  return top + call + "\n" + rules;
}

}  // namespace

StatusOr<std::string> tool_call_grammar(const ToolsSpec& tools, ToolParserKind parser) {
  if (parser == ToolParserKind::kQwen3Coder || parser == ToolParserKind::kPythonic) {
    return keyword_call_grammar(tools, parser);
  }
  std::string rules;
  std::vector<std::string> alternatives;
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    const ToolFunction& f = tools.functions[i];
    if (tools.choice == ToolChoice::kNamed && f.name != tools.named) continue;
    const std::string prefix = fmt::format("t{}-", i);
    if (f.parameters.empty()) {
      rules += grammar::json_object_ebnf(prefix);
    } else {
      grammar::JsonSchemaOptions opt;
      opt.rule_prefix = prefix;
      opt.strict = f.strict;
      StatusOr<std::string> g = grammar::json_schema_to_ebnf(f.parameters, opt);
      if (!g.is_ok()) {
        return Status::invalid_argument("tools[{}].function.parameters: {}", i,
                                        g.status().message());
      }
      rules += *g;
    }
    rules += "\n";
    const char* args_key = parser == ToolParserKind::kLlama3Json ? "parameters" : "arguments";
    const std::string head = fmt::format("{{\"name\": \"{}\", \"{}\": ", f.name, args_key);
    alternatives.push_back(
        fmt::format("{} {}root {}", ebnf_literal(head), prefix, ebnf_literal("}")));
  }
  if (alternatives.empty())
    return Status::invalid_argument("tool_choice names no function in 'tools'");
  std::string call = "tool-obj ::= " + alternatives[0];
  for (size_t i = 1; i < alternatives.size(); ++i) call += " | " + alternatives[i];
  std::string top;
  const bool many = tools.parallel_tool_calls;
  switch (parser) {
    case ToolParserKind::kHermes:
      top = fmt::format("tool-call ::= {} tool-obj {}\n", ebnf_literal("<tool_call>\n"),
                        ebnf_literal("\n</tool_call>"));
      top += many ? fmt::format("root ::= tool-call ( {} tool-call )*\n", ebnf_literal("\n"))
                  : "root ::= tool-call\n";
      break;
    case ToolParserKind::kLlama3Json:
      top = many ? fmt::format("root ::= tool-obj ( {} tool-obj )*\n", ebnf_literal("; "))
                 : "root ::= tool-obj\n";
      break;
    case ToolParserKind::kMistral:
      top = many ? fmt::format("root ::= {} tool-obj ( {} tool-obj )* {}\n",
                               ebnf_literal("[TOOL_CALLS]["), ebnf_literal(", "), ebnf_literal("]"))
                 : fmt::format("root ::= {} tool-obj {}\n", ebnf_literal("[TOOL_CALLS]["),
                               ebnf_literal("]"));
      break;
    case ToolParserKind::kQwen3Coder:
    case ToolParserKind::kPythonic:
      break;  // keyword_call_grammar
  }
  return top + call + "\n" + rules;
}

}  // namespace omnibus::server
