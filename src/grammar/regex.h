// Regular expression -> EBNF (grammar.h). The pattern is matched as a whole
// (as vLLM's guided_regex / structured_outputs.regex: the output full-matches).
//
// Supported syntax (ECMAScript / Python subset): literals and escapes
// (\n \t \r \f \v \0 \xHH \uHHHH \\ and escaped metacharacters), . (any
// character but \n), classes [...] [^...] with ranges and \d \w \s \D \W \S
// inside and outside them, groups ( ) (?: ) (?P<name> ) (?<name> ),
// alternation |, quantifiers * + ? {n} {n,} {n,m} and their lazy forms (the
// same language), and the anchors ^ at the start and $ at the end.
// Anything else — backreferences, lookaround, \b, inline flags, possessive
// quantifiers — is kInvalidArgument naming it and its offset.
// Counted repetition is bounded (n, m <= 1000; the expanded size, counting
// repetitions multiplied out, is capped at 100,000 items), so catastrophic
// patterns are an error, never a hang. Groups nest at most 100 deep.
// Classes are ASCII: \d = [0-9], \w = [A-Za-z0-9_], \s = [\t\n\v\f\r ];
// \D \W \S and [^...] are their complements over all code points. `{` that
// does not start a valid quantifier is a literal (as in Python); {,m} = {0,m}.
// The emitted item is self-contained: regex_to_ebnf_item never adds rules to
// extra_rules (it stays in the API for callers that embed). With a non-empty
// rule_prefix, parse_ebnf still needs a `root` rule from the caller.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "util/status.h"

namespace omnibus::grammar {

// Emits rules named `<rule_prefix>...`; the start rule is `<rule_prefix>root`.
StatusOr<std::string> regex_to_ebnf(std::string_view pattern, const std::string& rule_prefix = "");

// The body of one EBNF item matching the pattern (for embedding, e.g. JSON
// Schema's `pattern` inside a string's quotes); extra rules it needs are
// appended to `extra_rules`, named with `rule_prefix`.
StatusOr<std::string> regex_to_ebnf_item(std::string_view pattern, const std::string& rule_prefix,
                                         std::string* extra_rules);

}  // namespace omnibus::grammar
