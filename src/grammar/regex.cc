// regex.h's public entry points over the parser in regex_parser.h.
#include "grammar/regex.h"

#include "grammar/regex_parser.h"

namespace omnibus::grammar {
namespace {
Status check_prefix(const std::string& prefix) {
  for (char c : prefix) {
    const bool ok = c == '-' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9');
    if (!ok) return Status::invalid_argument("rule prefix '{}': only [a-zA-Z0-9_-]", prefix);
  }
  return Status::ok();
}
}  // namespace

StatusOr<std::string> regex_to_ebnf(std::string_view pattern, const std::string& rule_prefix) {
  std::string extra;
  OMNIBUS_ASSIGN_OR_RETURN(std::string item, regex_to_ebnf_item(pattern, rule_prefix, &extra));
  return rule_prefix + "root ::= " + item + "\n" + extra;
}

StatusOr<std::string> regex_to_ebnf_item(std::string_view pattern, const std::string& rule_prefix,
                                         std::string* extra_rules) {
  OMNIBUS_RETURN_IF_ERROR(check_prefix(rule_prefix));
  (void)extra_rules;  // every construct is a single inline item; no rules needed
  return internal::regex_item(pattern, internal::RegexOptions{});
}

}  // namespace omnibus::grammar
