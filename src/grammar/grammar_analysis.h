// Whole-grammar analyses the parser runs before it accepts a Grammar.
//
//   nullable_rules():      which rules match the empty string (worklist, linear).
//   find_left_recursion(): a rule on a cycle of references reachable without
//                          consuming a byte where some step of the cycle is NOT
//                          in last position (it would push a frame each time
//                          round: an unbounded stack). Cycles made only of
//                          last-position references are epsilon loops, which
//                          the matcher handles (grammar.h). Iterative: never
//                          recurses on the grammar's depth.
//   productive_rules():    which rules derive at least one finite byte string
//                          (worklist, linear). A rule that only refers to
//                          itself, or a cycle of rules with no way out
//                          (`a ::= b`, `b ::= a`, JSON Schema's {"$ref": "#"}),
//                          matches nothing; so does an element with no bytes.
//   prune_unproductive():  drops every alternative that uses an unproductive
//                          rule or an empty byte set. What is left matches the
//                          same strings, and every prefix the matcher accepts
//                          can then be completed (a reduced grammar): the
//                          matcher never walks into an alternative that leads
//                          nowhere.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace omnibus::grammar {

// REQUIRES: every kRule element names a rule in g.rules.
std::vector<bool> nullable_rules(const Grammar& g);

// Returns the index of a left-recursive rule, or -1.
int32_t find_left_recursion(const Grammar& g, const std::vector<bool>& nullable);

// REQUIRES: every kRule element names a rule in g.rules.
std::vector<bool> productive_rules(const Grammar& g);

// REQUIRES: productive == productive_rules(*g). Unproductive rules keep their
// names but lose every alternative.
void prune_unproductive(Grammar* g, const std::vector<bool>& productive);

}  // namespace omnibus::grammar
