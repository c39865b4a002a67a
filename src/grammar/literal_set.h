// literal_set_ebnf(): EBNF for "exactly one of these strings" (a `choice`
// list, a JSON Schema `enum`), factored by common prefix so the grammar stays
// within the matcher's bounds however many strings there are.
//
// The plain form, root ::= "a1" | "a2" | ... | "a5000", makes the matcher
// hold one parse stack per string at the start; past GrammarMatcher::
// kMaxStacks (4096) it cannot start at all. Factored, a rule has one
// alternative per distinct next code point (plus "" where a string may end):
//
//   {"red", "rose", "blue"}  ->  body:    "r" h0 | "blue"
//                                rules:   h0 ::= "ed" | "ose"
//
// Helper rules are always referenced last in their sequence, so the matcher
// pushes no frame for them (grammar.h): the stack depth stays 1 however long
// the strings. Each helper has at least two alternatives (a chain of single
// children is one literal). Strings are Unicode text: a byte that is not part
// of valid UTF-8 becomes U+FFFD, as ebnf_literal() writes it. Order and
// duplicates do not matter; the output is the same for the same set.
//
// Cost: O(total code points x log(number of strings)) time for the sort,
// O(total code points) memory and output; no recursion.
//
// Thread-safety: a pure function (rule_name is called on the caller's thread).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace omnibus::grammar {

struct LiteralSetEbnf {
  std::string body;                // the alternatives of the caller's rule
  std::vector<std::string> rules;  // rules[i]: the body of helper rule i
};

// REQUIRES: literals is not empty. rule_name(i) is called exactly once for
// each helper i, in the order i = 0, 1, ..., and must return a rule name the
// caller then defines with rules[i].
LiteralSetEbnf literal_set_ebnf(const std::vector<std::string>& literals,
                                const std::function<std::string(size_t)>& rule_name);

}  // namespace omnibus::grammar
