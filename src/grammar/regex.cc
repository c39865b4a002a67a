// regex.h's public entry points over the parser in regex_parser.h.
#include "grammar/regex.h"

#include "grammar/ebnf_text.h"
#include "grammar/regex_parser.h"

namespace omnibus::grammar {
StatusOr<std::string> regex_to_ebnf(std::string_view pattern, const std::string& rule_prefix) {
  std::string extra;
  OMNIBUS_ASSIGN_OR_RETURN(std::string item, regex_to_ebnf_item(pattern, rule_prefix, &extra));
  return rule_prefix + "root ::= " + item + "\n" + extra;
}

StatusOr<std::string> regex_to_ebnf_item(std::string_view pattern, const std::string& rule_prefix,
                                         std::string* extra_rules) {
  OMNIBUS_RETURN_IF_ERROR(internal::check_rule_prefix(rule_prefix));
  (void)extra_rules;  // every construct is a single inline item; no rules needed
  return internal::regex_item(pattern, internal::RegexOptions{});
}

}  // namespace omnibus::grammar
