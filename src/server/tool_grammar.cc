#include "server/tool_grammar.h"

#include <fmt/format.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace omnibus::server {

StatusOr<std::string> tool_call_grammar(const ToolsSpec& tools, ToolParserKind parser) {
  using grammar::ebnf_literal;
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
  }
  return top + call + "\n" + rules;
}

}  // namespace omnibus::server
